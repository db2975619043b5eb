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

The extents, the registry, accounting and eviction live in :mod:`engine.policies.irminsul_store`, its
indexes in :mod:`~engine.policies.irminsul_prompts` (prompt index) and :mod:`~engine.policies.irminsul_index`
(chunk trie, tail trie, S1 windows); the lookup walk is :mod:`engine.policies.irminsul_lookup`; this module
holds the configuration and the policy's calls (lookup, admit, commit, release). Extents and the prompt index refer to the prompts' segments (:class:`~engine.seq.Seq`), so
``footprint()`` gives stored runs by reference.

NOTE (speed): the prompt index keeps each committed prompt's CDC layout; a prompt sharing ``L`` tokens with
one takes its cuts and fingerprints up to its last anchor ``c`` with ``c + min_chunk <= L`` and chunks
only from there (:func:`engine.cdc.layout_from`; the same cuts as chunking the whole prompt, tested), so
the tokens of a continued conversation's shared prefix are never made.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, is_, itemgetter, not_

import numpy as np

from pic import accel
from pic.engine import cdc, eviction
from pic.engine.plan import Plan
from pic.engine.policies import irminsul_tally, register
from pic.engine.policies.base import CachePolicy, Footprint, PolicyContext, RequestView, Usage
from pic.engine.policies.irminsul_layout import Analysis, first_of, marker_boundaries, plan_of_uses
from pic.engine.policies.irminsul_layout import gaps as layout_gaps
from pic.engine.policies.irminsul_layout import pieces as layout_pieces
from pic.engine.policies.irminsul_layout import tail_pieces as _tail_pieces
from pic.engine.policies.irminsul_lookup import ChunkWalk
from pic.engine.policies.irminsul_records import LEAN, RELEASED, Chunk, Extent, Run, new_chunk, new_extent
from pic.engine.policies.irminsul_records import end_run as _end_run
from pic.engine.policies.irminsul_store import ChunkStore
from pic.traces.markers import BOUNDARY_MARKER

_RELEASED, _READY, _PARTS, _END = RELEASED, attrgetter("ready"), attrgetter("parts"), itemgetter(1)  # (_RELEASED: never appended to)

__all__ = ["Irminsul", "IrminsulConfig", "marker_boundaries"]

_TABLES_AT, _TABLES_PER_LOOKUP = 64, 12     # lookups before the prefilters may turn compiled (Irminsul._use_tables)


@dataclass(frozen=True, slots=True)
class IrminsulConfig:
    avg_chunk: int = field(default=256, metadata={"help": "expected CDC chunk size (tokens)"})
    min_chunk: int = field(default=64, metadata={"help": "minimum CDC chunk size (tokens)"})
    max_chunk: int = field(default=1024, metadata={
        "help": "maximum CDC chunk size (tokens); low-entropy runs are cut into whole periods up to it"})
    gear_seed: int = field(default=0, metadata={"help": "seed of the CDC Gear values"})
    gear: str = field(default="mix", metadata={
        "help": "CDC Gear values: mix (a multiply-xorshift of the token id, the default) | table (a seeded "
                "2**16-entry table, the default before #12's tenth round: ~2x slower chunking, other cuts)"})
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
        return cdc.CDCConfig(self.avg_chunk, self.min_chunk, self.max_chunk, self.gear_seed, self.gear)

    @property
    def marker(self) -> np.ndarray:
        if not self.marker_tokens:
            return BOUNDARY_MARKER
        return np.array([int(x) for x in self.marker_tokens.split(",")], dtype=np.int32)


