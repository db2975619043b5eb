"""Unit tests of the ``block-hash`` policy (vLLM automatic prefix caching)."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine import policies
from pic.engine.policies import RequestView
from tests.policies.conftest import BYTES_PER_TOKEN, make_ctx, serve, view


def test_only_whole_blocks_match() -> None:
    """A 60-token common prefix with 16-token blocks reuses 48 tokens; the partial block is not cached."""
    p = policies.build("block-hash", make_ctx(float("inf")))
    serve(p, view(0, np.arange(100)), 1)
    assert p.usage().total == 96 * BYTES_PER_TOKEN
    assert p.lookup(view(1, np.r_[np.arange(60), [999] * 40]), 2).num_reused == 48


def test_chained_hash_needs_same_prefix() -> None:
    """An identical block after a different first block is not reused (hashes are chained)."""
    p = policies.build("block-hash", make_ctx(float("inf")), {"block_size": "8"})
    serve(p, view(0, np.arange(64)), 1)
    assert p.lookup(view(1, np.r_[[9] * 8, np.arange(8, 64)]), 2).num_reused == 0


def test_tail_blocks_evicted_first() -> None:
    """Freed blocks enter the LRU queue tail first, so evicting one block keeps the shared head."""
    p = policies.build("block-hash", make_ctx(float("inf")), {"block_size": "10"})
    serve(p, view(0, np.arange(40)), 1)
    p.evict(10 * BYTES_PER_TOKEN, 2)
    assert p.lookup(view(1, np.arange(40)), 3).num_reused == 30


def test_locked_blocks_survive_evict() -> None:
    """Blocks held by an admitted request stay resident through an evict-everything call."""
    p = policies.build("block-hash", make_ctx(float("inf")))
    serve(p, view(0, np.arange(64)), 1)
    r = view(1, np.r_[np.arange(32), [1] * 32])
    plan = p.lookup(r, 2)
    assert p.admit(r, plan, 2)
    p.evict(10**9, 3)
    assert p.lookup(r, 4).num_reused == 32
    assert p.usage().protected >= 32 * BYTES_PER_TOKEN


def test_verify_detects_tampered_block() -> None:
    """Under --verify a stored block whose tokens differ is counted as a collision and not reused."""
    p = policies.build("block-hash", make_ctx(float("inf"), verify=True))
    serve(p, view(0, np.arange(64)), 1)
    p._tok[0, 0] = -5                        # corrupt the first stored block
    assert p.lookup(view(1, np.arange(64)), 2).num_reused == 0
    assert p.stats.collisions == 1


def test_matches_prefix_policy_rounded_to_blocks() -> None:
    """Unbounded and served one at a time, block-hash reuses exactly prefix's match rounded down to blocks."""
    from tests.policies.conftest import request_stream

    bh = policies.build("block-hash", make_ctx(float("inf")), {"block_size": "8"})
    px = policies.build("prefix", make_ctx(float("inf")))
    num_checked = 0
    for t, req in enumerate(request_stream(seed=2, num_requests=60)):
        a, b = bh.lookup(req, t), px.lookup(req, t)
        assert a.num_reused == b.num_reused // 8 * 8
        num_checked += b.num_reused > 0
        serve(bh, req, t)
        serve(px, req, t)
    assert num_checked > 5


@pytest.mark.parametrize("verify", [False, True])
def test_residency_prefix_closed_under_eviction(verify: bool) -> None:
    """With evictions and interleaved requests, every resident block's parent is resident, and lookup
    equals the leading run of a per-block probe of all the request's hashes (residency is prefix-closed,
    which the block tree relies on); the tree holds exactly the resident blocks."""
    from tests.policies.conftest import request_stream

    rng = np.random.default_rng(3)
    p = policies.build("block-hash", make_ctx(700, verify=verify), {"block_size": "8"})
    live: list[tuple[RequestView, bool]] = []
    num_evicted_mid = 0
    for t, req in enumerate(request_stream(seed=5, num_requests=120)):
        hashes = p._hashes(req).tolist()
        resident = _check_tree(p, verify)
        present = [h in resident for h in hashes]
        run = present.index(False) if False in present else len(present)
        assert not any(present[run:])                     # resident hashes form a leading run
        plan = p.lookup(req, t)
        assert plan.num_reused == run * 8
        if p.admit(req, plan, t):
            live.append((req, False))
        while live and (len(live) > 3 or rng.random() < 0.4):
            j = int(rng.integers(len(live)))
            r, committed = live[j]
            if committed:
                p.release(r, t)
                live.pop(j)
            else:
                p.commit(r, t)
                live[j] = (r, True)
        if rng.random() < 0.2:
            num_evicted_mid += p.evict(int(rng.integers(1, 200)) * BYTES_PER_TOKEN, t) > 0
        _check_tree(p, verify)
        p.usage().check()
    assert p.stats.evictions > 50 and num_evicted_mid > 5


