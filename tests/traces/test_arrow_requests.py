"""A trace read from a file keeps its request rows as the Arrow table (traces.arrow_cols): every value a replay
reads, the digests and every refusal equal those of the same rows as a polars frame."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from pic.engine.oracle import trace_digest
from pic.engine.runconfig import trace_sha256
from pic.traces.arrow_cols import string_codes
from pic.traces.io import read_trace, write_trace
from pic.traces.schema import SegmentTable, Trace, TraceError, requests_frame

_COLS = ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")


def _rows(n: int, seed: int, agent_nulls: bool = False) -> tuple[SegmentTable, dict]:
    rng = np.random.default_rng(seed)
    table = SegmentTable()
    segs = [table.add(rng.integers(0, 1000, int(rng.integers(1, 50))), "user") for _ in range(12)]
    names = ["b", "a", "ü-é", "", "a\x00z", "long-" * 30]
    rows = {k: [] for k in _COLS}
    t = 0
    for i in range(n):
        t += int(rng.integers(0, 5))
        for k, v in (("request_id", int(rng.integers(0, 10**9)) * n + i), ("session_id", names[i % len(names)]),
                     ("agent_id", None if agent_nulls and i % 3 == 0 else f"ag{i % 2}"), ("arrival_us", t),
                     ("output_tokens", int(rng.integers(0, 9))),
                     ("segment_ids", [segs[j] for j in rng.integers(0, 12, int(rng.integers(1, 5)))])):
            rows[k].append(v)
    return table, rows


def _both(table: SegmentTable, rows: dict) -> tuple[Trace, Trace]:
    frame = requests_frame(rows)
    seg = table.build()
    return Trace(seg, frame.to_arrow().cast(pa.schema([
        ("request_id", pa.int64()), ("session_id", pa.string()), ("agent_id", pa.string()),
        ("arrival_us", pa.int64()), ("output_tokens", pa.int32()), ("segment_ids", pa.list_(pa.uint64()))])),
        source="t"), Trace(seg, frame, source="t")


@pytest.mark.parametrize("seed,agent_nulls", [(0, False), (1, True), (2, False)])
def test_table_rows_equal_frame_rows(seed, agent_nulls):
    a, b = _both(*_rows(200, seed, agent_nulls))
    assert a._table is not None and b._table is None
    for c in ("request_id", "arrival_us", "output_tokens"):
        assert np.array_equal(a.column(c), b.column(c)) and a.column(c).dtype == b.column(c).dtype
    for c in ("session_id", "agent_id"):
        assert a.strings(c) == b.strings(c)
        assert (a.string_codes(c) is None) == (b.string_codes(c) is None)
        if a.string_codes(c) is not None:
            (ca, na), (cb, nb) = a.string_codes(c), b.string_codes(c)
            assert na == nb and np.array_equal(ca, cb)
    for x, y in zip(a.segment_lists(), b.segment_lists(), strict=True):
        assert np.array_equal(x, y)
    for x, y in zip(a._csr, b._csr, strict=True):
        assert np.array_equal(x, y)
    assert trace_sha256(a) == trace_sha256(b) and trace_digest(a) == trace_digest(b)
    assert a.requests.equals(b.requests) and a.num_requests == b.num_requests == 200


def test_read_trace_keeps_the_table(tmp_path):
    table, rows = _rows(50, 3)
    t = Trace(table.build(), requests_frame(rows), source="t")
    write_trace(t, tmp_path / "t.parquet")
    back = read_trace(tmp_path / "t.parquet")
    assert back._table is not None and back._frame is None
    assert back.requests.equals(t.requests) and trace_sha256(back) == trace_sha256(t)


def test_string_codes_sort_as_polars():
    vals = ["b", "a", "", "ü", "a\x00", "a", "zz", "é" * 40, "b"]
    codes, names = string_codes(pa.chunked_array([pa.array(vals[:4]), pa.array(vals[4:])]))
    want = pl.Series(vals).unique().sort()
    assert names == want.to_list()
    assert [names[c] for c in codes.tolist()] == vals


@pytest.mark.parametrize("breakage", ["dup-id", "neg-arrival", "neg-output", "backwards", "no-segments",
                                      "unknown-segment", "null-session"])
def test_refusals_equal_the_frame_path(breakage):
    """A broken table is refused with the frame's error (the same field, row and message)."""
    table, rows = _rows(30, 4)
    if breakage == "dup-id":
        rows["request_id"][7] = rows["request_id"][3]
    elif breakage == "neg-arrival":
        rows["arrival_us"][5] = -1
    elif breakage == "neg-output":
        rows["output_tokens"][9] = -2
    elif breakage == "backwards":
        rows["arrival_us"][12] = 0
        rows["arrival_us"][12 + 6] = 0
        rows["arrival_us"][12 + 12] = 0
    elif breakage == "no-segments":
        rows["segment_ids"][4] = []
    elif breakage == "unknown-segment":
        rows["segment_ids"][6] = [12345]
    elif breakage == "null-session":
        rows["session_id"][2] = None
    errors = []
    for make in (lambda: _both(table, rows)[0], lambda: Trace(table.build(), requests_frame(rows), source="t")):
        try:
            make()
            errors.append(None)
        except TraceError as e:
            errors.append(str(e))
    assert errors[0] == errors[1]
    assert (errors[0] is None) == (breakage == "null-session")


@pytest.mark.parametrize("seed", range(6))
def test_string_codes_of_words_sort_as_polars(seed):
    """The fixed-width path (no NUL byte): values across 8-byte word boundaries, prefixes of one another,
    multibyte characters, empty strings; codes cached by the trace (validate and the workload ask twice)."""
    rng = np.random.default_rng(seed)
    alphabet = ["a", "b", "z", "é", "ü", "\u20ac", "0", "~"]
    vals = ["".join(rng.choice(alphabet, int(rng.integers(0, 20)))) for _ in range(300)]
    vals += [v[:k] for v in vals[:40] for k in (0, 7, 8, 9)]
    codes, names = string_codes(pa.chunked_array([pa.array(vals[:100]), pa.array(vals[100:])]))
    assert names == pl.Series(vals).unique().sort().to_list()
    assert [names[c] for c in codes.tolist()] == vals
    a, _ = _both(*_rows(20, seed))
    assert a.string_codes("session_id") is a.string_codes("session_id")


@pytest.mark.parametrize("seed", [0, 1])
def test_segment_lists_are_read_into_the_csr(tmp_path, seed):
    """Once the CSR is made (every read validates it), the table keeps no segment id lists nor the sorted ids beside
    it; the lists read back (segment_lists, the frame, the digests) equal the file's."""
    table, rows = _rows(300, seed)
    _, b = _both(table, rows)
    write_trace(b, tmp_path / "t.parquet")
    got = read_trace(tmp_path / "t.parquet")
    assert "segment_ids" not in got._table.column_names and "_sorted_ids" not in got.__dict__
    for x, y in zip(got.segment_lists(), b.segment_lists(), strict=True):
        assert np.array_equal(x, y) and x.dtype == y.dtype
    assert got.requests.equals(b.requests)
    assert got.requests["segment_ids"].to_list() == rows["segment_ids"]
    assert trace_sha256(got) == trace_sha256(b) and trace_digest(got) == trace_digest(b)
    assert "segment_ids" in got._full_table().column_names
