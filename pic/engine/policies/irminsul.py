"""``irminsul`` — content-addressed, position-independent KV cache for MLA models (Irminsul design).

Keeps: the KV of every recomputed token once, as extents, and a registry ``fingerprint -> chunk`` of
content-defined chunks (:mod:`engine.cdc`, Gear hash over 64-token windows, xxh64 fingerprint), each a list
of pieces of extents (its own and views into the ones it reused). A lookup first takes the exact prefix: a
radix tree over committed prompts (:mod:`engine.radix`, an index of tokens, no KV) gives the longest
committed prefix and the chunk layout of a prompt that had it; that prompt's resident chunks serve it in
place. From there it walks the prompt's own chunks:

1. at each chunk start: fingerprint hit -> the chunk's KV is reused; at its base position it is
   ``REUSE``, elsewhere ``REUSE_ROTATED`` with delta = target - base (MLA: only the 64-dim k_r is rotated,
   cKV is reused verbatim; the cost model prices the rotation, ``fused_rotation`` is informational here);
2. token-granular extension through a radix tree over the stored chunks' tokens (:mod:`engine.radix`,
   one root path per chunk, index only): the longest stored chunk whose beginning equals the prompt
   from here on (at least ``min_match`` tokens) is reused as far as it matches, and the walk goes on
   from where it stops, so a hit continues into the stored chunk that followed it;
3. still missing and ``tails`` (default) -> the longest run ending the chunk that ends a stored chunk
   (a radix tree over the stored chunks' reversed tokens, at least ``min_match`` tokens): the chunk that
   straddles the start of a shared region shares its end with the stored one;
4. still missing and ``s1`` (off by default) -> the rest is cut into fixed ``s1_window`` windows aligned
   to its start and to its end, each looked up in the window index (every stored chunk registers its
   start- and end-aligned windows as views into its KV).

First-chunk clip: reused KV landing at position 0 from another position has its first ``sink_tokens``
recomputed (attention sink). S2: marker edges (segments of kind ``marker`` or occurrences of the marker
token sequence) are hard chunk boundaries. Admission locks exactly the reused tokens and stores the
prompt's new chunks prefix first as far as they fit. Eviction: unlocked extents in key order
(``lru``/``lfu``/``fifo``, ties: later in the prompt first), lazily through a heap; chunks over an evicted
extent are cut to their head.

The extents, the registry and its indexes (prompt index, chunk trie, tail trie, S1 windows), accounting
and eviction live in :mod:`engine.policies.irminsul_store`; this module decides what to look up, lock
and add. Extents and the prompt index refer to the prompts' segments (:class:`~engine.seq.Seq`), so
``footprint()`` gives stored runs by reference.

NOTE (speed): the prompt index keeps each committed prompt's CDC layout; a prompt sharing ``L`` tokens with
one takes its cuts and fingerprints up to its last anchor ``c`` with ``c + min_chunk <= L`` and chunks
only from there (:func:`engine.cdc.layout_from`; the same cuts as chunking the whole prompt, tested), so
the tokens of a continued conversation's shared prefix are never made.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

import numpy as np

from pic import accel
from pic.engine import cdc, eviction
from pic.engine.plan import Action, Plan, Span
from pic.engine.policies import register
from pic.engine.policies.base import CachePolicy, Footprint, PolicyContext, RequestView, Usage
from pic.engine.policies.irminsul_layout import (
    NO_CUTS,
    NO_TOKENS,
    Analysis,
    Use,
    marker_boundaries,
    marker_cuts,
    tokens_from,
)
from pic.engine.policies.irminsul_layout import gaps as layout_gaps
from pic.engine.policies.irminsul_layout import pieces as layout_pieces
from pic.engine.policies.irminsul_records import Chunk, Extent
from pic.engine.policies.irminsul_store import ChunkStore
from pic.traces.markers import BOUNDARY_MARKER

_RELEASED: list = []  # never appended to

__all__ = ["Irminsul", "IrminsulConfig", "marker_boundaries"]


@dataclass(frozen=True, slots=True)
class IrminsulConfig:
    avg_chunk: int = field(default=256, metadata={"help": "expected CDC chunk size (tokens)"})
    min_chunk: int = field(default=64, metadata={"help": "minimum CDC chunk size (tokens)"})
    max_chunk: int = field(default=1024, metadata={
        "help": "maximum CDC chunk size (tokens); low-entropy runs are cut into whole periods up to it"})
    gear_seed: int = field(default=0, metadata={"help": "seed of the Gear hash table"})
    s1: bool = field(default=False, metadata={
        "help": "S1: re-look-up CDC misses as fixed windows (each stored chunk registers its windows; off by "
                "default: the tail trie finds what they find, token-granular and with no registry entries)"})
    s1_window: int = field(default=128, metadata={"help": "S1 window size (tokens)"})
    tails: bool = field(default=True, metadata={
        "help": "a missed chunk reuses the longest run ending it that ends a stored chunk (tail trie over "
                "reversed chunk tokens, token-granular; no registry entries)"})
    s2: bool = field(default=True, metadata={
        "help": "S2: boundary markers are hard chunk boundaries (default on; inert without markers)"})
    marker_tokens: str = field(default="", metadata={
        "help": "S2 marker as comma-separated token ids (empty: the built-in 64-token marker)"})
    sink_tokens: int = field(default=32, metadata={
        "help": "first-chunk clip: tokens recomputed when reused KV lands at position 0"})
    fused_rotation: bool = field(default=True, metadata={
        "help": "k_r rotation fused into the attention load (informational; the cost model prices it)"})
    eviction: str = field(default="lru", metadata={"help": "eviction order: lru | lfu | fifo"})
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


@register
class Irminsul(CachePolicy):
    name = "irminsul"
    Config = IrminsulConfig

    def __init__(self, ctx: PolicyContext, config: IrminsulConfig | None = None) -> None:
        super().__init__(ctx, config)
        c = self.config
        self._cdc, self._marker, self._key = c.cdc, c.marker, eviction.key(c.eviction)
        self._store = ChunkStore(self._key, c.s1_window, ctx.bytes_per_token, tails=c.tails,
                                 min_match=c.min_match, bounded=not math.isinf(ctx.capacity_bytes))
        self._entries = self._store.entries
        self._pending: dict[int, Analysis] = {}   # rid -> lookup's analysis
        self._live: dict[int, tuple[list[Extent], list[Chunk]]] = {}    # rid -> locked extents, new chunks
        self._chunks_used: list[Chunk] = []       # chunks the last _analyze read
        self.stats.extra.update(prefix_tokens=0, chunk_lookups=0, chunk_hits=0, extended_tokens=0, window_lookups=0,
                                window_hits=0, clipped_tokens=0, rotated_tokens=0, partly_stored=0, tail_tokens=0,
                                unstored_tokens=0)

    # ---- Public API -------------------------------------------------------------------------------
    def lookup(self, req: RequestView, now_us: int) -> Plan:
        self.stats.lookups += 1
        if self.stats.lookups == 1 and req.source is not None:
            # NOTE (speed): the trace's distinct tokens are what this policy will derive and chunk: announced
            # up front, the compiled kernels load now when that is worth it (pic.accel), not after 2^22 tokens
            accel.kernels(int(req.source.offsets[-1]))
        got = self._analyze(req)
        uses = got.uses
        # NOTE: recency per chunk: every extent of a chunk the plan reads is touched, so a chunk's unused
        # tail does not age out alone and take the chunk (its index entry) with it
        for x in {id(x): x for c in self._chunks_used for x, _, _ in c.pieces}.values():
            x.last_access_us = now_us
            x.hits += 1
        hits: list[list[int]] = []            # [start, end, source]: abutting pieces of equal delta merged
        for t, e, x, lo in uses:
            src = x.base_pos + lo
            if hits and hits[-1][1] == t and t - src == hits[-1][0] - hits[-1][2]:
                hits[-1][1] = e
            else:
                hits.append([t, e, src])
        plan = Plan.from_spans(req.num_tokens, [Span(a, b, Action.REUSE if a == src else Action.REUSE_ROTATED, src)
                                                for a, b, src in hits])
        if plan.num_reused:
            self.stats.hits += 1
            self.stats.extra["rotated_tokens"] += plan.num_rotated
        self._pending[req.request_id] = got
        if len(self._pending) > 4096:       # lookups never followed by admit (probes) must not pile up
            del self._pending[next(iter(self._pending))]
        return plan

    def admit(self, req: RequestView, plan: Plan, now_us: int) -> bool:
        rid = req.request_id
        if rid in self._live:
            raise ValueError(f"request {rid} admitted twice")
        got = self._pending.pop(rid, None)
        if got is None:
            got = self._analyze(req)
        bounds, fps, uses, toks, off = got.bounds, got.fps, got.uses, got.toks, got.off
        st = self._store
        if sum([b - a for a, b, _, _ in uses]) != plan.num_reused:
            return self._stale([])            # not the plan this cache answered
        locked: list[Extent] = []
        views: list[tuple[int, int, list[Extent]]] = []    # target range of each use -> its locked extents
        split = False
        for a, b, x, lo in uses:
            if x.parts is None and lo == 0 and b - a == x.size and x.alive:     # a whole extent: lock it
                if not x.refs:
                    st.evictable -= x.nbytes
                    st.protected += x.nbytes
                x.refs += 1
                locked.append(x)
                views.append((a, b, [x]))
                continue
            got_x = st.lock_range(x, lo, lo + b - a)
            if not got_x:                     # evicted since lookup: the plan is stale
                return self._stale(locked)
            split = True
            locked += got_x
            views.append((a, b, got_x))
        # a later lock may have split an extent an earlier use locked (the prompt reuses the same stored
        # run twice): views point at the live parts
        if split:
            views = [(a, b, xs if all(x.parts is None for x in xs) else [y for x in xs for y in st.parts_of(x)])
                     for a, b, xs in views]
        entries = self._entries
        fresh = [(fp, k) for k, fp in enumerate(fps) if fp not in entries]
        new = dict(fresh)                     # fp -> chunk index, first occurrence, in prompt order
        if len(new) < len(fresh):
            new = {}
            for fp, k in fresh:
                new.setdefault(fp, k)
        ends = [e for _, e, _ in views]       # views are disjoint, in target order
        # NOTE (speed): a chunk after the last reused range is recomputed whole (most new chunks); only the
        # others get their gaps listed
        last = ends[-1] if ends else 0
        ks = list(new.values())
        gaps = {k: layout_gaps(views, bisect_right(ends, bounds[k]), bounds[k], bounds[k + 1]) for k in ks
                if bounds[k] < last}
        need = sum([bounds[k + 1] - bounds[k] for k in ks])
        if gaps:
            need -= sum([bounds[k + 1] - bounds[k] - sum([b - a for a, b in g]) for k, g in gaps.items()])
        bpt = self.ctx.bytes_per_token
        room = self.ctx.capacity_bytes - st.evictable - st.protected
        if need * bpt > room:
            self.evict(int(need * bpt - room), now_us)
            room = self.ctx.capacity_bytes - st.evictable - st.protected
        src, chunks, full = req.seq, [], True
        m, tb = self.config.min_match, (got.tb or _int32_bytes(toks)) if new else b""
        m4 = 4 * m
        if not gaps and need * bpt <= room:
            # every new chunk is recomputed whole and fits: one own extent each (new_extent, register inline)
            for fp, k in new.items():
                a, b = bounds[k], bounds[k + 1]
                x = Extent(src, a, b - a, (b - a) * bpt, now_us, 1, fp)
                c = Chunk(fp, src, a, b - a, [[x, 0, b - a]], rid, [x],
                          (tb[4 * (a - off):4 * (a - off) + m4], tb[4 * (b - off) - m4:4 * (b - off)])
                          if tb and a >= off and b - a >= m else None)
                entries[fp] = c
                chunks.append(c)
            st.protected += need * bpt
            st.num_extents += len(chunks)
            new = {}
        for fp, k in new.items():
            a, b = bounds[k], bounds[k + 1]
            g = gaps[k] if k in gaps else [(a, b)]
            size = sum([e - s for s, e in g])
            cost = size * bpt
            if cost > room or (cost and not full):
                full = False
                self.stats.extra["unstored_tokens"] += cost // bpt
                continue
            room -= cost
            keys = (tb[4 * (a - off):4 * (a - off) + m4], tb[4 * (b - off) - m4:4 * (b - off)]) \
                if tb and a >= off and b - a >= m else None
            own = [st.new_extent(src, g0, g1 - g0, now_us) for g0, g1 in g]
            pieces = [[own[0], 0, b - a]] if len(g) == 1 and g[0] == (a, b) else \
                layout_pieces(views, bisect_right(ends, a), own, g, a, b)
            chunks.append(st.register(fp, src, a, b - a, pieces, rid, own, keys))
        self.stats.extra["partly_stored"] += not full
        self._live[rid] = (locked, chunks)
        self._pending[rid] = got._replace(uses=[], toks=NO_TOKENS, tb=b"")       # the layout, for commit
        return True

    def commit(self, req: RequestView, now_us: int) -> None:
        got = self._pending.pop(req.request_id, None)
        self._store.make_ready(self._live.get(req.request_id, ([], []))[1], now_us, self.config.s1)
        if got is not None and got.fps:
            self._store.prompts.add(req.seq, (got.bounds, got.fps, got.anchors, got.hard, got.marked), now_us,
                                   4 * self.ctx.capacity_tokens + 2**20)

    def release(self, req: RequestView, now_us: int) -> None:
        self._pending.pop(req.request_id, None)
        locked, chunks = self._live.pop(req.request_id, ([], []))
        st = self._store
        # NOTE: tail first (vLLM frees a request's blocks reversed): among extents of equal recency the
        # end of a prompt is evicted before its head, so a chunk loses its tail and keeps serving its head
        if all(c.ready for c in chunks):      # committed: nothing to drop, one pass over the extents
            xs = [x for c in reversed(chunks) for x in reversed(c.own)]
            for c in chunks:
                c.own = _RELEASED
            xs += reversed(locked)
            st.unlock_all(xs)
            return
        for c in reversed(chunks):
            alive = self._entries.get(c.fp) is c
            if alive and not c.ready:          # released without commit: its KV never materialized
                st.drop(c)
            for x in reversed(c.own):
                st.unlock(x)
            c.own = _RELEASED       # read only while its producer runs (fewer live objects for the GC)
        for x in reversed(locked):
            st.unlock(x)

    def evict(self, num_bytes: int, now_us: int) -> int:
        return self._store.evict(num_bytes, self.stats)

    def holds(self, req: RequestView) -> bool | None:
        """Every extent the request locked (the tokens its plan reuses, its own new KV) is resident."""
        live = self._live.get(req.request_id)
        if live is None:
            return None
        return all(self._store.live(x, 0, x.size) is not None for x in live[0] + [y for c in live[1] for y in c.own])

    def usage(self) -> Usage:
        st = self._store
        return Usage(st.evictable, st.protected, st.evictable + st.protected, self.ctx.capacity_bytes)

    def footprint(self) -> Footprint:
        """Registry entries = chunk fingerprints + S1 window fingerprints; runs = the extents."""
        st = self._store
        return Footprint(len(st.entries) + len(st.windows), st.stored_runs())

    # ---- Internal helpers -------------------------------------------------------------------------
    def _stale(self, locked: list[Extent]) -> bool:
        for x in locked:
            self._store.unlock(x)
        self.stats.rejected += 1
        self.stats.extra["stale_plans"] = self.stats.extra.get("stale_plans", 0) + 1
        return False

    def _analyze(self, req: RequestView) -> Analysis:
        """The prompt's CDC layout and, for each reused target range, ``(start, end, extent, offset in the
        extent)`` in prompt order (the source position is ``extent.base_pos + offset``)."""
        best, best_len, shared, other = self._store.prompts.best_layout(req.seq)
        got = self._layout(req, shared, other, best_len) if other is not None else None
        if got is None:
            got = self._full_layout(req)
        bl, fl, toks, off = got.bounds, got.fps, got.toks, got.off
        uses: list[Use] = []
        self._chunks_used: list[Chunk] = []
        ex = self.stats.extra
        n, k, m, tb = req.num_tokens, 0, self.config.min_match, None
        pos = self._prefix(req, best, best_len, uses)
        ex["prefix_tokens"] += pos
        # NOTE (speed): a chunk whose fingerprint, first and last ``min_match`` tokens are all unknown to the
        # store misses every stage (lookup, chunk trie, tail trie, no S1): told from slices of one bytes
        # copy of the tokens, with no array slice or call per chunk (most new content of a trace)
        fast = toks.dtype == np.int32 and not self.config.s1
        if fast:
            # the chunks starting at or after ``pos`` that some stage may serve ("hot"), in one pass; the walk
            # below jumps from a missed chunk to the next hot one
            st, tb = self._store, _int32_bytes(toks)
            get, heads, tails = self._entries.get, st._heads, st._tails if st.rtrie is not None else {}
            nt, m4 = toks.shape[0] + off, 4 * m
            k0 = bisect_right(bl, pos) - 1
            k0 += bl[k0] < pos
            hot = [k for k in range(k0, len(fl)) if get(fl[k]) is not None
                   or (nt - bl[k] >= m and tb[4 * (bl[k] - off):4 * (bl[k] - off) + m4] in heads)
                   or (bl[k + 1] - bl[k] >= m and tb[4 * (bl[k + 1] - off) - m4:4 * (bl[k + 1] - off)] in tails)]
            hot.append(len(fl))
            misses = 0
        while pos < n:
            while bl[k + 1] <= pos:
                k += 1
            a, b = bl[k], bl[k + 1]
            if fast and pos == a:
                h = hot[bisect_left(hot, k)]
                if h > k:                     # chunks k .. h - 1 miss every stage
                    misses += h - k
                    pos, k = bl[h], h
                    continue
            if pos == a:
                ex["chunk_lookups"] += 1
            e = self._get(fl[k], toks, a - off, b - off)
            if e is not None and pos == a:
                ex["chunk_hits"] += 1
            # NOTE: a longer run than the hit chunk needs a stored chunk that extends it (a trie child)
            if e is None:
                # NOTE (speed): the chunk store's head/tail keys sliced from one bytes copy of the tokens
                tb = _int32_bytes(toks) if tb is None else tb
                t_len, t_e = self._store.longest(toks[pos - off:pos - off + self.config.max_chunk],
                                                 head=tb and tb[4 * (pos - off):4 * (pos - off + m)])
            elif self._store.extendable(e):
                t_len, t_e = self._store.longest(toks[pos - off:pos - off + self.config.max_chunk], short=True)
            else:
                t_len, t_e = 0, None
            if t_len > (b - pos if e is not None else self.config.min_match - 1):
                ex["extended_tokens"] += t_len - (b - pos if e is not None else 0)
                self._span(uses, t_e, pos, pos + t_len, 0)
                pos += t_len
            elif e is not None:
                self._span(uses, e, pos, b, pos - a)
                pos = b
            else:
                rest = self._tail(toks, off, pos, b, uses, tb) if self.config.tails else b
                if self.config.s1 and rest > pos:
                    self._s1(toks, off, pos, rest, uses)
                pos = b
        if fast:
            ex["chunk_lookups"] += misses
        uses.sort(key=lambda u: u[0])        # S1 adds end-aligned windows after start-aligned ones
        return got._replace(uses=uses, tb=tb or b"")

    def _full_layout(self, req: RequestView) -> Analysis:
        """CDC over the whole prompt."""
        toks, n = req.tokens, req.num_tokens
        hard, marked = marker_cuts(req, toks, 0, self._marker) if self.config.s2 else (NO_CUTS, False)
        hard = cdc.clean_hard(hard, n)
        bounds, anchors = cdc.layout(toks, self._cdc, hard)
        return Analysis(bounds.tolist(), cdc.fingerprints(toks, bounds).tolist(), anchors.tolist(), hard, marked,
                         toks, 0, [])

    def _layout(self, req: RequestView, shared: int, other: tuple, best_len: int) -> Analysis | None:
        """The layout from a committed prompt ``other`` that shares the first ``shared`` tokens: its cuts up
        to its last anchor ``c`` with ``c + min_chunk <= shared`` (:func:`engine.cdc.layout`: the same cuts
        when the hard boundaries before ``c + min_chunk`` are the same too), CDC from ``c`` on. Only tokens
        from ``c - 63`` (and from where a marker could straddle the shared prefix's end, and from the chunk
        where the walk starts) are made. None when no anchor qualifies (CDC over the whole prompt then)."""
        pb, pf, panc, phard, pmarked = other
        m, n = self._cdc.min_chunk, req.num_tokens
        if pmarked:                           # marker occurrences in the shared prefix: found from scratch
            return None
        k = bisect_right(pb, shared - m) - 1
        while k > 0 and not panc[k]:
            k -= 1
        if k <= 0:
            return None
        c = pb[k]
        lo = max(0, c - (cdc.WINDOW - 1))
        ms = max(0, shared - self._marker.shape[0] + 1)    # a marker occurrence ending after the shared prefix
        if self.config.s2:
            lo = min(lo, ms)
        if best_len < c:
            lo = min(lo, pb[bisect_right(pb, best_len) - 1])
        toks = tokens_from(req, lo)
        hard, marked = NO_CUTS, False
        if self.config.s2:
            # NOTE: ``other`` holds no marker occurrence, so none lies wholly in the shared prefix here either
            hard, marked = marker_cuts(req, toks[ms - lo:], ms, self._marker)
            hard = cdc.clean_hard(hard, n)
            cap = c + m
            if not np.array_equal(hard[:np.searchsorted(hard, cap)], phard[:np.searchsorted(phard, cap)]):
                return None
        tb, tanc = cdc.layout_from(toks[max(0, c - (cdc.WINDOW - 1)) - lo:], max(0, c - (cdc.WINDOW - 1)), n, c,
                                   self._cdc, hard)
        fps = cdc.fingerprints(toks[c - lo:], tb - c).tolist()
        return Analysis(pb[:k] + tb.tolist(), pf[:k] + fps, panc[:k] + tanc.tolist(), hard, marked, toks, lo, [])

    def _get(self, fp: int, toks: np.ndarray, a: int, b: int) -> Chunk | None:
        e = self._entries.get(fp)
        if e is None or not e.ready or e.size != b - a:    # (a cut chunk serves its head only)
            return None
        if self.ctx.verify:
            self.stats.verified_hits += 1
            if not np.array_equal(e.tokens, toks[a:b]):
                self.stats.collisions += 1
                return None
        return e

    def _span(self, uses: list[Use], c: Chunk, a: int, b: int, off: int) -> None:
        """Reuse chunk ``c``'s KV from offset ``off`` for target ``[a, b)``, piece by piece (first-chunk
        clip at position 0)."""
        self._chunks_used.append(c)
        if a and len(c.pieces) == 1 and b > a:      # the common case: one piece, no clip
            x, xo, _ = c.pieces[0]
            uses.append((a, b, x, xo + off))
            return
        pieces = self._store.pieces(c, off, off + b - a)
        if a == 0 and pieces[0][0].base_pos + pieces[0][1] != 0:
            clip = min(self.config.sink_tokens, b)
            self.stats.extra["clipped_tokens"] += clip
            if clip >= b:
                return
            a, off = clip, off + clip
            pieces = self._store.pieces(c, off, off + b - a)
        for x, lo, hi, cpos in pieces:
            t = a + cpos - off
            uses.append((t, t + hi - lo, x, lo))

    def _prefix(self, req: RequestView, best: tuple | None, best_len: int, uses: list[Use]) -> int:
        """Exact prefix from the prompt index, served by the resident chunks of the committed prompt
        that covers most of it (``best``, ``best_len`` from
        :meth:`engine.policies.irminsul_prompts.PromptIndex.best_layout`, matched by segments: ``req.seq``);
        its length."""
        if best is None:
            return 0
        bounds, fps = best[0], best[1]
        entries, verify, used = self._entries, self.ctx.verify, self._chunks_used
        for j, fp in enumerate(fps):
            a = bounds[j]
            if a >= best_len:
                break
            b = min(bounds[j + 1], best_len)
            e = entries[fp]
            if verify:
                self.stats.verified_hits += 1
                if not np.array_equal(e.part(0, b - a), req.seq.tokens(a, b)):
                    self.stats.collisions += 1
                    return a
            if a and len(e.pieces) == 1 and b > a:      # _span's common case, inline
                used.append(e)
                x, xo, _ = e.pieces[0]
                uses.append((a, b, x, xo))
            else:
                self._span(uses, e, a, b, 0)
        return best_len

    def _tail(self, toks: np.ndarray, off: int, lo: int, hi: int, uses: list[Use], tb: bytes = b"") -> int:
        """A missed chunk ``[lo, hi)``: reuse the longest run ending at ``hi`` that ends a stored chunk
        (>= ``min_match`` tokens, tail trie); returns where the rest of the miss ends. ``toks``: the
        prompt's tokens from ``off`` on."""
        m = self.config.min_match
        n, c = self._store.longest_tail(toks[lo - off:hi - off],
                                        tb[4 * (hi - off - m):4 * (hi - off)] if tb and hi - off >= m else None)
        if n < self.config.min_match:
            return hi
        self.stats.extra["tail_tokens"] += n
        self._span(uses, c, hi - n, hi, c.size - n)
        return hi - n

    def _s1(self, toks: np.ndarray, base: int, lo: int, hi: int, uses: list[Use]) -> None:
        """Look ``[lo, hi)`` up as start-aligned, then end-aligned fixed windows (``toks``: the prompt's
        tokens from ``base`` on)."""
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
            got = self._store.window(toks[s - base:s - base + w])
            if got is None:
                continue
            e, off = got
            if self.ctx.verify:
                self.stats.verified_hits += 1
                if not np.array_equal(e.part(off, off + w), toks[s - base:s - base + w]):
                    self.stats.collisions += 1
                    continue
            ex["window_hits"] += 1
            covered.append((s, s + w))
            self._span(uses, e, s, s + w, off)


def _int32_bytes(toks: np.ndarray) -> bytes:
    """The tokens' bytes as the chunk store keys them (int32; empty: no keys from it)."""
    return toks.tobytes() if toks.dtype == np.int32 else b""
