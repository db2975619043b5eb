"""Hypothesis state machine: RadixTree against a brute-force model (a list of resident sequences).

The model is the set of resident whole-page prefixes (the nodes of a page-level trie). Invariants:
``match_prefix`` = longest common prefix with any resident sequence, page-rounded; the tree's
``total_tokens`` = page_size * number of distinct resident page prefixes;
evictable + protected == total; locked paths never shrink.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule

from pic.engine.eviction import lfu, lru
from pic.engine.radix import _LEAF, RadixTree

# Small alphabet and short sequences so prefixes collide often.
seqs = st.lists(st.integers(0, 3), min_size=0, max_size=14)


def _lcp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class RadixMachine(RuleBasedStateMachine):
    """Rules insert/match/lock/unlock/evict; the model is the set of resident token prefixes."""

    inserted = Bundle("inserted")

    @initialize(page_size=st.sampled_from([1, 2, 3]), lfu_order=st.booleans())
    def setup(self, page_size: int, lfu_order: bool) -> None:
        self.p = page_size
        self.tree = RadixTree(page_size, lfu if lfu_order else lru)
        self.resident: set[tuple[int, ...]] = set()   # every resident prefix (trie nodes of the model)
        self.locks: list[tuple[tuple[int, ...], object]] = []
        self.now = 0

    def _tick(self) -> int:
        self.now += 1
        return self.now

    def _pages(self, t: tuple[int, ...]) -> set[tuple[int, ...]]:
        return {t[:k] for k in range(self.p, len(t) + 1, self.p)}

    def _expected_match(self, s: tuple[int, ...]) -> int:
        n = 0
        for k in range(self.p, len(s) + 1, self.p):
            if s[:k] in self.resident:
                n = k
        return n

    @rule(target=inserted, s=seqs)
    def insert(self, s: list[int]) -> list[int]:
        t = tuple(s[: len(s) // self.p * self.p])
        before = len(self.resident)
        new_prefixes = self._pages(t)
        num_new, node = self.tree.insert(np.array(s, np.int32), self._tick())
        self.resident |= new_prefixes
        assert num_new == self.p * (len(self.resident) - before)
        assert tuple(self.tree.tokens_of(node).tolist()) == t
        return s

    @rule(target=inserted, base=inserted, cut=st.integers(0, 14), tail=seqs)
    def insert_variant(self, base: list[int], cut: int, tail: list[int]) -> list[int]:
        """Insert a sequence sharing a prefix with an earlier one (forces splits mid-edge)."""
        return self.insert(base[:cut] + tail)

    @rule(base=inserted, cut=st.integers(0, 14), tail=seqs)
    def match_variant(self, base: list[int], cut: int, tail: list[int]) -> None:
        self.match(base[:cut] + tail)

    @rule(base=inserted, cut=st.integers(0, 14), tail=seqs)
    def lock_variant(self, base: list[int], cut: int, tail: list[int]) -> None:
        self.lock(base[:cut] + tail)

    @rule(s=seqs)
    def match(self, s: list[int]) -> None:
        num, node = self.tree.match_prefix(np.array(s, np.int32), self._tick(), split=False)
        assert num == self._expected_match(tuple(s))
        assert len(self.tree.tokens_of(node)) <= num

    @rule(s=seqs)
    def lock(self, s: list[int]) -> None:
        num, node = self.tree.match_prefix(np.array(s, np.int32), self._tick(), split=True)
        assert tuple(self.tree.tokens_of(node).tolist()) == tuple(s[:num])
        self.tree.inc_lock(node)
        self.locks.append((tuple(s[:num]), node))

    @precondition(lambda self: self.locks)
    @rule(i=st.integers(0, 100))
    def unlock(self, i: int) -> None:
        _, node = self.locks.pop(i % len(self.locks))
        self.tree.dec_lock(node)

    @rule(n=st.integers(0, 30))
    def evict(self, n: int) -> None:
        before = self.tree.total_tokens
        freed = self.tree.evict(n)
        assert self.tree.total_tokens == before - freed
        if freed < n:                                # nothing evictable may remain
            assert self.tree.evictable_tokens == 0
        # rebuild the model from what is still matchable: evicted prefixes are gone, locked ones stay
        self.resident = {r for r in self.resident
                         if self.tree.match_prefix(np.array(r, np.int32), split=False)[0] >= len(r)}

    @invariant()
    def accounting(self) -> None:
        t = self.tree
        assert t.evictable_tokens >= 0 and t.protected_tokens >= 0
        assert t.evictable_tokens + t.protected_tokens == t.total_tokens == self.p * len(self.resident)

    @invariant()
    def locked_paths_resident(self) -> None:
        for path, _ in self.locks:
            assert self._pages(path) <= self.resident
        locked = set().union(*(self._pages(path) for path, _ in self.locks))
        assert self.tree.protected_tokens == self.p * len(locked)

    @invariant()
    def leaves_share_the_empty_mapping(self) -> None:
        """Every childless node holds the shared read-only empty mapping, every other a dict of its own."""
        stack = [self.tree.root]
        while stack:
            nd = stack.pop()
            stack.extend(nd.children.values())
            assert (nd.children is _LEAF) == (not nd.children)
            assert nd.children is _LEAF or type(nd.children) is dict
        assert not _LEAF


TestRadixStateful = RadixMachine.TestCase
TestRadixStateful.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])


def test_prune_removes_what_a_full_eviction_removes() -> None:
    """RadixTree.prune(node) after releasing the only unlocked path frees the same nodes and tokens as
    evict(evictable_tokens), and leaves the same paths (fresh random prompts sharing prefixes)."""
    rng = np.random.default_rng()
    base = rng.integers(0, 4, 300, dtype=np.int32)
    prompts = [np.r_[base[:rng.integers(0, 300)], rng.integers(0, 4, rng.integers(1, 60), dtype=np.int32)]
               for _ in range(40)]
    trees = [RadixTree(), RadixTree()]
    nodes: list[list] = [[], []]
    for t, ns in zip(trees, nodes, strict=True):
        for p in prompts:
            _, leaf = t.insert(p, 0)
            t.inc_lock(leaf)
            ns.append(leaf)
    freed_total = 0
    for k in rng.permutation(len(prompts)).tolist():
        a, b = nodes[0][k], nodes[1][k]
        trees[0].dec_lock(a)
        trees[1].dec_lock(b)
        fa = trees[0].prune(a)
        fb = trees[1].evict(trees[1].evictable_tokens)
        assert fa == fb
        freed_total += fa
        assert trees[0].evictable_tokens == trees[1].evictable_tokens == 0
        assert trees[0].num_nodes == trees[1].num_nodes
        live = [i for i in range(len(prompts)) if nodes[0][i].is_alive]
        assert live == [i for i in range(len(prompts)) if nodes[1][i].is_alive]
    assert freed_total > 0 and trees[0].num_nodes == 0 and trees[0].total_tokens == 0


def _shape(tree: RadixTree) -> list:
    """Every edge (its path, key, tokens, access time, hits, creation time, locks) and the tree's counters."""
    out, stack = [], [(tree.root, ())]
    while stack:
        nd, path = stack.pop()
        for k, ch in sorted(nd.children.items()):
            toks = tuple(ch.src.tokens(ch.lo, ch.lo + ch.n).tolist())
            out.append((path, k, toks, ch.last_access_us, ch.hits, ch.created_us, ch.lock_ref))
            stack.append((ch, path + toks))
    return sorted(out) + [tree.total_tokens, tree.evictable_tokens, tree.num_nodes, tree.version]


