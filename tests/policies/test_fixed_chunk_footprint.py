"""``fixed-chunk``'s footprint: its chunks, counted as held by the radix edges where the tree kept their prompts
whole (:class:`engine.oracle.HeldRuns`), give the duplicate count of the plain runs (the edges, then every
chunk in store order), at every ``min_match`` (above the edges' context too), one replica or several."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic.engine import oracle, policies
from tests.policies.conftest import make_ctx, request_stream, serve


def _plain(p) -> list[tuple]:
    edges = p._tree.run_refs() if p._tree is not None else []
    return edges + [(ch.src, ch.pos, ch.pos + ch.size, 0) for ch in p._store.values()]


@pytest.mark.parametrize(("cap", "replicas", "opts"), [
    (math.inf, 1, {}),
    (math.inf, 2, {"save_unfull_chunk": "true"}),
    (math.inf, 1, {"prefix_page_size": "16"}),
    (math.inf, 2, {"prefix_page_size": "16", "save_unfull_chunk": "true"}),
    (math.inf, 1, {"prefix_stage": "false"}),
    (6000, 1, {}),
    (6000, 2, {"prefix_page_size": "8", "save_unfull_chunk": "true", "eviction": "lfu"}),
])
def test_footprint_counts_as_its_plain_runs(cap: float, replicas: int, opts: dict) -> None:
    pols = [policies.build("fixed-chunk", make_ctx(cap), {"chunk_size": "32", **opts}) for _ in range(replicas)]
    for rid, req in enumerate(request_stream(seed=7, num_requests=70)):
        p = pols[rid % replicas]
        plan = p.lookup(req, 10 * rid)
        if p.admit(req, plan, 10 * rid):
            p.commit(req, 10 * rid + 1)
            p.release(req, 10 * rid + 2)
    plain = [r for p in pols for r in _plain(p)]
    fps = [p.footprint() for p in pols]
    if math.isinf(cap) and "prefix_stage" not in opts:
        assert all(isinstance(fp.runs, oracle.HeldRuns) for fp in fps)
    if cap == 6000:
        assert any(p._tree.num_evicted for p in pols)
    runs = oracle.join_runs([fp.runs for fp in fps])
    assert isinstance(runs, oracle.HeldRuns) == isinstance(fps[0].runs, oracle.HeldRuns)
    assert [(id(q), a, b, c) for q, a, b, c in runs] == [(id(q), a, b, c) for q, a, b, c in plain]
    toks = [(q.tokens(a, b), c) for q, a, b, c in plain]
    got = []
    for m in (8, 31, 32, 33, 64, 65, 100):
        want = oracle.duplicate_tokens(toks, m)
        assert oracle.duplicate_tokens(runs, m) == oracle.duplicate_tokens(plain, m) == want, m
        got.append(want)
    assert got[0] > 0


def test_held_runs_of_a_trace_count_as_their_tuples() -> None:
    """Runs into a trace's segments: HeldRuns' chunks (held by the edges) add no window and count whole."""
    from pic.engine.replay import workload_from_trace
    from tests.engine.test_coverage import _tricky_trace

    work = workload_from_trace(_tricky_trace(3, n=60))
    p = policies.build("fixed-chunk", make_ctx(math.inf), {"chunk_size": "16"})
    for rid in range(work.num_requests):
        serve(p, work.view(rid), rid)
    runs = p.footprint().runs
    assert isinstance(runs, oracle.HeldRuns) and sum(runs.sizes.values()) == len(p._store) > 0
    plain = _plain(p)
    for m in (8, 16, 17, 64, 80):
        assert oracle.duplicate_tokens(runs, m) == oracle.duplicate_tokens(plain, m) == oracle.duplicate_tokens(
            [(q.tokens(a, b), c) for q, a, b, c in plain], m)
    assert np.any([ch.pos for ch in p._store.values()])


def test_windows_wider_than_the_edges_context_are_counted_from_the_runs() -> None:
    """A chunk across two edges: its windows of more than 64 tokens that start over 63 tokens before the
    lower edge are in no edge's run (context 63): counted from the runs (100 of the chunk's 128 tokens at
    min_match 100), as held (all 128) only up to 64."""
    from tests.policies.conftest import view

    p = policies.build("fixed-chunk", make_ctx(math.inf), {"chunk_size": "128"})
    a = np.arange(1000, 1100)
    for rid, toks in enumerate([a, np.r_[a, np.arange(5000, 5100)]]):
        serve(p, view(rid, toks), rid)
    runs, plain = p.footprint().runs, _plain(p)
    assert isinstance(runs, oracle.HeldRuns) and runs.sizes == {128: 1}
    assert oracle.duplicate_tokens(plain, 64) - oracle.duplicate_tokens(p._tree.run_refs(), 64) == 128
    assert oracle.duplicate_tokens(plain, 100) - oracle.duplicate_tokens(p._tree.run_refs(), 100) == 100
    for m in (64, 100):
        assert oracle.duplicate_tokens(runs, m) == oracle.duplicate_tokens(plain, m)