@register
class Irminsul(ChunkWalk, CachePolicy):
    name = "irminsul"
    Config, tally = IrminsulConfig, irminsul_tally.tally     # (tally: told, not asked: prefix_twin)

    def __init__(self, ctx: PolicyContext, config: IrminsulConfig | None = None) -> None:
        super().__init__(ctx, config)
        c = self.config
        self._cdc, self._marker, self._key = c.cdc, c.marker, eviction.key(c.eviction)
        self._store = ChunkStore(self._key, c.s1_window, ctx.bytes_per_token, tails=c.tails,
                                 min_match=c.min_match, bounded=not math.isinf(ctx.capacity_bytes))
        self._entries = self._store.entries
        self._prompts_cap = 4 * ctx.capacity_tokens + 2**20     # the prompt index's tokens at most
        self._pending: dict[int, Analysis | tuple] = {}   # rid -> lookup's analysis; after admit, its layout
        self._live: dict[int, tuple[list[Extent], list[Chunk]]] = {}    # rid -> locked extents, new chunks
        self._used_x: list[Extent] = []           # extents of the chunks the last _analyze read
        self._answered: tuple = (None, None)      # (request id, plan) of the last lookup
        self._hint = 0                            # the trace's distinct tokens (its source's), when known
        self.stats.extra.update(prefix_tokens=0, chunk_lookups=0, chunk_hits=0, extended_tokens=0, window_lookups=0,
                                window_hits=0, clipped_tokens=0, rotated_tokens=0, partly_stored=0, tail_tokens=0,
                                unstored_tokens=0)

    # ---- Public API -------------------------------------------------------------------------------
    def lookup(self, req: RequestView, now_us: int) -> Plan:
        self.stats.lookups += 1
        if self.stats.lookups == 1 and req.source is not None:
            # NOTE (speed): the trace's distinct tokens are what this policy will derive and chunk: announced
            # up front, the compiled kernels load now when that is worth it (pic.accel), not after 2^22 tokens
            self._hint = int(req.source.offsets[-1])
            accel.kernels(self._hint)
        if self.stats.lookups == _TABLES_AT:
            self._use_tables()
        got = self._analyze(req)
        # NOTE: recency per chunk: every extent of a chunk the plan reads is touched, so a chunk's unused
        # tail does not age out alone and take the chunk (its index entry) with it (the walk listed them)
        if self._used_x:
            self._store.touch_extents(self._used_x, now_us)
        plan, reused, rotated = plan_of_uses(req.num_tokens, got.uses)
        if reused:
            self.stats.hits += 1
            self.stats.extra["rotated_tokens"] += rotated
        self._pending[req.request_id] = got
        self._answered = (req.request_id, plan)
        if len(self._pending) > 4096:       # lookups never followed by admit (probes) must not pile up
            del self._pending[next(iter(self._pending))]
        return plan

    def admit(self, req: RequestView, plan: Plan, now_us: int) -> bool:
        rid = req.request_id
        if rid in self._live:
            raise ValueError(f"request {rid} admitted twice")
        got = self._pending.pop(rid, None)
        # NOTE (speed): the plan the last lookup answered with this analysis (the serving model admits right
        # after looking up) covers its uses by construction: no count of the plan's spans
        answered = got is not None and self._answered[1] is plan and self._answered[0] == rid
        if got is None:
            got = self._analyze(req)
        bounds, fps, uses = got.bounds, got.fps, got.uses
        st = self._store
        if answered and not uses and st.lean and not got.chunks and got.heads:
            new = st.admit_new(got, req.seq, now_us, self.ctx.capacity_bytes)     # (nothing found: one run)
            if new is not None:
                self._live[rid] = ([], new[0])
                self._pending[rid] = (bounds, fps, got.anchors, got.hard, got.marked, new[1], True)
                return True
        if not answered and sum([b - a for a, b, _, _ in uses]) != plan.num_reused:
            return self._stale([])            # not the plan this cache answered
        locked: list[Extent] = []
        views: list[tuple[int, int, list[Extent]]] = []    # target range of each use -> its locked extents
        n_x, bpt = st.num_extents, st.bpt     # (a lock that splits an extent makes one more)
        for a, b, x, lo in uses:
            hi = lo + b - a
            while x.parts is not None:        # a split extent: the part holding the range (where one does)
                left, right, at = x.parts
                if hi <= at:
                    x = left
                elif lo >= at:
                    x, lo, hi = right, lo - at, hi - at
                else:
                    break
            if x.parts is None and lo == 0 and hi == x.size and x.refs >= 0:     # a whole live extent: lock it
                if not x.refs:
                    st.evictable -= hi * bpt
                    st.protected += hi * bpt
                x.refs += 1
                locked.append(x)
                views.append((a, b, [x]))
                continue
            got_x = st.lock_range(x, lo, hi)
            if not got_x:                     # evicted since lookup: the plan is stale
                return self._stale(locked)
            locked += got_x
            views.append((a, b, got_x))
        # a later lock may have split an extent an earlier use locked (the prompt reuses the same stored
        # run twice): views point at the live parts (NOTE (speed): only when a locked extent is split now)
        if st.num_extents != n_x and any(map(_PARTS, locked)):
            views = [(a, b, xs if all(x.parts is None for x in xs) else [y for x in xs for y in st.parts_of(x)])
                     for a, b, xs in views]
        entries, nf, kw = self._entries, len(fps), -1
        # NOTE (speed): the chunks not in the registry in C-level passes (map, compress), no bytecode per chunk. A
        # lean store also lists the registry's chunk of each fingerprint (``cs``, filled as new chunks are made;
        # those of the first ones as the lookup read them): its registry only grows (no chunk is dropped or cut
        # while lean), so the prompt index keeps them with the layout and later walks of the layout read the
        # chunks without asking the registry (PromptIndex._served, ChunkWalk._prefix)
        if st.lean:
            known = got.chunks if answered and got.chunks else []
            hot = got.hot if answered else None
            nk = len(known)
            if hot is not None and hot[2] == st._admissions and hot[0] >= nk:
                # NOTE (speed): no admission since the lookup (a lean registry changes only there): the chunks
                # from h0 on that it did not find hot are not registered; only the hot ones are asked
                h0, hj = hot[0], hot[1][:-1]
                kw = h0 if not hj and (not nk or got.whole) else -1     # (cs[kw:]: this admission's chunks)
                if h0 > nk:
                    cs = known + [*map(entries.get, fps[nk:h0])]
                    cs += [None] * (nf - h0)
                else:
                    cs = known + [None] * (nf - h0)
                for k in hj:
                    cs[k] = entries.get(fps[k])
                if h0 > nk:
                    st.place(cs, range(nk, h0), bounds, fps)
                if hj:
                    st.place(cs, hj, bounds, fps)
                if hj:
                    ks = [*compress(range(nf), map(is_, cs, repeat(None)))]
                else:                         # (the prompt index keeps chunk lists without a None: ``known`` has none)
                    # NOTE (speed): a range where only the new suffix is new (most): no list made
                    ks = range(h0, nf)
                    for k in range(nk, h0):
                        if cs[k] is None:     # (a middle chunk not in the registry: the one the last turn's end cut)
                            ks = [k] if k == h0 - 1 else [i for i in range(k, h0) if cs[i] is None]
                            ks += range(h0, nf)
                            break
            else:
                cs = known + [*map(entries.get, fps[nk:])]
                st.place(cs, range(nk, nf), bounds, fps)
                ks = [*compress(range(nf), map(is_, cs, repeat(None)))]
        else:
            cs: list | None = None
            ks = [*compress(range(nf), map(not_, map(entries.__contains__, fps)))]
        room = self.ctx.capacity_bytes - st.evictable - st.protected
        # the new chunks: the first occurrence of each fingerprint, in prompt order. NOTE (speed): a lean store (it
        # always has room) registers them all and counts its registry after: one more entry each unless one repeats
        # (then undone and done again from the first ones; no set or dict of the prompt's fingerprints); any other
        # store tells repeats first (a set)
        post = st.lean and room == math.inf
        dups = not post and len(ks) > 1 and len(set(fps[ks[0]:ks[-1] + 1] if ks[-1] - ks[0] == len(ks) - 1
                                                     else map(fps.__getitem__, ks))) < len(ks)
        if dups:
            ks = first_of(ks, fps)
        # NOTE (speed): a chunk after the last reused range is recomputed whole (most new chunks); only the
        # others get their gaps listed. ks ascends, so the chunks starting before ``last`` are its first ones (a
        # bisect); views are disjoint, in target order
        last = views[-1][1] if views else 0
        j = bisect_left(ks, last, key=bounds.__getitem__) if last else 0
        gaps: dict[int, list[tuple[int, int]]] = {}
        for k in ks[:j]:                      # (views[bisect_right(views, a, key=_END)]: the first that ends after a)
            gaps[k] = layout_gaps(views, bisect_right(views, bounds[k], key=_END), bounds[k], bounds[k + 1])
        if room < math.inf:                   # (an unbounded store always has room: no count of what is needed)
            # new chunks in a row (most requests: all after the exact prefix) need the tokens between their ends
            if ks and ks[-1] - ks[0] == len(ks) - 1:
                need = bounds[ks[-1] + 1] - bounds[ks[0]]
            else:
                need = sum([bounds[k + 1] - bounds[k] for k in ks])
            if gaps:
                need -= sum([bounds[k + 1] - bounds[k] - sum([b - a for a, b in g]) for k, g in gaps.items()])
            if need * bpt > room:
                self.evict(int(need * bpt - room), now_us)
                room = self.ctx.capacity_bytes - st.evictable - st.protected
            fits = need * bpt <= room
        else:
            fits = True
        src, chunks, full = req.seq, [], True
        tag = st.admission(now_us)            # owner of what this admission makes (Extent.owner, Chunk.owner)
        m, k0, hk, tk = self.config.min_match, got.k0, got.heads, got.tails
        rest: Sequence[int] = ks              # the new chunks stored only as far as they fit
        n0, m0, x0, p0 = len(entries), len(st.made), st.num_extents, st.protected
        while fits:
            # every new chunk fits. NOTE (speed): one recomputed whole (most) gets one own extent, built inline
            # (new_extent and register); only the ones a reused range overlaps take the general path. A lean
            # store (unbounded) gives each run of them in a row one extent, each chunk a piece of it
            # NOTE (speed): a run's size and bytes are set once it ends (its chunks do not read them)
            whole, lean, run, run_end, rb = 0, st.lean, None, -1, 0
            # NOTE (speed): a lean store keeps the rows of new chunks recomputed whole (after the gap ones) each as
            # one record (Run, made after the loop), when their keys are known
            runs = lean and hk and j < len(ks) and ks[j] >= k0
            for k in (ks[:j] if runs else ks):
                fp = fps[k]
                a, b = bounds[k], bounds[k + 1]
                n = b - a
                keys = (hk[k - k0], tk[k - k0]) if k >= k0 and hk and n >= m else None
                if k in gaps:
                    g = gaps[k]
                    if len(g) == 1:
                        g0, g1 = g[0]
                        own = [st.new_extent(src, g0, g1 - g0, now_us, tag)]
                        if g0 == a and g1 == b:
                            pieces = ((own[0], 0, n),)
                        elif g1 == b:         # (the chunk straddling the end of the reused prefix: most)
                            pieces = _tail_pieces(views, bisect_right(views, a, key=_END), own[0], g0, a, b)
                        else:
                            pieces = layout_pieces(views, bisect_right(views, a, key=_END), own, g, a, b)
                    else:
                        own = [st.new_extent(src, g0, g1 - g0, now_us, tag) for g0, g1 in g]
                        pieces = layout_pieces(views, bisect_right(views, a, key=_END), own, g, a, b)
                    chunks.append(st.register(fp, src, a, n, pieces, tag, own, keys))
                    if cs is not None:
                        cs[k] = chunks[-1]
                    continue
                if lean:
                    if a == run_end:          # the run goes on: this chunk is its next piece
                        c = new_chunk(fp, src, a, n, ((run, a - rb, n),), tag, _RELEASED, keys)
                    else:
                        if run is not None:
                            whole += _end_run(run, run_end - rb)
                        run, rb = new_extent(src, a, n, now_us, 1, LEAN, tag), a
                        c = new_chunk(fp, src, a, n, ((run, 0, n),), tag, [run], keys)
                        st.num_extents += 1
                        st.made.append((run, bounds, k))      # (its chunks' edges, for stored_runs)
                    run_end = b
                else:
                    x = new_extent(src, a, n, now_us, 1, {fp}, tag)
                    c = new_chunk(fp, src, a, n, ((x, 0, n),), tag, [x], keys)
                    st.num_extents += 1
                    whole += n
                entries[fp] = c
                chunks.append(c)
                if cs is not None:
                    cs[k] = c
            if run is not None:
                whole += _end_run(run, run_end - rb)
            if runs:
                whole += st.add_runs(ks[j:], bounds, fps, hk, tk, k0, src, now_us, tag, chunks, cs)
            if post and len(entries) - n0 != len(ks):      # a fingerprint repeats: undone, its first chunk kept
                for k in ks:                  # (the registry held none of them)
                    entries.pop(fps[k], None)
                    cs[k] = None
                chunks = []
                del st.made[m0:]
                st.num_extents, st.protected = x0, p0
                ks, dups = first_of(ks, fps), True
                j = bisect_left(ks, last, key=bounds.__getitem__) if last else 0
                kept = set(ks[:j])
                gaps = {k: g for k, g in gaps.items() if k in kept}
                continue
            st.protected += whole * bpt
            rest = []
            break
        for k in rest:
            fp = fps[k]
            a, b = bounds[k], bounds[k + 1]
            g = gaps[k] if k in gaps else [(a, b)]
            size = sum([e - s for s, e in g])
            cost = size * bpt
            if cost > room or (cost and not full):
                full = False
                self.stats.extra["unstored_tokens"] += cost // bpt
                continue
            room -= cost
            keys = (hk[k - k0], tk[k - k0]) if k >= k0 and hk and b - a >= m else None
            own = [st.new_extent(src, g0, g1 - g0, now_us, tag) for g0, g1 in g]
            pieces = ((own[0], 0, b - a),) if len(g) == 1 and g[0] == (a, b) else \
                layout_pieces(views, bisect_right(views, a, key=_END), own, g, a, b)
            chunks.append(st.register(fp, src, a, b - a, pieces, tag, own, keys))
        if not full:
            self.stats.extra["partly_stored"] += 1
        self._live[rid] = (locked, chunks)
        # (every new chunk stored and no fingerprint repeated: each None of ``cs`` got its chunk)
        if cs is not None and (dups or rest) and None in cs:    # a fingerprint again later in the prompt, or one not stored
            js = [*compress(range(len(cs)), map(is_, cs, repeat(None)))]
            for k in js:
                cs[k] = entries.get(fps[k])
            if None in cs:
                cs = None
            else:
                st.place(cs, js, bounds, fps)
        # the layout as the prompt index keeps it, for commit (NOTE (speed): a plain tuple, made once), and whether its
        # chunks are all ready and whole once this request commits (its own, after kept ones found so: PromptIndex.add)
        whole = kw >= 0 and not dups and cs is not None and all(
            c.owner == tag or c.ready and c.size >= bounds[j + 1] - bounds[j] for j, c in enumerate(cs[nk:kw], nk))
        self._pending[rid] = (got.bounds, got.fps, got.anchors, got.hard, got.marked, cs, whole)
        return True

    def commit(self, req: RequestView, now_us: int) -> None:
        got = self._pending.pop(req.request_id, None)
        live = self._live.get(req.request_id)
        self._store.make_ready(live[1] if live is not None else [], now_us, self.config.s1)
        if got is not None and got[1]:       # (admit's layout tuple; a lookup's analysis when not admitted)
            layout = got if type(got) is tuple else (got.bounds, got.fps, got.anchors, got.hard, got.marked, got.chunks)
            self._store.prompts.add(req.seq, layout, now_us, self._prompts_cap)

    def release(self, req: RequestView, now_us: int) -> None:
        self._pending.pop(req.request_id, None)
        locked, chunks = self._live.pop(req.request_id, ([], []))
        st = self._store
        ready = st.lean and all(map(_READY, chunks))
        if not ready:
            chunks = st.expand(chunks)        # (runs: their chunks, which own the extents once the store is exact)
        # NOTE: tail first (vLLM frees a request's blocks reversed): among extents of equal recency the
        # end of a prompt is evicted before its head, so a chunk loses its tail and keeps serving its head
        if ready or all(map(_READY, chunks)):     # committed: nothing to drop, one pass over the extents
            # (most chunks of a lean run own nothing: their own list is already _RELEASED; one pass finds the rest)
            xs: list[Extent] = []
            for c in reversed(chunks):        # (each chunk once: admit made them)
                if c.own is not _RELEASED:
                    xs += reversed(c.own)
                    c.own = _RELEASED
                    if type(c) is Run and c.cs is not None and c.cs[0] is not None:
                        c.cs[0].own = _RELEASED
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
        chunks = live[1] if self._store.lean else self._store.expand(live[1])
        return all(self._store.live(x, 0, x.size) is not None for x in live[0] + [y for c in chunks for y in c.own])

    def usage(self) -> Usage:
        st = self._store
        return Usage(st.evictable, st.protected, st.evictable + st.protected, self.ctx.capacity_bytes)

    def resident_bytes(self) -> int:      # usage().total (NOTE (speed): asked twice per request; no Usage made)
        return self._store.evictable + self._store.protected

    def footprint(self) -> Footprint:
        """Registry entries = chunk fingerprints + S1 window fingerprints; runs = the extents."""
        st = self._store
        return Footprint(len(st.entries) + len(st.windows), st.stored_runs())

    # ---- Internal helpers -------------------------------------------------------------------------
    def _use_tables(self) -> None:
        """The store's prefilters as compiled key tables (:class:`~engine.policies.irminsul_index.KeyTable`) from
        now on, when the kernels are loaded and the walks so far asked about ``_TABLES_PER_LOOKUP`` chunks per
        lookup or more. NOTE (speed): the tables are asked in one compiled call per lookup (~5-8 us) instead of two
        dict probes per chunk and two Counter updates per commit (~0.2 us each, a cache miss each on Mooncake
        conversation's ~370 k chunks): worth it for long new content per prompt (Mooncake conversation: ~30 chunks),
        not for short (Azure conversation: ~5)."""
        if self.stats.extra["chunk_lookups"] < _TABLES_PER_LOOKUP * self.stats.lookups:
            return
        fast = accel.kernels(0, "irm")
        if fast is None:
            return
        # NOTE (speed, memory): sized up front for a chunk per avg_chunk distinct tokens of the trace (up to 2^20 keys
        # each: no rehash of a table while it grows there, nor the page faults of its smaller copies)
        self._store.use_tables(fast, min(20, max(12, (2 * self._hint // self.config.avg_chunk).bit_length())))

    def _stale(self, locked: list[Extent]) -> bool:
        for x in locked:
            self._store.unlock(x)
        self.stats.rejected += 1
        self.stats.extra["stale_plans"] = self.stats.extra.get("stale_plans", 0) + 1
        return False
