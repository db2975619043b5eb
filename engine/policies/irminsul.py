"""``irminsul`` — content-addressed, position-independent KV cache for MLA models (Irminsul design).

Keeps: one KV copy per distinct content-defined chunk (:mod:`engine.cdc`, Gear hash over 64-token windows,
xxh64 fingerprint) in a registry ``fingerprint -> entry`` (tokens, length, base position, owner request,
resident bytes, lock refs, recency). A lookup first takes the exact prefix: a radix tree over committed
prompts (:mod:`engine.radix`, an index of tokens, no KV) gives the longest committed prefix and the chunk
layout of a prompt that had it; that prompt's resident chunks serve it in place. From there it walks the
prompt's own chunks:

1. at each chunk start: fingerprint hit -> the chunk's KV is reused; at its base position it is
   ``REUSE``, elsewhere ``REUSE_ROTATED`` with delta = target - base (MLA: only the 64-dim k_r is rotated,
   cKV is reused verbatim; the cost model prices the rotation, ``fused_rotation`` is informational here);
2. token-granular extension through a radix tree over the stored chunks' tokens (:mod:`engine.radix`,
   one root path per chunk, index only): the longest stored chunk whose beginning equals the prompt
   from here on (at least ``min_match`` tokens) is reused as far as it matches, and the walk goes on
   from where it stops, so a hit continues into the stored chunk that followed it. KV is stored once,
   in the chunks;
3. still missing and ``s1`` -> the rest of the chunk is cut into fixed ``s1_window`` windows aligned to
   its start and to its end, each looked up in the window index (every stored chunk registers its
   start- and end-aligned windows as views into the chunk's KV).

First-chunk clip: reused KV landing at position 0 from another position has its first ``sink_tokens``
recomputed (attention sink). S2: marker edges (segments of kind ``marker`` or occurrences of the marker
token sequence) are hard chunk boundaries. Eviction: unlocked entries in key order (``lru``/``lfu``,
:mod:`engine.eviction`), lazily through a heap; a chunk's windows and trie path go with it.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import numpy as np

from engine import cdc, eviction
from engine.plan import Action, Plan, Span
from engine.policies import register
from engine.policies.base import CachePolicy, PolicyContext, RequestView, Usage
from engine.radix import RadixNode, RadixTree
from traces.markers import BOUNDARY_MARKER, find_markers
from traces.schema import KIND_CODE

_MARKER_KIND = KIND_CODE["marker"]
_LAYOUTS = 16  # committed-prompt layouts tried for the exact prefix


@dataclass(frozen=True, slots=True)
class IrminsulConfig:
    avg_chunk: int = field(default=256, metadata={"help": "expected CDC chunk size (tokens)"})
    min_chunk: int = field(default=64, metadata={"help": "minimum CDC chunk size (tokens)"})
    max_chunk: int = field(default=2048, metadata={"help": "maximum CDC chunk size (tokens)"})
    gear_seed: int = field(default=0, metadata={"help": "seed of the Gear hash table"})
    s1: bool = field(default=True, metadata={"help": "S1: re-look-up CDC misses as fixed windows (default on)"})
    s1_window: int = field(default=128, metadata={"help": "S1 window size (tokens)"})
    s2: bool = field(default=True, metadata={
        "help": "S2: boundary markers are hard chunk boundaries (default on; inert without markers)"})
    marker_tokens: str = field(default="", metadata={
        "help": "S2 marker as comma-separated token ids (empty: the built-in 64-token marker)"})
    sink_tokens: int = field(default=32, metadata={
        "help": "first-chunk clip: tokens recomputed when reused KV lands at position 0"})
    fused_rotation: bool = field(default=True, metadata={
        "help": "k_r rotation fused into the attention load (informational; the cost model prices it)"})
    eviction: str = field(default="lru", metadata={"help": "eviction order: lru | lfu"})
    min_match: int = field(default=16, metadata={
        "help": "shortest run reused from a chunk-trie match (avoids plans of tiny spans)"})

    def __post_init__(self) -> None:
        self.cdc  # noqa: B018 - validates the chunk sizes
        eviction.key(self.eviction)
        if self.s1_window < 1 or self.sink_tokens < 0 or self.min_match < 1:
            raise ValueError("s1_window and min_match must be >= 1, sink_tokens >= 0")
        if self.marker_tokens:
            try:
                [int(x) for x in self.marker_tokens.split(",")]
            except ValueError:
                raise ValueError(f"marker_tokens: expected comma-separated ints, got {self.marker_tokens!r}") \
                    from None

    @property
    def cdc(self) -> cdc.CDCConfig:
        return cdc.CDCConfig(self.avg_chunk, self.min_chunk, self.max_chunk, self.gear_seed)

    @property
    def marker(self) -> np.ndarray:
        if not self.marker_tokens:
            return BOUNDARY_MARKER
        return np.array([int(x) for x in self.marker_tokens.split(",")], dtype=np.int32)


class _Entry:
    """One resident chunk; ``node``: its end node in the chunk trie (None until committed)."""

    __slots__ = ("fp", "tokens", "base_pos", "owner", "nbytes", "refs", "last_access_us", "hits",
                 "created_us", "ready", "windows", "node")

    def __init__(self, fp: int, tokens: np.ndarray, base_pos: int, owner: int, nbytes: int, now: int):
        self.fp, self.tokens, self.base_pos, self.owner, self.nbytes = fp, tokens, base_pos, owner, nbytes
        self.refs, self.last_access_us, self.hits, self.created_us = 0, now, 0, now
        self.ready = False
        self.windows: list[int] = []
        self.node: RadixNode | None = None


@register
class Irminsul(CachePolicy):
    name = "irminsul"
    Config = IrminsulConfig

    def __init__(self, ctx: PolicyContext, config: IrminsulConfig | None = None) -> None:
        super().__init__(ctx, config)
        c = self.config
        self._cdc, self._marker, self._key = c.cdc, c.marker, eviction.key(c.eviction)
        self._entries: dict[int, _Entry] = {}
        self._windows: dict[int, tuple[int, int]] = {}      # window fp -> (entry fp, offset)
        self._trie = RadixTree()                            # index of ready chunks' tokens
        self._prompts = RadixTree()                         # index of committed prompts -> chunk layout
        self._pending: dict[int, tuple[list[int], list[int], list[int]]] = {}   # rid -> bounds, fps, used
        self._admitted: dict[int, tuple[list[int], list[int], list[int]]] = {}  # rid -> bounds, fps, new
        self._locks: dict[int, list[int]] = {}
        self._heap: list[tuple[tuple[int, ...], int, int]] = []
        self._seq = itertools.count()
        self._evictable = self._protected = 0
        self.stats.extra.update(prefix_tokens=0, chunk_lookups=0, chunk_hits=0, extended_tokens=0, window_lookups=0,
                                window_hits=0, clipped_tokens=0, rotated_tokens=0)

    # ---- Public API -------------------------------------------------------------------------------
    def lookup(self, req: RequestView, now_us: int) -> Plan:
        self.stats.lookups += 1
        bounds, fps, spans, used = self._analyze(req)
        for fp in dict.fromkeys(used):
            e = self._entries[fp]
            e.last_access_us = now_us
            e.hits += 1
        plan = Plan.from_spans(req.num_tokens, spans)
        if plan.num_reused:
            self.stats.hits += 1
            self.stats.extra["rotated_tokens"] += plan.num_rotated
        self._pending[req.request_id] = (bounds, fps, list(dict.fromkeys(used)))
        if len(self._pending) > 4096:       # lookups never followed by admit (probes) must not pile up
            del self._pending[next(iter(self._pending))]
        return plan

    def admit(self, req: RequestView, plan: Plan, now_us: int) -> bool:
        rid = req.request_id
        got = self._pending.pop(rid, None)
        if got is None:
            bounds, fps, _, used = self._analyze(req)
            used = list(dict.fromkeys(used))
        else:
            bounds, fps, used = got
        if any(fp not in self._entries for fp in used):   # evicted since lookup: the plan is stale
            self.stats.rejected += 1
            return False
        for fp in used:
            self._lock(self._entries[fp])
        new: dict[int, tuple[int, int]] = {}
        for k, fp in enumerate(fps):
            if fp not in self._entries and fp not in new:
                new[fp] = (bounds[k], bounds[k + 1])
        need = sum(b - a for a, b in new.values()) * self.ctx.bytes_per_token
        over = self._evictable + self._protected + need - self.ctx.capacity_bytes
        if over > 0 and self.evict(int(over), now_us) < over:
            for fp in used:
                self._unlock(self._entries[fp])
            self.stats.rejected += 1
            return False
        toks = req.tokens
        for fp, (a, b) in new.items():
            e = _Entry(fp, np.array(toks[a:b], dtype=np.int32), a, rid, (b - a) * self.ctx.bytes_per_token,
                       now_us)
            self._entries[fp] = e
            e.refs = 1                      # new KV: protected until release
            self._protected += e.nbytes
        self._locks[rid] = used + list(new)
        self._admitted[rid] = (bounds, fps, list(new))
        return True

    def commit(self, req: RequestView, now_us: int) -> None:
        bounds, fps, new = self._admitted.pop(req.request_id, ([], [], []))
        for fp in new:
            e = self._entries[fp]
            e.ready = True
            if self.config.s1:
                self._add_windows(e)
            num_new, node = self._trie.insert(e.tokens, now_us)
            node.value = fp
            self._trie.inc_lock(node)           # live chunks are locked in the index; dead ones get purged
            e.node = node
        if fps:
            _, node = self._prompts.insert(req.tokens, now_us)
            node.value = (bounds, fps)
            cap = 4 * self.ctx.capacity_tokens + 2**20
            if self._prompts.total_tokens > cap:
                self._prompts.evict(int(self._prompts.total_tokens - cap))

    def release(self, req: RequestView, now_us: int) -> None:
        self._admitted.pop(req.request_id, None)
        for fp in self._locks.pop(req.request_id, []):
            e = self._entries.get(fp)
            if e is None:
                continue
            self._unlock(e)
            if e.refs == 0 and not e.ready:   # released without commit: its KV never materialized
                self._drop(e)

    def evict(self, num_bytes: int, now_us: int) -> int:
        freed, heap = 0, self._heap
        while freed < num_bytes and heap:
            k, _, fp = heapq.heappop(heap)
            e = self._entries.get(fp)
            if e is None or e.refs > 0:
                continue
            cur = self._key(e)
            if cur != k:
                heapq.heappush(heap, (cur, next(self._seq), fp))
                continue
            freed += e.nbytes
            self.stats.evictions += 1
            self.stats.evicted_bytes += e.nbytes
            self._drop(e)
        return freed

    def usage(self) -> Usage:
        return Usage(self._evictable, self._protected, self._evictable + self._protected,
                     self.ctx.capacity_bytes)

    # ---- Internal helpers -------------------------------------------------------------------------
    def _analyze(self, req: RequestView):
        toks = req.tokens
        bounds = cdc.chunk(toks, self._cdc, self._hard(req) if self.config.s2 else None)
        bl, fl = bounds.tolist(), cdc.fingerprints(toks, bounds).tolist()
        spans: list[Span] = []
        used: list[int] = []
        ex = self.stats.extra
        n, k = toks.shape[0], 0
        pos = self._prefix(toks, spans, used)
        ex["prefix_tokens"] += pos
        while pos < n:
            while bl[k + 1] <= pos:
                k += 1
            a, b = bl[k], bl[k + 1]
            if pos == a:
                ex["chunk_lookups"] += 1
            e = self._get(fl[k], toks, a, b)
            if e is not None and pos == a:
                ex["chunk_hits"] += 1
            # NOTE: a longer run than the hit chunk needs a stored chunk that extends it (a trie child)
            t_len, t_e = (0, None) if e is not None and not e.node.children else self._longest(toks, pos)
            if t_len > (b - pos if e is not None else self.config.min_match - 1):
                ex["extended_tokens"] += t_len - (b - pos if e is not None else 0)
                self._span(spans, used, t_e, pos, pos + t_len, 0)
                pos += t_len
            elif e is not None:
                self._span(spans, used, e, pos, b, pos - a)
                pos = b
            else:
                if self.config.s1:
                    self._s1(toks, pos, b, spans, used)
                pos = b
        return bl, fl, spans, used

    def _get(self, fp: int, toks: np.ndarray, a: int, b: int) -> _Entry | None:
        e = self._entries.get(fp)
        if e is None or not e.ready:
            return None
        if self.ctx.verify:
            self.stats.verified_hits += 1
            if e.tokens.shape[0] != b - a or not np.array_equal(e.tokens, toks[a:b]):
                self.stats.collisions += 1
                return None
        elif e.tokens.shape[0] != b - a:
            return None
        return e

    def _span(self, spans: list[Span], used: list[int], e: _Entry, a: int, b: int, off: int) -> None:
        """Reuse ``e``'s KV from offset ``off`` for target ``[a, b)`` (first-chunk clip at position 0)."""
        src = e.base_pos + off
        if a == 0 and src != 0:
            clip = min(self.config.sink_tokens, b)
            self.stats.extra["clipped_tokens"] += clip
            a, src = clip, src + clip
            if a >= b:
                return
        spans.append(Span(a, b, Action.REUSE if src == a else Action.REUSE_ROTATED, src))
        used.append(e.fp)

    def _prefix(self, toks: np.ndarray, spans: list[Span], used: list[int]) -> int:
        """Exact prefix from the prompt index, served by the resident chunks of the committed prompt that
        covers most of it (trying at most ``_LAYOUTS`` prompts, deepest shared prefix first); its length."""
        num, node = self._prompts.match_prefix(toks, None, split=True)
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
        if best is None:
            return 0
        bounds, fps = best
        for j, fp in enumerate(fps):
            a = bounds[j]
            if a >= best_len:
                break
            b = min(bounds[j + 1], best_len)
            e = self._entries[fp]
            if self.ctx.verify:
                self.stats.verified_hits += 1
                if not np.array_equal(e.tokens[:b - a], toks[a:b]):
                    self.stats.collisions += 1
                    return a
            self._span(spans, used, e, a, b, 0)
        return best_len

    def _served(self, bounds: list[int], fps: list[int], num: int) -> int:
        for j, fp in enumerate(fps):
            if bounds[j] >= num:
                break
            e = self._entries.get(fp)
            if e is None or not e.ready:
                return bounds[j]
        return num

    def _longest(self, toks: np.ndarray, pos: int) -> tuple[int, _Entry | None]:
        """Longest run from ``pos`` that equals the beginning of a stored chunk (trie walk)."""
        num, node = self._trie.match_prefix(toks[pos:pos + self.config.max_chunk], None, split=True)
        if num == 0:
            return 0, None
        stack = [node]
        while stack:                      # any live chunk at or below the match shares its tokens
            nd = stack.pop()
            if nd.value is not None:
                return num, self._entries[nd.value]
            stack.extend(reversed(list(nd.children.values())))
        return 0, None

    def _s1(self, toks: np.ndarray, lo: int, hi: int, spans, used) -> None:
        """Look ``[lo, hi)`` up as start-aligned, then end-aligned fixed windows."""
        w = self.config.s1_window
        num = (hi - lo) // w
        if num == 0:
            return
        ex = self.stats.extra
        starts = [lo + i * w for i in range(num)]
        if (hi - lo) % w:
            starts += [hi - (i + 1) * w for i in range(num)]
        covered: list[tuple[int, int]] = []
        for s in starts:
            if any(s < b and a < s + w for a, b in covered):
                continue
            ex["window_lookups"] += 1
            ref = self._windows.get(cdc.fingerprint(toks[s:s + w]))
            e = self._entries.get(ref[0]) if ref is not None else None
            if e is None or not e.ready:
                continue
            off = ref[1]
            if self.ctx.verify:
                self.stats.verified_hits += 1
                if not np.array_equal(e.tokens[off:off + w], toks[s:s + w]):
                    self.stats.collisions += 1
                    continue
            ex["window_hits"] += 1
            covered.append((s, s + w))
            self._span(spans, used, e, s, s + w, off)

    def _add_windows(self, e: _Entry) -> None:
        w, n = self.config.s1_window, e.tokens.shape[0]
        offs = set(range(0, n - w + 1, w)) | set(range(n - w, -1, -w))
        for off in sorted(offs):
            wfp = cdc.fingerprint(e.tokens[off:off + w])
            if wfp not in self._windows:
                self._windows[wfp] = (e.fp, off)
                e.windows.append(wfp)

    def _hard(self, req: RequestView) -> np.ndarray:
        m = self._marker.shape[0]
        starts = find_markers(req.tokens, self._marker)
        idx = np.flatnonzero(req.segment_kinds == _MARKER_KIND)
        sb = req.segment_bounds
        return np.concatenate([starts, starts + m, sb[idx], sb[idx + 1]]).astype(np.int64)

    def _lock(self, e: _Entry) -> None:
        if e.refs == 0:
            self._evictable -= e.nbytes
            self._protected += e.nbytes
        e.refs += 1

    def _unlock(self, e: _Entry) -> None:
        e.refs -= 1
        if e.refs == 0:
            self._protected -= e.nbytes
            self._evictable += e.nbytes
            heapq.heappush(self._heap, (self._key(e), next(self._seq), e.fp))
            if len(self._heap) > 4 * len(self._entries) + 1024:
                self._heap = [(self._key(x), next(self._seq), x.fp) for x in self._entries.values()
                              if x.refs == 0]
                heapq.heapify(self._heap)

    def _drop(self, e: _Entry) -> None:
        del self._entries[e.fp]
        self._evictable -= e.nbytes
        if e.node is not None:
            e.node.value = None
            self._trie.dec_lock(e.node)
            self._trie.evict(self._trie.evictable_tokens)
        for wfp in e.windows:
            if self._windows.get(wfp, (None,))[0] == e.fp:
                del self._windows[wfp]
