"""``start_prefix`` of the exact-prefix policies (``prefix``, ``block-hash``): the serving model's fused lookup + admit
must leave the same state and stats as ``lookup`` then ``admit`` and answer the plan's reuse (engine.serving.model),
and a simulation through it must give the same rows as one through lookup / admit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic.engine import policies
from pic.engine.cost import CostModel
from pic.engine.plan import Plan
from pic.engine.serving import ServingModel, Workload
from pic.engine.specs import gpu_from_name, model_from_name
from tests.policies.conftest import make_ctx, request_stream

CASES = [("prefix", math.inf, False, None), ("prefix", 4000, False, None), ("prefix", 8000, False, {"page_size": "16"}),
         ("prefix", 6000, False, {"eviction": "lfu"}), ("block-hash", math.inf, False, None),
         ("block-hash", 4000, False, None), ("block-hash", math.inf, True, None), ("block-hash", 6000, True, None)]


def _state(p) -> tuple:
    u = p.usage()
    return (u.evictable, u.protected, u.total, p.stats.as_dict())


def _served(seed: int, count: int, max_out: int, span_us: int | None) -> tuple[Workload, CostModel]:
    """A workload of ``request_stream(seed, count)`` (outputs of 1..``max_out`` tokens, arrivals sorted over
    ``span_us``; None: 3 output tokens, arrivals 1 ms apart) and the cost model the tests serve it with."""
    reqs = request_stream(seed, count)
    n = len(reqs)
    if span_us is None:
        out, arrive = np.full(n, 3), np.arange(n, dtype=np.int64) * 1000
    else:
        rng = np.random.default_rng(seed)
        out, arrive = rng.integers(1, max_out, n), np.sort(rng.integers(0, span_us, n)).astype(np.int64)
    w = Workload(np.arange(n, dtype=np.int64), [r.session_id for r in reqs],
                 np.array([r.num_tokens for r in reqs], np.int64), out, arrive, lambda i: reqs[i])
    return w, CostModel(model_from_name("deepseek-v2-lite"), gpu_from_name("h200"))


@pytest.mark.parametrize("name,cap,verify,opts", CASES)
def test_start_prefix_is_lookup_then_admit(name, cap, verify, opts) -> None:
    """Requests admitted in overlapping groups (so that capacity refuses some): the same answers, usage and stats
    after every request, and the same plans later (the trees alike)."""
    reqs = request_stream(11, 90)
    a = policies.build(name, make_ctx(cap, verify=verify), opts)
    b = policies.build(name, make_ctx(cap, verify=verify), opts)
    live, held = [], []
    for k, req in enumerate(reqs):
        now = 10 * k
        plan = a.lookup(req, now)
        ok = a.admit(req, plan, now)
        r = b.start_prefix(req, now)
        if ok:
            assert r >= 0 and Plan.from_prefix(req.num_tokens, r) == plan
            live.append(req)
        else:
            assert r == -1
        assert _state(a) == _state(b)
        if len(live) >= 3 or k == len(reqs) - 1:       # commit the group; release all but its newest
            for q in live:
                a.commit(q, now + 1)
                b.commit(q, now + 1)
            for q in held + live[:-1]:
                a.release(q, now + 2)
                b.release(q, now + 2)
            held, live = live[-1:], []
            assert _state(a) == _state(b)
    for k, req in enumerate(reqs[::7]):
        assert a.lookup(req, 5000 + k) == b.lookup(req, 5000 + k)


class _NoStart:
    """A policy seen without its ``start_prefix`` (the model takes lookup and admit)."""

    def __init__(self, pol) -> None:
        self._pol = pol

    def __getattr__(self, name):
        if name == "start_prefix":
            raise AttributeError(name)
        return getattr(self._pol, name)


@pytest.mark.parametrize("name,cap", [("prefix", math.inf), ("prefix", 3000), ("block-hash", math.inf),
                                      ("block-hash", 3000)])
def test_serving_through_start_prefix_gives_the_same_rows(name, cap) -> None:
    w, cost = _served(3, 120, 200, 400_000)
    out = []
    for wrap in (False, True):
        pol = policies.build(name, make_ctx(cap))
        m = ServingModel(w, [_NoStart(pol) if wrap else pol], cost, token_budget=2048)
        assert (m._starts[0] is None) == wrap
        rows = m.run()
        out.append(({f: np.asarray(rows.cols[f]).tolist() for f in rows.cols}, m.peak_resident,
                    m.replicas[0].itl.array().tolist(), _state(pol)))
    assert out[0] == out[1]
    assert sum(out[0][0]["uncached"]) or cap == math.inf      # (a bounded cache refuses some)


def test_a_lookup_replaced_on_the_policy_is_called() -> None:
    """A caller that wraps ``lookup`` on the policy object (benchmarks' plan digests) sees every plan: the model then
    takes lookup and admit, with the same rows."""
    w, cost = _served(5, 60, 0, None)
    for name in ("prefix", "block-hash"):
        rows, seen = [], []
        for wrap in (False, True):
            pol = policies.build(name, make_ctx(math.inf))
            if wrap:
                inner = pol.lookup
                pol.lookup = lambda req, now, _inner=inner, _seen=seen: _seen.append(req.request_id) or _inner(req, now)
            m = ServingModel(w, [pol], cost)
            assert (m._starts[0] is None) == wrap
            got = m.run()
            rows.append({f: np.asarray(got.cols[f]).tolist() for f in got.cols})
        assert rows[0] == rows[1] and sorted(seen) == list(range(w.num_requests))


class _NoPeak(_NoStart):
    """A policy seen without its ``peak_bytes`` (and, if asked, its ``start_prefix``): the model asks its resident
    bytes after every admission."""

    def __init__(self, pol, start: bool) -> None:
        super().__init__(pol)
        self._start = start

    def __getattr__(self, name):
        if name == "peak_bytes" or (name == "start_prefix" and not self._start):
            raise AttributeError(name)
        return getattr(self._pol, name)


@pytest.mark.parametrize("name,cap", [("prefix", math.inf), ("prefix", 3000), ("prefix", 800), ("block-hash", math.inf),
                                      ("block-hash", 3000), ("block-hash", 800)])
def test_a_policys_own_peak_is_the_peak_sampled_after_each_admission(name, cap) -> None:
    """One replica, a policy keeping ``peak_bytes`` (its resident bytes at the end of every admission): the model's
    peak read from it at the end equals the peak it samples itself (bounded caches evicting and refusing too),
    through start_prefix and through lookup / admit; with two replicas the model samples every admission."""
    w, cost = _served(4, 150, 300, 300_000)
    got = []
    for hide in (False, True):
        for start in (True, False):
            pol = policies.build(name, make_ctx(cap))
            seen = _NoPeak(pol, start) if hide else (pol if start else _NoStart(pol))
            m = ServingModel(w, [seen], cost, token_budget=2048)
            assert (m._starts[0] is None) == (not start)
            assert m._note_admit[0] == hide
            m.run()
            got.append(m.peak_resident)
    assert got[0] > 0 and len(set(got)) == 1
    two = ServingModel(w, [policies.build(name, make_ctx(cap)) for _ in range(2)], cost, token_budget=2048)
    assert two._note_admit == [True, True]
