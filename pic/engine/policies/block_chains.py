"""The resident blocks of ``block-hash`` as a radix tree of block-hash runs (no entry per block).

A prompt's chained block hashes form a path from the root: block ``k``'s hash names the whole prefix
up to its end, so the resident blocks (prefix-closed, :mod:`engine.policies.block_hash` NOTE) are a
tree. An edge holds a run of consecutive blocks as two numpy views, their hashes and their slots, and
its children by their first hash. Matching a prompt walks edges and compares each edge's hashes with
the prompt's in one vectorized step; storing a prompt's new blocks adds one edge (and splits at most one);
evicting blocks (always leaves, tail first) shortens or drops the edges that held them. So a request
costs O(edges on its path) Python steps, not O(blocks) dict operations: with millions of resident
blocks every dict probe or insert is a few cache misses (~0.4-0.6 us each on the 2-core VM), which made
the per-block dict most of this policy's time.

Per slot the tree keeps which edge holds it (``eid``) and where (``off``), so eviction finds the edges
to shorten without searching, and a walk can resume after a known held block.
"""

from __future__ import annotations

import numpy as np

_EMPTY_H = np.zeros(0, np.uint64)
_EMPTY_S = np.zeros(0, np.int64)


class _Edge:
    __slots__ = ("hashes", "slots", "children", "parent", "eid")

    def __init__(self, hashes: np.ndarray, slots: np.ndarray, parent: _Edge | None, eid: int) -> None:
        self.hashes = hashes
        self.slots = slots
        self.children: dict[int, _Edge] = {}
        self.parent = parent
        self.eid = eid


class BlockChains:
    """Radix tree over chained block hashes; slots are the caller's (it owns per-slot state)."""

    def __init__(self) -> None:
        self.root = _Edge(_EMPTY_H, _EMPTY_S, None, 0)
        self._edges: dict[int, _Edge] = {}
        self._next_eid = 1                    # (int32 ids: one or two edges per request)
        self.eid = np.zeros(0, np.int32)      # per slot: id of the edge holding it (0: none)
        self.off = np.zeros(0, np.int32)      # per slot: its index in that edge
        self.version = 0                      # bumped by every change (memo key for walks)

    def grow(self, num_slots: int) -> None:
        """Room for slots ``[0, num_slots)``."""
        if num_slots > self.eid.shape[0]:
            self.eid.resize(num_slots, refcheck=False)    # in place, zero-filled (no views are kept)
            self.off.resize(num_slots, refcheck=False)

    def after(self, slot: int) -> tuple[_Edge, int]:
        """The walk position just after resident ``slot`` (``-1``: the root)."""
        if slot < 0:
            return self.root, 0
        return self._edges[int(self.eid[slot])], int(self.off[slot]) + 1

    def walk(self, hashes: np.ndarray, i: int, pos: tuple[_Edge, int], limit: int
             ) -> tuple[int, list[np.ndarray], tuple[_Edge, int]]:
        """Match ``hashes[i:limit]`` from ``pos``: ``(end, slot pieces of blocks [i, end), position)``."""
        e, o = pos
        pieces: list[np.ndarray] = []
        while i < limit:
            if o == e.hashes.shape[0]:
                c = e.children.get(int(hashes[i]))
                if c is None:
                    break
                e, o = c, 0
            m = min(e.hashes.shape[0] - o, limit - i)
            a, b = e.hashes[o:o + m], hashes[i:i + m]
            k = m if np.array_equal(a, b) else int(np.argmin(a == b))
            pieces.append(e.slots[o:o + k])
            i += k
            o += k
            if k < m:
                break
        return i, pieces, (e, o)

    def insert(self, pos: tuple[_Edge, int], hashes: np.ndarray, slots: np.ndarray) -> None:
        """Add a run of new blocks (``hashes`` with their ``slots``) after walk position ``pos``."""
        e, o = pos
        if o < e.hashes.shape[0]:                       # the run leaves e mid-way: split e at o
            tail = self._edge(e.hashes[o:], e.slots[o:], e)
            tail.children = e.children
            for c in tail.children.values():
                c.parent = tail
            self.eid[tail.slots] = tail.eid
            self.off[tail.slots] -= o
            e.hashes, e.slots = e.hashes[:o], e.slots[:o]
            e.children = {int(tail.hashes[0]): tail}
        new = self._edge(hashes.copy(), slots, e)
        e.children[int(hashes[0])] = new
        self.eid[slots] = new.eid
        self.off[slots] = np.arange(slots.shape[0])
        self.version += 1

    def evicted(self, slots: np.ndarray, alive: np.ndarray) -> None:
        """Forget ``slots`` (already not ``alive``): each edge keeps its alive head (eviction takes
        leaves, so an edge's evicted blocks are its tail and everything below them)."""
        for eid in np.unique(self.eid[slots]).tolist():
            e = self._edges[eid]
            keep = int(np.count_nonzero(alive[e.slots]))
            if keep == e.slots.shape[0]:
                continue
            e.children = {}
            if keep:
                e.hashes, e.slots = e.hashes[:keep], e.slots[:keep]
            else:
                del self._edges[eid]
                p = e.parent
                key = int(e.hashes[0])
                if p.children.get(key) is e:
                    del p.children[key]
        self.eid[slots] = 0
        self.version += 1

    # ---- Internal helpers -------------------------------------------------------------------------
    def _edge(self, hashes: np.ndarray, slots: np.ndarray, parent: _Edge) -> _Edge:
        e = _Edge(hashes, slots, parent, self._next_eid)
        self._edges[e.eid] = e
        self._next_eid += 1
        return e