def _check_tree(p, verify: bool) -> set[int]:
    """The block tree holds exactly the alive slots, each once, where its per-slot index says (under
    --verify: with the stored hashes and parent hashes). Returns the resident blocks' hashes."""
    tree, seen, hashes, stack = p._tree, [], [], [(p._tree.root, 0)]
    while stack:
        e, parent_hash = stack.pop()
        if e is not tree.root:
            h = tree.hashes(e)
            assert e.n == h.shape[0] == e.slots.shape[0] >= 1 and (p._alive[e.slots]).all()
            assert (p._lean or (tree.eid[e.slots] == e.eid).all()) and e.key == h[0]
            if e.s0 < 0:
                assert (tree.off[e.slots] == np.arange(e.n)).all()
            if verify:
                assert (p._hash[e.slots] == h).all()
                assert p._parent[e.slots[0]] == parent_hash and (p._parent[e.slots[1:]] == h[:-1]).all()
            seen.append(e.slots)
            hashes += h.tolist()
            parent_hash = h[-1]
        for key, c in e.children.items():
            assert key == c.key and c.parent is e
            stack.append((c, parent_hash))
    slots = np.concatenate(seen) if seen else np.zeros(0, np.int64)
    assert np.unique(slots).shape[0] == slots.shape[0] == p._num_resident == int(p._alive.sum())
    assert tree.num_edges == len(seen) and len(set(hashes)) == len(hashes)
    assert sorted(e.eid for e in tree._edges if e is not None) == sorted(set(range(1, len(tree._edges)))
                                                                        - set(tree._free_ids))
    return set(hashes)


def _unbounded(radix: bool, block_size: int = 8):
    """An unbounded block-hash cache: a radix tree until its first evict() (the default), or lean block state
    (``radix=False``, what the radix tree's replay builds)."""
    from pic.engine.policies.block_hash import BlockHashCache, BlockHashConfig

    p = BlockHashCache(make_ctx(float("inf")), BlockHashConfig(block_size), radix=radix)
    assert (p._radix is not None) == radix and p._lean
    return p


@pytest.mark.parametrize("radix", [True, False])
def test_unbounded_queue_built_on_demand_evicts_as_a_kept_queue(radix: bool) -> None:
    """An unbounded cache keeps no free queue until evict() is called; then it evicts exactly the blocks,
    in exactly the order, of a cache that kept its queue all along (a finite capacity never reached). From a
    radix tree (the default) the blocks are first rebuilt by replaying what the cache served."""
    from tests.policies.conftest import request_stream

    rng = np.random.default_rng(11)
    lazy = _unbounded(radix)
    kept = policies.build("block-hash", make_ctx(10**12), {"block_size": "8"})
    assert not kept._lean and kept._radix is None and lazy._free_seq is None and lazy._tree.eid is None
    live: list[tuple[RequestView, bool]] = []
    num_evictions = 0
    for t, req in enumerate(request_stream(seed=7, num_requests=150)):
        plans = [p.lookup(req, t) for p in (lazy, kept)]
        assert plans[0].num_reused == plans[1].num_reused
        if all(p.admit(req, plan, t) for p, plan in zip((lazy, kept), plans, strict=True)):
            live.append((req, False))
        _advance(live, (lazy, kept), t, rng, 3, 0.4)
        if rng.random() < 0.15:
            n = int(rng.integers(1, 400)) * BYTES_PER_TOKEN
            freed = [p.evict(n, t) for p in (lazy, kept)]
            assert freed[0] == freed[1]
            num_evictions += freed[0] > 0
            assert np.array_equal(np.flatnonzero(lazy._alive), np.flatnonzero(kept._alive))
    assert not lazy._lean and lazy._radix is None and num_evictions > 5
    assert lazy.stats == kept.stats and lazy.stats.evictions > 100


def test_free_order_widens_past_int32(monkeypatch) -> None:
    """The free-queue order is int32 until its counter would pass 2^31 - 1, then int64: a cache that widens
    early (limit patched to 50) evicts exactly what one that never widens does."""
    import pic.engine.policies.block_hash as bh
    from tests.policies.conftest import request_stream

    rng = np.random.default_rng(13)
    narrow = policies.build("block-hash", make_ctx(900), {"block_size": "8"})
    wide = policies.build("block-hash", make_ctx(900), {"block_size": "8"})
    limit = {id(narrow): (1 << 31) - 1, id(wide): 50}

    def each(name: str, *args):
        out = []
        for p in (narrow, wide):
            monkeypatch.setattr(bh, "_I32_MAX", limit[id(p)])
            out.append(getattr(p, name)(*args))
        assert out[0] == out[1]
        return out[0]

    live: list[tuple[RequestView, bool]] = []
    for t, req in enumerate(request_stream(seed=9, num_requests=150)):
        if each("admit", req, each("lookup", req, t), t):
            live.append((req, False))
        while live and (len(live) > 3 or rng.random() < 0.4):
            j = int(rng.integers(len(live)))
            r, committed = live[j]
            each("release" if committed else "commit", r, t)
            live[j] = (r, True)
            if committed:
                live.pop(j)
        assert np.array_equal(np.flatnonzero(narrow._alive), np.flatnonzero(wide._alive))
    assert narrow._free_seq.dtype == np.int32 and wide._free_seq.dtype == np.int64
    assert narrow.stats.evictions == wide.stats.evictions > 50


