"""Chunk store of the ``irminsul`` policy: the registry of resident chunks and its two indexes.

* registry ``fingerprint -> Entry`` (tokens, length, base position, owner request, resident bytes,
  lock refs, recency), with evictable/protected byte accounting and key-ordered eviction of unlocked
  entries (``lru``/``lfu``/... from :mod:`engine.eviction`) through a lazy heap;
* prompt index: a radix tree over committed prompts (tokens only, no KV) whose nodes carry each
  prompt's chunk layout, for the exact-prefix stage;
* chunk trie: a radix tree over the ready chunks' tokens (:mod:`engine.radix`, one root path per
  chunk, an index only: KV lives in the chunks), answering "the longest stored chunk whose beginning
  equals these tokens";
* S1 window index ``window fingerprint -> (entry fingerprint, offset)``: every ready chunk registers
  its start- and end-aligned ``s1_window``-token windows as views into its KV.

Dropping an entry removes its trie path and its windows with it. The policy
(:mod:`engine.policies.irminsul`) decides what to look up, lock and add.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from pic.engine import cdc
from pic.engine.policies.base import PolicyStats
from pic.engine.radix import RadixNode, RadixTree

_LAYOUTS = 16  # committed-prompt layouts tried for the exact prefix


class Entry:
    """One resident chunk; ``node``: its end node in the chunk trie (None until committed)."""

    __slots__ = ("fp", "tokens", "base_pos", "owner", "nbytes", "refs", "last_access_us", "hits",
                 "created_us", "ready", "windows", "node")

    def __init__(self, fp: int, tokens: np.ndarray, base_pos: int, owner: int, nbytes: int, now: int):
        self.fp, self.tokens, self.base_pos, self.owner, self.nbytes = fp, tokens, base_pos, owner, nbytes
        self.refs, self.last_access_us, self.hits, self.created_us = 0, now, 0, now
        self.ready = False
        self.windows: list[int] = []
        self.node: RadixNode | None = None


class ChunkStore:
    """Resident chunks by fingerprint, their trie and S1 window index, and byte accounting.

    ``key`` orders eviction (smallest first); ``s1_window`` is the S1 window size in tokens."""

    def __init__(self, key: Callable[[Any], tuple[int, ...]], s1_window: int) -> None:
        self.key, self.s1_window = key, s1_window
        self.entries: dict[int, Entry] = {}
        self.windows: dict[int, tuple[int, int]] = {}       # window fp -> (entry fp, offset)
        self.trie = RadixTree()                             # index of ready chunks' tokens
        self.prompts = RadixTree()                          # index of committed prompts -> chunk layout
        self.evictable = self.protected = 0
        self._heap: list[tuple[tuple[int, ...], int, int]] = []
        self._seq = itertools.count()

    # ---- Public API -------------------------------------------------------------------------------
    def add(self, fp: int, tokens: np.ndarray, base_pos: int, owner: int, nbytes: int, now_us: int) -> Entry:
        """A new, not yet ready entry, locked once (its KV is protected until the owner releases it)."""
        e = Entry(fp, tokens, base_pos, owner, nbytes, now_us)
        self.entries[fp] = e
        e.refs = 1
        self.protected += e.nbytes
        return e

    def make_ready(self, e: Entry, now_us: int, windows: bool) -> None:
        """The entry's KV exists: index its tokens in the trie (and its S1 windows when ``windows``)."""
        e.ready = True
        if windows:
            self._add_windows(e)
        _, node = self.trie.insert(e.tokens, now_us)
        node.value = e.fp
        self.trie.inc_lock(node)           # live chunks are locked in the index; dead ones get purged
        e.node = node

    def longest(self, toks: np.ndarray) -> tuple[int, Entry | None]:
        """Longest leading run of ``toks`` that equals the beginning of a stored chunk (trie walk)."""
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

    def window(self, toks: np.ndarray) -> tuple[Entry, int] | None:
        """The ready entry and offset holding the S1 window ``toks`` (by fingerprint), if any."""
        ref = self.windows.get(cdc.fingerprint(toks))
        e = self.entries.get(ref[0]) if ref is not None else None
        if e is None or not e.ready:
            return None
        return e, ref[1]

    def add_prompt(self, tokens: np.ndarray, bounds: list[int], fps: list[int], now_us: int,
                   cap_tokens: float) -> None:
        """Index a committed prompt with its chunk layout; keep the index under ``cap_tokens``."""
        _, node = self.prompts.insert(tokens, now_us)
        node.value = (bounds, fps)
        if self.prompts.total_tokens > cap_tokens:
            self.prompts.evict(int(self.prompts.total_tokens - cap_tokens))

    def best_layout(self, toks: np.ndarray) -> tuple[tuple[list[int], list[int]] | None, int]:
        """``((bounds, fps), num)``: the layout of the committed prompt whose resident chunks serve the
        longest exact prefix ``num`` of ``toks`` (trying at most ``_LAYOUTS`` prompts, deepest shared
        prefix first); ``(None, 0)`` when none serves any."""
        num, node = self.prompts.match_prefix(toks, None, split=True)
        best, best_len, tried, depth, skip = None, 0, 0, num, None
        while node is not None and best_len < depth and tried < _LAYOUTS:
            stack = [node]                # prompts below ``node`` (minus the branch done) share ``depth``
            while stack and tried < _LAYOUTS and best_len < depth:
                nd = stack.pop()
                stack.extend(reversed([c for c in nd.children.values() if c is not skip]))
                if nd.value is not None:
                    tried += 1
                    got = self._served(*nd.value, depth)
                    if got > best_len:
                        best, best_len = nd.value, got
            skip, depth, node = node, depth - node.key.shape[0], node.parent
        return best, best_len

    def lock(self, e: Entry) -> None:
        if e.refs == 0:
            self.evictable -= e.nbytes
            self.protected += e.nbytes
        e.refs += 1

    def unlock(self, e: Entry) -> None:
        e.refs -= 1
        if e.refs == 0:
            self.protected -= e.nbytes
            self.evictable += e.nbytes
            heapq.heappush(self._heap, (self.key(e), next(self._seq), e.fp))
            if len(self._heap) > 4 * len(self.entries) + 1024:
                self._heap = [(self.key(x), next(self._seq), x.fp) for x in self.entries.values()
                              if x.refs == 0]
                heapq.heapify(self._heap)

    def evict(self, num_bytes: int, stats: PolicyStats) -> int:
        """Drop unlocked entries, smallest key first, until ``num_bytes`` are freed; bytes freed."""
        freed, heap = 0, self._heap
        while freed < num_bytes and heap:
            k, _, fp = heapq.heappop(heap)
            e = self.entries.get(fp)
            if e is None or e.refs > 0:
                continue
            cur = self.key(e)
            if cur != k:
                heapq.heappush(heap, (cur, next(self._seq), fp))
                continue
            freed += e.nbytes
            stats.evictions += 1
            stats.evicted_bytes += e.nbytes
            self.drop(e)
        return freed

    def drop(self, e: Entry) -> None:
        """Remove an unlocked entry with its trie path and windows."""
        del self.entries[e.fp]
        self.evictable -= e.nbytes
        if e.node is not None:
            e.node.value = None
            self.trie.dec_lock(e.node)
            self.trie.evict(self.trie.evictable_tokens)
        for wfp in e.windows:
            if self.windows.get(wfp, (None,))[0] == e.fp:
                del self.windows[wfp]

    # ---- Internal helpers -------------------------------------------------------------------------
    def _served(self, bounds: list[int], fps: list[int], num: int) -> int:
        for j, fp in enumerate(fps):
            if bounds[j] >= num:
                break
            e = self.entries.get(fp)
            if e is None or not e.ready:
                return bounds[j]
        return num

    def _add_windows(self, e: Entry) -> None:
        w, n = self.s1_window, e.tokens.shape[0]
        offs = set(range(0, n - w + 1, w)) | set(range(n - w, -1, -w))
        for off in sorted(offs):
            wfp = cdc.fingerprint(e.tokens[off:off + w])
            if wfp not in self.windows:
                self.windows[wfp] = (e.fp, off)
                e.windows.append(wfp)
