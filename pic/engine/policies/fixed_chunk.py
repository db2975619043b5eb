"""``fixed-chunk`` — LMCache CacheBlend-style position-independent baseline over a fixed chunk grid.

Keeps: the KV of every full ``chunk_size``-token chunk on the fixed grid (``[0, C), [C, 2C), ...``)
of the request that produced it, one entry per distinct chunk content (the first producer's position
is remembered as ``source_pos``). A partial tail chunk is never stored.

Lookup: the new prompt is hashed at EVERY offset with a vectorized rolling hash
(:func:`engine.rolling.window_hashes`); windows whose hash is a stored key are candidates (two
vectorized counting-filter gathers, then a dict check of the few survivors; no Python loop per token).
Candidates are taken greedily left to right without overlap: ``REUSE`` when the window sits where its chunk was produced (so an
exact in-place prefix is reused in place), else ``REUSE_ROTATED`` from ``source_pos`` (RoPE keys
rotated by delta = start - source_pos). Under ``--verify`` the tokens of every hit are compared and
mismatches counted as ``collisions`` (and not reused).

Eviction: unlocked chunks, smallest ``engine.eviction`` key first (lru | lfu | fifo) from a lazy heap.
Models LMCache + CacheBlend (Yao et al., EuroSys'25) with position-independent chunk keys.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import numpy as np

from pic.engine import eviction
from pic.engine.plan import Action, Plan, Span
from pic.engine.policies import register
from pic.engine.policies.base import CachePolicy, PolicyContext, RequestView, Usage
from pic.engine.rolling import window_hashes

_FILTER_BITS = 22
_FILTER_SHIFT = 64 - _FILTER_BITS
_FILTER_MASK = (1 << _FILTER_BITS) - 1


@dataclass(frozen=True, slots=True)
class FixedChunkConfig:
    chunk_size: int = field(default=256, metadata={"help": "tokens per chunk of the storage grid; "
                                                           "windows of this size are matched at any offset"})
    eviction: str = field(default="lru", metadata={"help": "eviction order over unlocked chunks: "
                                                           "lru | lfu | fifo"})

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ValueError(f"fixed-chunk.chunk_size must be >= 1, got {self.chunk_size}")
        eviction.key(self.eviction)


class _Chunk:
    __slots__ = ("key", "pos", "tokens", "ref", "last_access_us", "hits", "created_us", "is_alive")

    def __init__(self, key: int, pos: int, tokens: np.ndarray, now_us: int) -> None:
        self.key, self.pos, self.tokens = key, pos, tokens
        self.ref = 0
        self.last_access_us = self.created_us = now_us
        self.hits = 0
        self.is_alive = True


@register
class FixedChunkCache(CachePolicy):
    name = "fixed-chunk"
    Config = FixedChunkConfig

    def __init__(self, ctx: PolicyContext, config: FixedChunkConfig | None = None) -> None:
        super().__init__(ctx, config)
        self._c = self.config.chunk_size
        self._key = eviction.key(self.config.eviction)
        self._store: dict[int, _Chunk] = {}
        # NOTE: counting filters over the top and the low bits of stored keys: one vectorized gather
        # per lookup rejects almost every window, a second one on the survivors nearly all false
        # positives; only what passes both is checked against the dict. Filters only prune
        # non-members, so plans do not depend on them.
        self._filter = np.zeros(1 << _FILTER_BITS, np.uint16)
        self._filter2 = np.zeros(1 << _FILTER_BITS, np.uint16)
        self._num_locked = 0
        self._reserved = 0                       # chunks reserved by admitted, uncommitted requests
        self._live: dict[int, tuple[list[_Chunk], int, np.ndarray | None]] = {}
        self._memo: tuple[np.ndarray, np.ndarray] | None = None   # (tokens, window hashes) of last lookup
        self._heap: list[tuple[tuple[int, ...], int, _Chunk]] = []
        self._seq = itertools.count()
        cap = ctx.capacity_tokens
        self._cap_chunks = cap if cap == float("inf") else cap // self._c

    # ---- Public API -------------------------------------------------------------------------------
    def lookup(self, req: RequestView, now_us: int) -> Plan:
        self.stats.lookups += 1
        c, toks = self._c, req.tokens
        w = self._windows(req)
        # hits as [start, end, source_pos]; abutting hits with equal delta are merged here exactly as
        # Plan.from_spans would merge them (fewer Span objects, same plan)
        hits: list[list[int]] = []
        # Leading grid run: while the window at the cursor is a hit it is the first candidate at or
        # after the cursor, hence the greedy pick, so no filter pass is needed for it.
        cursor, n_win, store = 0, w.shape[0], self._store
        while cursor < n_win:
            ch = store.get(int(w[cursor]))
            if ch is None:
                break
            if not self._same(ch, toks[cursor:cursor + c]):
                cursor += 1                # counted once; the scan goes on from the next window
                break
            ch.last_access_us = now_us
            ch.hits += 1
            _add_hit(hits, cursor, cursor + c, ch.pos)
            cursor += c
        start, cursor = cursor, (hits[-1][1] if hits else 0)
        cand = self._candidates(w, start)
        k = 0
        while k < cand.shape[0]:
            i = int(cand[k])
            if i < cursor:
                k = int(np.searchsorted(cand, cursor))
                continue
            k += 1
            ch = store.get(int(w[i]))
            if ch is None or not self._same(ch, toks[i:i + c]):
                continue
            ch.last_access_us = now_us
            ch.hits += 1
            _add_hit(hits, i, i + c, ch.pos)
            cursor = i + c
        if hits:
            self.stats.hits += 1
        return Plan.from_spans(req.num_tokens, [Span(a, b, Action.REUSE if a == src else Action.REUSE_ROTATED, src)
                                                for a, b, src in hits])

    def admit(self, req: RequestView, plan: Plan, now_us: int) -> bool:
        if req.request_id in self._live:
            raise ValueError(f"request {req.request_id} admitted twice")
        c = self._c
        w = self._windows(req)
        held: list[_Chunk] = []
        for s in plan.spans:
            if s.action == Action.RECOMPUTE:
                continue
            for j in range(s.start, s.end, c):
                ch = self._store.get(int(w[j]))
                if ch is None or ch.pos != (s.source_pos if s.source_pos >= 0 else s.start) + j - s.start:
                    for h in held:
                        self._unref(h)
                    self.stats.rejected += 1
                    self.stats.extra["stale_plans"] = self.stats.extra.get("stale_plans", 0) + 1
                    return False
                self._ref(ch)
                held.append(ch)
        need = 0                            # grid chunks the request adds; stored ones are locked
        seen = {id(ch) for ch in held}
        for h in set(w[0:c * (req.num_tokens // c):c].tolist()):
            ch = self._store.get(h)
            if ch is None:
                need += 1
            elif id(ch) not in seen:
                self._ref(ch)
                held.append(ch)
        over = len(self._store) + self._reserved + need - self._cap_chunks
        if over > 0:
            self._evict_chunks(int(over))
            if len(self._store) + self._reserved + need > self._cap_chunks:
                for h in held:
                    self._unref(h)
                self.stats.rejected += 1
                return False
        self._reserved += need
        self._live[req.request_id] = (held, need, w)
        return True

    def commit(self, req: RequestView, now_us: int) -> None:
        held, need, w = self._live[req.request_id]
        self._reserved -= need
        c, toks, verify, store = self._c, req.tokens, self.ctx.verify, self._store
        seen = {id(ch) for ch in held}
        grid = w[0:c * (req.num_tokens // c):c]
        new: list[int] = []
        num_locked = 0
        for i, h in zip(range(0, grid.shape[0] * c, c), grid.tolist(), strict=True):
            ch = store.get(h)
            if ch is None:
                ch = store[h] = _Chunk(h, i, toks[i:i + c].copy() if verify else None, now_us)
                new.append(h)
            elif id(ch) in seen or not self._same(ch, toks[i:i + c]):
                continue
            num_locked += ch.ref == 0
            ch.ref += 1
            held.append(ch)
            seen.add(id(ch))
        self._num_locked += num_locked
        if new:                                 # buckets of distinct keys may repeat: np.add.at
            keys = np.array(new, np.uint64)
            np.add.at(self._filter, keys >> np.uint64(_FILTER_SHIFT), 1)
            np.add.at(self._filter2, (keys & np.uint64(_FILTER_MASK)).astype(np.int64), 1)
        self._live[req.request_id] = (held, 0, None)

    def release(self, req: RequestView, now_us: int) -> None:
        held, need, _ = self._live.pop(req.request_id)
        self._reserved -= need
        key, seq, push, store = self._key, self._seq, heapq.heappush, self._store
        heap, num_freed = self._heap, 0
        for ch in held:                     # _unref inlined: same pushes, same compaction points
            ch.ref -= 1
            if ch.ref == 0:
                num_freed += 1
                push(heap, (key(ch), next(seq), ch))
                if len(heap) > 4 * len(store) + 1024:
                    self._compact_heap()
                    heap = self._heap
        self._num_locked -= num_freed

    def evict(self, num_bytes: int, now_us: int) -> int:
        per = self._c * self.ctx.bytes_per_token
        return self._evict_chunks(-(-int(num_bytes) // per)) * per

    def usage(self) -> Usage:
        per = self._c * self.ctx.bytes_per_token
        n = len(self._store)
        return Usage((n - self._num_locked) * per, (self._num_locked + self._reserved) * per,
                     (n + self._reserved) * per, self.ctx.capacity_bytes)

    # ---- Internal helpers -------------------------------------------------------------------------
    def _windows(self, req: RequestView) -> np.ndarray:
        if self._memo is None or self._memo[0] is not req.tokens:
            self._memo = (req.tokens, window_hashes(req.tokens, self._c))
        return self._memo[1]

    def _candidates(self, w: np.ndarray, start: int) -> np.ndarray:
        """Sorted offsets ``>= start`` whose window hash passes both filters."""
        ws = w[start:]
        idx = np.flatnonzero(self._filter[ws >> np.uint64(_FILTER_SHIFT)])
        idx = idx[self._filter2[(ws[idx] & np.uint64(_FILTER_MASK)).astype(np.int64)] > 0]
        return idx + start

    def _same(self, ch: _Chunk, toks: np.ndarray) -> bool:
        if not self.ctx.verify:
            return True
        self.stats.verified_hits += 1
        if np.array_equal(ch.tokens, toks):
            return True
        self.stats.collisions += 1
        return False

    def _ref(self, ch: _Chunk) -> None:
        if ch.ref == 0:
            self._num_locked += 1
        ch.ref += 1

    def _unref(self, ch: _Chunk) -> None:
        ch.ref -= 1
        if ch.ref == 0:
            self._num_locked -= 1
            heapq.heappush(self._heap, (self._key(ch), next(self._seq), ch))
            if len(self._heap) > 4 * len(self._store) + 1024:
                self._compact_heap()

    def _compact_heap(self) -> None:
        """Drop stale heap entries (one per free live chunk: the last in heap order)."""
        live = {id(e[2]): e for e in self._heap if e[2].is_alive and e[2].ref == 0}
        self._heap = list(live.values())
        heapq.heapify(self._heap)

    def _evict_chunks(self, num_chunks: int) -> int:
        heap, store, key, seq, pop = self._heap, self._store, self._key, self._seq, heapq.heappop
        gone: list[int] = []
        while len(gone) < num_chunks and heap:
            k, _, ch = pop(heap)
            if not ch.is_alive or ch.ref > 0:
                continue
            cur = key(ch)
            if cur != k:
                heapq.heappush(heap, (cur, next(seq), ch))
                continue
            ch.is_alive = False
            del store[ch.key]
            gone.append(ch.key)
        freed = len(gone)
        if freed:                               # filter counts of the evicted keys, in one go
            keys = np.array(gone, np.uint64)
            np.subtract.at(self._filter, keys >> np.uint64(_FILTER_SHIFT), 1)
            np.subtract.at(self._filter2, (keys & np.uint64(_FILTER_MASK)).astype(np.int64), 1)
        self.stats.evictions += freed
        self.stats.evicted_bytes += freed * self._c * self.ctx.bytes_per_token
        return freed


def _add_hit(hits: list[list[int]], a: int, b: int, src: int) -> None:
    """Append hit ``[a, b)`` from ``src``, extending the last one when it abuts with the same delta."""
    if hits:
        last = hits[-1]
        if last[1] == a and a - src == last[0] - last[2]:
            last[1] = b
            return
    hits.append([a, b, src])
