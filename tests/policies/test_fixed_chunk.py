"""Unit tests of the ``fixed-chunk`` policy (fixed grid storage, rolling-hash lookup at every offset)."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine import policies
from pic.engine.plan import Action
from tests.policies.conftest import BYTES_PER_TOKEN, make_ctx, serve, view


def _policy(verify: bool = False, **opts):
    return policies.build("fixed-chunk", make_ctx(float("inf"), verify=verify), {"chunk_size": "32", **opts})


def _grid_only(verify: bool = False, **opts):
    """LMCache's chunk store alone (no prefix stage): the tests of the grid and the rolling lookup."""
    return _policy(verify, prefix_stage="false", **opts)


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
    p = _grid_only()
    serve(p, view(0, np.arange(70)), 1)
    plan = p.lookup(view(1, np.r_[np.arange(70), [5] * 30]), 2)
    assert plan.leading_reuse == 64 and plan.num_rotated == 0


def test_partial_chunk_not_stored() -> None:
    """Only full grid chunks are stored: 70 tokens with 32-token chunks keep 64."""
    p = _grid_only()
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
    p = _grid_only()
    old, new = np.arange(0, 32), np.arange(500, 532)
    serve(p, view(0, old), 1)
    serve(p, view(1, new), 2)
    p.evict(1, 3)
    assert p.lookup(view(2, old), 4).num_reused == 0
    assert p.lookup(view(3, new), 5).num_reused == 32


def test_verify_rejects_collision() -> None:
    """Under --verify a hit whose stored tokens differ is a counted collision, not a reuse."""
    p = _grid_only(verify=True)
    serve(p, view(0, np.arange(32)), 1)
    ch = next(iter(p._store.values()))
    ch.src.arr[ch.pos + 3] = -1           # a chunk refers to the prompt that stored it: corrupt that
    assert p.lookup(view(1, np.arange(32)), 2).num_reused == 0
    assert p.stats.collisions == 1


