"""RequestTable: a request is an object only while in flight; finished values live in numpy columns and
read back exactly (column(), indexing, iteration, request_frame) as the objects held them."""

from __future__ import annotations

import numpy as np
import polars as pl
from polars.testing import assert_frame_equal

from pic.engine import request as request_mod
from pic.engine.metrics import request_frame
from pic.engine.request import _BOOL_FIELDS, _FLOAT_FIELDS, _INT_FIELDS, Request, RequestTable, Status
from pic.engine.serving import ServingModel
from tests.engine.test_serving import BrutePrefix, FakeCost, _workload


def _table(n: int, rng: np.random.Generator) -> RequestTable:
    rid = rng.permutation(n).astype(np.int64) * 7 + 3           # not in row order: frames must sort
    return RequestTable(rid, [f"s{int(i) % 13}" for i in rid], rng.integers(1, 5000, n),
                        rng.integers(0, 900, n), np.sort(rng.integers(0, 10**12, n)))


def _fill(r: Request, rng: np.random.Generator) -> dict:
    vals = {f: int(rng.integers(-1, 2**40)) for f in _INT_FIELDS if f not in ("request_id", "num_prompt_tokens",
                                                                              "num_output_tokens")}
    vals["replica"] = int(rng.integers(-1, 8))
    vals.update({f: float(rng.random() * 10.0 ** rng.integers(-6, 15)) for f in _FLOAT_FIELDS})
    vals.update({f: bool(rng.random() < 0.5) for f in _BOOL_FIELDS})
    for k, v in vals.items():
        setattr(r, k, v)
    return vals


def test_finished_values_read_back_exactly_in_any_finish_order(monkeypatch):
    monkeypatch.setattr(request_mod, "_FLUSH", 64)
    rng = np.random.default_rng(11)
    n = 3 * request_mod._FLUSH + 17                           # several flushes and a partial batch
    t = _table(n, rng)
    want: dict[int, dict] = {}
    for i in rng.permutation(n)[: n - 5]:                      # five stay in flight
        r = t[int(i)]
        assert t[int(i)] is r                                  # one live object per request
        want[int(i)] = _fill(r, rng)
        t.finish(int(i))
    live = sorted(set(range(n)) - set(want))
    for i in live:
        assert t[i].status == Status.PENDING and t[i] is t[i]
    for f in (*_INT_FIELDS, *_FLOAT_FIELDS, *_BOOL_FIELDS):
        col = t.column(f)
        for i, vals in want.items():
            if f in vals:
                assert col[i] == vals[f], (f, i)
    got = list(t)                                              # rebuilt copies for finished requests
    for i, vals in want.items():
        assert got[i].status == Status.FINISHED and got[i].view is None
        assert {k: getattr(got[i], k) for k in vals} == vals
    assert [r.request_id for r in got] == t.column("request_id").tolist()
    frame = request_frame("p", t)                              # request ids out of row order: gathered
    assert frame["request_id"].is_sorted()
    assert_frame_equal(frame, request_frame("p", got))


def test_request_frame_from_the_table_equals_the_frame_from_objects(monkeypatch):
    monkeypatch.setattr(request_mod, "_FLUSH", 64)
    cost = FakeCost()
    w = _workload(150, seed=5, max_out=40, span_us=2_000_000)
    table = ServingModel(w, [BrutePrefix()], cost, token_budget=512).run()
    assert isinstance(table, RequestTable)
    objs = list(table)                                         # Request objects (the other code path)
    a, b = request_frame("p", table), request_frame("p", objs)
    assert_frame_equal(a, b)
    assert a["request_id"].is_sorted() and a.height == w.num_requests
    assert (a["finish_us"] >= a["first_token_us"]).all() and (a["first_token_us"] >= a["arrival_us"]).all()
    # shuffled objects: the frame is still in request_id order with the same rows
    perm = np.random.default_rng(0).permutation(len(objs))
    assert_frame_equal(request_frame("p", [objs[i] for i in perm]), a)
    assert request_frame("p", []).schema == a.schema and request_frame("p", []).height == 0
    assert a.filter(pl.col("reused_tokens") > 0).height > 0    # the workload did reuse something


def test_in_flight_holds_exactly_the_requests_made_and_not_finished():
    """``in_flight`` (the serving model's path to arrived requests) is the live objects by index: a request
    joins at first access and leaves at finish; a finished request reads back as a copy, not rejoining."""
    rng = np.random.default_rng(9)
    t = _table(50, rng)
    a, b = t[3], t[7]
    assert t.in_flight == {3: a, 7: b} and t.in_flight[3] is a and t[3] is a
    t.finish(3)
    assert t.in_flight == {7: b}
    again = t[3]
    assert again is not a and again.status == Status.FINISHED and 3 not in t.in_flight