def test_insert_walked_equals_insert_after_the_same_walk() -> None:
    """``insert_walked`` where a ``match_prefix(split=True)`` walk of the same tokens stopped (tree unchanged
    since) leaves the tree ``insert`` leaves: the same edges, access times, hits, counters and result."""
    from pic.engine.seq import Seq

    rng = np.random.default_rng(3)
    for page in (1, 2, 3):
        a, b = RadixTree(page, evicts=False), RadixTree(page, evicts=False)
        base = rng.integers(0, 4, 40, dtype=np.int32)
        for t in range(120):
            cut = int(rng.integers(0, 40))
            toks = np.concatenate([base[:cut], rng.integers(0, 4, int(rng.integers(0, 12)), dtype=np.int32)])
            qa, qb = Seq.of_array(toks), Seq.of_array(toks.copy())
            pa, na = a.match_prefix(qa, None, split=True)
            pb, _ = b.match_prefix(qb, None, split=True)
            assert pa == pb
            if rng.random() < 0.3:
                b.match_prefix(qb, 10 * t, split=False)                # other walks touch nodes in both trees
                a.match_prefix(qa, 10 * t, split=False)
            assert a.version == b.version
            got = a.insert_walked(qa, 10 * t + 1, pa, na)
            want = b.insert(qb, 10 * t + 1)
            assert got[0] == want[0]
            assert _shape(a) == _shape(b), f"page {page}, step {t}"


