"""`pic ingest` through typer's CliRunner."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import pic.cli.ingest as cli_ingest
from pic.cli.app import app
from pic.traces.ingest import ingest as real_ingest
from pic.traces.io import read_trace
from tests.conftest import shared_file

runner = CliRunner()


def _tokens_file(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"tokens": [i, i + 1], "arrival_us": i}) + "\n" for i in range(5)))
    return p


def test_passes_options_to_library(tmp_path, monkeypatch):
    """The command calls traces.ingest.ingest once with the parsed sources and options."""
    calls = []

    def fake(sources, out, **kw):
        calls.append((sources, out, {k: v for k, v in kw.items() if k != "progress"}))
        return real_ingest(sources, out, **kw)

    monkeypatch.setattr(cli_ingest, "ingest", fake)
    src, out = _tokens_file(tmp_path), tmp_path / "o.parquet"
    res = runner.invoke(app, ["ingest", str(src), "-o", str(out), "--format", "tokens", "--skip-bad"])
    assert res.exit_code == 0, res.output
    assert calls == [([src], out, {"fmt": "tokens", "tokenizer": None, "skip_bad": True, "force": False, "skip_empty": True})]


def test_summary_table(tmp_path):
    """The summary names the output and the request count, and the file is a readable trace."""
    src, out = _tokens_file(tmp_path), tmp_path / "o.parquet"
    res = runner.invoke(app, ["ingest", str(src), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "requests" in res.output and " 5 " in res.output
    assert "skipped rows" in res.output
    assert read_trace(out).num_requests == 5


def test_tokenizer_option(tmp_path):
    """--tokenizer PATH uses that tokenizer.json (its name is recorded in the trace)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tj = tmp_path / "tokenizer.json"
    t = Tokenizer(models.WordLevel({"[UNK]": 0, "hi": 1}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.save(str(tj))
    src = tmp_path / "c.jsonl"
    src.write_text(json.dumps({"messages": [{"role": "user", "content": "hi hi there"}]}) + "\n")
    out = tmp_path / "o.parquet"
    res = runner.invoke(app, ["ingest", str(src), "-o", str(out), "--tokenizer", str(tj)])
    assert res.exit_code == 0, res.output
    back = read_trace(out)
    assert back.prompt(0).tolist() == [1, 1, 0]
    assert back.meta["tokenizer"] == "hf:tokenizer.json"


def test_help_has_examples():
    """--help lists the formats and shows examples."""
    res = runner.invoke(app, ["ingest", "--help"])
    assert res.exit_code == 0
    assert "mooncake" in res.output and "Examples" in res.output


def test_miniswe_then_inspect_json(tmp_path):
    """`pic ingest <miniswe> -o x.parquet && pic inspect x.parquet --json` reports 402 requests."""
    src = shared_file("lmcache-agent-trace", "miniswe")
    out = tmp_path / "x.parquet"
    res = runner.invoke(app, ["ingest", str(src), "-o", str(out)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["inspect", str(out), "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout)
    assert stats["requests"] == 402 and stats["sessions"] == 20


def test_stdin_source_is_refused_in_one_line(tmp_path):
    """`-` (stdin) is not a file: one line that says so, exit 1, nothing written."""
    out = tmp_path / "o.parquet"
    res = runner.invoke(app, ["ingest", "-", "--format", "sharegpt", "-o", str(out)], input="[]")
    assert res.exit_code == 1
    assert "stdin is not supported" in res.output and "Traceback" not in res.output
    assert not out.exists()
