"""The resident blocks of ``block-hash`` as a radix tree of block-hash runs (no entry per block).

A prompt's chained block hashes form a path from the root: block ``k``'s hash names the whole prefix
up to its end, so the resident blocks (prefix-closed, :mod:`engine.policies.block_hash` NOTE) are a
tree. An edge holds a run of consecutive blocks, their hashes and their slots, and its children by
their first hash. Matching a prompt walks edges and compares each edge's hashes with the prompt's in
one vectorized step; storing a prompt's new blocks adds one edge (and splits at most one); evicting
blocks (always leaves, tail first) shortens or drops the edges that held them. So a request costs
O(edges on its path) Python steps, not O(blocks) dict operations: with millions of resident blocks
every dict probe or insert is a few cache misses (~0.4-0.6 us each on the 2-core VM), which made the
per-block dict most of this policy's time.

Per slot the tree can keep which edge holds it (``eid``, :meth:`BlockChains.track`), so eviction finds the
edges to shorten without searching. A cache that never evicts does not track it (NOTE (memory): 4 B per
block; unbounded, ``block-hash`` keeps ~9 B per block in all): a walk resumes from a position recorded
earlier instead (:meth:`BlockChains.resume`, which follows the splits made since).

NOTE (memory): an edge whose slots are consecutive (every allocation of a cache that never evicts; a
bounded one recycles evicted slots) is just its first slot ``s0`` and length: its hashes sit in the
per-slot ``hash`` array and a block's place in it is ``slot - s0``. Only other edges keep their own slot
and hash arrays, and only their slots use the per-slot ``off`` array (made on the first such edge).
"""

from __future__ import annotations

import numpy as np

_EMPTY_H = np.zeros(0, np.uint64)
_EMPTY_S = np.zeros(0, np.int64)


class _Edge:
    """A run of ``n`` resident blocks: consecutive slots from ``s0`` (``s0 >= 0``; hashes in the tree's
    ``hash`` array), or ``s0 == -1`` with its own arrays ``_sl`` (slots) and ``_h`` (hashes)."""

    __slots__ = ("n", "key", "s0", "_sl", "_h", "kids", "parent", "eid")

    def __init__(self, n: int, key: int | None, s0: int, sl: np.ndarray | None, h: np.ndarray | None,
                 parent: _Edge | None, eid: int) -> None:
        self.n, self.key, self.s0, self._sl, self._h = n, key, s0, sl, h   # key: the first hash
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
        return self._sl if self.s0 < 0 else np.arange(self.s0, self.s0 + self.n)

    def at(self, lo: int = 0, hi: int | None = None) -> slice | np.ndarray:
        """Index of the slots of blocks ``[lo, hi)`` into per-slot arrays (a slice when consecutive)."""
        hi = self.n if hi is None else hi
        return slice(self.s0 + lo, self.s0 + hi) if self.s0 >= 0 else self._sl[lo:hi]

    def cut(self, n: int) -> None:
        """Keep the first ``n`` blocks."""
        self.n = n
        if self.s0 < 0:
            self._sl, self._h = self._sl[:n], self._h[:n]


