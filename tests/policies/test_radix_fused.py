"""The radix tree's fused calls of an exact-prefix policy (srv20): ``match_lock`` (lookup's walk, admit's lock of
its whole match) and ``insert_move`` (commit's insert, the move of its lock) against the calls they fuse, and
``block-hash``'s radix ``start`` (``_Tree.lock_blocks``) against lookup then admit: the same trees (edges, access
times, hits, locks, counters, version), answers, memo-served commits and block counts."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine.policies.block_radix import RadixBlocks
from pic.engine.policies.prefix import PrefixCache
from pic.engine.radix import RadixTree
from pic.engine.seq import Seq
from tests.policies.conftest import make_ctx, request_stream
from tests.policies.test_radix_stateful import _shape


def _tokens(rng, base, page):
    cut = int(rng.integers(0, base.shape[0]))
    return np.concatenate([base[:cut], rng.integers(0, 3, int(rng.integers(0, 15)), dtype=np.int32)])


@pytest.mark.parametrize("page", [1, 2, 3])
def test_match_lock_and_insert_move_equal_the_calls_they_fuse(page) -> None:
    """Prompts admitted (a walk and a lock), committed and released in overlapping groups, other walks between
    them: one tree through the fused calls, one through match_prefix / lock_point / inc_lock and insert_below /
    move_lock, the same after every call."""
    rng = np.random.default_rng(5 + page)
    a, b = RadixTree(page, evicts=False), RadixTree(page, evicts=False)
    base = rng.integers(0, 3, 50, dtype=np.int32)
    live: list = []
    for t in range(300):
        if live and rng.random() < 0.45:
            toks, qa, qb, (num, na), nb, done = live.pop(int(rng.integers(0, len(live))))
            if done:                                    # release
                a.dec_lock(na)
                b.dec_lock(nb)
            else:                                       # commit: often right after its admit (the memo serves)
                got = a.insert_move(qa, 10 * t, num, na)
                want = b.insert_below(qb, 10 * t, num, nb)
                b.move_lock(want[1], nb)
                assert got[0] == want[0]
                live.append((toks, qa, qb, (num, got[1]), want[1], True))
        else:
            toks = _tokens(rng, base, page)
            qa, qb = Seq.of_array(toks), Seq.of_array(toks.copy())
            now = None if rng.random() < 0.2 else 10 * t
            num_a, na = a.match_lock(qa, now)
            num, _ = b.match_prefix(qb, now, split=False)
            num_b, nb = b.lock_point(qb, num, now)
            b.inc_lock(nb)
            assert num_a == num == num_b
            live.append((toks, qa, qb, (num_a, na), nb, False))
        assert _shape(a) == _shape(b), f"page {page}, step {t}"
        assert a.protected_tokens == b.protected_tokens
    assert a.num_nodes > 20


def test_insert_move_refuses_an_unlocked_node() -> None:
    tree = RadixTree()
    leaf = tree.insert(np.array([1], np.int32), 0)[1]          # (not locked)
    with pytest.raises(ValueError):
        tree.insert_move(Seq.of_array(np.array([1, 2], np.int32)), 1, 1, leaf)


@pytest.mark.parametrize("block", [1, 4, 16])
def test_radix_blocks_start_equals_lookup_then_admit(block) -> None:
    reqs = request_stream(7, 120)
    a, b = RadixBlocks(block), RadixBlocks(block)
    live: list = []
    for k, req in enumerate(reqs):
        num = a.lookup(req)
        assert a.admit(req, num // block, 10 * k) == num // block
        assert b.start(req, 10 * k) == num
        live.append(req)
        if len(live) >= 3:
            for q in live:
                a.commit(q, 10 * k + 1)
                b.commit(q, 10 * k + 1)
            for q in live[:-1]:
                a.release(q, 10 * k + 2)
                b.release(q, 10 * k + 2)
            live = live[-1:]
        assert _shape(a.tree) == _shape(b.tree)
        assert (a.num_resident, a.reserved, a.num_locked) == (b.num_resident, b.reserved, b.num_locked)
        assert a.ops == b.ops and a.rids == b.rids


@pytest.mark.parametrize("name", ["prefix", "block-hash"])
def test_start_prefix_admitted_twice_raises(name) -> None:
    from pic.engine import policies

    req = request_stream(2, 3)[1]
    p = policies.build(name, make_ctx(float("inf")))
    assert p.start_prefix(req, 1) >= 0
    with pytest.raises(ValueError, match="admitted twice"):
        p.start_prefix(req, 2)
    assert isinstance(p, PrefixCache) == (name == "prefix")
