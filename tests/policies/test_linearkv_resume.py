"""``linearkv`` resumes CDC where its prefix stage matched a committed prompt: that prompt's cuts and fingerprints up to
its last anchor ``c`` with ``c + min_chunk <= shared``, then one compiled call from ``c`` (:meth:`LinearKV._chunks`), and
does not ask the store about the chunks taken from it while nothing ever left it. Plans, layouts (bounds,
fingerprints, anchors), stats and stored entries must be those of chunking every prompt whole, on conversation-like
traces of opaque segments (turns continuing or branching off earlier ones), requests admitted in groups."""

from __future__ import annotations

import math

import pytest

from pic import accel
from pic.engine import policies
from pic.engine.policies.base import PolicyContext
from pic.engine.replay import workload_from_trace
from pic.engine.specs import model_from_name
from pic.traces.schema import Trace
from tests.policies.conftest import conversations, in_groups

QNEXT = model_from_name("qwen3-next-80b-a3b")
OPTS = {"avg_chunk": "64", "min_chunk": "16", "max_chunk": "256"}


def _conversations(seed: int, n: int) -> Trace:
    """Conversation turns (conftest.conversations) of opaque segments only (Mooncake's kind), a few shared."""
    def shared(rng, table):
        return table.add_opaque(int(rng.integers(0, 1 << 30)), 3, int(rng.integers(20, 300)), "block")

    def new(rng, table, r):
        return table.add_opaque(int(rng.integers(0, 1 << 30)), 3, int(rng.integers(1, 400)), "block")
    return conversations(seed, n, shared, new)


def _run(work, opts: dict, keeps: bool, group: int, evict_at: int = -1) -> tuple:
    ctx = PolicyContext(math.inf, QNEXT.kv_bytes_per_token, model=QNEXT)
    p = policies.build("linearkv", ctx, {**OPTS, **opts})
    if not keeps:
        p._keeps = False
    known = [0]
    layouts = []
    inner = p._chunks

    def chunks(req, src=None, shared=0):
        got = inner(req, src, shared)
        known[0] += got[3]
        layouts.append((got[0], got[1], p._anc[1] if p._anc[0] is req else None))
        return got
    p._chunks = chunks
    plans = []

    def before(rid):
        if rid == evict_at:               # (chunks evicted, the prefix stage kept: the store has lost entries)
            p._store.evict(p._store.evictable // 2, p.stats)
            assert p._store.num_removed
    states = in_groups(p, work, group, lambda rid, plan: plans.append((plan, sorted(p._locks[rid]))), before)
    store = sorted((e.fp, e.base_pos, e.size, e.refs, e.ready, e.nbytes) for e in p._entries.values())
    return (plans, states, layouts, p.stats.as_dict(), store), known[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("opts", [{}, {"prefix_page_size": "8"}, {"compose": "exact"}])
def test_resumed_layouts_change_nothing(seed: int, opts: dict) -> None:
    if not accel.available():
        pytest.skip("numba not installed")
    accel.set_mode("1")
    try:
        work = workload_from_trace(_conversations(seed, 80))
        for group, evict_at in ((1, -1), (3, -1), (1, 40)):
            got, known = _run(work, opts, True, group, evict_at)
            want, none = _run(work, opts, False, group, evict_at)
            assert got == want
            assert known > 0 and none == 0
            assert got[3]["chunk_hits"] > 0
    finally:
        accel.set_mode(None)


def test_layouts_kept_only_unbounded_unverified_with_the_prefix_stage() -> None:
    for cap, verify, opts in ((1e9, False, {}), (math.inf, True, {}), (math.inf, False, {"prefix_stage": "false"})):
        ctx = PolicyContext(cap, QNEXT.kv_bytes_per_token, model=QNEXT, verify=verify)
        assert not policies.build("linearkv", ctx, {**OPTS, **opts})._keeps
    assert policies.build("linearkv", PolicyContext(math.inf, QNEXT.kv_bytes_per_token, model=QNEXT), OPTS)._keeps