class BlockChains:
    """Radix tree over chained block hashes; slots are the caller's (it owns per-slot state)."""

    def __init__(self) -> None:
        self.root = _Edge(0, None, -1, _EMPTY_S, _EMPTY_H, None, 0)
        # edges by id (id 0: none); ids of dropped edges are reused. NOTE (memory): a list (8 B per id)
        # instead of a dict by id (~100 B per edge with its int key): ~1 M edges at chat 10^6
        self._edges: list[_Edge | None] = [None]
        self._free_ids: list[int] = []
        # per slot: id of the edge holding it (0: none, not resident); None until track() (a cache that never
        # evicts needs none)
        self.eid: np.ndarray | None = None
        self.hash = np.zeros(0, np.uint64)    # per slot of a consecutive edge: its block's hash
        self.off: np.ndarray | None = None    # per slot of another edge: its index in that edge
        self.version = 0                      # bumped by every change (memo key for walks)

    @property
    def num_edges(self) -> int:
        return len(self._edges) - 1 - len(self._free_ids)

    def grow(self, num_slots: int) -> None:
        """Room for slots ``[0, num_slots)``."""
        if num_slots > self.hash.shape[0]:
            for a in (self.eid, self.hash, self.off):
                if a is not None:
                    a.resize(num_slots, refcheck=False)     # in place, zero-filled (no views are kept)

    def track(self) -> None:
        """Keep ``eid`` from now on (built from the edges; needed before the first :meth:`evicted`)."""
        if self.eid is None:
            self.eid = eid = np.zeros(self.hash.shape[0], np.int32)
            for e in self._edges:
                if e is not None:
                    eid[e.at()] = e.eid

    def hashes(self, e: _Edge, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """The hashes of ``e``'s blocks ``[lo, hi)`` (a view)."""
        hi = e.n if hi is None else hi
        return self.hash[e.s0 + lo:e.s0 + hi] if e.s0 >= 0 else e._h[lo:hi]

    @staticmethod
    def back(pos: tuple[_Edge, int], d: int) -> tuple[_Edge, int]:
        """The walk position ``d`` blocks before ``pos`` (on its path; never the head of an edge: the end of
        its parent instead, which is where a walk stands before entering the edge)."""
        e, o = pos
        while d and d >= o:
            d -= o
            e = e.parent
            o = e.n
        return e, o - d

    @staticmethod
    def resume(pos: tuple[_Edge, int], hashes: np.ndarray, i: int) -> tuple[_Edge, int]:
        """Walk position ``pos``, recorded after block ``i - 1`` of ``hashes``, in today's tree: an edge split
        since keeps its head, and its tail (the rest) is the child keyed by the tail's first hash. The blocks
        up to ``i`` must have stayed resident (they are held)."""
        e, o = pos
        while o > e.n:
            o -= e.n
            e = e.child(int(hashes[i - o]))
        return e, o

    def walk(self, hashes: np.ndarray, i: int, pos: tuple[_Edge, int], limit: int
             ) -> tuple[int, list[slice | np.ndarray], tuple[_Edge, int]]:
        """Match ``hashes[i:limit]`` from ``pos``: ``(end, slot pieces of blocks [i, end), position)``; a
        piece is a slice of consecutive slots, or an int64 array of them (NOTE (speed): per-slot state is
        then updated through views, not gathers and scatters)."""
        e, o = pos
        pieces: list[slice | np.ndarray] = []
        H = self.hash
        while i < limit:
            if o == e.n:
                c = e.kids                      # (e.child inlined)
                if c is None:
                    break
                h = int(hashes[i])
                c = c.get(h) if type(c) is dict else c if c.key == h else None
                if c is None:
                    break
                e, o = c, 0
            m = min(e.n - o, limit - i)
            s0 = e.s0
            a, b = (H[s0 + o:s0 + o + m] if s0 >= 0 else e._h[o:o + m]), hashes[i:i + m]
            # NOTE (speed): bytes equality of the two uint64 runs (~0.6 us) instead of np.array_equal (~6 us)
            k = m if a.tobytes() == b.tobytes() else int((a == b).argmin())     # (the method: ~1 us less)
            if k:
                pieces.append(slice(s0 + o, s0 + o + k) if s0 >= 0 else e._sl[o:o + k])
            i += k
            o += k
            if k < m:
                break
        return i, pieces, (e, o)

    def insert(self, pos: tuple[_Edge, int], hashes: np.ndarray, slots: np.ndarray | int) -> None:
        """Add a run of new blocks (``hashes`` with their ``slots``: an array, or the first of consecutive
        ones) after walk position ``pos``."""
        e, o = pos
        n = e.n
        if o < n:                                       # the run leaves e mid-way: split e at o
            key = int(self.hashes(e, o, o + 1)[0])
            if e.s0 >= 0:
                tail = self._edge(n - o, key, e.s0 + o, None, None, e)
            else:
                tail = self._edge(n - o, key, -1, e._sl[o:], e._h[o:], e)
                self.off[tail._sl] -= o
            tail.kids = e.kids
            for c in tail.children.values():
                c.parent = tail
            if self.eid is not None:
                self.eid[tail.at()] = tail.eid
            e.cut(o)
            e.kids = tail
        k = hashes.shape[0]
        if isinstance(slots, int):
            new = self._edge(k, int(hashes[0]), slots, None, None, e)
            self.hash[slots:slots + k] = hashes
            at = slice(slots, slots + k)
        else:
            new = self._edge(k, int(hashes[0]), -1, slots, hashes.copy(), e)
            if self.off is None:
                self.off = np.zeros(self.hash.shape[0], np.int32)
            self.off[slots] = np.arange(k)
            at = slots
        e.adopt(new)
        if self.eid is not None:
            self.eid[at] = new.eid
        self.version += 1

    def evicted(self, slots: np.ndarray) -> None:
        """Forget ``slots``: each edge keeps its head of blocks not among them (eviction takes leaves, so an
        edge's evicted blocks are its tail and everything below them). A slot is resident while its ``eid``
        is not 0 (:meth:`track` first)."""
        ids = self.eid[slots]
        # NOTE (speed): the ids come in runs (an edge's blocks are freed together): their run heads, then a
        # sorted set of those few (np.unique costs ~5 us a call even on a handful of values; same order)
        if ids.shape[0] > 16:
            head = np.empty(ids.shape[0], np.bool_)
            head[0] = True
            np.not_equal(ids[1:], ids[:-1], out=head[1:])
            ids = ids[head]
        eids = sorted(set(ids.tolist()))
        self.eid[slots] = 0
        for eid in eids:
            e = self._edges[eid]
            keep = int(np.count_nonzero(self.eid[e.at()]))
            if keep == e.n:
                continue
            e.kids = None
            if keep:
                e.cut(keep)
            else:
                self._edges[eid] = None
                self._free_ids.append(eid)
                e.parent.disown(e)
        self.version += 1

    # ---- Internal helpers -------------------------------------------------------------------------
    def _edge(self, n: int, key: int, s0: int, sl: np.ndarray | None, h: np.ndarray | None,
              parent: _Edge) -> _Edge:
        if self._free_ids:
            eid = self._free_ids.pop()
            e = self._edges[eid] = _Edge(n, key, s0, sl, h, parent, eid)
        else:
            e = _Edge(n, key, s0, sl, h, parent, len(self._edges))
            self._edges.append(e)
        return e


def head_pieces(pieces: list, n: int) -> list:
    """The slot pieces of the first ``n`` blocks of ``pieces`` (slices or int64 arrays, as :meth:`BlockChains.walk`
    gives them)."""
    out = []
    for p in pieces:
        if n <= 0:
            break
        k = p.stop - p.start if type(p) is slice else p.shape[0]
        if k > n:
            p = slice(p.start, p.start + n) if type(p) is slice else p[:n]
        out.append(p)
        n -= k
    return out


def tail_pieces(pieces: list, n: int) -> list:
    """The slot pieces after the first ``n`` blocks of ``pieces``."""
    out = []
    for p in pieces:
        k = p.stop - p.start if type(p) is slice else p.shape[0]
        if n >= k:
            n -= k
            continue
        out.append(p if not n else slice(p.start + n, p.stop) if type(p) is slice else p[n:])
        n = 0
    return out


def cat_pieces(pieces: list) -> np.ndarray:
    """int64: the slots of ``pieces``, in order."""
    parts = [np.arange(p.start, p.stop) if type(p) is slice else p for p in pieces]
    return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, np.int64)


def chain_runs(alive: np.ndarray, hashes: np.ndarray, parent: np.ndarray, tok: np.ndarray, bs: int) -> list:
    """``block-hash``'s footprint runs under --verify: each block of slots ``alive`` (in storing order) after up to
    3 ancestor blocks of context (found by their chained hashes), as ``(tokens, context tokens)``."""
    runs = []
    slot_of = dict(zip(hashes[alive].tolist(), alive.tolist(), strict=True))
    for slot in slot_of.values():
        chain, cur = [slot], slot
        for _ in range(-(-63 // bs)):
            cur = slot_of.get(int(parent[cur]), -1)
            if cur < 0:
                break
            chain.append(cur)
        runs.append((tok[chain[::-1]].reshape(-1), (len(chain) - 1) * bs))
    return runs
