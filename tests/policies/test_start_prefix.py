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
    reqs = request_stream(3, 120)
    rng = np.random.default_rng(3)
    w = Workload(np.arange(len(reqs), dtype=np.int64), [r.session_id for r in reqs],
                 np.array([r.num_tokens for r in reqs], np.int64), rng.integers(1, 200, len(reqs)),
                 np.sort(rng.integers(0, 400_000, len(reqs))).astype(np.int64), lambda i: reqs[i])
    cost = CostModel(model_from_name("deepseek-v2-lite"), gpu_from_name("h200"))
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
    reqs = request_stream(5, 60)
    w = Workload(np.arange(len(reqs), dtype=np.int64), [r.session_id for r in reqs],
                 np.array([r.num_tokens for r in reqs], np.int64), np.full(len(reqs), 3),
                 np.arange(len(reqs), dtype=np.int64) * 1000, lambda i: reqs[i])
    cost = CostModel(model_from_name("deepseek-v2-lite"), gpu_from_name("h200"))
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
        assert rows[0] == rows[1] and sorted(seen) == list(range(len(reqs)))


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
    reqs = request_stream(4, 150)
    rng = np.random.default_rng(4)
    w = Workload(np.arange(len(reqs), dtype=np.int64), [r.session_id for r in reqs],
                 np.array([r.num_tokens for r in reqs], np.int64), rng.integers(1, 300, len(reqs)),
                 np.sort(rng.integers(0, 300_000, len(reqs))).astype(np.int64), lambda i: reqs[i])
    cost = CostModel(model_from_name("deepseek-v2-lite"), gpu_from_name("h200"))
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
