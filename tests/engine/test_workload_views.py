"""Workload views (engine.replay.workload_from_trace): a request whose segment rows are consecutive takes
slices of the trace's arrays; every view equals the gathers of its segment rows, whichever path made it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pic.engine.replay import _consecutive_rows, read_trace_file, workload_from_trace
from pic.engine.seq import Seq
from pic.traces.schema import SegmentTable, Trace, requests_frame

SAMPLES = Path(__file__).resolve().parents[2] / "traces" / "samples"


def _mixed_trace() -> Trace:
    """Requests of one new segment, of several new segments (consecutive rows), of shared (scattered) ones,
    and repeats: both view paths, in and out of arrival order."""
    rng = np.random.default_rng(4)
    table = SegmentTable()
    shared = [table.add(rng.integers(1, 9000, int(rng.integers(1, 300))), "document") for _ in range(5)]
    rows = {k: [] for k in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    for i in range(80):
        kind = i % 4
        if kind == 0:
            segs = [table.add(rng.integers(1, 9000, int(rng.integers(1, 500))), "user")]
        elif kind == 1:
            segs = [table.add(rng.integers(1, 9000, int(rng.integers(1, 50))), "user") for _ in range(3)]
        elif kind == 2:
            segs = [shared[j] for j in rng.permutation(5)[:3]]
        else:
            segs = rows["segment_ids"][int(rng.integers(0, i))]
        for k, v in (("request_id", 1000 - i), ("session_id", f"s{i}"), ("agent_id", "a"),
                     ("arrival_us", int(rng.integers(0, 10**6))), ("output_tokens", 5), ("segment_ids", segs)):
            rows[k].append(v)
    return Trace(table.build(), requests_frame(rows), source="mixed")


def _check_views(trace: Trace) -> tuple[int, int]:
    work = workload_from_trace(trace)
    seg = trace.segments
    offs, seg_idx = trace._csr
    req = trace.requests
    order = np.lexsort((req["request_id"].to_numpy(), req["arrival_us"].to_numpy()))
    runs = _consecutive_rows(offs, seg_idx)
    seen = [0, 0]
    for i in range(work.num_requests):
        row = int(order[i])
        rows = seg_idx[offs[row]:offs[row + 1]]
        bounds = np.concatenate([[0], np.cumsum(np.diff(seg.offsets)[rows])]).astype(np.int64)
        v = work.view(i)
        assert v.request_id == int(req["request_id"][row]) and type(v.request_id) is int
        for got, want in ((v.segment_bounds, bounds), (v.segment_ids, seg.ids[rows]),
                          (v.segment_kinds, seg.kinds[rows]), (v.segment_rows, rows)):
            assert got.dtype == want.dtype and np.array_equal(got, want)
        assert v.num_tokens == int(bounds[-1]) and np.array_equal(v.tokens, seg.gather(rows))
        q, ref = work.view(i).seq, Seq.of_segments(seg, rows, bounds)   # (a fresh view: its bounds unread)
        assert (q.rows, q.bounds, q.end, q.store) == (ref.rows, ref.bounds, ref.end, ref.store)
        seen[bool(runs[row])] += 1
    return seen[0], seen[1]


def test_consecutive_rows():
    offs = np.array([0, 1, 3, 3, 6, 8])
    idx = np.array([5, 2, 3, 7, 8, 9, 4, 6])
    assert _consecutive_rows(offs, idx).tolist() == [True, True, False, True, False]
    assert _consecutive_rows(np.array([0, 0]), np.zeros(0, np.int64)).tolist() == [False]


def test_views_of_both_paths_equal_the_gathers():
    scattered, consecutive = _check_views(_mixed_trace())
    assert scattered >= 10 and consecutive >= 30


@pytest.mark.parametrize("name", ["chat", "multi-agent"])
def test_sample_trace_views_equal_the_gathers(name):
    scattered, consecutive = _check_views(read_trace_file(str(SAMPLES / f"{name}.parquet")))
    assert scattered > 0 and consecutive > 0


def test_view_without_bounds_makes_them_from_its_segments():
    from pic.engine.policies.base import RequestView

    trace = _mixed_trace()
    seg = trace.segments
    lens = np.diff(seg.offsets)
    for rows in (np.array([3]), np.array([5, 1, 4]), np.array([7, 8, 9])):
        v = RequestView(1, "s", None, None, seg.ids[rows], seg.kinds[rows], rows, seg, int(lens[rows].sum()))
        want = np.concatenate([[0], np.cumsum(lens[rows])]).astype(np.int64)
        assert v.segment_bounds.dtype == np.int64 and np.array_equal(v.segment_bounds, want)
        q = RequestView(1, "s", None, None, seg.ids[rows], seg.kinds[rows], rows, seg, int(want[-1])).seq
        ref = Seq.of_segments(seg, rows, want)
        assert (q.rows, q.bounds, q.end) == (ref.rows, ref.bounds, ref.end)
    with pytest.raises(ValueError, match="num_tokens"):
        RequestView(1, "s", None, None, seg.ids[:1], seg.kinds[:1], np.array([0]), seg)


def test_views_from_small_blocks_in_any_order(monkeypatch):
    """Blocks of 8 requests, at most 2 open: views asked out of order (a closed loop), twice each (two
    simulations), and a block dropped while some of its requests wait, equal the gathers."""
    from pic.engine import views

    monkeypatch.setattr(views, "_SHIFT", 3)
    monkeypatch.setattr(views, "_BLOCK", 8)
    monkeypatch.setattr(views, "_MASK", 7)
    monkeypatch.setattr(views, "_OPEN", 2)
    trace = _mixed_trace()
    work = workload_from_trace(trace)
    seg = trace.segments
    offs, seg_idx = trace._csr
    req = trace.requests
    order = np.lexsort((req["request_id"].to_numpy(), req["arrival_us"].to_numpy()))
    perm = np.random.default_rng(5).permutation(np.r_[np.arange(work.num_requests), np.arange(work.num_requests)])
    for i in perm.tolist():
        row = int(order[i])
        rows = seg_idx[offs[row]:offs[row + 1]]
        bounds = np.concatenate([[0], np.cumsum(np.diff(seg.offsets)[rows])]).astype(np.int64)
        v = work.view(i)
        assert v.request_id == int(req["request_id"][row]) and v.session_id == req["session_id"][row]
        assert v.num_tokens == int(bounds[-1]) and np.array_equal(v.segment_rows, rows)
        ref = Seq.of_segments(seg, rows, bounds)
        q = v.seq
        assert (q.rows, q.bounds, q.end, q.store) == (ref.rows, ref.bounds, ref.end, ref.store)
        assert np.array_equal(v.segment_bounds, bounds) and np.array_equal(v.segment_ids, seg.ids[rows])


def test_seq_ends_are_shared_ints_where_irminsul_is_loaded(monkeypatch):
    """With irminsul's records loaded, a Seq's ``end`` (its bounds' end, the view's ``num_tokens``) is the shared
    int object of that value; without them, a plain int of the same value. Shared above Python's small ints only
    through the table (a mutation that keeps its own int fails)."""
    import sys

    import pic.engine.policies.irminsul_records as rec

    trace = _mixed_trace()
    for loaded in (True, False):
        if not loaded:
            monkeypatch.delitem(sys.modules, "pic.engine.policies.irminsul_records")
        work = workload_from_trace(trace)
        big = 0
        for i in range(work.num_requests):
            v = work.view(i)
            q = v.seq
            assert q.end == q.bounds[-1] == v.num_tokens and type(q.end) is int
            if q.end > 256 and len(q.rows) > 1:
                big += 1
                assert (q.end is rec.INTS[q.end]) == loaded
        assert big > 5
