"""Token radix tree with lock refs, evictable/protected accounting and key-ordered leaf eviction.

The exact-prefix store behind the ``prefix`` policy (SGLang RadixAttention) and the first stage of
``irminsul``/``fixed-chunk``/``oracle``. Edges are references ``(Seq, offset, length)`` into the prompt that
inserted them (:mod:`engine.seq`), never token copies; children are keyed by their first page of tokens (``int``
first token when ``page_size == 1``, the page's bytes otherwise). An edge is compared piece by piece: pieces of
the same trace segment at the same offset are equal without reading a token, different pieces are compared with
numpy (first mismatch found vectorized), so work per call is O(nodes + segments on the path), not O(tokens) in
Python. ``tokens`` arguments may be an int32 array, a :class:`~engine.seq.Seq` or anything with a ``seq``
attribute (a ``RequestView``).

API (all counts in tokens, all times integer microseconds)::

    tree = RadixTree(page_size=1, key=engine.eviction.lru)
    num, node = tree.match_prefix(tokens, now_us)     # longest resident prefix, page-rounded
    num_new, leaf = tree.insert(tokens, now_us)        # insert whole pages; returns tokens added
    tree.insert(tokens, now_us, lo, hi)                # tokens[lo:hi] (match_prefix takes lo=, hi= too)
    tree.inc_lock(node); tree.dec_lock(node)           # protect / unprotect node and its ancestors
    freed = tree.evict(num_tokens)                     # evict unlocked leaves, smallest key first
    tree.evictable_tokens, tree.protected_tokens, tree.total_tokens

Semantics:

* ``match_prefix(tokens, now_us=None, split=True)``: returns ``(num, node)`` where ``num`` is the length
  of the longest resident prefix of ``tokens`` rounded down to whole pages. With ``split=True`` the
  tree is split so that ``node``'s root path is exactly ``tokens[:num]`` (lockable handle); with
  ``split=False`` nothing changes shape and ``node`` is the deepest node fully inside the match.
  When ``now_us`` is given, every node on the matched path is touched (``last_access_us = now_us``,
  and ``hits += 1`` unless ``count_hit=False``): the recency/frequency bookkeeping eviction keys
  read. ``insert`` touches recency only.
* ``insert`` stores ``tokens[: len // page_size * page_size]`` (the partial tail page is not cached).
* A node with ``lock_ref > 0`` and all its ancestors are protected; everything else is evictable.
  ``evictable_tokens + protected_tokens == total_tokens`` always holds.
* ``evict`` removes whole unlocked leaves (a parent becomes a leaf when its last child goes), in
  increasing ``key(node)`` order. ``key`` maps a node (``last_access_us``, ``hits``, ``created_us``)
  to a sortable tuple (:mod:`engine.eviction`); keys must not decrease while a node lives (true of
  lru/lfu/fifo), which lets the heap be lazy: an entry whose key went stale is re-pushed on pop.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

import numpy as np

from pic.engine.eviction import lru
from pic.engine.radix_leaf import _LEAF
from pic.engine.seq import Seq, first_tokens, lcp, lcp_at

_EMPTY = np.zeros(0, np.int32)
_EMPTY_SEQ = Seq.of_array(_EMPTY)


def as_seq(tokens: Any) -> Seq:
    """A :class:`Seq` for an int32 array, a Seq, or an object with a ``seq`` attribute."""
    if isinstance(tokens, Seq):
        return tokens
    if isinstance(tokens, np.ndarray):
        return Seq.of_array(tokens)
    return tokens.seq


class RadixNode:
    """One edge of the tree: tokens ``[lo, lo + n)`` of ``src`` below ``parent`` (``key`` materializes
    them). ``ckey`` is its key in the parent's ``children`` (a leaf's: the shared empty :data:`_LEAF`, read
    only). ``value`` is free for callers' payload."""

    __slots__ = ("src", "lo", "n", "ckey", "children", "parent", "lock_ref", "last_access_us", "hits",
                 "created_us", "is_alive", "value")

    def __init__(self, src: Seq, lo: int, n: int, ckey: Any, parent: RadixNode | None, now_us: int) -> None:
        self.src, self.lo, self.n, self.ckey = src, lo, n, ckey
        self.children: dict[Any, RadixNode] = _LEAF
        self.parent = parent
        self.lock_ref = 0
        self.last_access_us = now_us
        self.hits = 0
        self.created_us = now_us
        self.is_alive = True
        self.value: Any = None

    @property
    def num_tokens(self) -> int:
        return self.n

    @property
    def key(self) -> np.ndarray:
        """int32 [n]: the edge's tokens (materialized on each call; debugging and tests)."""
        return self.src.tokens(self.lo, self.lo + self.n) if self.n else _EMPTY


