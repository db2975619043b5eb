"""Property: every reader, on any input, either builds a valid trace or raises one TraceError line naming
the file (never another exception); through `pic ingest` the same input exits 0, or exits 1 with exactly
one line on stderr and leaves no output (issue #9). Bounded example counts keep CI quick."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from pic.cli.app import app
from pic.traces.ingest import read_sources
from pic.traces.schema import TraceError
from tests.fuzz.strategies import CSV_HEADERS, ROWS, input_file

FORMATS = [*ROWS, *CSV_HEADERS]
FUZZ = settings(max_examples=int(os.environ.get("PIC_FUZZ_EXAMPLES", "60")), deadline=None, derandomize=not os.environ.get("PIC_FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _read(data: bytes, fmt: str, given_fmt: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / ("in.csv" if fmt in CSV_HEADERS else "in.jsonl" if fmt != "sharegpt" else "in.json")
        p.write_bytes(data)
        try:
            trace = read_sources([p], fmt=given_fmt)[0]
        except TraceError as e:
            msg = str(e)
            assert msg.startswith(str(p)) and "\n" not in msg and "\r" not in msg, msg
            return
        assert trace.num_requests >= 1 and int(trace.prompt_lengths.min()) >= 1


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(data=st.data())
def test_reader_parses_or_raises_one_trace_error(fmt, data):
    """Any file of format-shaped hostile rows, read with --format FMT and with auto."""
    raw = data.draw(input_file(fmt))
    _read(raw, fmt, fmt)
    _read(raw, fmt, "auto")


@FUZZ
@given(raw=st.binary(max_size=200), fmt=st.sampled_from(["auto", *FORMATS]))
def test_reader_on_random_bytes(raw, fmt):
    """Bytes with no structure at all."""
    _read(raw, "tokens", fmt)


runner = CliRunner()


@settings(FUZZ, max_examples=int(os.environ.get("PIC_FUZZ_CLI_EXAMPLES", "12")))
@given(data=st.data())
def test_ingest_cli_exit_codes(data):
    """`pic ingest` on hostile files: exit 0, or exit 1 with one stderr line and no output, no temp file."""
    fmt = data.draw(st.sampled_from(FORMATS))
    raw = data.draw(input_file(fmt))
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / ("in.csv" if fmt in CSV_HEADERS else "in.jsonl" if fmt != "sharegpt" else "in.json")
        src.write_bytes(raw)
        out = Path(d) / "out" / "t.parquet"
        res = runner.invoke(app, ["ingest", str(src), "-o", str(out)])
        assert res.exit_code in (0, 1), (res.exit_code, res.output, res.exception)
        if res.exit_code == 1:
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: ") and "internal error" not in lines[0], res.stderr
            assert not out.exists()
        leftovers = [p.name for p in Path(d).rglob(".*")]
        assert not leftovers, leftovers
