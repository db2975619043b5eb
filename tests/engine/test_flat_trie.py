"""The flat-column trie (:mod:`engine.flat_trie`) against :class:`engine.radix.RadixTree` used as the chunk store's
index used it before (insert + lock per claim, unlock + prune + evict per release, a ``split=True`` walk and a
pre-order search per lookup): on random claims, releases and lookups over a small alphabet (many shared runs,
splits, removals and reused ids) the same answers, and node for node the same tree as a RadixTree whose lookups do
not split (the flat trie's lookups do not); that tree answers as the splitting one does."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine.flat_trie import FlatTrie
from pic.engine.radix import RadixTree
from pic.engine.seq import Seq
from tests.engine.test_seq_lcp import _segments

# ---- the chunk index's use of a RadixTree, as irminsul_index made it (the reference) -------------------------


def _claim(tree: RadixTree, toks: Seq, fp: int, lo: int, hi: int):
    if hi > lo:
        ck = toks.token(lo)
        if ck not in tree.root.children:
            return tree.new_leaf(tree.root, toks, lo, hi - lo, ck, fp)
    _, node = tree.insert(toks, 0, lo, hi)
    if node.value is not None and node.value != fp:
        return None
    node.value = fp
    tree.inc_lock(node)
    return node


def _release(tree: RadixTree, node, fp: int) -> None:
    if node.value == fp:
        node.value = None
    tree.dec_lock(node)
    tree.prune(node)
    if tree.evictable_tokens:
        tree.evict(tree.evictable_tokens)


def _first_value(node):
    stack = [node]
    while stack:
        nd = stack.pop()
        if nd.value is not None:
            return nd.value
        stack.extend(reversed(list(nd.children.values())))
    return None


def _longest(tree: RadixTree, toks: np.ndarray, split: bool):
    num, node = tree.match_prefix(toks, None, split=split)
    if num == 0:
        return 0, None
    depth, nd = 0, node
    while nd is not tree.root:
        depth += nd.n
        nd = nd.parent
    if depth < num:                       # (split=False: the match ends inside the edge below node)
        node = node.children[int(toks[depth])]
    v = _first_value(node)
    return (0, None) if v is None else (num, v)


# ---- both trees, node for node ---------------------------------------------------------------------------------


def _radix_nodes(tree: RadixTree) -> list:
    out, stack = [], [tree.root]
    while stack:
        nd = stack.pop()
        out.append(nd)
        stack.extend(reversed(list(nd.children.values())))
    return out


def _flat_nodes(t: FlatTrie) -> list[int]:
    out, stack = [], [0]
    while stack:
        nd = stack.pop()
        out.append(nd)
        stack.extend(reversed(t.children(nd)))
    return out


def _same_tree(tree: RadixTree, t: FlatTrie) -> dict:
    """Assert both hold the same nodes in the same pre-order (edges, values, locks, child keys); the flat id
    of each radix node."""
    rn, fn = _radix_nodes(tree), _flat_nodes(t)
    assert len(rn) == len(fn) == t.num_nodes + 1 == tree.num_nodes + 1
    ids = {}
    for a, b in zip(rn, fn, strict=True):
        ids[id(a)] = b
        if a is tree.root:
            continue
        assert a.key.tolist() == t.src[b].tokens(t.lo[b], t.lo[b] + t.n[b]).tolist()
        assert a.ckey == t.ck[b] and a.lock_ref == t.lock[b]
        assert (a.value is None and not t.has[b]) or (t.has[b] and a.value == t.val[b])
        assert ids[id(a.parent)] == t.par[b]
        assert t.find(t.par[b], t.ck[b]) == b              # the child table finds every node
    for b in fn:                          # the children lists: the first child's previous is the last
        kids = t.children(b)
        assert not kids or t.prv[kids[0]] == kids[-1]
        assert all(t.prv[y] == x and t.nxt[x] == y for x, y in zip(kids, kids[1:], strict=False))
    assert t.used == t.num_nodes and tree.evictable_tokens == t.evictable_tokens
    assert sum(x >= 0 for x in t.tab) == t.used
    return ids


def _array_prompts(rng: np.random.Generator, alpha: int) -> list[Seq]:
    """Prompts of private token arrays sharing runs (a few bases, then variations)."""
    prompts = []
    for _ in range(12):
        base = rng.integers(0, alpha, int(rng.integers(5, 40)), dtype=np.int32)
        prompts.append(base)
        for _ in range(3):
            cut = int(rng.integers(1, base.shape[0]))
            prompts.append(np.concatenate([base[:cut], rng.integers(0, alpha, int(rng.integers(1, 15)), dtype=np.int32)]))
    return [Seq.of_array(p) for p in prompts]


def _segment_prompts(rng: np.random.Generator) -> list[Seq]:
    """Prompts of stored and opaque segments (the trace's: segments that start alike, shared leading rows), and
    runs cut from them."""
    segs = _segments(rng)
    out = []
    for _ in range(10):
        rows = rng.integers(0, len(segs), int(rng.integers(1, 6)))
        for _ in range(3):
            rows = np.r_[rows[:int(rng.integers(0, rows.shape[0] + 1))], rng.integers(0, len(segs), int(rng.integers(1, 3)))]
            q = Seq.of_segments(segs, rows, np.r_[0, np.cumsum(segs.lengths[rows])])
            out.append(q)
            lo = int(rng.integers(0, q.end))
            out.append(q.sub(lo, int(rng.integers(lo + 1, q.end + 1))))
    return out


@pytest.mark.parametrize("seed", range(10))
def test_flat_trie_is_the_radix_tree_node_for_node(seed):
    rng = np.random.default_rng(seed)
    alpha = [3, 5, 40][seed % 3]
    seqs = _array_prompts(rng, alpha) if seed < 6 else _segment_prompts(rng)
    prompts = [q.tokens(0, q.end) for q in seqs]
    split_tree, tree, flat = RadixTree(evicts=False), RadixTree(evicts=False), FlatTrie(bits=2 + seed % 2 * 8)
    held: list = []                       # (fp, split_tree node, tree node, flat node)
    ref: dict = {}                        # flat node -> the claim's run
    for step in range(900):
        op = rng.random()
        if op < 0.45 or not held:
            q = seqs[int(rng.integers(len(seqs)))]
            lo = int(rng.integers(0, q.end))
            hi = int(rng.integers(lo, q.end + 1)) if rng.random() < 0.97 else lo
            fp = hash(q.tokens(lo, hi).tobytes()) & (2**64 - 1)
            if rng.random() < 0.03:
                fp ^= 1                  # (a fingerprint collision: another value on the same path)
            a, b, c = _claim(split_tree, q, fp, lo, hi), _claim(tree, q, fp, lo, hi), flat.claim(q, fp, lo, hi)
            assert (a is None) == (b is None) == (c is None)
            assert flat.node_of(q, fp, lo, hi) == c               # (found again by a walk while the claim holds)
            if c is not None:
                held.append((fp, a, b, c))
                ref[c] = (q, lo, hi)
        elif op < 0.75:
            fp, a, b, c = held.pop(int(rng.integers(len(held))))
            _release(split_tree, a, fp)
            _release(tree, b, fp)
            flat.release(c, fp)
        else:
            p = prompts[int(rng.integers(len(prompts)))]
            toks = np.concatenate([p[:int(rng.integers(0, p.shape[0] + 1))],
                                   rng.integers(0, alpha, int(rng.integers(0, 6)), dtype=np.int32)])
            got = flat.longest(Seq.of_array(toks))
            assert got == _longest(split_tree, toks, True) == _longest(tree, toks, False), step
        if step % 25 == 0 or step > 850:
            ids = _same_tree(tree, flat)
            for fp, _, b, c in held:
                assert ids[id(b)] == c and flat.has_children(c) == bool(b.children)
                q, lo, hi = ref[c]        # (a release of a twin claim, same run and value, clears the value)
                assert flat.node_of(q, fp, lo, hi) == (c if flat.has[c] and flat.val[c] == fp else None)
                assert flat.node_of(q, fp ^ 2, lo, hi) is None
    while held:
        fp, _, b, c = held.pop()
        _release(tree, b, fp)
        flat.release(c, fp)
    _same_tree(tree, flat)
    assert flat.num_nodes == 0 and flat.evictable_tokens == 0 and len(flat.free) > 0


def test_split_keeps_a_childs_place_and_lookups_search_in_order():
    """A split's upper part takes the child's place among its siblings; ``longest`` answers the first value
    below the match in pre-order."""
    t = FlatTrie()
    s = Seq.of_array(np.array([1, 2, 3, 9, 7, 1, 5, 1, 2, 8], np.int32))
    a = t.claim(s, 10, 0, 3)              # [1 2 3]
    b = t.claim(s, 11, 4, 5)              # [7]
    c = t.claim(s, 12, 7, 10)             # [1 2 8]: splits [1 2 3] at 2
    up = t.par[a]
    assert t.children(0) == [up, b] and t.children(up) == [a, c] and t.tokens_of(up).tolist() == [1, 2]
    assert t.longest(Seq.of_array(np.array([1, 2, 4], np.int32))) == (2, 10)
    assert t.longest(Seq.of_array(np.array([1, 2, 8, 8], np.int32))) == (3, 12)
    assert t.longest(Seq.of_array(np.array([1], np.int32))) == (1, 10)        # inside an edge, not split
    assert t.num_nodes == 4
    t.release(a, 10)
    assert t.children(up) == [c] and t.longest(Seq.of_array(np.array([1, 2], np.int32))) == (2, 12)
    d = t.claim(s, 13, 0, 3)
    assert t.children(up) == [c, d] and d == a                                 # the freed id, last in order
    assert t.claim(s, 99, 0, 3) is None and t.lock[d] == 1                     # another value holds the path


def test_child_table_deletes_by_backward_shift():
    """The child table at a fixed size (16 slots, at most 7 keys: many probe runs wrap around its end) finds
    every key put and not deleted, and no other, through random puts and deletes."""
    rng = np.random.default_rng(0)
    t, live = FlatTrie(bits=4), {}
    for _ in range(4000):
        if not live or (len(live) < 7 and rng.random() < 0.55):
            key = (int(rng.integers(0, 3)), int(rng.integers(0, 40)))
            if key in live:
                continue
            node = t._new()
            t.par[node], t.ck[node] = key
            t._put(node)
            live[key] = node
        else:
            key = list(live)[int(rng.integers(len(live)))]
            t._delete(live.pop(key))
        assert t.mask == 15 and t.used == len(live)
        for p in range(3):
            for k in range(40):
                assert t.find(p, k) == live.get((p, k), -1)


@pytest.mark.parametrize("seed", range(6))
def test_reversed_trie_is_the_trie_of_reversed_runs(seed):
    """A ``rev`` trie claiming forward runs (read backwards) is node for node the trie of the reversed runs (as
    private arrays: the tail trie before), with the same answers to lookups of reversed queries."""
    rng = np.random.default_rng(100 + seed)
    seqs = _array_prompts(rng, [3, 5, 40][seed % 3]) if seed < 3 else _segment_prompts(rng)
    prompts = [q.tokens(0, q.end) for q in seqs]
    fwd, rev = FlatTrie(bits=2 + seed % 2 * 8), FlatTrie(bits=3, rev=True)
    held: list = []
    ref: dict = {}
    for step in range(700):
        op = rng.random()
        if op < 0.5 or not held:
            q = seqs[int(rng.integers(len(seqs)))]
            lo = int(rng.integers(0, q.end))
            hi = int(rng.integers(lo, q.end + 1)) if rng.random() < 0.97 else lo
            fp = hash(q.tokens(lo, hi).tobytes()) & (2**64 - 1)
            if rng.random() < 0.03:
                fp ^= 1
            a = fwd.claim(Seq.of_array(q.tokens(lo, hi)[::-1].copy()), fp, 0, hi - lo) if hi > lo else \
                fwd.claim(q, fp, lo, hi)
            b = rev.claim(q, fp, lo, hi)
            assert (a is None) == (b is None)
            assert rev.node_of(q, fp, lo, hi) == b
            if a is not None:
                held.append((fp, a, b))
                ref[b] = (q, lo, hi)
        elif op < 0.75:
            fp, a, b = held.pop(int(rng.integers(len(held))))
            fwd.release(a, fp)
            rev.release(b, fp)
        else:
            p = prompts[int(rng.integers(len(prompts)))]
            cut = int(rng.integers(0, p.shape[0] + 1))
            toks = np.concatenate([rng.integers(0, 5, int(rng.integers(0, 6)), dtype=np.int32), p[cut:]])
            assert rev.longest(Seq.of_array(toks)) == fwd.longest(Seq.of_array(toks[::-1].copy())), step
        if step % 25 == 0 or step > 650:
            fn, rn = _flat_nodes(fwd), _flat_nodes(rev)
            assert len(fn) == len(rn) == fwd.num_nodes + 1 == rev.num_nodes + 1
            ids = dict(zip(fn, rn, strict=True))
            for x, y in zip(fn[1:], rn[1:], strict=True):
                assert fwd.src[x].tokens(fwd.lo[x], fwd.lo[x] + fwd.n[x]).tolist() == \
                    rev.src[y].tokens(rev.lo[y] - rev.n[y], rev.lo[y])[::-1].tolist()
                assert fwd.ck[x] == rev.ck[y] and fwd.lock[x] == rev.lock[y] and fwd.has[x] == rev.has[y]
                assert fwd.val[x] == rev.val[y] and ids[fwd.par[x]] == rev.par[y] and rev.find(rev.par[y], rev.ck[y]) == y
                assert fwd.tokens_of(x).tolist() == rev.tokens_of(y).tolist()
            assert all(ids[a] == b for _, a, b in held) and fwd.evictable_tokens == rev.evictable_tokens
            for fp, _, b in held:
                q, lo, hi = ref[b]
                assert rev.node_of(q, fp, lo, hi) == (b if rev.has[b] and rev.val[b] == fp else None)
                assert rev.node_of(q, fp ^ 2, lo, hi) is None


def test_node_of_is_the_claims_end_node_only():
    """``node_of``: the node a claim of the same run and value got; None for a run ending inside an edge (even below a
    node holding that value), for another value, for a run not in the trie; reversed in a reversed trie."""
    s = Seq.of_array(np.array([1, 2, 3, 9, 7, 4], np.int32))
    for rev in (False, True):
        t = FlatTrie(rev=rev)
        a = t.claim(s, 10, 0, 2) if not rev else t.claim(s, 10, 4, 6)          # [1 2] / reversed [4 7]
        b = t.claim(s, 11, 0, 5) if not rev else t.claim(s, 11, 1, 6)          # [1 2 3 9 7] / [4 7 9 3 2]
        assert t.par[b] == a
        got = [t.node_of(s, 10, 0, 2), t.node_of(s, 11, 0, 5), t.node_of(s, 10, 0, 4), t.node_of(s, 12, 0, 5),
               t.node_of(s, 10, 2, 4)] if not rev else \
              [t.node_of(s, 10, 4, 6), t.node_of(s, 11, 1, 6), t.node_of(s, 10, 2, 6), t.node_of(s, 12, 1, 6),
               t.node_of(s, 10, 0, 2)]
        assert got == [a, b, None, None, None]


@pytest.mark.parametrize("seed", range(6))
def test_insert_at_a_match_is_insert(seed):
    """:meth:`FlatTrie.insert_at` where :meth:`FlatTrie.match` stopped builds the tree :meth:`FlatTrie.insert` does
    (node for node, the same end nodes): a match ending inside an edge, at its end, at the root, past the query."""
    rng = np.random.default_rng(seed)
    prompts = _array_prompts(rng, 3) + _segment_prompts(rng) + [Seq.of_array(np.zeros(0, np.int32))]
    a, b = FlatTrie(bits=2), FlatTrie(bits=2)
    ends = set()
    for i in rng.permutation(2 * len(prompts)):
        q = prompts[i % len(prompts)]
        num, node, up = b.match(q)
        ends.add((num == q.end, node == 0, bool(node) and num - up < b.n[node]))
        assert a.insert(q, 0, q.end) == b.insert_at(q, num, node, up)
    assert len(ends) >= 4
    cols = ("par", "lo", "n", "ck", "kid", "nxt", "prv", "tab")
    assert all(getattr(a, c) == getattr(b, c) for c in cols) and a.src == b.src and a.num_nodes == b.num_nodes
