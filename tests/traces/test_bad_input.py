"""Malformed input: one clear ``file:line: field: problem`` error, no output left behind; --skip-bad."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pic.cli.app import app
from pic.traces.formats._base import SKIP_BAD_HINT
from pic.traces.ingest import ingest
from pic.traces.io import read_trace
from pic.traces.schema import TraceError

MC = '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}'
LM = '{"timestamp": 1, "input": "hello", "output": "x", "session_id": "s"}'
AZ = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
BG = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
SG_TURNS = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]


def _sharegpt(*convs) -> str:
    return json.dumps(list(convs), indent=1) + "\n"


def _line(obj) -> str:
    return json.dumps(obj) + "\n"


# (id, file name, content: str | bytes, format, expected message after "<path>:")
CASES = [
    ("truncated-json", "t.jsonl", '{"tokens": [1, 2]}\n{"tokens": [1,', "auto", r"2: json: invalid JSON"),
    ("json-array-line", "t.jsonl", '{"tokens": [1]}\n[1, 2]\n', "tokens", r"2: json: expected an object, got list"),
    ("tokens-wrong-type", "t.jsonl", _line({"tokens": "abc"}), "tokens", r"1: tokens: expected a non-empty list"),
    ("tokens-float-ids", "t.jsonl", _line({"tokens": [1.5]}), "tokens", r"1: tokens: token ids must be integers"),
    ("tokens-id-range", "t.jsonl", _line({"tokens": [-1]}), "tokens", r"1: tokens: token id outside \[0, 2\*\*31\)"),
    ("tokens-unknown-kind", "t.jsonl", _line({"segments": [{"kind": "banana", "tokens": [1]}]}), "tokens",
     r"1: segments\[0\]\.kind: unknown kind 'banana'"),
    ("tokens-missing", "t.jsonl", _line({"arrival_us": 5}), "tokens", r"1: tokens: missing field"),
    ("mooncake-missing-hash-ids", "m.jsonl", _line({"timestamp": 0, "input_length": 5, "output_length": 1}),
     "mooncake", r"1: hash_ids: missing field"),
    ("mooncake-length-type", "m.jsonl", MC.replace("600", '"600"') + "\n", "auto",
     r"1: input_length: expected a number, got str"),
    ("mooncake-length-fraction", "m.jsonl", MC.replace("600", "600.5") + "\n", "auto",
     r"1: input_length: expected an integer, got 600.5"),
    ("mooncake-hash-ids-inconsistent", "m.jsonl", MC + "\n" + MC.replace("600", "1100") + "\n", "auto",
     r"2: hash_ids: 2 ids but input_length 1100 needs 3 blocks of 512"),
    ("mooncake-negative-hash-id", "m.jsonl", MC.replace("[1, 2]", "[1, -2]") + "\n", "auto",
     r"1: hash_ids: expected a list of non-negative integers"),
    ("mooncake-negative-timestamp", "m.jsonl", MC.replace('"timestamp": 0', '"timestamp": -5') + "\n", "auto",
     r"1: timestamp: negative timestamp -5"),
    ("mooncake-negative-output", "m.jsonl", MC.replace('"output_length": 1', '"output_length": -1') + "\n", "auto",
     r"1: output_length: must be >= 0, got -1"),
    ("lmcache-nan-timestamp", "a.jsonl", LM + "\n" + LM.replace('"timestamp": 1', '"timestamp": NaN') + "\n", "auto",
     r"2: timestamp: not a finite number \(nan\)"),
    ("lmcache-missing-input", "a.jsonl", _line({"timestamp": 1, "output": ""}), "lmcache-agent",
     r"1: input: missing field"),
    ("lmcache-input-type", "a.jsonl", LM + "\n" + _line({"timestamp": 2, "input": 7}), "auto",
     r"2: input: expected a string, got int"),
    ("chat-missing-messages", "c.jsonl", _line({"tools": []}), "openai-chat", r"1: messages: missing field"),
    ("chat-unknown-role", "c.jsonl", _line({"messages": [{"role": "wizard", "content": "x"}]}), "auto",
     r"1: messages\[0\]\.role: unknown role 'wizard'"),
    ("chat-content-type", "c.jsonl", _line({"messages": [{"role": "user", "content": 3}]}), "auto",
     r"1: messages\[0\]\.content: expected a string or a list, got int"),
    ("chat-timestamp-string", "c.jsonl", _line({"messages": [{"role": "user", "content": "x"}], "timestamp": "noon"}),
     "auto", r"1: timestamp: expected a number, got str"),
    ("empty-file-auto", "e.jsonl", "", "auto", r" file: empty file"),
    ("empty-file-explicit", "e.jsonl", "\n\n", "tokens", r" requests: no valid requests in the input"),
    ("non-utf8", "t.jsonl", b'{"tokens": [1]}\n{"tokens": [2], "x": "\xff\xfe"}\n', "tokens",
     r"2: encoding: not valid UTF-8 \(byte 22\)"),
    ("non-utf8-sniff", "t.jsonl", b'\xff{"tokens": [1]}\n', "auto", r"1: encoding: not valid UTF-8 \(byte 0\)"),
    ("undetectable", "x.jsonl", "hello world\n", "auto", r"1: format: cannot detect the format"),
    ("azure-missing-column", "az.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03,5\n", "azure",
     r"1: GeneratedTokens: missing column"),
    ("azure-bad-int", "az.csv", AZ + "2023-11-16 18:17:03,abc,1\n", "auto",
     r"2: ContextTokens: expected an integer, got 'abc'"),
    ("azure-bad-time", "az.csv", AZ + "yesterday,5,1\n", "auto", r"2: TIMESTAMP: not a date-time or number"),
    ("azure-zero-context", "az.csv", AZ + "2023-11-16 18:17:03,0,1\n", "auto",
     r" requests: no valid requests in the input \(1 rows with empty prompts skipped\)"),
    ("azure-nan-time", "az.csv", AZ + "nan,5,1\n", "auto", r"2: TIMESTAMP: not a finite number"),
    ("azure-short-row", "az.csv", AZ + "2023-11-16 18:17:03,5\n", "auto", r"2: row: expected 3 columns, got 2"),
    ("sharegpt-truncated", "sg.json", _sharegpt({"id": "a", "conversations": SG_TURNS})[:-8], "auto",
     r"\d+: json: invalid JSON .*; the rest of the array cannot be read"),
    ("sharegpt-not-array", "sg.json", '{"id": "a", "conversations": 5}\n', "sharegpt",
     r"1: conversations: expected a list, got int"),
    ("sharegpt-missing-conversations", "sg.json", _sharegpt({"id": "a", "conversations": SG_TURNS}, {"id": "b"}),
     "sharegpt", r"15: conversations: missing field"),
    ("sharegpt-unknown-speaker", "sg.json", _sharegpt({"id": "a", "conversations": [
        {"from": "wizard", "value": "x"}]}), "auto", r"2: conversations\[0\]\.from: unknown speaker 'wizard'"),
    ("sharegpt-missing-speaker", "sg.jsonl", json.dumps({"conversations": [{"value": "x"}]}) + "\n", "auto",
     r"1: conversations\[0\]\.from: missing field"),
    ("sharegpt-value-type", "sg.json", _sharegpt({"id": "a", "conversations": [
        {"from": "human", "value": ["x"]}, {"from": "gpt", "value": "y"}]}), "auto",
     r"2: conversations\[0\]\.value: expected a string, got list"),
    ("sharegpt-element-type", "sg.json", '[{"id": "a", "conversations": []},\n 7]\n', "sharegpt",
     r"2: json: expected a conversation object, got int"),
    ("sharegpt-id-type", "sg.json", _sharegpt({"id": [1], "conversations": SG_TURNS}), "auto",
     r"2: id: expected a string, got list"),
    ("sharegpt-trailing-text", "sg.json", '[{"conversations": []}] x\n', "sharegpt",
     r"1: json: unexpected text after the array"),
    ("sharegpt-no-assistant", "sg.json", _sharegpt({"id": "a", "conversations": [{"from": "human", "value": "x"}]}),
     "auto", r" requests: no valid requests in the input \(1 bad rows skipped\)"),
    ("burstgpt-missing-column", "bg.csv", "Timestamp,Model,Request tokens\n5,GPT-4,10\n", "burstgpt",
     r"1: Response tokens: missing column"),
    ("burstgpt-bad-int", "bg.csv", BG + "5,GPT-4,many,1,1,API log\n", "auto",
     r"2: Request tokens: expected an integer, got 'many'"),
    ("burstgpt-zero-request", "bg.csv", BG + "5,GPT-4,0,1,1,API log\n", "auto",
     r" requests: no valid requests in the input \(1 rows with empty prompts skipped\)"),
    ("burstgpt-negative-response", "bg.csv", BG + "5,GPT-4,10,-1,9,API log\n", "auto",
     r"2: Response tokens: must be >= 0, got -1"),
    ("burstgpt-bad-time", "bg.csv", BG + "soon,GPT-4,10,1,11,API log\n", "auto",
     r"2: Timestamp: expected seconds, got 'soon'"),
    ("burstgpt-negative-time", "bg.csv", BG + "-3,GPT-4,10,1,11,API log\n", "auto",
     r"2: Timestamp: negative timestamp -3"),
    ("burstgpt-nan-time", "bg.csv", BG + "nan,GPT-4,10,1,11,API log\n", "auto",
     r"2: Timestamp: not a finite number \(nan\)"),
    ("burstgpt-short-row", "bg.csv", BG + "5,GPT-4,10\n", "auto", r"2: row: expected 6 columns, got 3"),
]


def _write(tmp_path, name, content):
    src = tmp_path / "in" / name
    src.parent.mkdir()
    if isinstance(content, bytes):
        src.write_bytes(content)
    else:
        src.write_text(content)
    return src


def _assert_nothing_written(out):
    assert not out.exists()
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


@pytest.mark.parametrize(("name", "content", "fmt", "expect"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_library(tmp_path, name, content, fmt, expect):
    """Each malformed input raises one TraceError line naming file, line and field; no file is written."""
    src = _write(tmp_path, name, content)
    out = tmp_path / "out" / "t.parquet"
    with pytest.raises(TraceError) as e:
        ingest([src], out, fmt=fmt)
    msg = str(e.value)
    assert "\n" not in msg
    assert re.match(re.escape(str(src)) + ":" + expect, msg), msg
    _assert_nothing_written(out)


@pytest.mark.parametrize(("name", "content", "fmt", "expect"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_row_errors_end_with_the_skip_bad_hint(tmp_path, name, content, fmt, expect):
    """A row error ends with the hint to pass --skip-bad exactly when --skip-bad would go past it (#10)."""
    src = _write(tmp_path, name, content)
    with pytest.raises(TraceError) as e:
        ingest([src], tmp_path / "a.parquet", fmt=fmt)
    try:
        ingest([src], tmp_path / "b.parquet", fmt=fmt, skip_bad=True)
        helps = True
    except TraceError as again:
        helps = str(again) != str(e.value)
    assert str(e.value).endswith(SKIP_BAD_HINT) == helps, str(e.value)


def test_fifty_megabyte_line(tmp_path):
    """A 50 MB single line is refused without holding it (limit named), and nothing is written."""
    src = tmp_path / "in" / "big.jsonl"
    src.parent.mkdir()
    with open(src, "w") as f:
        f.write('{"tokens": [1]}\n{"tokens": [' + "1," * (25 * 1024 * 1024) + "1]}\n")
    out = tmp_path / "out" / "t.parquet"
    with pytest.raises(TraceError, match=re.escape(str(src)) + r":2: line: \d+ bytes, over the 16777216-byte limit"):
        ingest([src], out)
    _assert_nothing_written(out)


def test_fifty_megabyte_line_skipped(tmp_path):
    """With skip_bad the over-long line is counted and the other rows are kept."""
    src = tmp_path / "big.jsonl"
    with open(src, "w") as f:
        f.write('{"tokens": [1]}\n' + " " * (50 * 1024 * 1024) + "x\n" + '{"tokens": [2]}\n')
    r = ingest([src], tmp_path / "t.parquet", skip_bad=True)
    assert r.num_requests == 2 and r.num_skipped == 1
    assert next(iter(r.skipped)).startswith("line: ")


def test_unknown_format(tmp_path):
    """An unknown --format is refused before any work, listing the known ones."""
    src = _write(tmp_path, "t.jsonl", '{"tokens": [1]}\n')
    with pytest.raises(ValueError, match=r"format: unknown format 'xml' \(choose from auto, openai-chat"):
        ingest([src], tmp_path / "out" / "t.parquet", fmt="xml")
    assert not (tmp_path / "out").exists()


def test_missing_source(tmp_path):
    """A source path that does not exist is named in the error."""
    with pytest.raises(TraceError, match=r"nope\.jsonl: path: no such file or directory"):
        ingest([tmp_path / "nope.jsonl"], tmp_path / "t.parquet")


def test_mixed_directory_writes_nothing(tmp_path):
    """A directory mixing formats fails with nothing written."""
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_text('{"tokens": [1]}\n')
    (d / "b.csv").write_text(AZ + "0,5,1\n")
    out = tmp_path / "out" / "t.parquet"
    with pytest.raises(TraceError, match=r"in: format: mixed formats in one directory"):
        ingest([d], out)
    _assert_nothing_written(out)


def test_failure_keeps_existing_output(tmp_path):
    """A failed ingest leaves a previous trace at the output path untouched."""
    good = tmp_path / "good.jsonl"
    good.write_text('{"tokens": [1, 2, 3]}\n')
    out = tmp_path / "t.parquet"
    ingest([good], out)
    before = out.read_bytes()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"tokens": [1, 2, 3]}\n{"tokens": \n')
    with pytest.raises(TraceError):
        ingest([bad], out)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "good.jsonl", "t.parquet"]


