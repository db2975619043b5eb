"""An unbounded store's prompt index in a FlatTrie (``PromptIndex(evicts=False)``) answers as the RadixTree one a bounded
store keeps (``evicts=True``, never over its cap here): the same layouts tried in the same order, so the same
``best_layout`` answers (the layout objects themselves), over prompts of private arrays and of segments, with
lookups that are never committed (the tree splits there, the flat trie does not), prompts that are prefixes of
others and prompts committed twice (the later layout replaces the first)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from pic.engine.policies import irminsul_prompts
from pic.engine.policies.irminsul_layout import NO_CUTS
from pic.engine.policies.irminsul_prompts import PromptIndex
from tests.engine.test_flat_trie import _array_prompts, _segment_prompts


def _layout(rng: np.random.Generator, end: int, entries: dict) -> tuple:
    """A layout of chunks over ``[0, end)``: each fingerprint's chunk in ``entries`` ready, not ready, cut or absent."""
    cuts = np.unique(rng.integers(1, max(end, 2), int(rng.integers(0, 5))))
    bounds = [0, *[int(c) for c in cuts if c < end], end]
    fps = [int(f) for f in rng.integers(0, 60, len(bounds) - 1)]
    for fp, a, b in zip(fps, bounds, bounds[1:], strict=False):
        if fp not in entries:
            r = rng.random()
            if r < 0.8:
                entries[fp] = SimpleNamespace(ready=r < 0.7, size=b - a if r < 0.6 else max(1, (b - a) // 2))
    return bounds, fps, _anchors(rng, len(bounds)), NO_CUTS, False, None


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("tries", [16, 3])
def test_flat_prompt_index_answers_as_the_radix_tree(seed, tries, monkeypatch):
    monkeypatch.setattr(irminsul_prompts, "_LAYOUTS", tries)
    rng = np.random.default_rng(seed)
    prompts = _array_prompts(rng, 4) + _segment_prompts(rng) if seed % 2 else _array_prompts(rng, 3)
    entries: dict = {}
    flat, tree = PromptIndex(entries, evicts=False), PromptIndex(entries, evicts=True)
    assert flat.flat is not None and flat.tree is None and tree.flat is None
    asked = 0
    for i in rng.permutation(3 * len(prompts)):
        q = prompts[i % len(prompts)]
        a, b = flat.best_layout(q), tree.best_layout(q)
        assert a[1:3] == b[1:3] and a[0] is b[0] and a[3] is b[3]
        asked += a[0] is not None
        if rng.random() < 0.8:            # (else looked up only: the tree keeps the split, the flat trie none)
            lay = _layout(rng, q.end, entries)
            for idx in (flat, tree):
                idx.add(q, lay, int(i), math.inf)
    assert asked > 10
    assert sorted(map(id, flat.layouts())) == sorted(map(id, tree.layouts()))
    assert flat.flat.num_nodes <= tree.tree.num_nodes


def _same(a: tuple | None, b: tuple | None) -> bool:
    """Two layouts alike: equal lists of edges and fingerprints (lists: a lookup extends them), the same chunk objects
    in order."""
    if a is None or b is None:
        return a is b
    return type(a[0]) is type(a[1]) is list and a[0] == b[0] and a[1] == b[1] and a[2] == b[2] and \
        np.array_equal(a[3], b[3]) and a[4] == b[4] and len(a) == len(b) == 6 and (
        a[5] is b[5] is None or a[5] is not None and b[5] is not None and len(a[5]) == len(b[5]) and
        all(x is y for x, y in zip(a[5], b[5], strict=True)))


def _continued(rng: np.random.Generator, o: tuple, end: int, entries: dict) -> tuple[list, list, bytes]:
    """Edges, fingerprints and anchors over ``[0, end)`` that begin as layout ``o``'s (some of them; one edge,
    fingerprint or anchor among them, at times, not), the rest new (as :func:`_layout` makes them)."""
    bounds, fps = _layout(rng, end, entries)[:2]
    ob = [b for b in o[0][:len(o[1])] if b < end][:int(rng.integers(1, len(o[1]) + 1))]
    of, oa = list(o[1][:len(ob)]), bytearray(o[2][:len(ob)])
    if len(ob) > 2 and rng.random() < 0.4:  # (an edge, a fingerprint or an anchor among the first ones differs)
        j, r = int(rng.integers(1, len(ob))), rng.random()
        if r < 0.4:
            del ob[j], of[j], oa[j]
        elif r < 0.7:
            of[j] = fps[0]
        else:
            oa[j] ^= 1
    bounds = ob + [b for b in bounds if b > ob[-1]]
    fps = of + [int(f) for f in rng.integers(0, 60, len(bounds) - 1 - len(of))]
    return bounds, fps, bytes(oa) + _anchors(rng, len(bounds) - len(oa))


def _anchors(rng: np.random.Generator, n: int) -> bytes:
    return rng.integers(0, 2, n).astype(np.bool_).tobytes()


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(("chain", "recent"), [(4, 0), (2, 0), (4, 3), (16, 4096)])
def test_lean_chunk_lists_continued_answer_as_kept_whole(seed, chain, recent, monkeypatch):
    """A lean flat index keeps a chunk list that begins as best_layout's ``other``'s as that one's (how many it
    shares, its own rest): read back (best_layout's answers, found_whole, layouts()) it is the whole list the tree
    index keeps, chunk for chunk, over chains of continued prompts (some longer than ``_CHAIN``, some lists sharing
    none, some chunks turning ready or whole later), with or without the latest whole lists at hand."""
    monkeypatch.setattr(irminsul_prompts, "_CHAIN", chain)
    monkeypatch.setattr(irminsul_prompts, "_RECENT", recent)      # (0: every list read back by its chain)
    rng = np.random.default_rng(seed)
    prompts = _array_prompts(rng, 4) + _segment_prompts(rng) if seed % 2 else _array_prompts(rng, 3)
    entries: dict = {}
    flat, tree = PromptIndex(entries, evicts=False), PromptIndex(entries, evicts=True)
    flat.lean = tree.lean = True
    made: list = []
    for i in rng.permutation(4 * len(prompts)):
        q = prompts[i % len(prompts)]
        a, b = flat.best_layout(q), tree.best_layout(q)
        assert a[1:3] == b[1:3] and _same(a[0], b[0]) and _same(a[3], b[3])
        assert a[3] is None or flat.found_whole(a[3]) == tree.found_whole(b[3])
        for c in made[-3:]:               # (chunks turn ready and whole later)
            c.ready, c.size = True, max(c.size, 10**9)
        o = a[3] if a[3] is not None and rng.random() < 0.9 else None
        other = o[5] if o is not None else []
        if o is not None and rng.random() < 0.8:      # (edges and fingerprints continue other's: most)
            bounds, fps, anchors = _continued(rng, o, q.end, entries)
        else:
            bounds, fps = _layout(rng, q.end, entries)[:2]
            anchors = _anchors(rng, len(bounds))
        r = rng.random()                  # (hard boundaries and marker occurrences: in a few)
        hard, marked = (NO_CUTS, False) if r < 0.8 else (np.array([1, 2]), r < 0.9)
        for fp, x, y in zip(fps, bounds, bounds[1:], strict=False):
            if fp not in entries and rng.random() < 0.8:
                entries[fp] = SimpleNamespace(ready=True, size=y - x)
        n = len(fps)
        k = min(n, len(other), int(rng.integers(0, len(other) + 1)))
        new = [SimpleNamespace(ready=rng.random() < 0.7, size=int(rng.integers(1, 50))) for _ in range(n - k)]
        made += new
        cs = [*other[:k], *new]
        lay = (bounds, fps, anchors, hard, marked, cs, bool(rng.random() < 0.3))
        for idx in (flat, tree):
            idx.add(q, lay, int(i), math.inf)
    assert sum(u >= 0 for u in flat._up) > 10 and (chain > 4 or max(flat._dep) == chain)
    assert sum(type(lay[0]) is tuple for lay in flat._lays) > 10       # (edges and fingerprints kept as rests)
    assert any(type(lay[0]) is tuple and lay[2] is not None for lay in flat._lays)
    assert len(flat._full) <= recent
    assert sorted(map(repr, map(_key, flat.layouts()))) == sorted(map(repr, map(_key, tree.layouts())))


def _key(lay: tuple) -> tuple:
    return lay[0], lay[1], lay[2], lay[3].tolist(), lay[4], [id(c) for c in lay[5]]
