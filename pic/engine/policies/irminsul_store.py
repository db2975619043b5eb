"""Chunk store of the ``irminsul`` policy: KV extents, the chunk registry over them, and its indexes.

* extents: the physical KV, one per run of tokens a request recomputed inside one of its new chunks
  (its tokens by reference ``(prompt Seq, position)`` — the position the KV was produced at —, bytes,
  lock refs, recency). Bytes are counted here and
  only here: a token's KV is stored once. An extent can be split where a lock starts or ends, so a plan
  locks exactly the tokens it reuses;
* registry ``fingerprint -> Chunk``: a content-defined chunk is a list of pieces ``(extent, offset,
  length)`` — its own recomputed extents and views into the extents of the chunks it reused — so a chunk
  whose tokens were mostly reused from elsewhere indexes that existing KV under its own boundaries
  instead of storing it again;
* prompt index: a radix tree over committed prompts (references to their segments, no KV) whose nodes
  carry each prompt's chunk layout, for the exact-prefix stage;
* chunk trie: a radix tree over the ready chunks' tokens (:mod:`engine.radix`, an index only) answering
  "the longest stored chunk whose beginning equals these tokens";
* S1 window index ``window fingerprint -> (chunk fingerprint, offset)``: every ready chunk registers its
  start- and end-aligned ``s1_window``-token windows as views into its KV.

Eviction takes unlocked extents, smallest key first (``lru``/``lfu``/``fifo`` of :mod:`engine.eviction`)
from a lazy heap. A chunk that lost an extent is dropped from every index; an extent no chunk uses any
more is unreachable and freed with it. The policy (:mod:`engine.policies.irminsul`) decides what to look
up, lock and add.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pic.engine import cdc
from pic.engine.policies.base import PolicyStats
from pic.engine.policies.irminsul_prompts import PromptIndex
from pic.engine.policies.irminsul_records import NONE as _NONE
from pic.engine.policies.irminsul_records import Chunk, Extent
from pic.engine.radix import RadixNode, RadixTree
from pic.engine.seq import Seq


class ChunkStore:
    """Extents, the chunk registry over them with its trie and S1 window index, and byte accounting.

    ``key`` orders eviction (smallest first); ``s1_window`` is the S1 window size in tokens."""

    def __init__(self, key: Callable[[Any], tuple[int, ...]], s1_window: int, bytes_per_token: int,
                 tails: bool = False, min_match: int = 16, bounded: bool = True) -> None:
        # NOTE: among extents equally recent (or frequent), the one produced later in its prompt goes first
        # (position before creation time): the tail of a prompt before its head, so chunks lose tails
        # (cut) rather than heads (dropped with everything after them)
        def by_position(x: Extent) -> tuple[int, ...]:
            k = key(x)
            return (*k[:-1], -x.base_pos, k[-1]) if len(k) > 1 else (*k, -x.base_pos)
        self.key = by_position
        self.s1_window, self.bpt = s1_window, bytes_per_token
        self.entries: dict[int, Chunk] = {}
        self.windows: dict[int, tuple[int, int]] = {}       # window fp -> (chunk fp, offset)
        self.trie = RadixTree()                             # index of ready chunks' tokens
        self.rtrie = RadixTree() if tails else None         # index of ready chunks' reversed tokens
        self.prompts = PromptIndex(self.entries)            # committed prompts -> chunk layout
        # NOTE: the tries are built lazily. Indexing a chunk appends to ``_log``; the log is replayed into the
        # tries (same operations, same order, so the same trees) only when a lookup needs them: a walk whose
        # first (last) ``min_match`` tokens begin (end) some indexed chunk (``_heads``/``_tails``: how many
        # indexed chunks of >= min_match tokens begin / end with each such run), or a hit chunk that another
        # indexed chunk may extend. Without content reuse beyond the exact prefix no trie is ever built.
        self.min_match = min_match
        self._heads: dict[bytes, int] = {}
        self._tails: dict[bytes, int] = {}
        self._log: list = []        # index?, chunk, how many of its tokens; flat (no tuple per entry: fewer GC objects)
        self.evictable = self.protected = 0
        self.num_extents = 0
        self._heap: list[tuple[tuple[int, ...], int, Extent]] = []
        self._seq = itertools.count()
        # NOTE (speed): an unbounded store never evicts in a replay (admit always has room), so it keeps no
        # heap: unlocked extents are only listed, and an explicit evict() builds the heap from the list then
        self._unheaped: list[Extent] | None = None if bounded else []

    # ---- Public API: extents --------------------------------------------------------------------
    def new_extent(self, src: Seq, base_pos: int, size: int, now_us: int) -> Extent:
        """New KV of tokens ``[base_pos, base_pos + size)`` of prompt ``src``, produced now at ``base_pos``:
        locked once (protected until its producer releases it)."""
        x = Extent(src, base_pos, size, size * self.bpt, now_us)
        x.refs = 1
        self.protected += x.nbytes
        self.num_extents += 1
        return x

    def live(self, x: Extent, lo: int, hi: int) -> list[tuple[Extent, int, int]] | None:
        """The live extents now holding ``x``'s tokens ``[lo, hi)`` (``x`` may have been split since), as
        ``(extent, lo, hi)``; None when any of it was freed."""
        if x.parts is None:
            return [(x, lo, hi)] if x.alive else None
        left, right, at = x.parts
        out: list[tuple[Extent, int, int]] = []
        for y, a, b in ((left, lo, min(hi, at)), (right, max(lo, at) - at, hi - at)):
            if a < b:
                got = self.live(y, a, b)
                if got is None:
                    return None
                out += got
        return out

    def parts_of(self, x: Extent) -> list[Extent]:
        """``x`` itself, or the extents it was split into, in token order."""
        if x.parts is None:
            return [x]
        return self.parts_of(x.parts[0]) + self.parts_of(x.parts[1])

    def lock_range(self, x: Extent, lo: int, hi: int) -> list[Extent]:
        """Lock exactly tokens ``[lo, hi)`` of ``x`` (splitting it where the range starts or ends); the
        locked extents, or ``[]`` when some of the range is gone."""
        if x.parts is None and lo == 0 and hi == x.size:      # the common case: a whole, unsplit extent
            if not x.alive:
                return []
            self.lock(x)
            return [x]
        parts = self.live(x, lo, hi)
        if parts is None:
            return []
        out = []
        for e, a, b in parts:
            if a > 0:
                e = self._split(e, a)[1]
                b -= a
            if b < e.size:
                e = self._split(e, b)[0]
            self.lock(e)
            out.append(e)
        return out

    def lock(self, x: Extent) -> None:
        if x.refs == 0:
            self.evictable -= x.nbytes
            self.protected += x.nbytes
        x.refs += 1

    def unlock(self, x: Extent) -> None:
        """Undo one :meth:`lock` (of ``x`` or, after a split, of every part of it)."""
        self.unlock_all((x,))

    def unlock_all(self, xs: Sequence[Extent]) -> None:
        """:meth:`unlock` each of ``xs`` in order (a split extent: each of its parts)."""
        listed = self._unheaped
        for x in xs:
            if x.parts is not None:
                self.unlock_all(x.parts[:2])
                listed = self._unheaped
                continue
            x.refs -= 1
            if x.refs:
                continue
            self.protected -= x.nbytes
            self.evictable += x.nbytes
            if not x.users:               # nothing indexes it any more: unreachable
                self._free(x)
            elif listed is not None and len(listed) < 4 * self.num_extents + 1024:
                listed.append(x)          # (_push, inline while the list needs no compaction)
            else:
                self._push(x)
                listed = self._unheaped

    def _push(self, x: Extent) -> None:
        """``x`` became evictable: on the heap (or the list of an unbounded store)."""
        if self._unheaped is not None:
            self._unheaped.append(x)
            if len(self._unheaped) > 4 * self.num_extents + 1024:
                self._unheaped = list({id(e): e for e in self._unheaped if _evictable(e)}.values())
            return
        heapq.heappush(self._heap, (self.key(x), next(self._seq), x))
        if len(self._heap) > 4 * self.num_extents + 1024:     # drop stale entries, one per free extent
            live = {id(e): (k, s, e) for k, s, e in self._heap if _evictable(e)}
            self._heap = list(live.values())
            heapq.heapify(self._heap)

    def evict(self, num_bytes: int, stats: PolicyStats) -> int:
        """Free unlocked extents, smallest key first (with the chunks that read them and whatever only
        those chunks held), until ``num_bytes`` are freed; bytes freed."""
        if self._unheaped is not None:        # first eviction of an unbounded store: keep a heap from now on
            listed, self._unheaped = self._unheaped, None
            for x in {id(e): e for e in listed if _evictable(e)}.values():
                self._push(x)
        freed, heap = 0, self._heap
        while freed < num_bytes and heap:
            k, _, x = heapq.heappop(heap)
            if not x.alive or x.refs > 0 or x.parts is not None:
                continue
            cur = self.key(x)
            if cur != k:
                heapq.heappush(heap, (cur, next(self._seq), x))
                continue
            before = self.evictable
            stats.evictions += 1
            for fp in list(x.users):
                c = self.entries[fp]
                self.cut(c, self._offset(c, x))
            if x.alive:
                self._free(x)
            freed += before - self.evictable
        stats.evicted_bytes += freed
        return freed

    # ---- Public API: chunks -----------------------------------------------------------------------
    def register(self, fp: int, src: Seq, pos: int, size: int, pieces: list[list[Any]], owner: int,
                 own: list[Extent], keys: tuple[bytes, bytes] | None = None) -> Chunk:
        """A new, not yet ready chunk over ``pieces`` whose tokens are ``src``'s ``[pos, pos + size)`` (``own``:
        its freshly computed extents; ``keys``: the bytes of its first and last ``min_match`` tokens when the
        caller has them)."""
        c = Chunk(fp, src, pos, size, pieces, owner, own, keys)
        self.entries[fp] = c
        for x, _, _ in pieces:
            x.users.add(fp)
        return c

    def make_ready(self, chunks: list[Chunk], now_us: int, windows: bool) -> None:
        """The chunks' KV exists: index their tokens in the trie(s) (and their S1 windows when ``windows``),
        in order (:meth:`_index`, inline: one call per request)."""
        m, heads, tails = self.min_match, self._heads, self._tails
        for c in chunks:
            c.ready = True
            if windows:
                self._add_windows(c)
            c.indexed = n = c.size
            if n >= m:
                hk, tk = c.keys if c.keys is not None else _keys(c, n, m)
                c.head = hk
                heads[hk] = heads.get(hk, 0) + 1
                tails[tk] = tails.get(tk, 0) + 1
            c.keys = None
            log = self._log
            log += (True, c, n)
            if len(log) > 3 * (2 * len(self.entries) + 4096):     # bounded: replay it now and then
                self._flush()

    def pieces(self, c: Chunk, off: int, end: int) -> list[tuple[Extent, int, int, int]]:
        """``(extent, ext_lo, ext_hi, chunk_pos)`` covering the chunk's tokens ``[off, end)``."""
        out, pos = [], 0
        for x, xo, n in c.pieces:
            if pos + n > off and pos < end:
                a, b = max(off, pos), min(end, pos + n)
                out.append((x, xo + a - pos, xo + b - pos, a))
            pos += n
            if pos >= end:
                break
        return out

    def cut(self, c: Chunk, at: int) -> None:
        """Keep only the chunk's first ``at`` tokens (an extent there was evicted): a shorter index entry
        over the same KV, as a radix tree keeps a path whose leaf went; ``at == 0`` drops the chunk. A cut
        chunk no longer matches its fingerprint (lookups check the length); the prefix stage, the trie and
        its remaining S1 windows still serve its head."""
        if at <= 0:
            self.drop(c)
            return
        keep, lost, pos = [], [], 0
        for x, xo, n in c.pieces:
            if pos + n <= at:
                keep.append([x, xo, n])
            elif pos < at:
                keep.append([x, xo, at - pos])
                lost.append(x)
            else:
                lost.append(x)
            pos += n
        c.pieces, c.size, c.keys = keep, at, None
        if c.ready:
            self._unindex(c)
            self._index(c)
        w, kept = self.s1_window, []
        for wfp in c.windows:
            ref = self.windows.get(wfp)
            if ref is not None and ref[0] == c.fp:
                if ref[1] + w > at:
                    del self.windows[wfp]
                else:
                    kept.append(wfp)
        c.windows = kept if kept else _NONE
        still = {id(x) for x, _, _ in keep}
        for x in {id(x): x for x in lost}.values():
            if id(x) not in still:
                x.users.discard(c.fp)
            if x.refs == 0 and x.alive:
                self._trim(x)

    def drop(self, c: Chunk) -> None:
        """Remove a chunk from every index; free the extents nothing reads any more."""
        del self.entries[c.fp]
        self._unindex(c)
        for wfp in c.windows:
            if self.windows.get(wfp, (None,))[0] == c.fp:
                del self.windows[wfp]
        for x in {id(x): x for x, _, _ in c.pieces}.values():
            x.users.discard(c.fp)
            if x.refs == 0 and x.alive:
                self._trim(x)

    def longest(self, toks: np.ndarray, short: bool = False, head: bytes | None = None) -> tuple[int, Chunk | None]:
        """Longest leading run of ``toks`` that equals the beginning of a stored chunk (trie walk). Unless
        ``short``, a run under ``min_match`` tokens may be reported as ``(0, None)`` (the walk is skipped
        when no indexed chunk begins with the first ``min_match`` tokens; ``head``: their bytes, if known)."""
        if not short:
            m = self.min_match
            if toks.shape[0] < m or (toks[:m].tobytes() if head is None else head) not in self._heads:
                return 0, None
        self._flush()
        num, node = self.trie.match_prefix(toks, None, split=True)
        if num == 0:
            return 0, None
        stack = [node]
        while stack:                      # any live chunk at or below the match shares its tokens
            nd = stack.pop()
            if nd.value is not None:
                return num, self.entries[nd.value]
            stack.extend(reversed(list(nd.children.values())))
        return 0, None

    def longest_tail(self, toks: np.ndarray, tail: bytes | None = None) -> tuple[int, Chunk | None]:
        """Longest trailing run of ``toks`` that equals the end of a stored chunk (tail-trie walk over the
        reversed tokens); (0, None) without a tail trie, and for a run under ``min_match`` tokens (the walk
        is skipped when no indexed chunk ends with the last ``min_match`` tokens; ``tail``: their bytes, if known)."""
        m = self.min_match
        if self.rtrie is None or toks.shape[0] < m or (toks[-m:].tobytes() if tail is None else tail) not in self._tails:
            return 0, None
        self._flush()
        num, node = self.rtrie.match_prefix(np.ascontiguousarray(toks[::-1]), None, split=True)
        if num == 0:
            return 0, None
        stack = [node]
        while stack:
            nd = stack.pop()
            if nd.value is not None:
                return num, self.entries[nd.value]
            stack.extend(reversed(list(nd.children.values())))
        return 0, None

    def extendable(self, c: Chunk) -> bool:
        """Whether another indexed chunk may begin with all of ready chunk ``c``'s tokens (``c``'s end node
        in the chunk trie has children)."""
        m = self.min_match
        if c.size >= m and self._heads.get(c.head, 0) < 2:
            return False                      # c is the only indexed chunk beginning with its first m tokens
        self._flush()
        return c.node is not None and bool(c.node.children)

    def window(self, toks: np.ndarray) -> tuple[Chunk, int] | None:
        """The ready chunk and offset holding the S1 window ``toks`` (by fingerprint), if any."""
        ref = self.windows.get(cdc.fingerprint(toks))
        c = self.entries.get(ref[0]) if ref is not None else None
        if c is None or not c.ready:
            return None
        return c, ref[1]

    def stored_runs(self) -> list[tuple[Seq, int, int, int]]:
        """Every live extent (what is physically stored) by reference, ``(src, lo, hi, 0)``, in registry
        order."""
        seen = dict.fromkeys([p[0] for c in self.entries.values() for p in c.pieces])    # (by identity)
        return [(x.src, x.base_pos, x.base_pos + x.size, 0) for x in seen]

    # ---- Internal helpers -------------------------------------------------------------------------
    def _split(self, x: Extent, at: int) -> tuple[Extent, Extent]:
        """Cut live extent ``x`` after ``at`` tokens into two extents with its locks and recency."""
        left = Extent(x.src, x.base_pos, at, at * self.bpt, x.created_us)
        right = Extent(x.src, x.base_pos + at, x.size - at, x.nbytes - at * self.bpt, x.created_us)
        for y in (left, right):
            y.refs, y.last_access_us, y.hits = x.refs, x.last_access_us, x.hits
        x.alive, x.parts = False, (left, right, at)
        self.num_extents += 1
        for fp in x.users:
            c = self.entries[fp]
            pieces = []
            for e, eo, n in c.pieces:
                if e is not x:
                    pieces.append([e, eo, n])
                    continue
                if eo < at:
                    k = min(n, at - eo)
                    pieces.append([left, eo, k])
                    left.users.add(fp)
                    eo, n = at, n - k
                if n > 0:
                    pieces.append([right, eo - at, n])
                    right.users.add(fp)
            c.pieces = pieces
            if c.own:
                c.own = [y for e in c.own for y in ((left, right) if e is x else (e,))]
        if x.refs == 0:
            for y in (left, right):
                if y.users:
                    self._push(y)
                else:
                    self._free(y)
        return left, right

    def _index(self, c: Chunk) -> None:
        """Put a ready chunk's tokens in the trie (and reversed in the tail trie), each end node locked
        and naming it; a path another chunk already names (same tokens) stays that chunk's. Logged now,
        done in :meth:`_flush`."""
        c.indexed = n = c.size
        if n >= self.min_match:
            hk, tk = c.keys if c.keys is not None else _keys(c, n, self.min_match)
            c.head = hk
            for d, k in ((self._heads, hk), (self._tails, tk)):
                d[k] = d.get(k, 0) + 1
        c.keys = None
        self._log += (True, c, n)
        if len(self._log) > 3 * (2 * len(self.entries) + 4096):     # bounded: replay it now and then
            self._flush()

    def _unindex(self, c: Chunk) -> None:
        n = c.indexed
        if n is None:
            return
        c.indexed = None
        if n >= self.min_match:
            for d, k in ((self._heads, c.head), (self._tails, c.part(n - self.min_match, n).tobytes())):
                if d[k] == 1:
                    del d[k]
                else:
                    d[k] -= 1
        self._log += (False, c, n)

    def _flush(self) -> None:
        """Replay the logged index operations into the tries, in order."""
        log, self._log = self._log, []
        for i in range(0, len(log), 3):
            add, c, n = log[i], log[i + 1], log[i + 2]
            if add:
                t = c.part(0, n)
                c.node = _claim(self.trie, t, c.fp)
                if self.rtrie is not None:
                    c.rnode = _claim(self.rtrie, np.ascontiguousarray(t[::-1]), c.fp)
                continue
            for tree, attr in ((self.trie, "node"), (self.rtrie, "rnode")):
                node = getattr(c, attr)
                if node is None:
                    continue
                if node.value == c.fp:
                    node.value = None
                tree.dec_lock(node)
                tree.evict(tree.evictable_tokens)
                setattr(c, attr, None)

    def _trim(self, x: Extent) -> None:
        """Free the parts of unlocked ``x`` that no chunk reads any more (all of it when none does)."""
        if not x.users:
            self._free(x)
            return
        cover = sorted((eo, eo + n) for fp in x.users for e, eo, n in self.entries[fp].pieces if e is x)
        cuts, end = set(), 0
        for a, b in cover:
            if a > end:
                cuts.update((end, a))
            end = max(end, b)
        if end < x.size:
            cuts.add(end)
        cuts.discard(0)
        for at in sorted(cuts, reverse=True):          # _split frees a part that has no user
            x = self._split(x, at)[0]

    def _free(self, x: Extent) -> None:
        x.alive = False
        self.evictable -= x.nbytes
        self.num_extents -= 1

    @staticmethod
    def _offset(c: Chunk, x: Extent) -> int:
        """Chunk position of the first piece of ``c`` that reads ``x``."""
        pos = 0
        for e, _, n in c.pieces:
            if e is x:
                return pos
            pos += n
        return pos

    def _add_windows(self, c: Chunk) -> None:
        w, n, toks = self.s1_window, c.size, c.tokens
        if c.windows is _NONE:
            c.windows = []
        offs = set(range(0, n - w + 1, w)) | set(range(n - w, -1, -w))
        for off in sorted(offs):
            wfp = cdc.fingerprint(toks[off:off + w])
            if wfp not in self.windows:
                self.windows[wfp] = (c.fp, off)
                c.windows.append(wfp)


def _claim(tree: RadixTree, toks: np.ndarray, fp: int) -> RadixNode | None:
    """Insert ``toks`` and lock its end node for chunk ``fp`` (None when another chunk holds it)."""
    _, node = tree.insert(toks, 0)
    if node.value is not None and node.value != fp:
        return None
    node.value = fp
    tree.inc_lock(node)
    return node


def _keys(c: Chunk, n: int, m: int) -> tuple[bytes, bytes]:
    """Bytes of the first and last ``m`` of chunk ``c``'s first ``n`` tokens (``c.head`` once known)."""
    return c.head if c.head is not None else c.part(0, m).tobytes(), c.part(n - m, n).tobytes()


def _evictable(x: Extent) -> bool:
    return x.alive and x.refs == 0 and x.parts is None