def test_skip_bad_counts_reasons(tmp_path):
    """--skip-bad keeps the good rows and counts the bad ones by reason."""
    src = tmp_path / "m.jsonl"
    bad_len = MC.replace("600", "1100")
    src.write_text("\n".join([MC, bad_len, "{oops", MC.replace('"timestamp": 0', '"timestamp": 9'), bad_len]) + "\n")
    r = ingest([src], tmp_path / "t.parquet", skip_bad=True)
    assert r.num_requests == 2
    assert r.skipped == {"hash_ids: 2 ids but input_length 1100 needs 3 blocks of 512": 2,
                         "json: invalid JSON (Expecting property name enclosed in double quotes at column 2)": 1}
    assert read_trace(tmp_path / "t.parquet").num_requests == 2


def test_skip_bad_all_rows_bad(tmp_path):
    """If every row is bad, --skip-bad still fails (nothing to write) and says how many were skipped."""
    src = tmp_path / "t.jsonl"
    src.write_text('{"tokens": "x"}\n{"tokens": []}\n')
    with pytest.raises(TraceError, match=r"requests: no valid requests in the input \(2 bad rows skipped\)"):
        ingest([src], tmp_path / "out" / "t.parquet", fmt="tokens", skip_bad=True)
    assert not (tmp_path / "out").exists()


