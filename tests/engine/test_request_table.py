"""RequestTable: one flat column per request field, written by the simulation; values read back exactly
(column(), indexing, iteration, request_frame) as written."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pic.engine.metrics import request_frame
from pic.engine.request import _BOOL_FIELDS, _FLOAT_FIELDS, _INT_FIELDS, RequestTable, Status
from pic.engine.serving import ServingModel
from tests.engine.test_serving import BrutePrefix, FakeCost, _workload


def _table(n: int, rng: np.random.Generator) -> RequestTable:
    rid = rng.permutation(n).astype(np.int64) * 7 + 3           # not in row order: frames must sort
    return RequestTable(rid, [f"s{int(i) % 13}" for i in rid], rng.integers(1, 5000, n),
                        rng.integers(0, 900, n), np.sort(rng.integers(0, 10**12, n)))


def _fill(t: RequestTable, i: int, rng: np.random.Generator) -> dict:
    """Random values for request ``i``'s fields, written into the table's columns (the simulation's path)."""
    vals = {f: int(rng.integers(-1, 2**40)) for f in _INT_FIELDS if f not in ("request_id", "num_prompt_tokens",
                                                                              "num_output_tokens")}
    vals["replica"] = int(rng.integers(0, 8))
    vals["finish_us"] = int(rng.integers(0, 2**40))
    vals.update({f: float(rng.random() * 10.0 ** rng.integers(-6, 15)) for f in _FLOAT_FIELDS})
    vals.update({f: bool(rng.random() < 0.5) for f in _BOOL_FIELDS})
    for k, v in vals.items():
        t.cols[k][i] = v
    return vals


def test_written_values_read_back_exactly_as_columns_copies_and_frames():
    rng = np.random.default_rng(11)
    n = 3 * 64 + 17
    t = _table(n, rng)
    want: dict[int, dict] = {}
    for i in rng.permutation(n)[: n - 5]:                      # five are never written (not arrived)
        want[int(i)] = _fill(t, int(i), rng)
    untouched = sorted(set(range(n)) - set(want))
    for i in untouched:
        r = t[i]
        assert r.status == Status.PENDING and r.replica == r.start_us == r.finish_us == -1
        assert r.num_reused == 0 and r.prefill_joules == 0.0 and r.admitted is False
    for f in (*_INT_FIELDS, *_FLOAT_FIELDS, *_BOOL_FIELDS):
        col = t.column(f)
        assert col.dtype == {**dict.fromkeys(_INT_FIELDS, np.int64), **dict.fromkeys(_FLOAT_FIELDS, np.float64),
                             **dict.fromkeys(_BOOL_FIELDS, np.bool_)}[f]
        for i, vals in want.items():
            if f in vals:
                assert col[i] == vals[f], (f, i)
    got = list(t)                                              # rebuilt copies
    for i, vals in want.items():
        assert got[i].status == Status.FINISHED and got[i].view is None
        assert {k: getattr(got[i], k) for k in vals} == vals
        assert all(type(getattr(got[i], k)) is type(v) for k, v in vals.items())
    assert [r.request_id for r in got] == t.column("request_id").tolist() == [t[i].request_id for i in range(n)]
    assert t[-1].request_id == got[-1].request_id and len(t[2:5]) == 3
    with pytest.raises(IndexError):
        t[n]
    frame = request_frame("p", t)                              # request ids out of row order: gathered
    assert frame["request_id"].is_sorted()
    assert_frame_equal(frame, request_frame("p", got))


def test_status_follows_the_timestamps_written():
    t = _table(4, np.random.default_rng(1))
    assert t[0].status == Status.PENDING
    t.cols["replica"][0] = 2
    assert t[0].status == Status.WAITING
    t.cols["start_us"][0] = 10
    assert t[0].status == Status.PREFILL
    t.cols["first_token_us"][0] = 20
    assert t[0].status == Status.DECODE
    t.cols["finish_us"][0] = 30
    assert t[0].status == Status.FINISHED and t[1].status == Status.PENDING


def test_request_frame_from_the_table_equals_the_frame_from_objects():
    cost = FakeCost()
    w = _workload(150, seed=5, max_out=40, span_us=2_000_000)
    table = ServingModel(w, [BrutePrefix()], cost, token_budget=512).run()
    assert isinstance(table, RequestTable)
    objs = list(table)                                         # Request objects (the other code path)
    assert all(r.status == Status.FINISHED for r in objs)
    a, b = request_frame("p", table), request_frame("p", objs)
    assert_frame_equal(a, b)
    assert a["request_id"].is_sorted() and a.height == w.num_requests
    assert (a["finish_us"] >= a["first_token_us"]).all() and (a["first_token_us"] >= a["arrival_us"]).all()
    # shuffled objects: the frame is still in request_id order with the same rows
    perm = np.random.default_rng(0).permutation(len(objs))
    assert_frame_equal(request_frame("p", [objs[i] for i in perm]), a)
    assert request_frame("p", []).schema == a.schema and request_frame("p", []).height == 0
    assert a.filter(pl.col("reused_tokens") > 0).height > 0    # the workload did reuse something