def test_insert_below_a_lock_equals_insert() -> None:
    """``insert_below`` from a node locked at admission (``lock_point``), with other prompts inserted,
    locked and released in between (splitting edges above and at the locked node), leaves the tree
    ``insert`` leaves: the same edges, access times, hits, locks, counters and result; with ``hi`` too."""
    from pic.engine.seq import Seq

    rng = np.random.default_rng(11)
    for page in (1, 2, 3):
        a, b = RadixTree(page), RadixTree(page)
        base = rng.integers(0, 3, 60, dtype=np.int32)
        pending: list = []            # (tokens, hi, (num, node) in a, node in b)
        for t in range(300):
            if pending and rng.random() < 0.4:
                toks, hi, (num, na), nb = pending.pop(int(rng.integers(0, len(pending))))
                qa, qb = Seq.of_array(toks), Seq.of_array(toks.copy())
                got = a.insert_below(qa, 10 * t, num, na, hi)
                want = b.insert(qb, 10 * t, 0, hi)
                assert got[0] == want[0]
                for tree, nd, leaf in ((a, na, got[1]), (b, nb, want[1])):
                    tree.inc_lock(leaf)
                    tree.dec_lock(nd)
                    tree.dec_lock(leaf)
            else:
                cut = int(rng.integers(0, 60))
                toks = np.concatenate([base[:cut], rng.integers(0, 3, int(rng.integers(0, 15)), dtype=np.int32)])
                hi = None if rng.random() < 0.5 else int(rng.integers(0, toks.shape[0] + 1))
                full = (toks.shape[0] if hi is None else hi) // page * page
                want_n = int(rng.integers(0, full + 1)) // page * page
                num_a, na = a.lock_point(Seq.of_array(toks), min(want_n, a.match_prefix(toks, None, split=False)[0]), 10 * t)
                num_b, nb = b.lock_point(Seq.of_array(toks), num_a, 10 * t)
                assert num_a == num_b
                a.inc_lock(na)
                b.inc_lock(nb)
                pending.append((toks, hi, (num_a, na), nb))
            assert _shape(a) == _shape(b), f"page {page}, step {t}"
        assert a.num_nodes > 20


def test_leaf_mapping_is_shared_read_only_and_copies_as_itself() -> None:
    """Leaves share one empty children mapping that refuses writes and stays the same object through copy,
    deepcopy and pickle (a copied tree's leaves must not share a writable dict)."""
    import copy
    import pickle

    import pytest

    tree = RadixTree()
    tree.insert(np.array([1, 2, 3], np.int32), 1)
    tree.insert(np.array([1, 2, 4], np.int32), 2)
    for t in (tree, copy.deepcopy(tree), pickle.loads(pickle.dumps(tree))):
        mid = t.root.children[1]
        leaves = list(mid.children.values())
        assert len(leaves) == 2 and all(x.children is _LEAF for x in leaves) and mid.children is not _LEAF
        t.insert(np.array([1, 2, 3, 9], np.int32), 3)     # a leaf gets a child: a dict of its own
        assert len(leaves[0].children) == 1 and leaves[1].children is _LEAF and not _LEAF
    with pytest.raises(TypeError):
        _LEAF[0] = None
    mid = tree.root.children[1]
    three = mid.children[3]
    assert tree.evict(1) == 1 and list(mid.children) == [3]       # [4] goes (least recent)
    assert tree.evict(1) == 1 and three.children is _LEAF          # [9] goes: [3] is a leaf again
    assert tree.evict(10) == 3 and tree.root.children is _LEAF and not _LEAF