# --- Parquet that is not a (current) pic trace ---------------------------------------------------

def _parquet(path, metadata):
    table = pa.table({"a": [1, 2]})
    pq.write_table(table.replace_schema_metadata(metadata), path)
    return path


@pytest.mark.parametrize(("meta", "expect"), [
    (None, r"metadata: not a pic trace \(no pic.schema_version\)"),
    ({b"pic.schema_version": b"99"}, r"metadata: schema version 99, this pic reads 1 and 2"),
    ({b"pic.schema_version": b"1"}, r"record: missing column"),
], ids=["no-metadata", "wrong-version", "wrong-schema"])
def test_bad_parquet(tmp_path, meta, expect):
    """A Parquet file that is not a current pic trace is named with what is wrong."""
    p = _parquet(tmp_path / "x.parquet", meta)
    with pytest.raises(TraceError, match=re.escape(str(p)) + ": " + expect):
        read_trace(p)


# --- the same through the CLI ------------------------------------------------------------------

runner = CliRunner()


@pytest.mark.parametrize("case", ["truncated-json", "mooncake-hash-ids-inconsistent", "non-utf8", "azure-bad-time"])
def test_bad_input_cli(tmp_path, case):
    """`pic ingest` exits non-zero with one `error: file:line: field: ...` line and writes nothing."""
    _, name, content, fmt, expect = next(c for c in CASES if c[0] == case)
    src = _write(tmp_path, name, content)
    out = tmp_path / "out" / "t.parquet"
    res = runner.invoke(app, ["ingest", str(src), "-o", str(out), "--format", fmt])
    assert res.exit_code == 1
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and re.match(r"error: " + re.escape(str(src)) + ":" + expect, lines[0]), res.output
    _assert_nothing_written(out)


