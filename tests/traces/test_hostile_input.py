"""Hostile input to the readers (issue #9): deep JSON, numbers beyond the schema, a BOM, pipes, Parquet
by magic bytes, a broken schema version, an empty trace, undecodable file names, quadratic prompts.

Each case ends in a TraceError naming file, line and field — never a RecursionError/OverflowError — or is
read correctly.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pic.traces.formats.lmcache_agent import split_prompt
from pic.traces.ingest import read_sources
from pic.traces.io import read_trace, write_trace
from pic.traces.schema import SegmentTable, Trace, TraceError, requests_frame

DEEP = 100_000
OK_ROWS = {
    "openai-chat": {"messages": [{"role": "user", "content": "hi"}]},
    "lmcache-agent": {"timestamp": 1, "input": "hello", "output": "x", "session_id": "s"},
    "mooncake": {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]},
    "tokens": {"tokens": [1, 2, 3]},
}


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def _deep(key: str) -> str:
    return f'{{"{key}": ' + "[" * DEEP + "]" * DEEP + "}"


# ---- deep JSON ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", list(OK_ROWS))
@pytest.mark.parametrize("where", ["first-line", "second-line"])
def test_deep_json_is_one_error_in_every_jsonl_reader(tmp_path, fmt, where):
    """A line nested 100k deep is 'file:line: json: nested too deeply', with --format auto or given."""
    deep = _deep(next(iter(OK_ROWS[fmt])))
    lines = [deep] if where == "first-line" else [json.dumps(OK_ROWS[fmt]), deep]
    src = _write(tmp_path, "d.jsonl", "\n".join(lines) + "\n")
    line = len(lines)
    for given in ("auto", fmt):
        if given == "auto" and where == "first-line":
            expect = rf"{re.escape(str(src))}:1: (json|format): .*nested too deeply"
        else:
            expect = rf"{re.escape(str(src))}:{line}: json: nested too deeply"
        with pytest.raises(TraceError, match=expect):
            read_sources([src], fmt=given)


def test_deep_json_skipped_under_skip_bad(tmp_path):
    """--skip-bad counts a too-deep line like any other bad line."""
    src = _write(tmp_path, "d.jsonl", json.dumps(OK_ROWS["tokens"]) + "\n" + _deep("tokens") + "\n")
    trace, rows, *_ = read_sources([src], fmt="tokens", skip_bad=True)
    assert trace.num_requests == 1 and sum(rows.skipped.values()) == 1


def test_moderately_deep_tool_json_is_an_error_not_a_crash(tmp_path):
    """JSON that parses but is too deep to re-serialise (tools of depth ~990) is a row error."""
    depth = 990
    row = '{"messages": [{"role": "user", "content": "hi"}], "tools": ' + "[" * depth + "]" * depth + "}"
    src = _write(tmp_path, "t.jsonl", row + "\n")
    try:
        trace, *_ = read_sources([src], fmt="openai-chat")
    except TraceError as e:
        assert re.search(r":1: (tools|json): .*nested too deeply", str(e)), str(e)
    else:
        assert trace.num_requests == 1


# ---- numbers beyond what the schema holds ---------------------------------------------------------------

@pytest.mark.parametrize(("fmt", "row", "field"), [
    ("mooncake", {**OK_ROWS["mooncake"], "timestamp": 1e30}, "timestamp"),
    ("mooncake", {**OK_ROWS["mooncake"], "output_length": 2**40}, "output_length"),
    ("mooncake", {**OK_ROWS["mooncake"], "input_length": 2**70}, "input_length"),
    ("tokens", {**OK_ROWS["tokens"], "arrival_us": 2**64}, "arrival_us"),
    ("tokens", {**OK_ROWS["tokens"], "arrival_us": 9.3e18}, "arrival_us"),
    ("tokens", {"tokens": [1, 2**70]}, "tokens"),
    ("tokens", {**OK_ROWS["tokens"], "output_tokens": 2**31}, "output_tokens"),
    ("openai-chat", {**OK_ROWS["openai-chat"], "max_tokens": 2**64}, "max_tokens"),
    ("openai-chat", {**OK_ROWS["openai-chat"], "timestamp": 1e300}, "timestamp"),
    ("openai-chat", {**OK_ROWS["openai-chat"], "arrival_us": 10**30}, "arrival_us"),
    ("lmcache-agent", {**OK_ROWS["lmcache-agent"], "timestamp": 2**63}, "timestamp"),
], ids=["mc-timestamp", "mc-output", "mc-input", "tok-arrival-int", "tok-arrival-float", "tok-id",
        "tok-output", "oa-max-tokens", "oa-timestamp", "oa-arrival", "lm-timestamp"])
def test_out_of_range_numbers_are_row_errors(tmp_path, fmt, row, field):
    """Every numeric field is range-checked at read time against what the schema holds."""
    src = _write(tmp_path, "r.jsonl", json.dumps(row) + "\n")
    with pytest.raises(TraceError, match=rf"{re.escape(str(src))}:1: {re.escape(field)}: .*(out of range|outside|too large|over)"):
        read_sources([src], fmt=fmt)


def test_deep_sharegpt_array(tmp_path):
    """A ShareGPT array whose element is nested 100k deep: one error naming the file and line."""
    src = _write(tmp_path, "s.json", "[\n" + '{"conversations": ' + "[" * DEEP + "]" * DEEP + "}]")
    with pytest.raises(TraceError, match=rf"{re.escape(str(src))}:2: json: nested too deeply"):
        read_sources([src], fmt="sharegpt")


@pytest.mark.parametrize(("row", "field"), [
    (f"1.0,GPT-4,{2**64},1,0,x", "Request tokens"), (f"1.0,GPT-4,5,{2**40},0,x", "Response tokens"),
    ("1e300,GPT-4,5,1,0,x", "Timestamp"),
], ids=["request", "response", "time"])
def test_burstgpt_numbers_are_range_checked(tmp_path, row, field):
    """BurstGPT numbers beyond what the schema holds are row errors."""
    src = _write(tmp_path, "b.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 + row + "\n")
    with pytest.raises(TraceError, match=rf"{re.escape(str(src))}:2: {field}: .*out of range"):
        read_sources([src], fmt="burstgpt")


@pytest.mark.parametrize(("cells", "field"), [
    (f"0,{2**64},1", "ContextTokens"), (f"0,{2**31},1", "ContextTokens"), (f"0,5,{2**40}", "GeneratedTokens"),
    ("1e300,5,1", "TIMESTAMP"), ("9999-12-31 23:59:59,5,1", None),
], ids=["ctx-int64", "ctx-int32", "gen", "time", "date-max"])
def test_azure_numbers_are_range_checked(tmp_path, cells, field):
    """Azure CSV numbers beyond what a request can hold are row errors (the largest date is fine)."""
    src = _write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n" + cells + "\n")
    if field is None:
        assert read_sources([src])[0].num_requests == 1
        return
    with pytest.raises(TraceError, match=rf"{re.escape(str(src))}:2: {field}: "):
        read_sources([src])


# ---- encodings, pipes, Parquet by its bytes ---------------------------------------------------------------

@pytest.mark.parametrize("fmt", list(OK_ROWS))
def test_utf8_bom_is_accepted(tmp_path, fmt):
    """A UTF-8 byte-order mark before the first JSONL line is skipped (auto-detection included)."""
    src = _write(tmp_path, "b.jsonl", b"\xef\xbb\xbf" + (json.dumps(OK_ROWS[fmt]) + "\n").encode())
    for given in ("auto", fmt):
        assert read_sources([src], fmt=given)[0].num_requests == 1


def _fifo(tmp_path: Path, data: bytes) -> Path:
    p = tmp_path / "pipe"
    os.mkfifo(p)

    def feed():
        with open(p, "wb") as f:
            f.write(data)

    threading.Thread(target=feed, daemon=True).start()
    return p


def test_pipe_needs_format_and_then_is_read(tmp_path):
    """A pipe (`<(cat f)`) with --format auto says why and what to do; with --format it is read once."""
    data = (json.dumps(OK_ROWS["tokens"]) + "\n").encode()
    p = tmp_path / "pipe"
    os.mkfifo(p)
    with pytest.raises(TraceError, match=r"pipe: is a pipe.*--format"):
        read_sources([p])
    os.unlink(p)
    p = _fifo(tmp_path, data)
    assert read_sources([p], fmt="tokens")[0].num_requests == 1


def _small_trace() -> Trace:
    t = SegmentTable()
    sid = t.add(np.arange(1, 20), "user")
    return Trace(t.build(), requests_frame({"request_id": [0], "session_id": ["s"], "agent_id": ["a"],
                                            "arrival_us": [0], "output_tokens": [1], "segment_ids": [[sid]]}))


@pytest.mark.parametrize("name", ["t.pq", "T.PARQUET", "trace"])
def test_parquet_is_detected_by_magic_bytes(tmp_path, name):
    """A pic trace named without the .parquet suffix is read as a trace by replay's reader, and ingest
    says it is already a trace."""
    from pic.engine.replay import read_trace_file

    p = write_trace(_small_trace(), tmp_path / name)
    assert read_trace_file(p).num_requests == 1
    with pytest.raises(TraceError, match="already a pic trace"):
        read_sources([p])


def test_non_utf8_schema_version_names_the_file(tmp_path):
    """A schema version in Parquet metadata that is not UTF-8 is a one-line error naming the file."""
    p = tmp_path / "x.parquet"
    pq.write_table(pa.table({"a": [1]}).replace_schema_metadata({b"pic.schema_version": b"\xff\xfe"}), p)
    with pytest.raises(TraceError, match=rf"{re.escape(str(p))}: metadata: schema version is not UTF-8"):
        read_trace(p)


def test_trace_with_segments_but_no_requests(tmp_path):
    """A trace with segments and zero requests reads; its stats are zeros; replay says there is nothing."""
    from pic.engine.config import ReplayConfig
    from pic.engine.replay import replay
    from pic.traces.stats import trace_stats

    t = SegmentTable()
    t.add(np.arange(1, 20), "user")
    empty = Trace(t.build(), requests_frame({k: [] for k in ("request_id", "session_id", "agent_id",
                                                              "arrival_us", "output_tokens", "segment_ids")}))
    back = read_trace(write_trace(empty, tmp_path / "e.parquet"))
    assert trace_stats(back)["requests"] == 0
    with pytest.raises(ValueError, match="no requests"):
        replay(back, ReplayConfig())


@pytest.mark.parametrize(("suffix", "content"), [
    (".jsonl", json.dumps(OK_ROWS["tokens"]) + "\n"),
    (".csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,5,1\n"),
    (".csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1.0,GPT-4,5,1,6,x\n"),
    (".json", json.dumps([{"conversations": [{"from": "human", "value": "hi"},
                                                       {"from": "gpt", "value": "yo"}]}])),
], ids=["tokens", "azure", "burstgpt", "sharegpt"])
def test_undecodable_file_names(tmp_path, suffix, content):
    """A file name that is not UTF-8 (surrogate-escaped by Python) is read; the session id is printable."""
    name = os.fsdecode(b"bad\xff" + suffix.encode())
    src = tmp_path / name
    src.write_text(content)
    trace = read_sources([src])[0]
    sess = trace.requests["session_id"][0]
    assert sess.encode("utf-8") and "bad" in sess
    out = write_trace(trace, tmp_path / os.fsdecode(b"out\xff.parquet"))
    assert read_trace(out).num_requests == 1


# ---- linear time --------------------------------------------------------------------------------------

@pytest.mark.parametrize("unit", ["\n<br>", "\n<a>", "\n<a>x</b>", "\n<a></a>\n<b>"])
def test_lmcache_prompt_split_is_linear(unit):
    """Unclosed line-opening tags do not make the splitter rescan the prompt: 1 MB in well under a
    second of CPU (it took 300 s before); the pieces still join back to the prompt."""
    text = unit * (1_000_000 // len(unit))
    t0 = time.process_time()
    pieces = split_prompt(text)
    cpu = time.process_time() - t0
    assert "".join(p for _, p in pieces) == text
    assert cpu < 3.0, f"{cpu:.2f} s CPU for 1 MB"


@pytest.mark.parametrize(("fmt", "header"), [("azure", "TIMESTAMP,ContextTokens,GeneratedTokens"),
                                             ("burstgpt", "Timestamp,Model,Request tokens,Response tokens,"
                                                          "Total tokens,Log Type")])
def test_csv_line_with_a_bare_carriage_return(tmp_path, fmt, header):
    """A bare \\r inside a CSV field (found by the fuzz suite) is a row error, not a csv.Error."""
    src = _write(tmp_path, "c.csv", header + "\n0,\r0\n")
    with pytest.raises(TraceError, match=rf"{re.escape(str(src))}:2: row: not a CSV line"):
        read_sources([src], fmt=fmt)
