"""A trace's stored tokens kept as uint16 where every one fits (traces.content.narrow_tokens): nothing a user sees
changes (the same prompts, digests, hashes, plans and outputs as an int32 read of the same file), a trace with a
token outside [0, 65536) stays int32, and the file written back is the same."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pic import accel
from pic.engine import cdc
from pic.engine.config import ReplayConfig, parse_size
from pic.engine.replay import replay
from pic.engine.runconfig import trace_sha256
from pic.engine.seq import Seq, lcp
from pic.traces import content, io
from pic.traces.schema import SegmentTable, Trace, requests_frame

SAMPLES = Path(__file__).resolve().parents[2] / "traces" / "samples"
POLICIES = ("prefix", "block-hash", "fixed-chunk", "irminsul", "linearkv", "oracle", "rdr")


def _read(path, narrow: bool, monkeypatch) -> Trace:
    monkeypatch.setattr(content, "NARROW", narrow)
    return io.read_trace(path)


def _both(path, monkeypatch) -> tuple[Trace, Trace]:
    t16, t32 = _read(path, True, monkeypatch), _read(path, False, monkeypatch)
    monkeypatch.setattr(content, "NARROW", True)
    return t16, t32


@pytest.mark.parametrize("name", ["chat", "rag-reorder"])
def test_narrowed_read_gives_the_same_trace(name, monkeypatch) -> None:
    """uint16 in memory; every token handed out (prompts, segments, gathered runs, token_at) int32 and equal; the
    trace digest (xxh of int32 bytes in runconfig) and content ids equal."""
    t16, t32 = _both(SAMPLES / f"{name}.parquet", monkeypatch)
    s16, s32 = t16.segments, t32.segments
    assert s16.tokens.dtype == np.uint16 and s32.tokens.dtype == np.int32
    assert s16.tokens.nbytes * 2 == s32.tokens.nbytes and np.array_equal(s16.tokens, s32.tokens)
    assert trace_sha256(t16) == trace_sha256(t32)
    for i in range(t16.num_requests):
        a, b = t16.prompt(i), t32.prompt(i)
        assert a.dtype == b.dtype == np.int32 and np.array_equal(a, b)
    for i in range(len(s16)):
        a, b = s16.segment(i, 1, 9), s32.segment(i, 1, 9)
        assert a.dtype == np.int32 and np.array_equal(a, b)
        assert cdc.fingerprint(s16.segment(i)) == cdc.fingerprint(s32.segment(i))
    rows = np.arange(len(s16))
    pos = np.minimum(np.arange(len(s16)) % 7, s16.lengths - 1)
    assert np.array_equal(s16.tokens_at(rows, pos), s32.tokens_at(rows, pos))
    r = t16.request_segments(3)
    q16, q32 = (Seq.of_segments(s, r, t16.segment_bounds(3)) for s in (s16, s32))
    n = q16.end
    assert q16.tokens(0, n).dtype == np.int32 and np.array_equal(q16.tokens(0, n), q32.tokens(0, n))
    assert q16.tokens(5, 40).tobytes() == q32.tokens(5, 40).tobytes()         # (radix page keys)
    assert lcp(q16, 0, Seq.of_array(t32.prompt(3)), 0, n) == n


def test_fixed_kernels_read_uint16_tokens_as_int32() -> None:
    """The kernels that read a trace's tokens in place (fixed-chunk, oracle) give the same hashes either way."""
    if not accel.available():
        pytest.skip("numba not installed")
    from pic import _accel_numba_fixed as fast

    trace = io.read_trace(SAMPLES / "chat.parquet")
    s16 = trace.segments
    assert s16.tokens.dtype == np.uint16
    tok32 = s16.tokens.astype(np.int32)
    for i in (0, 7, 50):
        rows = trace.request_segments(i)
        a = fast.segment_prefix_hashes(s16.tokens, *s16.pieces(rows), np.uint64(content.OPAQUE_VOCAB - 1))
        b = fast.segment_prefix_hashes(tok32, *s16.pieces(rows), np.uint64(content.OPAQUE_VOCAB - 1))
        assert np.array_equal(a, b) and np.array_equal(b, fast.prefix_hashes(trace.prompt(i)))


@pytest.mark.parametrize("mode", ["0", "1"])
@pytest.mark.parametrize("capacity", [None, "8MiB"])
def test_replays_are_the_same_either_way(capacity, mode, monkeypatch) -> None:
    """Every policy's rows and summary (plans, hits, footprints: duplicates, resident keys) equal, under the numpy
    paths and the compiled kernels."""
    t16, t32 = _both(SAMPLES / "tool-reorder.parquet", monkeypatch)
    cfg = ReplayConfig(policies=POLICIES, capacity_bytes=math.inf if capacity is None else parse_size(capacity))
    accel.set_mode(mode)
    try:
        a, b = replay(t16, cfg), replay(t32, cfg)
    finally:
        accel.set_mode(None)
    assert a.table.equals(b.table)
    drop = ("sim_seconds", "wall_seconds")
    for name in POLICIES:
        sa, sb = a.summary["policies"][name], b.summary["policies"][name]
        assert {k: v for k, v in sa.items() if k not in drop} == {k: v for k, v in sb.items() if k not in drop}


def _small_trace(tokens: list[np.ndarray]) -> Trace:
    table = SegmentTable()
    ids = [table.add(t, "user") for t in tokens]
    rows = {"request_id": list(range(len(ids))), "session_id": ["s"] * len(ids), "agent_id": ["a"] * len(ids),
            "arrival_us": list(range(len(ids))), "output_tokens": [1] * len(ids),
            "segment_ids": [[ids[0], x] for x in ids]}
    return Trace(table.build(), requests_frame(rows), source="t")


@pytest.mark.parametrize("big", [65_536, 2_000_000_000, -1])
@pytest.mark.parametrize("where", [0, 5])
def test_a_token_outside_uint16_keeps_int32(tmp_path, monkeypatch, big, where) -> None:
    """A token >= 65536 (a marker at 2e9) or negative in any row group (the first, or one after groups that fit:
    widened then) keeps the whole array int32, with its values."""
    rng = np.random.default_rng(1)
    toks = [rng.integers(0, 65_536, 20).astype(np.int32) for _ in range(8)]
    toks[where][3] = big
    path = tmp_path / "t.parquet"
    monkeypatch.setattr(io, "_SEGMENT_BATCH_ROWS", 2)     # (several segment row groups)
    io.write_trace(_small_trace(toks), path)
    assert pq.ParquetFile(path).num_row_groups > 4
    got = io.read_trace(path).segments
    assert got.tokens.dtype == np.int32
    assert np.array_equal(got.tokens, np.concatenate(toks)) and int(got.tokens[20 * where + 3]) == big
    toks[where][3] = 65_535
    io.write_trace(_small_trace(toks), path)
    got = io.read_trace(path).segments
    assert got.tokens.dtype == np.uint16 and np.array_equal(got.tokens, np.concatenate(toks))


def test_the_file_written_back_is_the_same(tmp_path, monkeypatch) -> None:
    """Writing a narrowed trace gives the int32 read's file: tokens int32 on disk, the same table."""
    t16, t32 = _both(SAMPLES / "chat.parquet", monkeypatch)
    a, b = io.write_trace(t16, tmp_path / "a.parquet"), io.write_trace(t32, tmp_path / "b.parquet")
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.schema.field("tokens").type == tb.schema.field("tokens").type == io.ARROW_SCHEMA.field("tokens").type
    assert ta.equals(tb) and a.read_bytes() == b.read_bytes()
