"""`pic inspect` through typer's CliRunner, and traces.stats.trace_stats."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pic.cli.app import app
from pic.traces.ingest import ingest
from pic.traces.stats import trace_stats

runner = CliRunner()

ROWS = [  # two sessions; the system segment is shared by all three requests
    {"segments": [{"kind": "system", "tokens": [1] * 10}, {"kind": "user", "tokens": [2, 3]}],
     "arrival_us": 0, "session_id": "a", "output_tokens": 5},
    {"segments": [{"kind": "system", "tokens": [1] * 10}, {"kind": "user", "tokens": [4]}],
     "arrival_us": 1_000_000, "session_id": "a", "agent_id": "x", "output_tokens": 1},
    {"segments": [{"kind": "system", "tokens": [1] * 10}, {"kind": "user", "tokens": [5, 6, 7, 8]}],
     "arrival_us": 2_000_000, "session_id": "b", "output_tokens": 0},
]


@pytest.fixture
def trace_file(tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "t.parquet"
    ingest([src], out)
    return out


def test_stats_values(trace_file):
    """trace_stats counts requests, sessions, tokens, dedup and rate from the trace itself."""
    from pic.traces.io import read_trace

    s = trace_stats(read_trace(trace_file))
    assert (s["requests"], s["sessions"], s["agents"]) == (3, 2, 2)
    assert s["prompt_tokens"] == 12 + 11 + 14
    assert s["segment_tokens_distinct"] == 10 + 2 + 1 + 4
    assert s["dedup_ratio"] == pytest.approx(37 / 17)
    assert s["prompt_len"]["max"] == 14 and s["prompt_len"]["p50"] == 12
    assert s["output_tokens"] == 6
    assert s["duration_s"] == 2.0 and s["arrival_rate_rps"] == pytest.approx(1.0)
    assert s["segments_by_kind"] == {"system": {"segments": 1, "tokens": 10}, "user": {"segments": 3, "tokens": 7}}


def test_inspect_json(trace_file):
    """--json prints one JSON object with the statistics."""
    res = runner.invoke(app, ["inspect", str(trace_file), "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["requests"] == 3 and s["distinct_segments"] == 4


def test_inspect_table(trace_file):
    """The table shows counts, the dedup ratio and the arrival rate."""
    res = runner.invoke(app, ["inspect", str(trace_file)])
    assert res.exit_code == 0, res.output
    assert "3 / 2 / 2" in res.output and "2.18x" in res.output and "1.00 req/s" in res.output


def test_inspect_missing_file(tmp_path):
    """A missing trace is a one-line error, exit 1."""
    res = runner.invoke(app, ["inspect", str(tmp_path / "nope.parquet")])
    assert res.exit_code == 1 and "nope.parquet: path: no such file" in res.output


def test_inspect_wrong_schema_version(tmp_path):
    """A Parquet with another schema version is refused with both versions named."""
    p = tmp_path / "x.parquet"
    pq.write_table(pa.table({"a": [1]}).replace_schema_metadata({b"pic.schema_version": b"7"}), p)
    res = runner.invoke(app, ["inspect", str(p)])
    assert res.exit_code == 1 and "schema version 7, this pic reads 1" in res.output


def test_inspect_not_parquet(tmp_path):
    """A file that is not Parquet at all is named as such."""
    p = tmp_path / "x.parquet"
    p.write_text("hello")
    res = runner.invoke(app, ["inspect", str(p)])
    assert res.exit_code == 1 and "not a Parquet file" in res.output