@pytest.mark.parametrize("capacity", [float("inf"), 10**6])
def test_commit_resumes_after_a_split_of_its_held_run(capacity: float) -> None:
    """A request admitted on a 4-block run commits after another request split that run in two (no per-block
    edge id while lean: commit resumes from admit's position through the split) and stores its new blocks
    after the whole run."""
    from pic.engine.policies.block_hash import BlockHashCache

    p = BlockHashCache(make_ctx(capacity), radix=False)
    assert p._lean == (capacity == float("inf")) and (p._tree.eid is None) == p._lean
    serve(p, view(0, np.arange(64)), 1)
    a = view(1, np.r_[np.arange(64), np.arange(1000, 1032)])
    plan = p.lookup(a, 2)
    assert plan.num_reused == 64 and p.admit(a, plan, 2)
    serve(p, view(2, np.r_[np.arange(32), np.arange(2000, 2032)]), 3)      # splits the run after block 2
    assert p._tree.num_edges == 3
    p.commit(a, 4)
    p.release(a, 4)
    assert p._tree.num_edges == 4 and p._num_resident == 4 + 2 + 2
    assert p.lookup(view(3, np.r_[np.arange(64), np.arange(1000, 1032)]), 5).num_reused == 96
    _check_tree(p, False)
    p.usage().check()


def test_ref_widens_past_uint8() -> None:
    """Reference counts are uint8 while few requests are live, then int32: a cache that widens early (at 2 live
    requests) serves and evicts exactly what one that stays narrow does."""
    from tests.policies.conftest import request_stream

    rng = np.random.default_rng(17)
    narrow = policies.build("block-hash", make_ctx(900), {"block_size": "8"})
    wide = policies.build("block-hash", make_ctx(900), {"block_size": "8"})
    wide._ref_max = 2
    live: list[tuple[RequestView, bool]] = []
    for t, req in enumerate(request_stream(seed=19, num_requests=150)):
        plans = [p.lookup(req, t) for p in (narrow, wide)]
        assert plans[0].num_reused == plans[1].num_reused
        ok = [p.admit(req, plan, t) for p, plan in zip((narrow, wide), plans, strict=True)]
        assert ok[0] == ok[1]
        if ok[0]:
            live.append((req, False))
        _advance(live, (narrow, wide), t, rng, 5, 0.3)
        assert np.array_equal(narrow._ref[:narrow._top], wide._ref[:wide._top])
        assert np.array_equal(np.flatnonzero(narrow._alive), np.flatnonzero(wide._alive))
    assert narrow._ref.dtype == np.uint8 and wide._ref.dtype == np.int32
    assert narrow.stats.evictions == wide.stats.evictions > 50


def _advance(live: list, pols, t: int, rng, most: int, chance: float) -> None:
    """Move random live requests on in every policy alike (commit, or release once committed) while more than
    ``most`` are live or a draw under ``chance`` says go on."""
    while live and (len(live) > most or rng.random() < chance):
        j = int(rng.integers(len(live)))
        r, committed = live[j]
        for p in pols:
            (p.release if committed else p.commit)(r, t)
        live[j] = (r, True)
        if committed:
            live.pop(j)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_radix_tree_counts_as_the_block_state(seed: int) -> None:
    """Unbounded, the radix tree gives every plan, admission and usage() (evictable, protected, total) of the
    per-block state, after every call, on interleaved requests that share, extend and cut prefixes; so does
    its footprint. A 2^-64 hash collision aside, the two are the same cache."""
    from tests.policies.conftest import request_stream

    rng = np.random.default_rng(100 + seed)
    bs = int(rng.choice([1, 5, 8, 16]))
    tree, blocks = _unbounded(True, bs), _unbounded(False, bs)
    pair = (tree, blocks)
    live: list[tuple[RequestView, bool]] = []
    num_locked = 0
    for t, req in enumerate(request_stream(seed=seed, num_requests=160)):
        plans = [p.lookup(req, t) for p in pair]
        assert plans[0] == plans[1]
        assert [p.admit(req, plan, t) for p, plan in zip(pair, plans, strict=True)] == [True, True]
        assert tree.usage() == blocks.usage()
        live.append((req, False))
        while live and (len(live) > 6 or rng.random() < 0.3):
            j = int(rng.integers(len(live)))
            r, committed = live[j]
            for p in pair:
                (p.release if committed else p.commit)(r, t)
            if committed:
                live.pop(j)
            else:
                live[j] = (r, True)
            u = tree.usage()
            assert u == blocks.usage()
            u.check()
            num_locked += u.protected > 0 and u.evictable > 0
    assert tree.stats == blocks.stats and tree.stats.hits > 20
    assert tree.footprint().entries == blocks.footprint().entries > 0 and num_locked > 20
    assert tree._radix is not None and blocks._radix is None
