"""Unit tests of the ``fixed-chunk`` policy (fixed grid storage, rolling-hash lookup at every offset)."""

from __future__ import annotations

import numpy as np

from pic.engine import policies
from pic.engine.plan import Action
from tests.policies.conftest import BYTES_PER_TOKEN, make_ctx, serve, view


def _policy(verify: bool = False, **opts):
    return policies.build("fixed-chunk", make_ctx(float("inf"), verify=verify), {"chunk_size": "32", **opts})


def test_shifted_chunk_found_with_delta() -> None:
    """A stored chunk found 13 tokens later is reused rotated with delta = 13."""
    p = _policy()
    doc = np.arange(100, 164)
    serve(p, view(0, doc), 1)
    plan = p.lookup(view(1, np.r_[np.arange(13), doc]), 2)
    rot = [s for s in plan.spans if s.action == Action.REUSE_ROTATED]
    assert [(s.start, s.end, s.source_pos, s.delta) for s in rot] == [(13, 77, 0, 13)]


def test_in_place_chunks_are_plain_reuse() -> None:
    """Chunks at the position they were produced are REUSE (the exact in-place prefix)."""
    p = _policy()
    serve(p, view(0, np.arange(70)), 1)
    plan = p.lookup(view(1, np.r_[np.arange(70), [5] * 30]), 2)
    assert plan.leading_reuse == 64 and plan.num_rotated == 0


def test_partial_chunk_not_stored() -> None:
    """Only full grid chunks are stored: 70 tokens with 32-token chunks keep 64."""
    p = _policy()
    serve(p, view(0, np.arange(70)), 1)
    assert p.usage().total == 64 * BYTES_PER_TOKEN


def test_matches_do_not_overlap() -> None:
    """Greedy left-to-right matches never overlap, even when windows of two chunks overlap."""
    p = _policy()
    a = np.arange(200, 232)
    serve(p, view(0, np.r_[a, a[16:], a[:16]]), 1)     # chunks "a" and "a rotated by 16"
    plan = p.lookup(view(1, np.r_[a, a, a]), 2)
    reused = [s for s in plan.spans if s.action != Action.RECOMPUTE]
    assert all(x.end <= y.start for x, y in zip(reused, reused[1:], strict=False))
    assert plan.num_reused == 96


def test_lru_evicts_oldest_chunk() -> None:
    """Evicting one chunk removes the least recently used one."""
    p = _policy()
    old, new = np.arange(0, 32), np.arange(500, 532)
    serve(p, view(0, old), 1)
    serve(p, view(1, new), 2)
    p.evict(1, 3)
    assert p.lookup(view(2, old), 4).num_reused == 0
    assert p.lookup(view(3, new), 5).num_reused == 32


def test_verify_rejects_collision() -> None:
    """Under --verify a hit whose stored tokens differ is a counted collision, not a reuse."""
    p = _policy(verify=True)
    serve(p, view(0, np.arange(32)), 1)
    next(iter(p._store.values())).tokens[3] = -1
    assert p.lookup(view(1, np.arange(32)), 2).num_reused == 0
    assert p.stats.collisions == 1


def test_equals_brute_force_scan() -> None:
    """Unbounded, the vectorized lookup equals a per-offset Python scan over stored chunk contents."""
    from pic.engine.plan import Plan, Span
    from tests.policies.conftest import request_stream

    c = 32
    p = _policy()
    stored: dict[bytes, int] = {}                     # chunk content -> first producer position
    num_rotated = 0
    for t, req in enumerate(request_stream(seed=4, num_requests=50)):
        toks, spans, i = req.tokens, [], 0
        while i + c <= req.num_tokens:
            src = stored.get(toks[i:i + c].tobytes())
            if src is None:
                i += 1
                continue
            spans.append(Span(i, i + c, Action.REUSE if src == i else Action.REUSE_ROTATED, src))
            i += c
        expected = Plan.from_spans(req.num_tokens, spans)
        assert p.lookup(req, t) == expected
        num_rotated += expected.num_rotated
        serve(p, req, t)
        for j in range(0, req.num_tokens // c * c, c):
            stored.setdefault(toks[j:j + c].tobytes(), j)
    assert num_rotated > 0


def test_filters_count_exactly_the_stored_keys() -> None:
    """After commits and evictions, both counting filters equal the bucket counts of the stored keys
    (no false negatives can hide a stored chunk from lookup)."""
    from pic.engine.policies.fixed_chunk import _FILTER_BITS, _FILTER_MASK, _FILTER_SHIFT
    from tests.policies.conftest import request_stream

    p = policies.build("fixed-chunk", make_ctx(3000), {"chunk_size": "32"})
    for t, req in enumerate(request_stream(seed=6, num_requests=80)):
        plan = p.lookup(req, t)
        if p.admit(req, plan, t):
            p.commit(req, t)
            p.release(req, t)
    keys = np.array(list(p._store), np.uint64)
    top = np.bincount((keys >> np.uint64(_FILTER_SHIFT)).astype(np.int64), minlength=1 << _FILTER_BITS)
    low = np.bincount((keys & np.uint64(_FILTER_MASK)).astype(np.int64), minlength=1 << _FILTER_BITS)
    assert p.stats.evictions > 20 and keys.shape[0] > 0
    assert np.array_equal(p._filter, top) and np.array_equal(p._filter2, low)
