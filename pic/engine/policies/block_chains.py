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
    """A run of resident blocks: their hashes and slots. NOTE (memory): slots handed out in one piece
    (every allocation of a cache that never evicts) are kept as their first slot ``s0``, not an array."""

    __slots__ = ("hashes", "key", "s0", "_sl", "kids", "parent", "eid")

    def __init__(self, hashes: np.ndarray, slots: np.ndarray | int, parent: _Edge | None, eid: int) -> None:
        self.hashes = hashes
        self.key = int(hashes[0]) if hashes.shape[0] else None        # first hash: the parent's key for it
        self.s0, self._sl = (slots, None) if isinstance(slots, int) else (-1, slots)
        # children: None (a leaf), the only child, or a dict by first hash. NOTE (memory): a dict per edge
        # was ~95 B per leaf and 224 B per single child (chat: every turn's edge hangs below the last one's)
        self.kids: _Edge | dict[int, _Edge] | None = None
        self.parent = parent
        self.eid = eid

    @property
    def children(self) -> dict[int, _Edge]:
        """The children by first hash (a new dict)."""
        k = self.kids
        return {} if k is None else dict(k) if type(k) is dict else {k.key: k}

    def child(self, h: int) -> _Edge | None:
        k = self.kids
        if k is None:
            return None
        if type(k) is dict:
            return k.get(h)
        return k if k.key == h else None

    def adopt(self, c: _Edge) -> None:
        k = self.kids
        if k is None:
            self.kids = c
        elif type(k) is dict:
            k[c.key] = c
        else:
            self.kids = {k.key: k, c.key: c}

    def disown(self, c: _Edge) -> None:
        k = self.kids
        if k is c:
            self.kids = None
        elif type(k) is dict and k.get(c.key) is c:
            del k[c.key]
            if len(k) == 1:
                self.kids = next(iter(k.values()))

    @property
    def slots(self) -> np.ndarray:
        """int64: the slot of each block."""
        return self._sl if self.s0 < 0 else np.arange(self.s0, self.s0 + self.hashes.shape[0])

    def at(self, lo: int, hi: int | None = None) -> slice | np.ndarray:
        """Index of the slots of blocks ``[lo, hi)`` into per-slot arrays (a slice when consecutive)."""
        hi = self.hashes.shape[0] if hi is None else hi
        return slice(self.s0 + lo, self.s0 + hi) if self.s0 >= 0 else self._sl[lo:hi]

    def piece(self, lo: int, hi: int) -> np.ndarray | int:
        """Slots of blocks ``[lo, hi)``, as :meth:`BlockChains.insert` takes them."""
        return self.s0 + lo if self.s0 >= 0 else self._sl[lo:hi]

    def cut(self, n: int) -> None:
        """Keep the first ``n`` blocks."""
        self.hashes = self.hashes[:n]
        if self.s0 < 0:
            self._sl = self._sl[:n]


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
                c = e.child(int(hashes[i])) if e.kids is not None else None
                if c is None:
                    break
                e, o = c, 0
            m = min(e.hashes.shape[0] - o, limit - i)
            a, b = e.hashes[o:o + m], hashes[i:i + m]
            k = m if np.array_equal(a, b) else int(np.argmin(a == b))
            if k:
                pieces.append(np.arange(e.s0 + o, e.s0 + o + k) if e.s0 >= 0 else e._sl[o:o + k])
            i += k
            o += k
            if k < m:
                break
        return i, pieces, (e, o)

    def insert(self, pos: tuple[_Edge, int], hashes: np.ndarray, slots: np.ndarray | int) -> None:
        """Add a run of new blocks (``hashes`` with their ``slots``: an array, or the first of consecutive
        ones) after walk position ``pos``."""
        e, o = pos
        n = e.hashes.shape[0]
        if o < n:                                       # the run leaves e mid-way: split e at o
            tail = self._edge(e.hashes[o:], e.piece(o, n), e)
            tail.kids = e.kids
            for c in tail.children.values():
                c.parent = tail
            at = tail.at(0)
            self.eid[at] = tail.eid
            self.off[at] -= o
            e.cut(o)
            e.kids = tail
        new = self._edge(hashes.copy(), slots, e)
        e.adopt(new)
        at = new.at(0)
        self.eid[at] = new.eid
        self.off[at] = np.arange(hashes.shape[0])
        self.version += 1

    def evicted(self, slots: np.ndarray, alive: np.ndarray) -> None:
        """Forget ``slots`` (already not ``alive``): each edge keeps its alive head (eviction takes
        leaves, so an edge's evicted blocks are its tail and everything below them)."""
        for eid in np.unique(self.eid[slots]).tolist():
            e = self._edges[eid]
            keep = int(np.count_nonzero(alive[e.at(0)]))
            if keep == e.hashes.shape[0]:
                continue
            e.kids = None
            if keep:
                e.cut(keep)
            else:
                del self._edges[eid]
                e.parent.disown(e)
        self.eid[slots] = 0
        self.version += 1

    # ---- Internal helpers -------------------------------------------------------------------------
    def _edge(self, hashes: np.ndarray, slots: np.ndarray | int, parent: _Edge) -> _Edge:
        e = _Edge(hashes, slots, parent, self._next_eid)
        self._edges[e.eid] = e
        self._next_eid += 1
        return e
