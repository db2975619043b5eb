"""``irminsul`` — content-addressed, position-independent KV cache for MLA models (Irminsul design).

Keeps: one KV copy per distinct content-defined chunk (:mod:`engine.cdc`, Gear hash over 64-token windows,
xxh64 fingerprint) in a registry ``fingerprint -> entry`` (tokens, length, base position, owner request,
resident bytes, lock refs, recency). A lookup walks the prompt's chunks in order:

1. fingerprint hit -> the chunk's KV is reused; at its base position it is ``REUSE``, elsewhere
   ``REUSE_ROTATED`` with delta = target - base (MLA: only the 64-dim k_r is rotated, cKV is reused
   verbatim; the cost model prices the rotation, ``fused_rotation`` is informational here);
2. miss right after reused KV -> exact continuation, token-granular: the entries that followed the last
   reused chunk in committed prompts (its successors; the root's successors are prompt starts) are
   compared token by token and the longest common run is reused. From the root this *is* the radix
   exact-prefix match, and it needs no second KV copy (the radix tree's edges are the chunks);
3. still missing and ``s1`` -> the region is cut into fixed ``s1_window`` windows aligned to its start
   and to its end and each is looked up in the window index (every stored chunk registers its start- and
   end-aligned windows, as views into the chunk's KV).

First-chunk clip: reused KV landing at position 0 from another position has its first ``sink_tokens``
recomputed (attention sink). S2: marker edges (segments of kind ``marker`` or occurrences of the marker
token sequence) are hard chunk boundaries. Eviction: unlocked entries in key order (``lru``/``lfu``,
:mod:`engine.eviction`), lazily through a heap; a chunk's windows and successor links go with it.
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
from traces.markers import BOUNDARY_MARKER, find_markers
from traces.schema import KIND_CODE

_MARKER_KIND = KIND_CODE["marker"]


@dataclass(frozen=True, slots=True)
class IrminsulConfig:
    avg_chunk: int = field(default=256, metadata={"help": "expected CDC chunk size (tokens)"})
    min_chunk: int = field(default=64, metadata={"help": "minimum CDC chunk size (tokens)"})
    max_chunk: int = field(default=2048, metadata={"help": "maximum CDC chunk size (tokens)"})
    gear_seed: int = field(default=0, metadata={"help": "seed of the Gear hash table"})
    s1: bool = field(default=False, metadata={"help": "S1: re-look-up CDC misses as fixed windows"})
    s1_window: int = field(default=128, metadata={"help": "S1 window size (tokens)"})
    s2: bool = field(default=False, metadata={"help": "S2: boundary markers are hard chunk boundaries"})
    marker_tokens: str = field(default="", metadata={
        "help": "S2 marker as comma-separated token ids (empty: the built-in 64-token marker)"})
    sink_tokens: int = field(default=32, metadata={
        "help": "first-chunk clip: tokens recomputed when reused KV lands at position 0"})
    fused_rotation: bool = field(default=True, metadata={
        "help": "k_r rotation fused into the attention load (informational; the cost model prices it)"})
    eviction: str = field(default="lru", metadata={"help": "eviction order: lru | lfu"})
    max_successors: int = field(default=64, metadata={
        "help": "successor links kept per chunk and first token (older links are dropped)"})

    def __post_init__(self) -> None:
        self.cdc  # noqa: B018 - validates the chunk sizes
        eviction.key(self.eviction)
        if self.s1_window < 1 or self.sink_tokens < 0 or self.max_successors < 1:
            raise ValueError("s1_window and max_successors must be >= 1, sink_tokens >= 0")
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
    """One resident chunk. ``succ``: first token -> fingerprints of chunks that followed it."""

    __slots__ = ("fp", "tokens", "base_pos", "owner", "nbytes", "refs", "last_access_us", "hits",
                 "created_us", "ready", "windows", "succ")

    def __init__(self, fp: int, tokens: np.ndarray, base_pos: int, owner: int, nbytes: int, now: int):
        self.fp, self.tokens, self.base_pos, self.owner, self.nbytes = fp, tokens, base_pos, owner, nbytes
        self.refs, self.last_access_us, self.hits, self.created_us = 0, now, 0, now
        self.ready = False
        self.windows: list[int] = []
        self.succ: dict[int, list[int]] = {}


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
        self._root: dict[int, list[int]] = {}               # successors of the empty prefix
        self._pending: dict[int, tuple[list[int], list[int], list[int]]] = {}   # rid -> bounds, fps, used
        self._admitted: dict[int, tuple[list[int], list[int], list[int]]] = {}  # rid -> bounds, fps, new
        self._locks: dict[int, list[int]] = {}
        self._heap: list[tuple[tuple[int, ...], int, int]] = []
        self._seq = itertools.count()
        self._evictable = self._protected = 0
        self.stats.extra.update(chunk_lookups=0, chunk_hits=0, continued_tokens=0, window_lookups=0,
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
        toks, prev = req.tokens, self._root
        for k, fp in enumerate(fps):
            lst = prev.setdefault(int(toks[bounds[k]]), [])
            if fp in lst:
                lst.remove(fp)
            lst.insert(0, fp)
            del lst[self.config.max_successors:]
            e = self._entries.get(fp)
            if e is None:
                break
            prev = e.succ

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
        pos, prev = 0, self._root
        ex = self.stats.extra
        for k, fp in enumerate(fl):
            a, b = bl[k], bl[k + 1]
            if b <= pos:
                continue
            c_spans: list[Span] = []
            c_used: list[int] = []
            if prev is not None:       # exact continuation first: it may run past this chunk's end
                c_pos, c_prev = self._continue(prev, toks, max(a, pos), c_spans, c_used)
            else:
                c_pos, c_prev = max(a, pos), None
            if c_pos < b and a >= pos:
                ex["chunk_lookups"] += 1
                e = self._get(fp, toks, a, b)
                if e is not None:
                    ex["chunk_hits"] += 1
                    self._span(spans, used, e, a, b, 0)
                    pos, prev = b, e.succ
                    continue
            spans += c_spans
            used += c_used
            ex["continued_tokens"] += c_pos - max(a, pos)
            pos, prev = c_pos, c_prev
            if pos < b:
                prev = self._s1(toks, pos, b, spans, used) if self.config.s1 else None
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

    def _continue(self, succ: dict[int, list[int]], toks: np.ndarray, pos: int, spans, used):
        """Follow successor links token-granularly from ``pos``; return (new pos, successors or None)."""
        n = toks.shape[0]
        while pos < n:
            best, best_e = 0, None
            for fp in succ.get(int(toks[pos]), ()):
                e = self._entries.get(fp)
                if e is None or not e.ready:
                    continue
                m = min(e.tokens.shape[0], n - pos)
                neq = e.tokens[:m] != toks[pos:pos + m]
                same = m if not neq.any() else int(neq.argmax())
                if same > best:
                    best, best_e = same, e
            if best_e is None:
                return pos, None
            self._span(spans, used, best_e, pos, pos + best, 0)
            pos += best
            if best < best_e.tokens.shape[0]:
                return pos, None
            succ = best_e.succ
        return pos, succ

    def _s1(self, toks: np.ndarray, lo: int, hi: int, spans, used) -> dict[int, list[int]] | None:
        """Look ``[lo, hi)`` up as start-aligned, then end-aligned fixed windows; return the successors of
        the entry whose end the last window reached (continuation), else None."""
        w = self.config.s1_window
        num = (hi - lo) // w
        if num == 0:
            return None
        ex = self.stats.extra
        starts = [lo + i * w for i in range(num)]
        if (hi - lo) % w:
            starts += [hi - (i + 1) * w for i in range(num)]
        covered: list[tuple[int, int]] = []
        nxt = None
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
            if s + w == hi and off + w == e.tokens.shape[0]:
                nxt = e.succ
        return nxt

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
        for wfp in e.windows:
            if self._windows.get(wfp, (None,))[0] == e.fp:
                del self._windows[wfp]
