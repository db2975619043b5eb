"""A token radix trie in flat columns: the index ``irminsul``'s chunk store keeps over its ready chunks' tokens
(:mod:`engine.policies.irminsul_index`: the chunk trie, and the tail trie over reversed tokens), and an unbounded
store's prompt index (:mod:`engine.policies.irminsul_prompts`: :meth:`FlatTrie.insert`, :meth:`FlatTrie.match`).

The same tree as :class:`engine.radix.RadixTree` (page size 1, never evicting by key) makes of the operations
the chunk store does (:meth:`FlatTrie.claim`, :meth:`FlatTrie.release`), node for node: the same edges, split
where the tree splits them, each node's children in the order a ``children`` dict keeps (insertion order; a
split node's upper part takes its place), the same end nodes, locks and values; and the same answers to
:meth:`FlatTrie.longest` (the longest match and the first value at or below it in pre-order) and
:meth:`FlatTrie.has_children`. A lookup does not split the edge it stops inside (the tree's ``split=True`` walk
does): the answer is the same (the upper part of a split edge has no value and one child), and an insert that
later branches there splits it as the tree did, in the same place.

A node is an int id (the root is 0) into columns (``array``): parent, edge ``[lo, lo + n)`` of a source
:class:`~engine.seq.Seq` (a list of references, the tree's ``src``: no token copied), the edge's first token,
value and whether it has one, lock count, and the children as a doubly linked list (first child; next and
previous sibling, the first child's previous being the last). A child is found under ``(parent, first token)``
in one open-addressing table of node ids (linear probing, at most half full, the key read back from the
columns; deletion by backward shift). Freed ids are reused.

NOTE (memory): ~56-66 B per node (the columns ~49 B, the table 8-16 B), against ~145 B for a ``RadixNode`` and
~200-290 B for each internal node's children dict plus the boxed ints of its fields (chat 10^4: the chunk and
tail tries were ~1.5 KB per request).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right

import numpy as np

from pic.engine.seq import Seq, first_tokens, lcp, lcp_at, lcp_rev

_NIL = -1
_BLOCK = 256
_NILS, _ZEROS, _NONES = array("i", [_NIL]) * _BLOCK, [0] * _BLOCK, [None] * _BLOCK


class FlatTrie:
    """A radix trie of token runs (page size 1) in flat columns; see the module docstring."""

    __slots__ = ("par", "lo", "n", "ck", "val", "has", "lock", "kid", "nxt", "prv", "src", "free", "tab",
                 "mask", "used", "num_nodes", "evictable_tokens", "rev")

    def __init__(self, bits: int = 10, rev: bool = False) -> None:
        """An empty trie, its child table of ``2^bits`` slots (it doubles at half full). ``rev``: a trie of
        reversed runs whose edges are runs of forward sources read backwards (see :meth:`claim`)."""
        self.par = array("i", [_NIL])
        self.lo = array("i", [0])           # (a position in a prompt: below 2^31)
        self.n = array("i", [0])
        self.ck = array("i", [0])
        self.val = array("Q", [0])
        self.has = bytearray(1)
        self.lock = array("i", [1])           # the root: never removed
        self.kid = array("i", [_NIL])
        self.nxt = array("i", [_NIL])
        self.prv = array("i", [_NIL])
        self.src: list = [None]
        self.free = array("i")
        self.tab = array("i", [_NIL]) * (1 << bits)
        self.mask = (1 << bits) - 1
        self.used = 0                         # ids in the table (every node but the root)
        self.num_nodes = 0
        self.evictable_tokens = 0             # tokens on unlocked nodes
        # NOTE (memory): a reversed trie (the tail trie) keeps an edge as ``(src, lo, n)`` = ``src``'s tokens
        # ``lo - 1, lo - 2, ..., lo - n`` (``lo`` its forward end): its sources are the forward prompts the chunk trie
        # keeps too, not a reversed Seq of each request's run (a Seq and two arrays, ~260 B per chat request)
        self.rev = rev

    # ---- Public API -------------------------------------------------------------------------------------
    def claim(self, q: Seq, fp: int, lo: int, hi: int) -> int | None:
        """Insert ``q[lo:hi]`` (a reversed trie: those tokens reversed) and lock its end node for value ``fp``; the
        node, or None when another value holds it (unlocked then). ``RadixTree.insert`` + ``inc_lock`` as
        ``irminsul_index`` did them."""
        n = hi - lo
        if n <= 0:
            node = 0
        else:
            rev = self.rev
            at = hi if rev else lo            # a reversed trie's node records where its run ends
            ck = q.token(hi - 1 if rev else lo)
            child = self.find(0, ck)
            if child < 0:                     # (most chunks: a new leaf under the root, no walk)
                node = self._leaf(0, q, at, n, ck)
                self.val[node] = fp
                self.has[node] = 1
                self.lock[node] = 1
                self.evictable_tokens -= n
                return node
            pos, node, _, ck = (self._walk_rev if rev else self._walk)(q, at, n, True, child)
            if pos < n:
                node = self._leaf(node, q, at - pos if rev else at + pos, n - pos, ck)
        if self.has[node] and self.val[node] != fp:
            return None
        self.val[node] = fp
        self.has[node] = 1
        self.inc_lock(node)
        return node

    def insert(self, q: Seq, lo: int, hi: int) -> int:
        """Insert ``q[lo:hi]`` (a forward trie), nothing locked nor valued: its end node (the root for an empty run).
        ``RadixTree.insert``'s tree (a walk that stops inside an edge splits it there)."""
        n = hi - lo
        if n <= 0:
            return 0
        ck = q.token(lo)
        child = self.find(0, ck)
        if child < 0:
            return self._leaf(0, q, lo, n, ck)
        pos, node, _, ck = self._walk(q, lo, n, True, child)
        return node if pos >= n else self._leaf(node, q, lo + pos, n - pos, ck)

    def insert_at(self, q: Seq, num: int, node: int, up: int) -> int:
        """:meth:`insert` ``(q, 0, q.end)`` where :meth:`match` ``(q)`` gave ``(num, node, up)`` and the trie has not
        changed since: the same tree (``node``'s edge split where the match ends inside it; the rest a leaf), no walk."""
        if node and num - up < self.n[node]:
            node = self._split(node, num - up)
        return node if num >= q.end else self._leaf(node, q, num, q.end - num, q.token(num))

    def match(self, q: Seq) -> tuple[int, int, int]:
        """``(num, node, depth)``: the longest prefix ``num`` of ``q`` the trie holds (a forward trie; no split), the
        deepest node whose edge holds some of it (the edge it ends inside, or at the end of; the root where nothing
        matches) and that node's parent's depth (tokens on the root path above its edge)."""
        if q.end <= 0:
            return 0, 0, 0
        child = self.find(0, q.token(0))
        if child < 0:
            return 0, 0, 0
        pos, node, child, _ = self._walk(q, 0, q.end, False, child)
        if child >= 0:
            node = child
        d, up, nn, par = 0, self.par[node], self.n, self.par
        while up > 0:
            d += nn[up]
            up = par[up]
        return pos, node, d

    def node_of(self, q: Seq, fp: int, lo: int, hi: int) -> int | None:
        """The node :meth:`claim` ``(q, fp, lo, hi)`` returned, while that claim holds: the end node of ``q[lo:hi]``
        (reversed in a reversed trie) if it holds value ``fp``, else None (another value took the path). A walk, no
        change. NOTE (memory): a lean store's runs keep no end nodes, they are found so when a chunk is made of a run
        (rarely: 5 chunks of 8,046 runs on chat 10^4)."""
        n = hi - lo
        if n <= 0:
            node = 0
        else:
            child = self.find(0, q.token(hi - 1) if self.rev else q.token(lo))
            if child < 0:
                return None
            pos, node, child, _ = self._walk_rev(q, hi, n, False, child) if self.rev else \
                self._walk(q, lo, n, False, child)
            if pos < n or child >= 0:
                return None
        return node if self.has[node] and self.val[node] == fp else None

    def release(self, node: int, fp: int) -> None:
        """Undo :meth:`claim` of ``node`` by value ``fp``: unlock it, remove what that left unlocked as a leaf
        (and each parent that becomes one), then every other unlocked node (none where every path is claimed)."""
        if self.has[node] and self.val[node] == fp:
            self.has[node] = 0
            self.val[node] = 0
        self.dec_lock(node)
        self.prune(node)
        if self.evictable_tokens:
            self.evict_all()

    def longest(self, q: Seq) -> tuple[int, int | None]:
        """``(num, value)``: the longest prefix of ``q`` the trie holds and the first value at or below where it
        ends (pre-order, children in order); ``(0, None)`` when nothing matches or no value lies below."""
        if q.end <= 0:
            return 0, None
        rev, n = self.rev, q.end              # (a reversed trie: q read backwards from its end)
        child = self.find(0, q.token(n - 1 if rev else 0))
        if child < 0:
            return 0, None
        pos, node, child, _ = self._walk_rev(q, n, n, False, child) if rev else self._walk(q, 0, n, False, child)
        v = self.first_value(node if child < 0 else child)
        return (0, None) if v is None else (pos, v)

    def first_value(self, top: int) -> int | None:
        """The value of the first node at or below ``top`` that has one, in pre-order (children in order)."""
        has, kid, nxt, par = self.has, self.kid, self.nxt, self.par
        node = top
        while True:
            if has[node]:
                return self.val[node]
            c = kid[node]
            if c >= 0:
                node = c
                continue
            while node != top:
                s = nxt[node]
                if s >= 0:
                    node = s
                    break
                node = par[node]
            else:
                return None

    def has_children(self, node: int) -> bool:
        return self.kid[node] >= 0

    def find(self, parent: int, token: int) -> int:
        """The child of ``parent`` whose edge begins with ``token``, or -1."""
        tab, mask, par, ck = self.tab, self.mask, self.par, self.ck
        i = hash((parent, token)) & mask
        while True:
            c = tab[i]
            if c < 0 or (par[c] == parent and ck[c] == token):
                return c
            i = (i + 1) & mask

    def inc_lock(self, node: int) -> None:
        lock, par, n = self.lock, self.par, self.n
        k = 0
        while node:
            if lock[node] == 0:
                k += n[node]
            lock[node] += 1
            node = par[node]
        self.evictable_tokens -= k

    def dec_lock(self, node: int) -> None:
        lock, par, n = self.lock, self.par, self.n
        k = 0
        while node:
            if lock[node] <= 0:
                raise ValueError("dec_lock on an unlocked node")
            lock[node] -= 1
            if lock[node] == 0:
                k += n[node]
            node = par[node]
        self.evictable_tokens += k

    def prune(self, node: int) -> int:
        """Remove ``node`` if it is an unlocked leaf, then each parent that becomes one; tokens freed."""
        freed = 0
        lock, kid, par = self.lock, self.kid, self.par
        while node and lock[node] == 0 and kid[node] < 0 and self.src[node] is not None:
            up = par[node]
            freed += self._remove_leaf(node)
            node = up
        return freed

    def evict_all(self) -> int:
        """Remove every unlocked node (leaves first: what ``RadixTree.evict(evictable_tokens)`` leaves)."""
        freed = 0
        lock, kid, src = self.lock, self.kid, self.src
        for node in range(1, len(src)):
            if src[node] is not None and lock[node] == 0 and kid[node] < 0:
                freed += self.prune(node)
        return freed

    def tokens_of(self, node: int) -> np.ndarray:
        """The root path's tokens down to ``node`` (tests, debugging)."""
        parts = []
        while node:
            lo = self.lo[node]
            parts.append(self.src[node].tokens(lo - self.n[node], lo)[::-1] if self.rev else
                         self.src[node].tokens(lo, lo + self.n[node]))
            node = self.par[node]
        return np.concatenate(parts[::-1]) if parts else np.zeros(0, np.int32)

    def children(self, node: int) -> list[int]:
        """``node``'s children, in order (tests, debugging)."""
        out, c = [], self.kid[node]
        while c >= 0:
            out.append(c)
            c = self.nxt[c]
        return out

    def nbytes(self) -> int:
        """Bytes the columns and the table take (their buffers and the source list's slots)."""
        cols = (self.par, self.lo, self.n, self.ck, self.val, self.lock, self.kid, self.nxt, self.prv, self.free,
                self.tab)
        return sum(c.buffer_info()[1] * c.itemsize for c in cols) + len(self.has) + 8 * len(self.src)

    # ---- Internal helpers -------------------------------------------------------------------------------
    def _walk(self, q: Seq, lo: int, n: int, split: bool, child: int) -> tuple[int, int, int, int]:
        """The longest prefix of ``q[lo:lo + n]`` (``n > 0``) in the trie, from the root's ``child`` whose edge
        begins with its first token: ``(pos, node, child, ck)``, ``node`` the deepest node whose root path it holds
        whole, ``child`` (-1 if none) the edge below it that holds the rest of the match (only when not ``split``:
        else that edge is split and ``node`` is its upper part), ``ck`` the token at ``lo + pos`` where a leaf
        would go there (no child of ``node`` begins with it; else -1).

        NOTE (speed): ``RadixTree._walk``'s way over a prompt of segments: a child key is the token's segment's
        first token where the token begins its piece, and an edge at the query's own position whose pieces' rows
        are the query's from the same start is equal without a look (``seq.lcp_at``); the child table probed
        inline."""
        nn, lo_, src, tab, mask, par, cks = self.n, self.lo, self.src, self.tab, self.mask, self.par, self.ck
        pieces = q.arr is None
        if pieces:
            qr, qb, store = q.rows, q.bounds, q.store
            first = first_tokens(store)
        node, pos, x = 0, 0, lo
        j = bisect_right(qb, x) - 1 if pieces else 0        # (the query's piece holding x)
        while True:
            e = nn[child]
            m = e if e < n - pos else n - pos
            same = lcp_at(src[child], lo_[child], q, j, x, m) if pieces else lcp(src[child], lo_[child], q, x, m)
            pos += same
            if same < e:
                if same == 0:                 # (first tokens equal: not reached)
                    return pos, node, _NIL, q.token(x)
                if not split:
                    return pos, node, child, _NIL
                return pos, self._split(child, same), _NIL, q.token(x + same) if pos < n else _NIL
            node = child
            if pos >= n:
                return pos, node, _NIL, _NIL
            x = lo + pos
            if pieces:
                j = bisect_right(qb, x) - 1
                r = qr[j]
                ck = first[r] if r >= 0 and x == qb[j] else q.token(x)
            else:
                ck = q.token(x)
            h = hash((node, ck)) & mask
            while True:
                child = tab[h]
                if child < 0:
                    return pos, node, _NIL, ck
                if par[child] == node and cks[child] == ck:
                    break
                h = (h + 1) & mask

    def _walk_rev(self, q: Seq, hi: int, n: int, split: bool, child: int) -> tuple[int, int, int, int]:
        """:meth:`_walk` of a reversed trie: ``q[hi - n:hi]`` read backwards (``pos`` tokens matched: the query's
        position is ``hi - pos``, its next token ``q[hi - pos - 1]``)."""
        nn, lo_, src = self.n, self.lo, self.src
        node, pos, x = 0, 0, hi
        while True:
            e = nn[child]
            m = e if e < n - pos else n - pos
            same = lcp_rev(src[child], lo_[child], q, x, m)
            pos += same
            if same < e:
                if same == 0:                 # (first tokens equal: not reached)
                    return pos, node, _NIL, q.token(x - 1)
                if not split:
                    return pos, node, child, _NIL
                return pos, self._split(child, same), _NIL, q.token(x - same - 1) if pos < n else _NIL
            node = child
            if pos >= n:
                return pos, node, _NIL, _NIL
            x = hi - pos
            ck = q.token(x - 1)
            child = self.find(node, ck)       # (a tail trie's walks are few: the probe not inlined as in _walk)
            if child < 0:
                return pos, node, _NIL, ck

    def _new(self) -> int:
        """A free node id (its columns those of an empty leaf). NOTE (speed): the columns grow by blocks of
        ``_BLOCK`` ids (one extend each), handed out from the free list (lowest first)."""
        free = self.free
        if not free:
            a, k = len(self.src), _BLOCK
            for col in (self.par, self.kid, self.nxt, self.prv):
                col.extend(_NILS)
            for col in (self.lo, self.n, self.ck, self.val, self.lock):
                col.extend(_ZEROS)
            self.has.extend(bytes(k))
            self.src.extend(_NONES)
            free.extend(range(a + k - 1, a - 1, -1))
        return free.pop()

    def _leaf(self, parent: int, q: Seq, lo: int, n: int, ck: int) -> int:
        """A new unlocked leaf ``q[lo:lo + n]`` (first token ``ck``) last among ``parent``'s children."""
        node = self._new()
        self.par[node], self.lo[node], self.n[node], self.ck[node], self.src[node] = parent, lo, n, ck, q
        self.lock[node] = 0
        self._append(parent, node)
        self._put(node)
        self.num_nodes += 1
        self.evictable_tokens += n
        return node

    def _split(self, child: int, at: int) -> int:
        """Cut ``child``'s edge after ``at`` tokens: a new upper node takes its place (slot and order among its
        parent's children); return it."""
        up = self._new()
        p, s, lo = self.par[child], self.src[child], self.lo[child]
        self.par[up], self.lo[up], self.n[up], self.ck[up], self.src[up] = p, lo, at, self.ck[child], s
        self.lock[up] = self.lock[child]
        self.tab[self._slot(child)] = up
        self._replace(p, child, up)
        self.kid[up] = child
        self.prv[child] = child
        self.nxt[child] = _NIL
        self.par[child] = up
        self.n[child] -= at
        if self.rev:                          # (lo: the forward end; the lower part ends at at tokens less)
            self.lo[child] = lo - at
            self.ck[child] = s.token(lo - at - 1)
        else:
            self.lo[child] = lo + at
            self.ck[child] = s.token(lo + at)
        self._put(child)
        self.num_nodes += 1
        return up

    def _remove_leaf(self, node: int) -> int:
        self._unlink(self.par[node], node)
        self._delete(node)
        k = self.n[node]
        self.evictable_tokens -= k
        self.num_nodes -= 1
        self.src[node] = None
        self.has[node] = 0
        self.val[node] = 0
        self.free.append(node)
        return k

    # children lists (a dict's order: appended last; a split's upper part in the child's place)
    def _append(self, p: int, c: int) -> None:
        kid, prv = self.kid, self.prv
        f = kid[p]
        self.nxt[c] = _NIL
        if f < 0:
            kid[p] = c
            prv[c] = c
        else:
            last = prv[f]
            self.nxt[last] = c
            prv[c] = last
            prv[f] = c

    def _unlink(self, p: int, c: int) -> None:
        kid, nxt, prv = self.kid, self.nxt, self.prv
        f, nx, pv = kid[p], nxt[c], prv[c]
        if c == f:
            kid[p] = nx
            if nx >= 0:
                prv[nx] = pv
        else:
            nxt[pv] = nx
            prv[f if nx < 0 else nx] = pv

    def _replace(self, p: int, c: int, u: int) -> None:
        kid, nxt, prv = self.kid, self.nxt, self.prv
        f, nx, pv = kid[p], nxt[c], prv[c]
        nxt[u] = nx
        if c == f:
            kid[p] = u
            prv[u] = u if pv == c else pv
        else:
            prv[u] = pv
            nxt[pv] = u
        if nx >= 0:
            prv[nx] = u
        elif c != f:
            prv[f] = u

    # the child table: node ids keyed by (parent, first token), read back from the columns
    def _slot(self, node: int) -> int:
        tab, mask = self.tab, self.mask
        i = hash((self.par[node], self.ck[node])) & mask
        while tab[i] != node:
            i = (i + 1) & mask
        return i

    def _put(self, node: int) -> None:
        if 2 * (self.used + 1) > self.mask + 1:
            self._grow()
        tab, mask = self.tab, self.mask
        i = hash((self.par[node], self.ck[node])) & mask
        while tab[i] >= 0:
            i = (i + 1) & mask
        tab[i] = node
        self.used += 1

    def _delete(self, node: int) -> None:
        tab, mask, par, ck = self.tab, self.mask, self.par, self.ck
        i = self._slot(node)
        j = i
        while True:                           # backward shift: no entry is left behind a hole on its probe path
            j = (j + 1) & mask
            d = tab[j]
            if d < 0:
                break
            h = hash((par[d], ck[d])) & mask
            if (i < j and (h <= i or h > j)) or (i > j and h <= i and h > j):
                tab[i] = d
                i = j
        tab[i] = _NIL
        self.used -= 1

    def _grow(self) -> None:
        size = 2 * (self.mask + 1)
        old = self.tab
        self.tab, self.mask = array("i", [_NIL]) * size, size - 1
        tab, mask, par, ck = self.tab, self.mask, self.par, self.ck
        for node in old:
            if node >= 0:
                i = hash((par[node], ck[node])) & mask
                while tab[i] >= 0:
                    i = (i + 1) & mask
                tab[i] = node
