"""The lookup walk of the ``irminsul`` policy (:mod:`engine.policies.irminsul`): a prompt's CDC layout (from
scratch, or resumed from a committed prompt's anchor) and what of it the store can serve — the exact prefix
from the prompt index, then per chunk a fingerprint hit, a chunk-trie extension, a tail-trie run, S1
windows — as reused target ranges (:data:`~engine.policies.irminsul_layout.Use`) in prompt order."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import compress, groupby, repeat
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from pic.engine import cdc
from pic.engine.policies.base import PolicyContext, PolicyStats, RequestView
from pic.engine.policies.irminsul_fresh import FreshContent, start_fresh
from pic.engine.policies.irminsul_index import KeyTable
from pic.engine.policies.irminsul_layout import (
    NO_CUTS,
    Analysis,
    Use,
    _may_mark,
    edge_arrays,
    marker_cuts,
    nothing_known,
    opaque_layout,
    query_key,
    tokens_from,
)
from pic.engine.policies.irminsul_records import Chunk, Extent, Run, flags, join_use, shared_ints
from pic.engine.policies.irminsul_store import ChunkStore

_START = itemgetter(0)

if TYPE_CHECKING:
    from pic.engine.policies.irminsul import IrminsulConfig


class ChunkWalk:
    """Lookup helpers mixed into :class:`~engine.policies.irminsul.Irminsul` (they read its config, context,
    stats and store, and record the extents of the chunks a walk read in ``_used_x``)."""

    config: IrminsulConfig
    ctx: PolicyContext
    stats: PolicyStats
    _store: ChunkStore
    _entries: dict[int, Chunk]
    _cdc: cdc.CDCConfig
    _marker: np.ndarray
    _used_x: list[Extent]
    _tail_bounds: tuple[int, np.ndarray | None]     # (k, bounds[k:] as an int64 array) of the last layout made
    # its chunks' edge keys, when the layout's call made them: (heads, tails, meta, q: where its query key is of)
    _tail_keys: tuple[list, list, np.ndarray, int] | None
    _shortcuts = True                 # the walk's answers without the walk where they are known (off: tests)
    _fresh: FreshContent | None | int = 0

    def _analyze(self, req: RequestView) -> Analysis:
        """The prompt's CDC layout and, for each reused target range, ``(start, end, extent, offset in the
        extent)`` in prompt order (the source position is ``extent.base_pos + offset``)."""
        if self._fresh is not None:           # (FreshContent: the segments of the prompts so far; 0: not started)
            self._fresh = self._fresh.note(req) if self._fresh else start_fresh(self, req)
        best, best_len, shared, other = self._store.prompts.best_layout(req.seq)
        got = self._layout(req, shared, other, best_len) if other is not None else None
        if got is None:
            got = self._full_layout(req)
            if best is None and self._tail_keys is not None and self._shortcuts and not self.config.s1:
                new = nothing_known(self._store, got, self._tail_keys)
                if new is not None:
                    self._used_x = []
                    self.stats.extra["chunk_lookups"] += len(got.fps)
                    return new
        bl, fl, toks, off = got.bounds, got.fps, got.toks, got.off
        uses: list[Use] = []
        self._used_x: list[Extent] = []
        ex = self.stats.extra
        n, k, m = req.num_tokens, 0, self.config.min_match
        pos = self._prefix(req, best, best_len, uses)
        ex["prefix_tokens"] += pos
        # NOTE (speed): a chunk whose fingerprint, first and last ``min_match`` tokens are all unknown to the
        # store misses every stage (lookup, chunk trie, tail trie, no S1): told from the keys of its first and
        # last ``min_match`` tokens (cdc.edge_keys: one call for the prompt's chunks from ``pos`` on), with no
        # array slice or call per chunk (most new content of a trace)
        fast = not self.config.s1
        heads_at: list[int] = []
        skip = -1                             # the straddling chunk, when it misses every stage (below)
        if fast:
            # the chunks from ``pos`` on that some stage may serve ("hot"), in one pass; the walk jumps from a miss to the next
            st = self._store
            entries, heads, tails = self._entries, st._heads, st._tails if st.rtrie is not None else {}
            # keys from the chunk holding ``pos`` (kc: new when it straddles the end of the exact prefix)
            kc = bisect_right(bl, pos) - 1
            k0 = kc + (bl[kc] < pos)
            kc = kc if bl[kc] >= off else k0          # (its tokens are made unless a --verify collision cut pos)
            kb, tb = self._tail_bounds        # bl[kb:] as the layout's array: no list -> array conversion
            meta = None
            if self._tail_keys is not None and kc >= kb:      # (made with the layout: opaque_layout, as lists)
                heads_at, tails_at, meta, q = self._tail_keys
                if kc > kb:
                    heads_at, tails_at = heads_at[kc - kb:], tails_at[kc - kb:]
            else:
                eb = tb[kc - kb:] if kc >= kb else np.array(bl[kc:], np.int64)
                ha, ta = cdc.edge_keys(toks, eb - off if off else eb, m)
                heads_at, tails_at = ha.tolist(), ta.tolist()
            if meta is not None and type(heads) is KeyTable and self._fresh and self._fresh.nothing_past(req, pos, kc, k0, bl, fl, m, entries):
                ex["chunk_lookups"] += len(fl) - k0      # (nothing stored past pos: the walk's answer, no probe)
                return Analysis(got.bounds, got.fps, got.anchors, got.hard, got.marked, toks, off, uses, kc, heads_at,
                                tails_at, got.chunks, (k0, [len(fl)], st._admissions), got.whole)
            ks = range(k0, len(fl))
            hot = [] if entries.keys().isdisjoint(fl[k0:]) else [*compress(ks, map(entries.__contains__, fl[k0:]))]
            # NOTE (speed): the chunk straddling the exact prefix's end (kc < k0; most lookups of a continued
            # conversation) misses every stage when its fingerprint is not registered, the key of its tokens from
            # ``pos`` (the layout's query key, :func:`query_key`) begins no indexed chunk and its tail key ends none:
            # asked with the others (its chunk trie and tail trie steps skipped: ``skip``)
            skip = kc if meta is not None and kc < k0 and q == pos else -1
            if type(heads) is KeyTable:
                # NOTE (speed): the prefilters as compiled key tables (long walks: Irminsul._use_tables) in one call
                if skip >= 0:
                    ha, ta = edge_arrays(meta, kc - kb)
                    ha[0] = meta[-1]          # (the straddling chunk's head: its list keeps it)
                    more = st.hot(ha, ta, kc)
                    if more and more[0] == kc:
                        skip = -1
                        del more[0]
                elif meta is not None:
                    ha, ta = edge_arrays(meta, k0 - kb)
                    more = st.hot(ha, ta, k0)
                else:
                    ha, ta = ha[k0 - kc:], ta[k0 - kc:]
                    more = st.hot(ha, ta, k0)
            else:
                # NOTE (speed): C-level passes (map + compress), no Python bytecode per chunk
                more = [*compress(ks, map(heads.__contains__, heads_at[k0 - kc:]))]
                more += compress(ks, map(tails.__contains__, tails_at[k0 - kc:]))
                if skip >= 0 and (query_key(meta) in heads or tails_at[0] in tails):
                    skip = -1
            if skip >= 0 and fl[kc] in entries:
                skip = -1
            if more:
                hot = sorted({*hot, *more})
            hot.append(len(fl))
            misses = 0
            if len(hot) == 1 and (bl[k0] == pos or skip == kc) and self._shortcuts:
                # NOTE (speed): nothing hot, no straddling chunk to walk (none, or it misses every stage): the walk's
                # answer (each chunk from k0 a miss) without it (most lookups of Mooncake conversation)
                ex["chunk_lookups"] += len(fl) - k0
                return Analysis(got.bounds, got.fps, got.anchors, got.hard, got.marked, toks, off, uses, kc, heads_at,
                                tails_at, got.chunks, (k0, hot, st._admissions), got.whole)
        while pos < n:
            if bl[k + 1] <= pos:              # the chunk holding pos (a bisect: past the exact prefix's chunks)
                k = bisect_right(bl, pos, k + 1) - 1
            a, b = bl[k], bl[k + 1]
            if fast and pos == a:
                h = hot[bisect_left(hot, k)]
                if h > k:                     # chunks k .. h - 1 miss every stage
                    misses += h - k
                    pos, k = bl[h], h
                    continue
            elif k == skip:                   # (the straddling chunk: so does the rest of it)
                pos = b
                continue
            if pos == a:
                ex["chunk_lookups"] += 1
            e = self._get(fl[k], toks, a - off, b - off)
            if e is not None and pos == a:
                ex["chunk_hits"] += 1
            # NOTE: a longer run than the hit chunk needs a stored chunk that extends it (a trie child)
            if e is None:
                t_len, t_e = self._store.longest(toks[pos - off:pos - off + self.config.max_chunk],
                                                 head=heads_at[k - kc] if fast and pos == a else None)
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
                rest = self._tail(toks, off, pos, b, uses, tails_at[k - kc] if fast else None) \
                    if self.config.tails else b
                if self.config.s1 and rest > pos:
                    self._s1(toks, off, pos, rest, uses)
                pos = b
        if fast:
            # NOTE (speed): without S1 every stage appends its ranges at or after where the walk stands: in
            # target order already (no sort)
            ex["chunk_lookups"] += misses
        else:
            uses.sort(key=_START)             # S1 adds end-aligned windows after start-aligned ones
        if fast:        # (positionally: NamedTuple._replace is a Python-level rebuild)
            return Analysis(got.bounds, got.fps, got.anchors, got.hard, got.marked, toks, off, uses, kc, heads_at, tails_at,
                            got.chunks, (k0, hot, st._admissions), got.whole)
        return got._replace(uses=uses)

    def _full_layout(self, req: RequestView) -> Analysis:
        """CDC over the whole prompt."""
        if not self.config.s2 or (req.source is not None and not _may_mark(req.source, self._marker)):
            got = opaque_layout(req, 0, 0, 0, self._cdc, self.config.min_match)    # (no hard boundary)
            if got is not None:
                # (the kernel's anchors as bytes of 0/1: flags's)
                toks, bounds, anchors, fps, heads, tails, meta = got
                self._tail_bounds, self._tail_keys = (0, None), (heads, tails, meta, -1)
                return Analysis(bounds, fps, anchors, NO_CUTS, False, toks, 0, [])
        self._tail_keys = None
        toks, n = tokens_from(req, 0), req.num_tokens
        hard, marked = marker_cuts(req, toks, 0, self._marker) if self.config.s2 else (NO_CUTS, False)
        hard = cdc.clean_hard(hard, n)
        bounds, anchors, fps = cdc.layout_fps(toks, self._cdc, hard)    # (one compiled call: no hard boundary)
        self._tail_bounds = (0, bounds)
        return Analysis(shared_ints(bounds.tolist()), fps.tolist(), flags(anchors), hard, marked, toks, 0, [])

    def _layout(self, req: RequestView, shared: int, other: tuple, best_len: int) -> Analysis | None:
        """The layout from a committed prompt ``other`` that shares the first ``shared`` tokens: its cuts up
        to its last anchor ``c`` with ``c + min_chunk <= shared`` (:func:`engine.cdc.layout`: the same cuts
        when the hard boundaries before ``c + min_chunk`` are the same too), CDC from ``c`` on. Only tokens
        from ``c - 63`` (and from where a marker could straddle the shared prefix's end, and from the chunk
        where the walk starts) are made. None when no anchor qualifies (CDC over the whole prompt then)."""
        pb, pf, panc, phard, pmarked = other[:5]
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
        base = max(0, c - (cdc.WINDOW - 1))
        # (a lean store: the chunks of the first k fingerprints as the prompt index keeps them, for admit; whether
        # that list was found all ready and whole)
        known = other[5][:k] if len(other) > 5 and other[5] is not None and self._store.lean else None
        whole = known is not None and self._store.prompts.found_whole(other)
        if not phard.size and (not self.config.s2 or (req.source is not None and not _may_mark(req.source, self._marker))):
            # no hard boundary here nor in ``other``: tokens, layout and edge keys from one call
            got = opaque_layout(req, lo, base, c, self._cdc, self.config.min_match, best_len)
            if got is not None:
                toks, tb, tanc, fps, heads, tails, meta = got
                self._tail_bounds, self._tail_keys = (k, None), (heads, tails, meta, best_len)
                return Analysis(pb[:k] + tb, pf[:k] + fps, bytes(panc[:k]) + tanc, NO_CUTS, False, toks, lo, [],
                                chunks=known, whole=whole)
        self._tail_keys = None
        toks = tokens_from(req, lo)
        hard, marked = NO_CUTS, False
        if self.config.s2:
            # NOTE: ``other`` holds no marker occurrence, so none lies wholly in the shared prefix here either
            hard, marked = marker_cuts(req, toks[ms - lo:], ms, self._marker)
            hard = cdc.clean_hard(hard, n)
            cap = c + m
            if (hard.size or phard.size) and \
                    not np.array_equal(hard[:np.searchsorted(hard, cap)], phard[:np.searchsorted(phard, cap)]):
                return None
        # (bounds, anchors and the chunks' fingerprints from one compiled call when there is no hard boundary)
        tb, tanc, fps = cdc.layout_from_fps(toks[base - lo:], base, n, c, self._cdc, hard)
        self._tail_bounds = (k, tb)
        return Analysis(pb[:k] + shared_ints(tb.tolist()), pf[:k] + fps.tolist(), bytes(panc[:k]) + flags(tanc), hard, marked, toks,
                        lo, [], chunks=known, whole=whole)

    def _get(self, fp: int, toks: np.ndarray, a: int, b: int) -> Chunk | None:
        e = self._entries.get(fp)
        if e is None or not e.ready:
            return None
        if type(e) is Run:                    # (a lean store's run: the chunk made of it)
            e = self._store.chunk_at(e, e.index(fp))
        if e.size != b - a:                   # (a cut chunk serves its head only)
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
        if a and len(c.pieces) == 1 and b > a:      # the common case: one piece, no clip
            x, xo, _ = c.pieces[0]
            self._used_x.append(x)
            uses.append((a, b, x, xo + off))
            return
        if a:
            # NOTE (speed): no clip away from position 0: the pieces' uses as ChunkStore.pieces lists them, in one
            # pass (chunks of several pieces: partly reused ones, ~1 per Mooncake conversation lookup)
            used, pos, end = self._used_x, 0, off + b - a
            for x, xo, n in c.pieces:
                used.append(x)
                if pos + n > off and pos < end:
                    lo, hi = max(off, pos), min(end, pos + n)
                    t = a + lo - off
                    uses.append((t, t + hi - lo, x, xo + lo - pos))
                pos += n
            return
        self._used_x += [p[0] for p in c.pieces]
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
        entries, verify = self._entries, self.ctx.verify
        # NOTE (speed): in a lean store the chunks of a run share its extent: a use that goes on in the same
        # extent where the last one ended, at an edge of a chunk that made it (an extent edge in the exact store,
        # whose runs are an extent per chunk), is the same use: one lock at admit, the exact store's lock edges
        lean, joint = self._store.lean, -1
        if verify:
            return self._prefix_verified(req, bounds, fps, best_len, uses)
        # the chunks starting before best_len (the last one clipped to it), their entries in one C-level pass
        jn = bisect_left(bounds, best_len)
        ends = bounds[1:jn + 1]
        if ends and ends[-1] > best_len:
            ends[-1] = best_len
        # (a lean store: the layout's chunks as the prompt index keeps them, not asked of the registry)
        cs = best[5] if lean and len(best) > 5 and best[5] is not None else None
        if cs is not None and Run in map(type, cs[:jn]):
            return self._prefix_runs(bounds, ends, cs[:jn], best_len, uses)
        have, t0, b0, x0, lo0, _ = self._chunk_uses(
            zip(bounds, ends, cs[:jn] if cs is not None else map(entries.__getitem__, fps[:jn]), strict=False),
            lean, uses, (False, 0, 0, None, 0, joint))
        if have:
            uses.append((t0, b0, x0, lo0))
        return best_len

    def _chunk_uses(self, chunks, lean: bool, uses: list[Use], state: tuple) -> tuple:
        """The exact prefix's walk over ``chunks`` (``(start, end, chunk)`` in target order, each served from its
        start): each chunk's use, extending the use in progress where it goes on in the same extent (a lean store,
        :meth:`_prefix`). ``state``: ``(have, t0, b0, x0, lo0, joint)``, the use in progress (listed in ``uses``
        once it ends) and where it ends at its chunk's end; returns it after the last chunk.
        NOTE (speed): the use being extended is kept in locals and listed once it ends."""
        used = self._used_x
        have, t0, b0, x0, lo0, joint = state
        for a, b, e in chunks:
            pieces = e.pieces
            if a and len(pieces) == 1 and b > a:      # _span's common case, inline
                x, xo, n = pieces[0]
                own = e.owner == x.owner
                if have and lean and (joint == a or (own and joint == -a - 1)) and x0 is x and lo0 + a - t0 == xo:
                    b0 = b                    # the same use goes on (x is listed in used already)
                else:
                    if have:
                        uses.append((t0, b0, x0, lo0))
                    used.append(x)
                    t0, b0, x0, lo0, have = a, b, x, xo, True
                # where this use ends at its chunk's end: b (an edge of the chunk that made x), -b - 1 (of a view)
                joint = -1 if b - a < n else b if own else -b - 1
            else:
                if have:
                    uses.append((t0, b0, x0, lo0))
                    have = False
                k = len(uses)
                self._span(uses, e, a, b, 0)
                join_use(uses, k, joint, a, e, lean)
                joint = -1
        return have, t0, b0, x0, lo0, joint

    def _prefix_runs(self, bounds: list[int], ends: list[int], cs: list, best_len: int, uses: list[Use]) -> int:
        """:meth:`_prefix` over a lean store's kept chunks some of which are runs (at their chunks' places:
        :meth:`~engine.policies.irminsul_runs.RunChunks.place`): the chunks of a run in a row are one step (the
        uses and ``joint`` the chunk by chunk walk gives them: all but the first go on in the use of the first);
        the other chunks take that walk (:meth:`_chunk_uses`), a group of equal ones at a time."""
        used, j, joint = self._used_x, 0, -1
        have, t0, b0, x0, lo0 = False, 0, 0, None, 0
        for e, g in groupby(cs):
            j2 = j + len([*g])
            if type(e) is Run:
                x = e.x
                if j == 0:                    # the chunk at position 0 (_span's path: its own use, no clip)
                    used.append(x)
                    uses.append((0, ends[0], x, 0))
                    joint = -1
                    j = 1
                    if j == j2:
                        continue
                a, b = bounds[j], ends[j2 - 1]
                xo = a - x.base_pos
                if have and (joint == a or joint == -a - 1) and x0 is x and lo0 + a - t0 == xo:
                    b0 = b
                else:
                    if have:
                        uses.append((t0, b0, x0, lo0))
                    used.append(x)
                    t0, b0, x0, lo0, have = a, b, x, xo, True
                joint = b if b == bounds[j2] else -1
                j = j2
                continue
            if j and j2 == j + 1 and len(e.pieces) > 1:
                # (one chunk of several pieces: the one that straddled a former prompt's end, most other chunks of a
                # continued conversation's kept list; _chunk_uses's step of it, without the call)
                if have:
                    uses.append((t0, b0, x0, lo0))
                    have = False
                k = len(uses)
                self._span(uses, e, bounds[j], ends[j], 0)
                join_use(uses, k, joint, bounds[j], e, True)
                joint, j = -1, j2
                continue
            have, t0, b0, x0, lo0, joint = self._chunk_uses(
                zip(bounds[j:j2], ends[j:j2], repeat(e), strict=False), True, uses, (have, t0, b0, x0, lo0, joint))
            j = j2
        if have:
            uses.append((t0, b0, x0, lo0))
        return best_len

    def _prefix_verified(self, req: RequestView, bounds: list[int], fps: list[int], best_len: int,
                         uses: list[Use]) -> int:
        """:meth:`_prefix` checking each chunk's tokens (``--verify``): up to the first collision."""
        entries, used = self._entries, self._used_x
        lean, joint = self._store.lean, -1
        for j, fp in enumerate(fps):
            a = bounds[j]
            if a >= best_len:
                break
            b = min(bounds[j + 1], best_len)
            e = self._store.chunk_of(entries[fp], fp)
            self.stats.verified_hits += 1
            if not np.array_equal(e.part(0, b - a), req.seq.tokens(a, b)):
                self.stats.collisions += 1
                return a
            if a and len(e.pieces) == 1 and b > a:      # _span's common case, inline
                x, xo, n = e.pieces[0]
                own = e.owner == x.owner
                if lean and (joint == a or (own and joint == -a - 1)):
                    t, _, y, lo = uses[-1]
                    if y is x and lo + a - t == xo:     # (x is listed in used already)
                        uses[-1] = (t, b, x, lo)
                        joint = -1 if b - a < n else b if own else -b - 1
                        continue
                used.append(x)
                uses.append((a, b, x, xo))
                joint = -1 if b - a < n else b if own else -b - 1
            else:
                k = len(uses)
                self._span(uses, e, a, b, 0)
                join_use(uses, k, joint, a, e, lean)
                joint = -1
        return best_len

    def _tail(self, toks: np.ndarray, off: int, lo: int, hi: int, uses: list[Use], key: int | None = None) -> int:
        """A missed chunk ``[lo, hi)``: reuse the longest run ending at ``hi`` that ends a stored chunk
        (>= ``min_match`` tokens, tail trie); returns where the rest of the miss ends. ``toks``: the
        prompt's tokens from ``off`` on; ``key``: the key of the ``min_match`` tokens ending at ``hi``, if known."""
        n, c = self._store.longest_tail(toks[lo - off:hi - off], key)
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

