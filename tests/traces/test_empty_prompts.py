"""Prompts with no text (issue #10 item 8): skipped and counted by default, recorded in the trace's
metadata, shown by `pic inspect`; malformed rows still fail, with the hint to pass --skip-bad."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pic.cli.app import app
from pic.traces.formats._base import SKIP_BAD_HINT
from pic.traces.ingest import ingest
from pic.traces.io import read_trace
from pic.traces.schema import TraceError

runner = CliRunner()

# (format, good row, row with an empty prompt, malformed row)
ROWS = {
    "openai-chat": ({"messages": [{"role": "user", "content": "hi there"}]},
                    {"messages": [{"role": "user", "content": ""}, {"role": "user", "content": None}]},
                    {"messages": [{"role": "wizard", "content": "x"}]}),
    "lmcache-agent": ({"timestamp": 1, "input": "hello", "output": "x"},
                      {"timestamp": 2, "input": "", "output": "x"},
                      {"timestamp": 3, "input": 5, "output": "x"}),
    "mooncake": ({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]},
                 {"timestamp": 1, "input_length": 0, "output_length": 1, "hash_ids": []},
                 {"timestamp": 2, "input_length": 10, "output_length": 1, "hash_ids": [1, 2]}),
}


def _file(tmp_path, fmt, *rows):
    p = tmp_path / "in.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


@pytest.mark.parametrize("fmt", list(ROWS))
def test_empty_prompts_are_skipped_and_recorded(tmp_path, fmt):
    """Two empty prompts among good rows: the good ones are kept, the count is in the metadata."""
    good, empty, _ = ROWS[fmt]
    src = _file(tmp_path, fmt, good, empty, good, empty)
    res = ingest([src], tmp_path / "t.parquet", fmt=fmt)
    assert res.num_requests == 2 and res.num_empty == 2 and res.num_skipped == 0
    assert read_trace(tmp_path / "t.parquet").meta["empty_prompts_skipped"] == "2"


def test_azure_zero_context_is_an_empty_prompt(tmp_path):
    """An Azure row with ContextTokens 0 is an empty prompt too."""
    src = tmp_path / "a.csv"
    src.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,5,1\n2.0,0,1\n")
    assert ingest([src], tmp_path / "t.parquet").num_empty == 1


@pytest.mark.parametrize("fmt", list(ROWS))
def test_fail_empty_makes_them_errors(tmp_path, fmt):
    """skip_empty=False (`--fail-empty`): the first empty prompt is a row error."""
    good, empty, _ = ROWS[fmt]
    src = _file(tmp_path, fmt, good, empty)
    with pytest.raises(TraceError, match=r":2: .*empty prompt.*" + SKIP_BAD_HINT):
        ingest([src], tmp_path / "t.parquet", fmt=fmt, skip_empty=False)


@pytest.mark.parametrize("fmt", list(ROWS))
def test_malformed_rows_still_fail_with_the_hint(tmp_path, fmt):
    """A malformed row is still an error by default, and the message ends with the --skip-bad hint."""
    good, empty, bad = ROWS[fmt]
    src = _file(tmp_path, fmt, good, empty, bad)
    with pytest.raises(TraceError) as e:
        ingest([src], tmp_path / "t.parquet", fmt=fmt)
    assert ":3: " in str(e.value) and str(e.value).endswith(SKIP_BAD_HINT)
    assert not (tmp_path / "t.parquet").exists()


def test_cli_prints_the_count_and_inspect_shows_it(tmp_path):
    """`pic ingest` prints 'skipped N rows with empty prompts'; `pic inspect` shows the recorded count."""
    good, empty, bad = ROWS["lmcache-agent"]
    src = _file(tmp_path, "lmcache-agent", good, empty, empty, empty, good)
    out = tmp_path / "t.parquet"
    res = runner.invoke(app, ["ingest", str(src), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "skipped 3 rows with empty prompts" in res.output
    res = runner.invoke(app, ["inspect", str(out)])
    assert res.exit_code == 0 and "rows with empty prompts skipped at ingest" in res.output
    assert "3" in next(line for line in res.output.splitlines() if "empty prompts" in line)
    res = runner.invoke(app, ["inspect", str(out), "--json"])
    assert json.loads(res.stdout)["meta"]["empty_prompts_skipped"] == "3"


def test_cli_row_error_is_one_line_ending_with_the_hint(tmp_path):
    """The CLI prints the row error on one line ending with the --skip-bad hint; --skip-bad goes on."""
    good, empty, bad = ROWS["openai-chat"]
    src = _file(tmp_path, "openai-chat", good, bad, empty)
    res = runner.invoke(app, ["ingest", str(src), "-o", str(tmp_path / "t.parquet")])
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(SKIP_BAD_HINT) and ":2: messages[0].role" in lines[0]
    res = runner.invoke(app, ["ingest", str(src), "-o", str(tmp_path / "t.parquet"), "--skip-bad"])
    assert res.exit_code == 0 and "skipped 1 rows with empty prompts" in res.output
    assert "skipped 1 bad row(s)" in res.output


def test_only_empty_prompts_is_an_error_that_says_so(tmp_path):
    """A file of nothing but empty prompts: 'no valid requests (N rows with empty prompts skipped)'."""
    _, empty, _ = ROWS["lmcache-agent"]
    src = _file(tmp_path, "lmcache-agent", empty, empty)
    with pytest.raises(TraceError, match=r"no valid requests in the input \(2 rows with empty prompts skipped\)"):
        ingest([src], tmp_path / "t.parquet")


def test_gather_takes_empty_segments_in_any_store() -> None:
    """An empty segment among others, or alone, is gathered as nothing, in a store of stored tokens only (no
    opaque keys: it used to be taken for an opaque segment there and fail) and in a mixed one."""
    import numpy as np

    from pic.traces.content import Segments

    offs = np.array([0, 3, 3, 5], np.int64)
    toks = np.array([7, 8, 9, 4, 5], np.int32)
    plain = Segments(np.arange(3, dtype=np.uint64), np.zeros(3, np.uint8), offs, toks)
    assert plain.gather(np.array([0, 1, 2, 1])).tolist() == [7, 8, 9, 4, 5]
    mixed = Segments(np.arange(3, dtype=np.uint64), np.zeros(3, np.uint8), offs, toks, offs.copy(),
                     np.ones(3, np.uint64), np.ones(3, np.uint64))
    assert mixed.gather(np.array([2, 1, 0])).tolist() == [4, 5, 7, 8, 9]
    # alone (a prompt of one empty segment, and the segment itself): nothing, in either store
    for store in (plain, mixed):
        assert store.gather(np.array([1])).tolist() == [] and store.segment(1).dtype == np.int32
        assert store.segment(1).shape == (0,) and store.segment(0, 1, 1).shape == (0,)