class RadixTree:
    """Token radix tree; see the module docstring for the full contract."""

    def __init__(self, page_size: int = 1, key: Callable[[Any], tuple[int, ...]] = lru, evicts: bool = True) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.page_size = page_size
        self.key = key
        # False: no eviction heap is kept while nothing is evicted (~170 B per leaf; an unbounded cache),
        # made from the unlocked leaves on the first evict / peek_key
        self.evicts = evicts
        self.root = RadixNode(_EMPTY_SEQ, 0, 0, None, None, 0)
        self.root.lock_ref = 1  # never evicted, never counted
        self.evictable_tokens = 0
        self.protected_tokens = 0
        self.num_nodes = 0
        self.num_evicted = 0          # nodes evicted so far
        self._heap: list[tuple[tuple[int, ...], int, RadixNode]] = []
        self._seq = itertools.count()
        self._version = 0          # bumped on every change of shape (insert, split, removal)
        # the last split=False walk from the root: (seq, now, version, pos, node, child, same, its n): it matched
        # seq[:pos], down to node, then `same` (< child.n) tokens of child's edge (child None: a walk on from node
        # stops at once). Kept true across lock_point's splits (_memo_split)
        self._memo: tuple | None = None
        self._miss: tuple = (None, -1, None)   # last walk that found no child: (seq, position, child key)

    # ---- Public API -------------------------------------------------------------------------------
    @property
    def total_tokens(self) -> int:
        return self.evictable_tokens + self.protected_tokens

    def match_prefix(self, tokens: Any, now_us: int | None = None, split: bool = True,
                     count_hit: bool = True, lo: int = 0, hi: int | None = None) -> tuple[int, RadixNode]:
        """Longest resident prefix of ``tokens[lo:hi]`` (page-rounded) and its node; see module docstring."""
        q = as_seq(tokens)
        p = self.page_size
        return self._walk(q, lo, ((q.end if hi is None else hi) - lo) // p * p, self.root, 0, now_us, split, count_hit)

    def _walk(self, q: Seq, lo: int, n: int, node: RadixNode, pos: int, now_us: int | None, split: bool,
              count_hit: bool) -> tuple[int, RadixNode]:
        """:meth:`match_prefix` of ``q[lo:lo + n]`` (``n`` whole pages) from ``node``, whose root path is
        ``q[lo:lo + pos]``."""
        p = self.page_size
        # NOTE (speed): a prompt of segments, pages of one token (every exact-prefix tree): its piece at each
        # step found once, for the child key (_child_key: the piece's first token, most often) and for lcp's
        # first check (seq.lcp_at: an edge at the query's own position whose pieces' rows are the query's from
        # the same start is equal without a look)
        pieces = p == 1 and q.arr is None
        if pieces:
            qr, qb, store = q.rows, q.bounds, q.store
            first = first_tokens(store)
        while pos < n:
            x = lo + pos
            if pieces:
                j = bisect_right(qb, x) - 1
                ck = first[qr[j]] if x == qb[j] else q.token(x)     # (q.arr is None: every piece a segment row)
            else:
                ck = self._child_key(q, x)
            child = node.children.get(ck)
            if child is None:
                self._miss = (q, x, ck)
                break
            m = child.n
            if n - pos < m:
                m = n - pos
            same = lcp_at(child.src, child.lo, q, j, x, m) if pieces else lcp(child.src, child.lo, q, x, m)
            if same < m:
                same = same // p * p
            if same == 0:
                break
            if now_us is not None:
                child.last_access_us = now_us
                child.hits += count_hit
            pos += same
            if same < child.n:
                if split:
                    node = self._split(child, same)
                else:
                    self._memo = (q, now_us, self._version, pos, node, child, same, n) if not lo else None
                    return pos, node
                break
            node = child
        if not split:
            self._memo = (q, now_us, self._version, pos, node, None, 0, n) if not lo else None
        return pos, node

    def lock_point(self, tokens: Any, num: int, now_us: int | None = None) -> tuple[int, RadixNode]:
        """``match_prefix(tokens[:num], now_us, split=True, count_hit=False)``: the node whose root path is
        exactly the resident prefix of ``tokens[:num]``. NOTE: right after a ``split=False`` walk of the
        same ``tokens`` at the same ``now_us`` that found ``num`` (lookup, then admit), with the tree
        unchanged since, it splits where that walk stopped instead of walking again."""
        q = as_seq(tokens)
        m = self._memo
        if m is not None and m[0] is q and m[1] == now_us and m[2] == self._version and m[3] == num:
            return num, (m[4] if m[5] is None else self._memo_split(m[5], m[6]))
        return self.match_prefix(q.prefix(num), now_us, split=True, count_hit=False)

    def match_lock(self, q: Seq, now_us: int | None, hi: int | None = None) -> tuple[int, RadixNode]:
        """``num, _ = match_prefix(q[:hi], now_us, split=False)``, then ``lock_point(q, num, now_us)`` and ``inc_lock``
        of its node, returned with ``num`` (the same tree, touches, memo and counts). NOTE (speed): an exact-prefix
        policy's lookup and admit of its whole match (``start_prefix``) in one call, walking once."""
        pos, node = self._walk(q, 0, (q.end if hi is None else hi) // self.page_size * self.page_size, self.root, 0,
                               now_us, False, True)
        child = self._memo[5]
        if child is not None:
            node = self._memo_split(child, self._memo[6])
        self._lock_up(node, self.root)
        return pos, node

    def insert_move(self, q: Seq, now_us: int, num: int, node: RadixNode, hi: int | None = None) -> tuple[int, RadixNode]:
        """:meth:`insert_below` ``(q, now_us, num, node, hi)``, then ``move_lock(leaf, node)`` of the leaf it gives
        (a commit's insert and the move of its admit's lock, in one call): its answer."""
        if node.lock_ref <= 0:
            raise ValueError("move_lock from an unlocked node")
        got = self.insert_below(q, now_us, num, node, hi)
        self._lock_up(got[1], node)
        return got

    def insert(self, tokens: Any, now_us: int, lo: int = 0, hi: int | None = None) -> tuple[int, RadixNode]:
        """Insert the whole pages of ``tokens[lo:hi]``; return (tokens newly stored, node ending the path).
        New edges refer to ``tokens`` itself (a run inside a prompt costs no Seq of its own)."""
        q = as_seq(tokens)
        p = self.page_size
        n = ((q.end if hi is None else hi) - lo) // p * p
        pos, node = self.match_prefix(q, now_us, split=True, count_hit=False, lo=lo, hi=lo + n)
        return self._leaf_after(q, lo, n, pos, node, now_us)

    def insert_below(self, tokens: Any, now_us: int, num: int, node: RadixNode,
                     hi: int | None = None) -> tuple[int, RadixNode]:
        """:meth:`insert` of ``tokens[:hi]`` where ``node``'s root path is ``tokens[:num]`` (whole pages): a
        node locked since a walk found it (a lock keeps it and its path; a split above it keeps its root
        path). The same tree, access times and result as :meth:`insert`, walking only below ``node`` (the path
        above it is touched, as the walk would). NOTE (speed): a policy's commit after its admit's lock
        (``prefix``: the resident prefix of a continued conversation is most of its prompt)."""
        q = as_seq(tokens)
        n = (q.end if hi is None else hi) // self.page_size * self.page_size
        m = self._memo
        if m is not None and m[0] is q and m[2] == self._version and m[7] == n and num <= m[3] - m[6]:
            # NOTE (speed): the tree is unchanged since a walk of ``tokens`` found where this one stops (a commit
            # after its lookup and admit; ``node`` is on its path): the same touches, split and leaf, no compare
            child = m[5]
            if child is None:
                self._touch_path(m[4], now_us)
                return self._leaf_after(q, 0, n, m[3], m[4], now_us)
            self._touch_path(child, now_us)
            return self._leaf_after(q, 0, n, m[3], self._split(child, m[6]), now_us)
        self._touch_path(node, now_us)
        pos, node = self._walk(q, 0, n, node, num, now_us, True, False)
        return self._leaf_after(q, 0, n, pos, node, now_us)

    def insert_walked(self, tokens: Any, now_us: int, pos: int, node: RadixNode) -> tuple[int, RadixNode]:
        """:meth:`insert` of all of ``tokens`` right after ``match_prefix(tokens, None, split=True)`` found
        ``(pos, node)``, with the tree unchanged since (the caller compares :attr:`version`): the same tree,
        access times and result, without walking the path again (its nodes are touched, as the walk would)."""
        q = as_seq(tokens)
        self._touch_path(node, now_us)
        return self._leaf_after(q, 0, q.end // self.page_size * self.page_size, pos, node, now_us)

    @property
    def version(self) -> int:
        """Bumped on every change of shape (insert, split, removal)."""
        return self._version

    def _touch_path(self, node: RadixNode, now_us: int) -> None:
        """``last_access_us = now_us`` on ``node`` and its ancestors (what a walk from the root to it does)."""
        while node is not self.root:
            node.last_access_us = now_us
            node = node.parent

    def _leaf_after(self, q: Seq, lo: int, n: int, pos: int, node: RadixNode, now_us: int) -> tuple[int, RadixNode]:
        """The rest of :meth:`insert` once its walk found ``(pos, node)``."""
        if pos >= n:
            return 0, node
        # NOTE (speed): the walk that just stopped here derived this child key (an opaque token: a hash mix)
        miss = self._miss
        ckey = miss[2] if miss[0] is q and miss[1] == lo + pos else self._child_key(q, lo + pos)
        leaf = RadixNode(q, lo + pos, n - pos, ckey, node, now_us)
        if node.children is _LEAF:
            node.children = {ckey: leaf}
        else:
            node.children[ckey] = leaf
        self._version += 1
        self.num_nodes += 1
        num_new = n - pos
        self.evictable_tokens += num_new
        if self.evicts:
            self._push(leaf)
        return num_new, leaf

    def new_leaf(self, parent: RadixNode, src: Seq, lo: int, n: int, ckey: Any, value: Any) -> RadixNode:
        """``insert`` of ``src[lo:lo + n]`` at ``now_us`` 0 where its walk ends at ``parent`` with no child under
        ``ckey`` (the key of its first page, given), then ``inc_lock`` of the new leaf, whose ``value`` it sets
        (a chunk index's fast path: the caller knows the walk would stop there)."""
        leaf = RadixNode(src, lo, n, ckey, parent, 0)
        if parent.children is _LEAF:
            parent.children = {ckey: leaf}
        else:
            parent.children[ckey] = leaf
        self._version += 1
        self.num_nodes += 1
        self.evictable_tokens += n
        self._push(leaf)
        leaf.value = value
        self.inc_lock(leaf)
        return leaf

    def inc_lock(self, node: RadixNode) -> None:
        """Protect ``node`` and its ancestors from eviction (reference counted)."""
        self._lock_up(node, self.root)

    def move_lock(self, node: RadixNode, above: RadixNode) -> None:
        """``inc_lock(node); dec_lock(above)``, ``above`` (locked) ``node`` or an ancestor: one walk up to it."""
        if above.lock_ref <= 0:
            raise ValueError("move_lock from an unlocked node")
        self._lock_up(node, above)

    def _lock_up(self, node: RadixNode, above: RadixNode) -> None:
        """One more lock on ``node`` and its ancestors below ``above`` (the counts moved once, at the end)."""
        k = 0
        while node is not above:
            r = node.lock_ref
            if r == 0:
                k += node.n
            node.lock_ref = r + 1
            node = node.parent
        self.evictable_tokens -= k
        self.protected_tokens += k

    def dec_lock(self, node: RadixNode) -> None:
        """Undo one :meth:`inc_lock` of ``node``."""
        first, root, k = node, self.root, 0
        while node is not root:
            r = node.lock_ref
            if r <= 0:      # (the tree is then broken: the counts moved so far are not applied)
                raise ValueError("dec_lock on an unlocked node")
            node.lock_ref = r - 1
            if r == 1:
                k += node.n
            node = node.parent
        self.evictable_tokens += k
        self.protected_tokens -= k
        if self.evicts and first is not root and first.lock_ref == 0 and not first.children:
            self._push(first)

    def evict(self, num_tokens: int) -> int:
        """Evict unlocked leaves in key order until ``num_tokens`` are freed or none is left."""
        if not self.evicts:
            self._start_evicting()
        freed = 0
        heap = self._heap
        while freed < num_tokens and heap:
            k, _, node = heapq.heappop(heap)
            if not node.is_alive or node.lock_ref > 0 or node.children:
                continue
            cur = self.key(node)
            if cur != k:
                heapq.heappush(heap, (cur, next(self._seq), node))
                continue
            freed += self._remove_leaf(node)
        return freed

    def prune(self, node: RadixNode) -> int:
        """Remove ``node`` if it is an unlocked leaf, then each ancestor that becomes one; tokens freed. The
        same removals as ``evict(evictable_tokens)`` when these are the tree's only unlocked leaves (true of a
        tree whose every path is locked until it is released and pruned), without an eviction heap."""
        freed = 0
        while node is not self.root and node.is_alive and node.lock_ref == 0 and not node.children:
            parent = node.parent
            freed += self._remove_leaf(node)
            node = parent
        return freed

    def peek_key(self) -> tuple[int, ...] | None:
        """Key of the leaf :meth:`evict` would remove next (None when nothing is evictable); drops
        stale heap entries on the way. Lets a policy merge this tree's eviction order with another
        store's."""
        if not self.evicts:
            self._start_evicting()
        heap = self._heap
        while heap:
            k, _, node = heap[0]
            if not node.is_alive or node.lock_ref > 0 or node.children:
                heapq.heappop(heap)
                continue
            cur = self.key(node)
            if cur != k:
                heapq.heapreplace(heap, (cur, next(self._seq), node))
                continue
            return k
        return None

    def run_refs(self, context: int = 63) -> list[tuple[Seq, int, int, int]]:
        """Every node's edge with its parent path's last <= ``context`` tokens, parents first (for content
        statistics over what the tree stores), by reference: ``(src, lo, hi, c)``, tokens ``[lo, hi)`` of
        ``src`` whose first ``c`` are context (an edge's source prompt holds its whole root path before it:
        true of a tree whose inserts all start at 0, the exact-prefix stores this is called on)."""
        out: list[tuple[Seq, int, int, int]] = []
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            c = min(node.lo, context)
            out.append((node.src, node.lo - c, node.lo + node.n, c))
            stack.extend(node.children.values())
        return out

    def tokens_of(self, node: RadixNode) -> np.ndarray:
        """The full root-path token sequence ending at ``node`` (tests, debugging)."""
        parts = []
        while node is not None and node is not self.root:
            parts.append(node.key)
            node = node.parent
        return np.concatenate(parts[::-1]) if parts else _EMPTY

    # ---- Internal helpers -------------------------------------------------------------------------
    def _child_key(self, q: Seq, pos: int) -> Any:
        if self.page_size == 1:
            return q.token(pos)
        return q.tokens(pos, pos + self.page_size).tobytes()

    def _split(self, child: RadixNode, at: int) -> RadixNode:
        """Cut ``child``'s edge after ``at`` tokens; return the new upper node."""
        parent = child.parent
        self._version += 1
        upper = RadixNode(child.src, child.lo, at, child.ckey, parent, child.created_us)
        upper.lock_ref = child.lock_ref
        upper.last_access_us = child.last_access_us
        upper.hits = child.hits
        parent.children[child.ckey] = upper
        child.lo += at
        child.n -= at
        child.ckey = self._child_key(child.src, child.lo)
        child.parent = upper
        upper.children = {child.ckey: child}
        self.num_nodes += 1
        return upper

    def _memo_split(self, node: RadixNode, at: int) -> RadixNode:
        """:meth:`_split` of an edge on the path of the last split=False walk, or of its child at ``at <= same``:
        the memo stays true of the tree."""
        upper = self._split(node, at)
        m = self._memo
        if m is not None and m[2] == self._version - 1:      # (the child split: its upper part is the walk's node)
            self._memo = (*m[:2], self._version, *m[3:]) if node is not m[5] else \
                (*m[:2], self._version, m[3], upper, node if at < m[6] else None, m[6] - at, m[7])
        return upper

    def _push(self, node: RadixNode) -> None:
        if not self.evicts:
            return
        heapq.heappush(self._heap, (self.key(node), next(self._seq), node))
        if len(self._heap) > 4 * self.num_nodes + 1024:
            self._compact()

    def _start_evicting(self) -> None:
        """Keep the eviction heap from now on, starting with every unlocked leaf (ties in key then go
        in tree order, not in the order the leaves were made)."""
        self.evicts = True
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            elif node is not self.root and node.lock_ref == 0:
                self._push(node)

    def _remove_leaf(self, node: RadixNode) -> int:
        parent = node.parent
        kids = parent.children
        del kids[node.ckey]
        if not kids:
            parent.children = _LEAF
        self._version += 1
        node.is_alive = False
        k = node.n
        self.evictable_tokens -= k
        self.num_nodes -= 1
        self.num_evicted += 1
        if parent is not self.root and parent.lock_ref == 0 and not parent.children:
            self._push(parent)
        return k

    def _compact(self) -> None:
        seen: set[int] = set()
        keep = []
        for k, s, node in self._heap:
            if node.is_alive and node.lock_ref == 0 and not node.children and id(node) not in seen:
                seen.add(id(node))
                keep.append((k, s, node))
        heapq.heapify(keep)
        self._heap = keep