def test_unknown_format_cli(tmp_path):
    """`pic ingest --format xml` is a usage error (exit 2) listing the formats; a near miss is suggested."""
    src = _write(tmp_path, "t.jsonl", '{"tokens": [1]}\n')
    res = runner.invoke(app, ["ingest", str(src), "-o", str(tmp_path / "o.parquet"), "--format", "xml"])
    flat = " ".join(re.sub("[│╭╮╰╯─]", " ", res.output).split())
    assert res.exit_code == 2 and "'xml' is not one of 'auto', 'openai-chat'" in flat
    res = runner.invoke(app, ["ingest", str(src), "-o", str(tmp_path / "o.parquet"), "--format", "sharegtp"])
    assert res.exit_code == 2 and "did you mean 'sharegpt'?" in " ".join(re.sub("[│╭╮╰╯─]", " ", res.output).split())
    assert not (tmp_path / "o.parquet").exists()


def test_skip_bad_cli(tmp_path):
    """`pic ingest --skip-bad` writes the good rows and reports the skipped count and reason."""
    src = tmp_path / "t.jsonl"
    src.write_text('{"tokens": [1]}\n{"tokens": "x"}\n{"tokens": [2]}\n')
    out = tmp_path / "t.parquet"
    res = runner.invoke(app, ["ingest", str(src), "-o", str(out), "--skip-bad"])
    assert res.exit_code == 0, res.output
    assert "skipped 1 bad row(s):" in res.output
    assert "tokens: expected a non-empty list of token ids" in res.output
    assert read_trace(out).num_requests == 2


def test_inspect_not_a_trace_cli(tmp_path):
    """`pic inspect` on a Parquet that is not a pic trace exits 1 with a clear message."""
    p = _parquet(tmp_path / "x.parquet", None)
    res = runner.invoke(app, ["inspect", str(p)])
    assert res.exit_code == 1 and "not a pic trace" in res.output
