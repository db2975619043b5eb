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
* chunk trie, tail trie and S1 window index over the ready chunks (:mod:`engine.policies.irminsul_index`).

Eviction takes unlocked extents, smallest key first (``lru``/``lfu``/``fifo`` of :mod:`engine.eviction`)
from a lazy heap. A chunk that lost an extent is dropped from every index; an extent no chunk uses any
more is unreachable and freed with it. The policy (:mod:`engine.policies.irminsul`) decides what to look
up, lock and add.

NOTE (speed, memory): an unbounded store is *lean* until it first has to evict or drop a chunk (a replay
never evicts there): a request's new chunks recomputed whole in a row share one extent (a *run*, each chunk a
piece of it at its offset, instead of an extent per chunk), extents keep no ``users`` set, and a split (a
lock edge) does not rewrite the pieces that name the split extent (:meth:`live` resolves them). Locks,
bytes, plans and :meth:`stored_runs` are those of the exact store (stored runs are cut at the chunk edges
inside a run, as the exact store's extents are). :meth:`_exact` turns it exact: pieces resolved to live
extents, users made, runs split at their chunks' edges (each part keeps the run's recency: an explicit
eviction of a formerly unbounded store orders by the recency of a request's run, not of each chunk).
"""

from __future__ import annotations

import heapq
import itertools
from array import array
from collections.abc import Callable, Sequence
from typing import Any

from pic.engine import cdc, eviction
from pic.engine.policies.base import PolicyStats
from pic.engine.policies.irminsul_index import ChunkIndexes
from pic.engine.policies.irminsul_prompts import PromptIndex
from pic.engine.policies.irminsul_records import LEAN, Chunk, Extent, Late, new_chunk, new_extent
from pic.engine.policies.irminsul_records import NONE as _NONE
from pic.engine.policies.irminsul_runs import RunChunks
from pic.engine.seq import Seq


class ChunkStore(RunChunks, ChunkIndexes):
    """Extents, the chunk registry over them with its trie and S1 window index, and byte accounting.

    ``key`` orders eviction (smallest first); ``s1_window`` is the S1 window size in tokens."""

    def __init__(self, key: Callable[[Any], tuple[int, ...]], s1_window: int, bytes_per_token: int,
                 tails: bool = False, min_match: int = 16, bounded: bool = True, lean: bool | None = None) -> None:
        # NOTE: among extents equally recent (or frequent), the one produced later in its prompt goes first
        # (position before creation time): the tail of a prompt before its head, so chunks lose tails
        # (cut) rather than heads (dropped with everything after them)
        def by_position(x: Extent) -> tuple[int, ...]:
            k = key(x)
            return (*k[:-1], -x.base_pos, k[-1]) if len(k) > 1 else (*k, -x.base_pos)
        # NOTE (speed): the same tuples without the generic call for the named orders (a capacity-bound replay
        # keys each extent twice: ~1 M keys on Mooncake conversation at 60 GiB)
        self.key = _BY_POSITION.get(key, by_position)
        self.s1_window, self.bpt = s1_window, bytes_per_token
        self.entries: dict[int, Chunk] = {}
        self._init_indexes(tails, min_match, keep_keys=bounded)
        self.prompts = PromptIndex(self.entries, evicts=bounded)    # committed prompts -> chunk layout
        self.evictable = self.protected = 0
        self.num_extents = 0
        # NOTE (speed): heap entries are flat, ``(*key, serial, extent)``: the same order as ``(key, serial,
        # extent)`` (every key has the same length) at one level of tuple comparison instead of two
        self._heap: list[tuple] = []
        self._seq = itertools.count()
        # NOTE (speed): an unbounded store never evicts in a replay (admit always has room), so it keeps no
        # heap: unlocked extents are only listed, and an explicit evict() builds the heap from the list then
        self._unheaped: list[Extent] | None = None if bounded else []
        self.lean = (not bounded) if lean is None else lean     # see the module's NOTE (speed, memory)
        self.prompts.lean = self.lean
        # NOTE (speed): while lean, what made the registry's chunks, in registry order: ``(run, bounds, k)`` (or the
        # :class:`~engine.policies.irminsul_records.Run`, whose ``x``, ``bounds``, ``k`` they are) for a run of chunks
        # recomputed whole (``bounds[k]`` = its start: its chunk edges are ``bounds`` from ``k`` up to its end), a
        # Chunk for every other; :meth:`stored_runs` reads the runs' stored runs from it as
        # columns (no tuple, no Python step per chunk)
        self.made: list = []
        self._admissions = 0
        # NOTE (memory): a lean store's recency per admission, not per extent (a LeanExtent keeps none: ~100 B per
        # chat request less): its time (``_born``), its extents' last access and hits (``touch_extents``), by tag;
        # an extent takes its admission's once the store turns exact (:meth:`_exact`)
        self._born, self._seen, self._hits = array("q", (0,)), array("q", (0,)), array("I", (0,))

    # ---- Public API: extents --------------------------------------------------------------------
    def new_extent(self, src: Seq, base_pos: int, size: int, now_us: int, owner: int = -1) -> Extent:
        """New KV of tokens ``[base_pos, base_pos + size)`` of prompt ``src``, produced now at ``base_pos`` by
        admission ``owner`` (:meth:`admission`): locked once (protected until its producer releases it)."""
        x = new_extent(src, base_pos, size, now_us, 1, LEAN if self.lean else set(), owner)
        self.protected += size * self.bpt
        self.num_extents += 1
        return x

    def admission(self, now_us: int = 0) -> int:
        """A new admission's tag (``owner`` of the extents and chunks it makes; unique in this store, unlike a
        request id a caller may use again), made at ``now_us``."""
        self._admissions += 1
        t = self._admissions
        if self.lean:                     # (its extents' recency, :meth:`_exact`; an admission undone: tag again)
            if t < len(self._born):
                self._born[t] = self._seen[t] = now_us
                self._hits[t] = 0
            else:
                self._born.append(now_us)
                self._seen.append(now_us)
                self._hits.append(0)
        return t

    def live(self, x: Extent, lo: int, hi: int) -> list[tuple[Extent, int, int]] | None:
        """The live extents now holding ``x``'s tokens ``[lo, hi)`` (``x`` may have been split since), as
        ``(extent, lo, hi)``; None when any of it was freed."""
        if x.parts is None:
            return [(x, lo, hi)] if x.refs >= 0 else None     # (alive)
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
            if x.refs < 0:                # (freed)
                return []
            self.lock(x)
            return [x]
        if x.parts is None:
            if x.refs < 0:                # (freed)
                return []
            parts = ((x, lo, hi),)
        else:
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
            self.evictable -= x.size * self.bpt
            self.protected += x.size * self.bpt
        x.refs += 1

    def unlock(self, x: Extent) -> None:
        """Undo one :meth:`lock` (of ``x`` or, after a split, of every part of it)."""
        self.unlock_all((x,))

    def unlock_all(self, xs: Sequence[Extent]) -> None:
        """:meth:`unlock` each of ``xs`` in order (a split extent: each of its parts)."""
        bpt = self.bpt
        if self.lean:                     # nothing is freed nor listed: :meth:`_exact` finds what is evictable
            for x in xs:
                if x.parts is not None:
                    self.unlock_all(x.parts[:2])
                    continue
                x.refs -= 1
                if not x.refs:
                    self.protected -= x.size * bpt
                    self.evictable += x.size * bpt
            return
        listed = self._unheaped
        for x in xs:
            if x.parts is not None:
                self.unlock_all(x.parts[:2])
                listed = self._unheaped
                continue
            x.refs -= 1
            if x.refs:
                continue
            self.protected -= x.size * bpt
            self.evictable += x.size * bpt
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
        heapq.heappush(self._heap, (*self.key(x), next(self._seq), x))
        if len(self._heap) > 4 * self.num_extents + 1024:     # drop stale entries, one per free extent
            live = {id(t[-1]): t for t in self._heap if _evictable(t[-1])}
            self._heap = list(live.values())
            heapq.heapify(self._heap)

    def evict(self, num_bytes: int, stats: PolicyStats) -> int:
        """Free unlocked extents, smallest key first (with the chunks that read them and whatever only
        those chunks held), until ``num_bytes`` are freed; bytes freed."""
        self._exact()
        if self._unheaped is not None:        # first eviction of an unbounded store: keep a heap from now on
            listed, self._unheaped = self._unheaped, None
            for x in {id(e): e for e in listed if _evictable(e)}.values():
                self._push(x)
        freed, heap, key, pop = 0, self._heap, self.key, heapq.heappop
        while freed < num_bytes and heap:
            t = pop(heap)
            x = t[-1]
            if not x.alive or x.refs > 0 or x.parts is not None:
                continue
            cur = key(x)
            if cur != t[:-2]:
                heapq.heappush(heap, (*cur, next(self._seq), x))
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
                 own: list[Extent], keys: tuple[int, int] | None = None) -> Chunk:
        """A new, not yet ready chunk over ``pieces`` whose tokens are ``src``'s ``[pos, pos + size)`` (``own``:
        its freshly computed extents; ``keys``: the keys of its first and last ``min_match`` tokens when the
        caller has them, :func:`engine.cdc.edge_keys`)."""
        c = new_chunk(fp, src, pos, size, pieces, owner, own, keys)
        self.entries[fp] = c
        if self.lean:
            self.made.append(c)
        else:
            for x, _, _ in pieces:
                x.users.add(fp)
        return c

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
        self._exact()
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
        c.pieces, c.size = keep, at
        if c.ready:
            self._unindex(c)          # (reads the keys of the tokens indexed so far)
        c.keys = None
        if c.ready:
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
        self._exact()
        del self.entries[c.fp]
        self._unindex(c)
        for wfp in c.windows:
            if self.windows.get(wfp, (None,))[0] == c.fp:
                del self.windows[wfp]
        for x in {id(x): x for x, _, _ in c.pieces}.values():
            x.users.discard(c.fp)
            if x.refs == 0 and x.alive:
                self._trim(x)

    def touch_extents(self, xs: Sequence[Extent], now_us: int) -> None:
        """Extents ``xs`` (repeats allowed) are accessed now, each once (a split one: each of its parts)."""
        # NOTE (speed): repeats dropped by a C-level pass (an extent hashes by identity); a split extent's parts found
        # with a stack, not parts_of's lists (~60 % of the extents a Mooncake conversation lookup reads are split)
        if self.lean:                     # (recency per admission, see __init__: an extent's, split or not, its own)
            seen, hits, na = self._seen, self._hits, len(self._born)
            for x in dict.fromkeys(xs):
                o = x.owner
                if 0 < o < na:
                    seen[o] = now_us
                    hits[o] += 1
            return
        for x in dict.fromkeys(xs):
            if x.parts is not None:
                stack = [x]
                while stack:
                    y = stack.pop()
                    if y.parts is not None:
                        stack += y.parts[:2]
                        continue
                    y.last_access_us = now_us
                    y.hits += 1
                continue
            x.last_access_us = now_us
            x.hits += 1

    # ---- Internal helpers -------------------------------------------------------------------------
    def _split(self, x: Extent, at: int) -> tuple[Extent, Extent]:
        """Cut live extent ``x`` after ``at`` tokens into two extents with its locks and recency."""
        if self.lean:                     # pieces naming x stay (live() resolves them); no users to move, no recency
            left = new_extent(x.src, x.base_pos, at, 0, x.refs, LEAN, x.owner)
            right = new_extent(x.src, x.base_pos + at, x.size - at, 0, x.refs, LEAN, x.owner)
            x.parts = (left, right, at)   # (no longer alive)
            self.num_extents += 1
            return left, right
        left = new_extent(x.src, x.base_pos, at, x.created_us, x.refs, set(), x.owner)
        right = new_extent(x.src, x.base_pos + at, x.size - at, x.created_us, x.refs, set(), x.owner)
        left.last_access_us = right.last_access_us = x.last_access_us
        left.hits = right.hits = x.hits
        x.parts = (left, right, at)       # (no longer alive)
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

    def _exact(self) -> None:
        """A lean store becomes exact (see the module's NOTE): every chunk's pieces name live extents, each
        extent knows its users, a run is split at its chunks' edges, and the unlocked extents are evictable
        (an unbounded store keeps them listed for :meth:`evict`). Each extent (a :class:`LeanExtent`) gets its
        admission's recency: its time, the last access and the hits of its admission's extents."""
        if not self.lean:
            return
        self._flush()                     # (while lean: the chunks' end nodes and head keys are not kept, found below)
        self.make_all()
        trie, rtrie, m = self.trie, self.rtrie, self.min_match
        for c in self.entries.values():
            n = c.indexed
            if n is None:
                continue
            if c.node is None:
                c.node = trie.node_of(c.src, c.fp, c.pos, c.pos + n)
            if c.rnode is None and rtrie is not None:
                c.rnode = rtrie.node_of(c.src, c.fp, c.pos, c.pos + n)
            if c.head is None and n >= m:
                c.head = cdc.fingerprint(c.part(0, m))
        self.lean, self.made = False, []
        self.prompts.lean = False         # (the layouts' chunks may be dropped or cut from now on)
        self.prompts._whole.clear()
        seen: dict[int, Extent] = {}
        born, last, hits, na = self._born, self._seen, self._hits, len(self._born)
        self._born, self._seen, self._hits = array("q"), array("q"), array("I")
        for c in self.entries.values():
            pieces = []
            for x, xo, n in c.pieces:
                if x.parts is None:
                    pieces.append([x, xo, n])
                else:
                    pieces += [[y, lo, hi - lo] for y, lo, hi in self.live(x, xo, xo + n) or ()]
            c.pieces = pieces
            for x, _, _ in pieces:
                if not isinstance(x.users, set):      # (LEAN, or a copy of it: copy.deepcopy makes one)
                    if type(x) is Extent:
                        x.users = set()
                    else:                 # (a LeanExtent: its admission's recency)
                        o = x.owner if 0 < x.owner < na else 0
                        x.users = Late(last[o], hits[o], born[o])
                    seen[id(x)] = x
                x.users.add(c.fp)
        for c in list(self.entries.values()):  # a run: an extent per chunk (the exact store's granularity)
            for x, xo, n in list(c.pieces):
                if x.owner != c.owner:
                    continue
                y, lo, _ = self.live(x, xo, xo + n)[0]
                if lo > 0:
                    self._split(y, lo)
                y, _, hi = self.live(x, xo, xo + n)[-1]     # (x may have been split: its live part)
                if hi < y.size:
                    self._split(y, hi)
        listed = [x for x in seen.values() for x in self.parts_of(x) if _evictable(x)]
        if self._unheaped is not None:
            self._unheaped += listed
        else:
            for x in listed:
                self._push(x)

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
        """Free unlocked live ``x`` (``refs`` -1: no longer alive)."""
        x.refs = -1
        self.evictable -= x.size * self.bpt
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


# ``by_position`` of :class:`ChunkStore` for the named orders of :mod:`engine.eviction`, written out
_BY_POSITION: dict[Callable[[Any], tuple[int, ...]], Callable[[Extent], tuple[int, ...]]] = {
    eviction.lru: lambda x: (x.last_access_us, -x.base_pos, x.created_us),
    eviction.lfu: lambda x: (x.hits, x.last_access_us, -x.base_pos, x.created_us),
    eviction.fifo: lambda x: (x.created_us, -x.base_pos),
}


def _evictable(x: Extent) -> bool:
    return x.refs == 0 and x.parts is None
