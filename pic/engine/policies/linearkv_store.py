"""Chunk registry of the ``linearkv`` policy: whole chunks, each with its KV and its recurrent state(s).

``fingerprint -> Entry`` (size, where its tokens are, base position, resident bytes = KV + zero-start end
state [+ transition operator], lock refs, recency), evictable/protected byte accounting, and eviction of
unlocked entries in key order (:mod:`engine.eviction`) through a lazy heap (kept only once the store may
evict: an unbounded store never does). Unlike irminsul's extent store, a chunk here is
stored and dropped whole: a recurrent state exists only at a chunk's end, so part of a chunk is of no use.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from pic.engine.policies.base import PolicyStats


class Entry:
    """One resident chunk (``ready`` once the producing request's prefill committed): ``size`` tokens at
    ``base_pos`` of ``src``, the producing prompt (:class:`engine.seq.Seq`, by reference: read only to
    verify a hit).

    NOTE (speed, memory): no token copy per chunk (Mooncake conversation makes ~370 k chunks)."""

    __slots__ = ("fp", "src", "size", "base_pos", "nbytes", "refs", "last_access_us", "hits", "created_us", "ready")

    def __init__(self, fp: int, src: Any, size: int, base_pos: int, nbytes: int, now: int) -> None:
        self.fp, self.src, self.size, self.base_pos, self.nbytes = fp, src, size, base_pos, nbytes
        self.refs, self.last_access_us, self.hits, self.created_us, self.ready = 0, now, 0, now, False

    @property
    def tokens(self) -> np.ndarray:
        return self.src.tokens(self.base_pos, self.base_pos + self.size)


class Store:
    """Entries by fingerprint with byte accounting; ``key`` orders eviction (smallest first)."""

    def __init__(self, key: Callable[[Any], tuple[int, ...]], evicts: bool = True) -> None:
        self.key = key
        self.entries: dict[int, Entry] = {}
        self.evictable = self.protected = 0
        self.evicts = evicts        # False: no eviction heap until the first peek/evict (then built)
        self.num_removed = 0        # entries removed so far (evicted or dropped): none, every entry added is here
        self._heap: list[tuple[tuple[int, ...], int, int]] = []
        self._seq = itertools.count()

    def add(self, fp: int, src: Any, size: int, base_pos: int, nbytes: int, now_us: int) -> Entry:
        """A new, not yet ready entry, locked once (protected until its producer releases it)."""
        e = Entry(fp, src, size, base_pos, nbytes, now_us)
        self.entries[fp] = e
        e.refs = 1
        self.protected += nbytes
        return e

    def add_new(self, new: dict[int, tuple[int, int]], src: Any, bpt: int, per: int, now_us: int,
                cold: frozenset[int]) -> None:
        """:meth:`add` of every chunk ``fp -> [a, b)`` of ``new`` (in order; ``(b - a) * bpt + per`` bytes each,
        base position ``a``), those in ``cold`` first in eviction order (recency -1). NOTE (speed): one call per
        request, not one per chunk (Mooncake conversation: ~370 k chunks)."""
        entries, total = self.entries, 0
        for fp, (a, b) in new.items():
            nbytes = (b - a) * bpt + per
            e = entries[fp] = Entry(fp, src, b - a, a, nbytes, now_us)
            e.refs = 1
            total += nbytes
            if fp in cold:
                e.last_access_us = e.created_us = -1
        self.protected += total

    def unlock_all(self, fps: list[int]) -> None:
        """:meth:`unlock` the resident entries of ``fps`` (in order; missing ones skipped), dropping each that
        ends unlocked before it was ever ready (its KV never materialized). NOTE (speed): without an eviction
        heap (an unbounded store), inlined: one call per request."""
        entries = self.entries
        if self.evicts:
            for fp in fps:
                e = entries.get(fp)
                if e is None:
                    continue
                self.unlock(e)
                if e.refs == 0 and not e.ready:
                    self.drop(e)
            return
        freed = dropped = 0
        for e in map(entries.get, fps):       # (lazily: an entry dropped here is missing for a later fp)
            if e is None:
                continue
            e.refs -= 1
            if e.refs:
                continue
            freed += e.nbytes
            if not e.ready:
                del entries[e.fp]
                dropped += e.nbytes
                self.num_removed += 1
        self.protected -= freed
        self.evictable += freed - dropped

    def lock(self, e: Entry) -> None:
        if e.refs == 0:
            self.evictable -= e.nbytes
            self.protected += e.nbytes
        e.refs += 1

    def unlock(self, e: Entry) -> None:
        e.refs -= 1
        if e.refs:
            return
        self.protected -= e.nbytes
        self.evictable += e.nbytes
        if not self.evicts:
            return
        heapq.heappush(self._heap, (self.key(e), next(self._seq), e.fp))
        if len(self._heap) > 4 * len(self.entries) + 1024:   # drop stale heap items now and then
            self._rebuild_heap()

    def evict(self, num_bytes: int, stats: PolicyStats) -> int:
        """Drop unlocked entries, smallest key first, until ``num_bytes`` are freed; bytes freed."""
        freed = 0
        while freed < num_bytes and self.peek() is not None:
            freed += self.evict_next(stats)
        return freed

    def peek(self) -> tuple[int, ...] | None:
        """Key of the entry :meth:`evict_next` would drop (None: nothing unlocked); drops stale heap items on
        the way. Lets the policy merge this store's eviction order with its prefix stage's."""
        if not self.evicts:
            self.evicts = True
            self._rebuild_heap()
        heap = self._heap
        while heap:
            k, _, fp = heap[0]
            e = self.entries.get(fp)
            if e is None or e.refs > 0:
                heapq.heappop(heap)
                continue
            cur = self.key(e)
            if cur != k:                  # touched since it was pushed: re-queue at its current key
                heapq.heapreplace(heap, (cur, next(self._seq), fp))
                continue
            return k
        return None

    def evict_next(self, stats: PolicyStats) -> int:
        """Drop the entry :meth:`peek` names (call it first); bytes freed."""
        e = self.entries[heapq.heappop(self._heap)[2]]
        stats.evictions += 1
        stats.evicted_bytes += e.nbytes
        self.drop(e)
        return e.nbytes

    def drop(self, e: Entry) -> None:
        """Remove an unlocked entry."""
        del self.entries[e.fp]
        self.num_removed += 1
        self.evictable -= e.nbytes

    def _rebuild_heap(self) -> None:
        """The heap made afresh from the unlocked entries (stale items dropped; or the first one)."""
        self._heap = [(self.key(x), next(self._seq), x.fp) for x in self.entries.values() if x.refs == 0]
        heapq.heapify(self._heap)