@pytest.mark.parametrize("prefix_stage", [False, True])
def test_equals_brute_force_scan(prefix_stage: bool) -> None:
    """Unbounded, the vectorized lookup equals a brute-force model: the longest prefix of any earlier
    prompt (prefix stage), then a per-offset Python scan over stored chunk contents from its end."""
    from pic.engine.plan import Plan, Span
    from tests.policies.conftest import request_stream

    c = 32
    p = _policy(prefix_stage=str(prefix_stage))
    stored: dict[bytes, int] = {}                     # chunk content -> first producer position
    prompts: list[np.ndarray] = []
    num_rotated = 0
    for t, req in enumerate(request_stream(seed=4, num_requests=50)):
        toks, spans, i = req.tokens, [], 0
        if prefix_stage:
            for q in prompts:
                m = min(len(q), len(toks))
                neq = np.flatnonzero(q[:m] != toks[:m])
                i = max(i, int(neq[0]) if neq.size else m)
            if i:
                spans.append(Span(0, i, Action.REUSE, 0))
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
        prompts.append(toks)
        for j in range(0, req.num_tokens // c * c, c):
            stored.setdefault(toks[j:j + c].tobytes(), j)
    assert num_rotated > 0


def test_compiled_filter_scan_equals_the_numpy_scan() -> None:
    """The compiled one-pass scan over the bitsets, window hashes derived from the prefix hashes on the fly,
    gives the numpy scan's candidates and keys (fresh random tokens, windows seeded with stored keys, buckets
    emptied by removals, starts past the last window)."""
    import pytest

    from pic import accel
    from pic.engine.policies.fixed_chunk import _Filters
    from pic.engine.rolling import prefix_hashes, window_hashes

    if not accel.available():
        pytest.skip("numba not installed")
    rng = np.random.default_rng()
    width = int(rng.integers(1, 64))
    docs = [rng.integers(0, 200_000, int(rng.integers(0, 3_000)), dtype=np.int32) for _ in range(40)]
    stored = np.concatenate([window_hashes(d, width)[::width] for d in docs[:20]])
    f = _Filters()
    f.add(rng.integers(0, 2**63, 50_000, dtype=np.uint64) * np.uint64(2))
    f.add(stored)
    f.remove(stored[: stored.size // 3])
    try:
        for d in docs:
            toks = np.concatenate([d, docs[int(rng.integers(0, 20))]])
            h = prefix_hashes(toks)
            for start in (0, int(rng.integers(0, 100)), max(toks.size - width, 0), toks.size + 5):
                accel.set_mode("0")
                want = f.candidates(h, width, start)
                accel.set_mode("1")
                got = f.candidates(h, width, start)
                for a, b in zip(want, got, strict=True):
                    assert a.dtype == b.dtype and np.array_equal(a, b)
                w = window_hashes(toks, width)
                assert np.array_equal(got[1], w[got[0]]) and (got[0] >= start).all()
                live = np.flatnonzero(np.isin(w, stored[stored.size // 3:]))
                assert np.isin(live[live >= start], got[0]).all()
    finally:
        accel.set_mode(None)


def test_compiled_filter_add_equals_numpy() -> None:
    """The compiled filter insert leaves the counts and bitsets the four ufunc.at calls leave (fresh random
    keys in several batches, buckets repeated within a batch, a count wrapping past 2**16 - 1)."""
    import pytest

    from pic import accel
    from pic.engine.policies.fixed_chunk import _Filters

    if not accel.available():
        pytest.skip("numba not installed")
    rng = np.random.default_rng()
    batches = [rng.integers(0, 2**64 - 1, int(rng.integers(70, 30_000)), dtype=np.uint64, endpoint=True)
               for _ in range(6)]                           # (>= 70 keys: batch 2 holds the 70 below)
    batches[2][:70] = np.uint64(3) << np.uint64(60)        # one bucket of each filter, 70 times in one batch
    filters = []
    try:
        for mode in ("0", "1"):
            accel.set_mode(mode)
            f = _Filters()
            f.counts[0][(3 << 60) >> 42] = 65_500           # wraps in both paths
            for keys in batches:
                f.add(keys)
            filters.append(f)
    finally:
        accel.set_mode(None)
    want, got = filters
    for a, b in zip((*want.counts, *want.bits), (*got.counts, *got.bits), strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    hits = sum(int(((b >> np.uint64(42)) == (3 << 18)).sum()) for b in batches)   # 70, and any random key there
    assert int(want.counts[0][3 << 18]) == (65_500 + hits) % 65_536 < 65_500


def test_compiled_rolling_hashes_equal_numpy() -> None:
    """fixed-chunk's compiled prefix hashes (one Horner pass) equal engine.rolling's closed form."""
    import pytest

    from pic import accel
    from pic.engine.rolling import prefix_hashes

    if not accel.available():
        pytest.skip("numba not installed")
    from pic import _accel_numba_fixed as k

    rng = np.random.default_rng()
    for n in (0, 3, 4, 1000, 70_000):
        t = rng.integers(-5, 200_000, n, dtype=np.int32)
        assert np.array_equal(k.prefix_hashes(t), prefix_hashes(t))


# ---- exact-prefix stage (LMCache behind the engine's prefix cache) and save_unfull_chunk (#10) ----

def test_prefix_stage_reuses_whole_continued_prompt() -> None:
    """A prompt continuing an earlier 70-token prompt reuses all 70 tokens in place (the engine's prefix
    cache serves them), not only the 64 of two whole 32-token chunks."""
    p = _policy()
    first = np.arange(1000, 1070)
    serve(p, view(0, first), 1)
    plan = p.lookup(view(1, np.r_[first, np.arange(5000, 5030)]), 2)
    assert plan.leading_reuse == 70 and plan.num_rotated == 0


def test_never_below_prefix_on_a_stream() -> None:
    """Unbounded, fixed-chunk reuses at least what `prefix` reuses on every request of a mixed stream."""
    from tests.policies.conftest import request_stream

    fc, pre = _policy(), policies.build("prefix", make_ctx(float("inf")))
    for t, req in enumerate(request_stream(seed=9, num_requests=60)):
        a, b = fc.lookup(req, t), pre.lookup(req, t)
        assert a.num_reused >= b.num_reused, f"request {t}: fixed-chunk {a.num_reused} < prefix {b.num_reused}"
        for pol, plan in ((fc, a), (pre, b)):
            assert pol.admit(req, plan, t)
            pol.commit(req, t)
            pol.release(req, t)


def test_rolling_lookup_starts_at_prefix_end() -> None:
    """After the prefix stage, a shifted chunk is still found by the rolling lookup."""
    p = _policy()
    head, doc = np.arange(2000, 2040), np.arange(100, 164)
    serve(p, view(0, np.r_[head, doc]), 1)                  # chunks: head[0:32], head[32:40]+doc[0:24], ...
    serve(p, view(1, np.r_[np.arange(7), doc]), 2)          # stores doc's grid chunks at offset 7
    plan = p.lookup(view(2, np.r_[head, np.arange(9), doc]), 3)
    assert plan.leading_reuse == 40                          # prefix stage: all of head
    rot = [s for s in plan.spans if s.action == Action.REUSE_ROTATED]
    assert rot and all(s.start >= 40 for s in rot)


def test_prefix_stage_off_is_grid_only() -> None:
    """``prefix_stage=false`` is LMCache alone: a continued prompt reuses whole grid chunks only."""
    p = _policy(prefix_stage="false")
    first = np.arange(1000, 1070)
    serve(p, view(0, first), 1)
    assert p.lookup(view(1, np.r_[first, np.arange(5000, 5030)]), 2).leading_reuse == 64


def test_prefix_and_chunks_share_one_capacity() -> None:
    """The prefix tree and the chunk store are charged against one capacity: 70 prompt tokens in the
    tree + 64 in two chunks; a cache of 100 tokens evicts to fit the next prompt and stays within it."""
    p = _policy()
    serve(p, view(0, np.arange(1000, 1070)), 1)
    assert p.usage().total == (70 + 64) * BYTES_PER_TOKEN
    q = policies.build("fixed-chunk", make_ctx(100), {"chunk_size": "32"})
    for i in range(4):
        req = view(i, np.arange(3000 + 100 * i, 3050 + 100 * i))
        plan = q.lookup(req, i)
        assert q.admit(req, plan, i)
        q.usage().check()
        q.commit(req, i)
        q.release(req, i)
        q.usage().check()
    assert q.stats.evictions > 0


def test_save_unfull_chunk_stores_and_finds_the_tail() -> None:
    """With ``save_unfull_chunk`` the partial tail chunk is stored, and found again where a later prompt's
    uncovered stretch ends with it (here after a new header); off (LMCache's default) it is not."""
    doc = np.arange(100, 170)                                # 70 tokens: 2 chunks + a 6-token tail
    for unfull, want in ((True, 70), (False, 64)):
        p = _policy(save_unfull_chunk=str(unfull), prefix_stage="false")
        serve(p, view(0, doc), 1)
        assert p.usage().total == want * BYTES_PER_TOKEN
        plan = p.lookup(view(1, np.r_[np.arange(9000, 9011), doc]), 2)
        assert plan.num_reused == want and plan.num_rotated == want


def test_unbounded_cache_evicts_as_a_bounded_one() -> None:
    """An unbounded cache keeps no eviction heap until evict() is called; then it evicts what a cache with
    a heap from the start (a finite capacity that is never reached) evicts, step by step (LRU: chunks of one
    request tie, and both orders break those ties by their grid order)."""
    rng = np.random.default_rng()
    docs = [rng.integers(0, 50_000, 96) for _ in range(12)]
    caches = [policies.build("fixed-chunk", make_ctx(cap), {"chunk_size": "32"}) for cap in (float("inf"), 10**9)]
    for p in caches:
        for t in range(40):
            k = np.random.default_rng(t).integers(0, len(docs), 3)
            serve(p, view(t, np.concatenate([docs[i] for i in k])), 10 * t + 1)
    assert caches[0]._lean and not caches[1]._lean
    for step in range(6):
        n = int(rng.integers(1, 200)) * BYTES_PER_TOKEN
        freed = [p.evict(n, 1000 + step) for p in caches]
        assert freed[0] == freed[1] > 0
        assert sorted(caches[0]._store) == sorted(caches[1]._store)
        assert caches[0].usage().total == caches[1].usage().total
    assert not caches[0]._lean


@pytest.mark.parametrize("order", ["lru", "lfu", "fifo"])
def test_unbounded_cache_evicts_smallest_keys_first(order: str) -> None:
    """An unbounded grid-only cache asked to evict frees the chunks with the smallest eviction keys."""
    from pic.engine import eviction

    rng = np.random.default_rng()
    docs = [rng.integers(0, 50_000, 64) for _ in range(10)]
    p = _grid_only(eviction=order)
    for t in range(30):
        k = rng.integers(0, len(docs), 2)
        serve(p, view(t, np.concatenate([docs[i] for i in k])), 10 * t + 1)
    key = eviction.key(order)
    before = {h: key(ch) for h, ch in p._store.items()}
    assert p.evict(int(rng.integers(1, 5)) * 32 * BYTES_PER_TOKEN, 999) > 0
    gone = [k for h, k in before.items() if h not in p._store]
    kept = [k for h, k in before.items() if h in p._store]
    assert gone and kept and max(gone) <= min(kept)


def test_prompt_hashed_from_its_segments() -> None:
    """A prompt is hashed from its segments (stored tokens read in place, opaque ones derived) without
    gathering its tokens: the same prefix hashes as the tokens Segments.gather makes (fresh random stored
    and opaque segments, empty ones, and a store without opaque segments)."""
    import pytest

    from pic import accel
    from pic.engine.rolling import prefix_hashes
    from pic.traces.content import _MASK, Segments

    if not accel.available():
        pytest.skip("numba not installed")
    from pic import _accel_numba_fixed as k

    rng = np.random.default_rng()
    n = 40
    lens = rng.integers(0, 700, n)
    lens[3] = 0
    offs = np.r_[0, np.cumsum(lens)].astype(np.int64)
    stored = rng.random(n) < 0.5
    tlen = np.where(stored, lens, 0)
    toffs = np.r_[0, np.cumsum(tlen)].astype(np.int64)
    buf = rng.integers(-3, 2**31 - 1, int(tlen.sum()), dtype=np.int32)
    keys, salts = rng.integers(0, 2**63, n, dtype=np.uint64), rng.integers(0, 2**63, n, dtype=np.uint64)
    mixed = Segments(np.arange(n, dtype=np.uint64), np.zeros(n, np.uint8), offs, buf, toffs, keys, salts)
    plain = Segments(np.arange(n, dtype=np.uint64), np.zeros(n, np.uint8), offs,
                     rng.integers(0, 2**17, int(offs[-1]), dtype=np.int32))
    for seg in (mixed, plain):
        for _ in range(10):
            rows = rng.integers(0, n, int(rng.integers(1, 12)))
            got = k.segment_prefix_hashes(seg.tokens, *seg.pieces(rows), _MASK)
            assert np.array_equal(got, prefix_hashes(seg.gather(rows)))


def test_compiled_prompt_scan_equals_its_parts() -> None:
    """prompt_scan (one call per lookup) gives the prefix hashes of the prompt's segments, the filters'
    candidates from ``start`` and the grid keys that the separate kernels and numpy give (stored and opaque
    segments, a store without opaque ones, starts past the last window, prompts shorter than a chunk)."""
    from pic import accel
    from pic.engine.policies.fixed_chunk import _FILTER_MASK, _FILTER_SHIFT, _Filters
    from pic.engine.rolling import BASE, prefix_hashes
    from pic.traces.content import _MASK, Segments

    if not accel.available():
        pytest.skip("numba not installed")
    from pic import _accel_numba_fixed as k

    rng = np.random.default_rng()
    n = 30
    lens = rng.integers(0, 400, n)
    offs = np.r_[0, np.cumsum(lens)].astype(np.int64)
    tlen = np.where(rng.random(n) < 0.5, lens, 0)
    toffs = np.r_[0, np.cumsum(tlen)].astype(np.int64)
    buf = rng.integers(0, 50, int(tlen.sum()), dtype=np.int32)
    keys, salts = rng.integers(0, 2**63, n, dtype=np.uint64), rng.integers(0, 2**63, n, dtype=np.uint64)
    mixed = Segments(np.arange(n, dtype=np.uint64), np.zeros(n, np.uint8), offs, buf, toffs, keys, salts)
    plain = Segments(np.arange(n, dtype=np.uint64), np.zeros(n, np.uint8), offs,
                     rng.integers(0, 50, int(offs[-1]), dtype=np.int32))
    for seg in (mixed, plain):
        for width in (1, 16, 64, 300):
            bw = np.uint64(pow(BASE, width, 1 << 64))
            f = _Filters()
            f.add(np.concatenate([rng.integers(0, 2**63, 20_000, dtype=np.uint64),
                                  prefix_hashes(seg.gather(np.arange(5)))[width::width]]))
            for _ in range(6):
                rows = rng.integers(0, n, int(rng.integers(1, 8)))
                h = prefix_hashes(seg.gather(rows))
                start = int(rng.integers(0, h.shape[0] + 3))
                t = seg.offsets if seg.token_offsets is None else seg.token_offsets
                none = np.zeros(0, np.uint64)
                q = (h.shape[0] - 1) // width
                grid = h[width:q * width + 1:width] - h[0:(q - 1) * width + 1:width] * bw if q else h[:0]
                accel.set_mode("0")
                try:
                    want = (h, *f.candidates(h, width, start), grid)
                finally:
                    accel.set_mode(None)
                # the first k0 grid keys known (0: none; at most up to start): those tokens are not hashed, the
                # hashes start at H[k0 * width], the candidates and the grid are the whole prompt's
                for k0 in {0, min(q, start // width), int(rng.integers(0, min(q, start // width) + 1))}:
                    got = k.prompt_scan(seg.tokens, t, seg.offsets, none if seg.keys is None else seg.keys,
                                        none if seg.keys is None else seg.salts, rows, _MASK, width, bw, start,
                                        *f.bits, np.uint64(_FILTER_SHIFT), np.uint64(_FILTER_MASK), grid[:k0].copy())
                    for a, b in zip((h[k0 * width:], *want[1:]), got, strict=True):
                        assert a.dtype == b.dtype and np.array_equal(a, b)
                if start // width < q:      # known keys past the start: refused
                    with pytest.raises(ValueError):
                        k.prompt_scan(seg.tokens, t, seg.offsets, none if seg.keys is None else seg.keys,
                                      none if seg.keys is None else seg.salts, rows, _MASK, width, bw, start, *f.bits,
                                      np.uint64(_FILTER_SHIFT), np.uint64(_FILTER_MASK),
                                      grid[:start // width + 1].copy())


@pytest.mark.parametrize("opts", [{}, {"save_unfull_chunk": "true"}, {"prefix_stage": "false"}])
def test_compiled_lookup_equals_numpy_on_a_trace(opts: dict) -> None:
    """Requests of a trace (views into its segments, stored and opaque, content shared at shifted offsets):
    the plans, counters and stored chunks are the same with the compiled kernels (one prompt_scan per
    lookup) and with the numpy paths, chunk hits in place and rotated among them."""
    from pic import accel
    from pic.engine.replay import workload_from_trace
    from tests.engine.test_coverage import _tricky_trace

    if not accel.available():
        pytest.skip("numba not installed")
    work = workload_from_trace(_tricky_trace(5, n=80))
    out = []
    for mode in ("0", "1"):
        accel.set_mode(mode)
        try:
            p = policies.build("fixed-chunk", make_ctx(float("inf"), verify=True), {"chunk_size": "16", **opts})
            plans = [serve(p, work.view(rid), rid) for rid in range(work.num_requests)]
            out.append((plans, p.stats.as_dict(), sorted((ch.key, ch.pos, ch.size) for ch in p._store.values())))
        finally:
            accel.set_mode(None)
    assert out[0] == out[1]
    assert sum(pl.num_rotated for pl in out[0][0]) > 0 and out[0][1]["collisions"] == 0


def test_chunks_stored_between_admit_and_commit_are_held() -> None:
    """Two requests admitted before either commits (their grid chunks missing at both admits): the second
    commit holds the chunks the first stored, so they stay protected until both are released; a chunk
    repeated inside one prompt is reserved, stored and held once."""
    p = _grid_only()
    a, b = view(0, np.arange(64)), view(1, np.arange(64))
    for req in (a, b):
        assert p.admit(req, p.lookup(req, 1), 1)
    assert p.usage().protected == 128 * BYTES_PER_TOKEN           # both reserve the two chunks
    p.commit(a, 2)
    p.commit(b, 3)
    assert (p.usage().protected, p.usage().evictable) == (64 * BYTES_PER_TOKEN, 0)
    p.release(a, 4)
    assert (p.usage().protected, p.usage().evictable) == (64 * BYTES_PER_TOKEN, 0)
    p.release(b, 5)
    assert (p.usage().protected, p.usage().evictable) == (0, 64 * BYTES_PER_TOKEN)
    c = view(2, np.r_[np.arange(500, 532), np.arange(500, 532)])
    assert p.admit(c, p.lookup(c, 6), 6)
    assert p.usage().protected == 32 * BYTES_PER_TOKEN
    p.commit(c, 7)
    assert (p.usage().protected, p.usage().total) == (32 * BYTES_PER_TOKEN, 96 * BYTES_PER_TOKEN)
    p.release(c, 8)
    assert p.usage().protected == 0 and len(p._store) == 3
