"""Prompt-analysis helpers of the ``irminsul`` policy (:mod:`engine.policies.irminsul`): the prompt's tokens
from a position, S2 marker cuts, the lookup's analysis record, the plan of its reused target ranges
(:func:`plan_of_uses`), and the admit-time gap/piece arithmetic over them. Pure functions of their arguments, no
policy state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from pic import accel
from pic.engine import cdc
from pic.engine.plan import Action, Plan, Span
from pic.engine.plan import _trusted_plan as _plan
from pic.engine.plan import _trusted_span as _span
from pic.engine.policies.base import RequestView
from pic.engine.policies.irminsul_index import KeyCounts
from pic.engine.policies.irminsul_records import Extent, shared_ints
from pic.traces.content import _MASK, OPAQUE_VOCAB
from pic.traces.markers import find_markers
from pic.traces.schema import KIND_CODE

_MARKER_KIND = KIND_CODE["marker"]
NO_CUTS = np.zeros(0, np.int64)


def tokens_from(req: RequestView, lo: int) -> np.ndarray:
    """int32: the prompt's tokens ``[lo, N)``, its segments from the one holding ``lo`` gathered in one
    vectorized call (as ``req.tokens`` makes all of them; ``Seq.tokens`` derives opaque pieces one by one).

    NOTE (speed): a prompt of opaque segments only (Mooncake, Azure) is derived by one kernel call from columns
    of its store made once (``key ^ salt``, lengths, which rows are opaque): ~6 numpy calls per prompt instead
    of :meth:`~traces.content.Segments.gather`'s ~18, and none of the tokens before ``lo`` (the same tokens)."""
    src, rows = req.source, req.segment_rows
    if src is None or rows is None or req._tokens is not None:
        return req.tokens[lo:] if lo else req.tokens
    sb = req.segment_bounds
    i = int(sb.searchsorted(lo, side="right")) - 1
    s0 = int(sb[i])
    cols = _columns(src)
    if cols is not None and lo < req.num_tokens:
        fast = accel.kernels(req.num_tokens - s0)
        r = rows[i:]
        if fast is not None and (cols[4] or cols[3][r].all()):
            ls = cols[2][r]
            starts = np.zeros(ls.shape[0], np.int64)
            starts[0] = lo - s0
            ls[0] -= lo - s0
            out = np.empty(req.num_tokens - lo, np.int32)
            fast.opaque_fill(cols[1][r], True, starts, ls, _MASK, out)
            return out
    return src.gather(rows[i:])[lo - s0:]


def opaque_layout(req: RequestView, lo: int, base: int, start: int, cfg, m: int, q: int = -1) -> tuple | None:
    """``(toks, bounds, anchors, fps, heads, tails, meta)`` of the prompt (no hard boundary) from one compiled call
    (:func:`pic._accel_numba_cdc.prompt_layout`): its tokens ``[lo, N)`` as :func:`tokens_from` makes them (an
    array), its CDC layout (``cfg``) of tokens ``[base, N)`` from ``start`` (bounds a list, anchors as bytes: 1 or 0
    per bound) with the chunks' fingerprints, and their edge keys of ``m`` tokens (:func:`engine.cdc.edge_keys` in
    ``toks``) (lists); ``meta``: the kernel's array of them all (:func:`edge_arrays` gives the keys as arrays; its last
    item is the key of the ``m`` tokens from ``q``, where ``lo <= q <= N - m``, :func:`query_key`). None
    unless the prompt is made of a store's opaque segments only and the kernels are loaded (and the kernel decides
    alone): the caller takes the general path.

    NOTE (speed): one call per prompt instead of three (:func:`tokens_from`, the layout, the edge keys), with no
    numpy set-up between them: ~20 us less per prompt; its answers in one array, made lists by one ``tolist``."""
    src, rows = req.source, req.segment_rows
    if src is None or rows is None or req._tokens is not None:
        return None
    # NOTE (speed): the store's columns and the chunking's kernel arguments of the last store and ``cfg`` asked
    # kept (one trace, one policy config: every call), not looked up per prompt (~2 us per prompt)
    global _LAST_OPAQUE
    got = _LAST_OPAQUE              # (an immutable tuple, replaced whole)
    if got[0] is not src or got[1] is not cfg:
        cols = _columns(src)
        got = _LAST_OPAQUE = (src, cfg, None if cols is None or not cols[5] else (
            cols[1], cols[2], *cdc._kernel_gear(cfg.seed, cfg.gear), cfg.threshold, cfg.min_chunk, cfg.max_chunk))
    args = got[2]
    n = req.num_tokens
    if args is None:
        return None
    fast = accel.kernels(n - lo, "cdc")
    if fast is None:
        return None
    if not (0 <= lo <= base <= max(0, start - (cdc.WINDOW - 1)) and start < n and n - 1 > max(start, cdc.WINDOW - 1)
            and n > cdc.WINDOW):
        return None
    kx, lens, table, key, thr, mn, mx = args
    toks, meta, ok = fast.prompt_layout(kx, lens, rows, lo, _MASK, table, key, thr, base, mn, start, n, mx, m, q)
    if not ok:
        return None
    v = meta.tolist()
    nb = (len(v) + 2) // 5
    h, t, a = 2 * nb - 1, 3 * nb - 2, 4 * nb - 3
    return toks, shared_ints(v[:nb]), bytes(v[a:-1]), v[nb:h], v[h:t], v[t:a], meta


def edge_arrays(meta: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The heads and tails of :func:`opaque_layout`'s ``meta`` from chunk ``d`` on, as ``uint64`` arrays (views)."""
    nb = (meta.shape[0] + 2) // 5
    return meta[2 * nb - 1 + d:3 * nb - 2], meta[3 * nb - 2 + d:4 * nb - 3]


def query_key(meta: np.ndarray) -> int:
    """The key of the ``m`` tokens from ``q`` that :func:`opaque_layout` made (0 where it made none)."""
    return int(meta[-1])


_LAST_OPAQUE: tuple = (None, None, None)    # (store, CDC config, kernel arguments or None) of opaque_layout


def _columns(store) -> tuple | None:
    """``(store, key ^ salt, lengths, opaque, all opaque, none stored)`` per segment of a
    :class:`~pic.traces.content.Segments` with opaque segments (``opaque``: derived and not empty, as
    :meth:`~traces.content.Segments.gather` tells them; ``none stored``: no segment stores tokens, all are opaque
    or empty), made once per store; None without opaque segments."""
    got = _COLUMNS.get(id(store))
    if got is not None and got[0] is store:
        return got[1]
    cols = None
    if store.token_offsets is not None and store.keys is not None and store.salts is not None:
        lens = np.diff(store.offsets).astype(np.int64)
        derived = np.diff(store.token_offsets) == 0
        opq = derived & (lens > 0)
        cols = (store, np.ascontiguousarray(store.keys ^ store.salts, np.uint64), lens, opq, bool(opq.all()),
                bool(derived.all()))
    _COLUMNS[id(store)] = (store, cols)
    if len(_COLUMNS) > 8:
        del _COLUMNS[next(iter(_COLUMNS))]
    return cols


_COLUMNS: dict[int, tuple] = {}


def marker_boundaries(req: RequestView, marker: np.ndarray) -> np.ndarray:
    """S2 hard chunk boundaries: both edges of every occurrence of ``marker`` and of every ``marker``
    segment (int64, unsorted; ``cdc.chunk`` cleans them)."""
    return marker_cuts(req, req.tokens, 0, marker)[0]


def marker_cuts(req: RequestView, toks: np.ndarray, off: int, marker: np.ndarray) -> tuple[np.ndarray, bool]:
    """:func:`marker_boundaries` with the occurrences searched in ``toks`` = the prompt's tokens from ``off``
    on (exact when no occurrence lies wholly before ``off + len(marker) - 1``), and whether any was found."""
    if req.source is not None and not _may_mark(req.source, marker):
        return NO_CUTS, False
    m = marker.shape[0]
    starts = find_markers(toks, marker)
    idx = np.flatnonzero(req.segment_kinds == _MARKER_KIND)
    if not starts.shape[0] and not idx.shape[0]:
        return NO_CUTS, False
    sb = req.segment_bounds
    return np.concatenate([starts + off, starts + (off + m), sb[idx], sb[idx + 1]]).astype(np.int64), \
        bool(starts.shape[0])


def _may_mark(store, marker: np.ndarray) -> bool:
    """Whether a prompt made of ``store``'s segments (a :class:`~pic.traces.content.Segments`) may hold a
    ``marker`` segment or an occurrence of ``marker``: a segment of kind marker, or a token equal to its first
    (stored tokens; opaque ones lie in ``[0, OPAQUE_VOCAB)``). Decided once per store and marker start.

    NOTE (speed): a trace without any (Mooncake, Azure: opaque blocks only) skips the marker search of every
    prompt (a pass over its tokens and one over its segments' kinds)"""
    global _LAST_MARK
    last = _LAST_MARK               # (an immutable tuple, replaced whole)
    if last[0] is store and last[1] is marker:      # (NOTE (speed): one policy, one trace: every call)
        return last[2]
    t = int(marker[0]) if marker.shape[0] else -1
    got = _MAY_MARK.get((id(store), t))
    if got is not None and got[0] is store:
        may = got[1]
    else:
        may = bool((store.kinds == _MARKER_KIND).any()) or bool((store.tokens == t).any()) or \
            (store.token_offsets is not None and 0 <= t < OPAQUE_VOCAB)
        _MAY_MARK[(id(store), t)] = (store, may)
        if len(_MAY_MARK) > 8:
            del _MAY_MARK[next(iter(_MAY_MARK))]
    _LAST_MARK = (store, marker, may)
    return may


_MAY_MARK: dict[tuple[int, int], tuple[object, bool]] = {}
_LAST_MARK: tuple = (None, None, False)     # (store, marker array, _may_mark) of the last call decided

Use = tuple[int, int, Extent, int]   # target start, target end, extent, offset in the extent
NO_TOKENS = np.zeros(0, np.int32)


class Analysis(NamedTuple):
    """A lookup's analysis of one prompt: its CDC layout (``bounds``, chunk fingerprints ``fps``, which
    bounds are ``anchors``, its cleaned ``hard`` boundaries, whether a marker occurrence was ``marked``;
    kept in the prompt index at commit), the reused target ranges ``uses``, and the prompt's tokens from
    ``off`` on (``toks``) that admit copies new chunks from."""

    bounds: list[int]
    fps: list[int]
    anchors: bytes                # one byte (0/1) per bound (irminsul_lookup._flags)
    hard: np.ndarray
    marked: bool
    toks: np.ndarray
    off: int
    uses: list[Use]
    k0: int = 0                 # heads[j], tails[j]: cdc.edge_keys of chunk k0 + j (fast walks; else empty)
    heads: list[int] | tuple = ()
    tails: list[int] | tuple = ()
    # a lean store's chunks of the fingerprints (lookup: of the first ones, where the layout resumed a committed
    # prompt's; admit: of all, kept with the layout by the prompt index); else None
    chunks: list | None = None
    # a fast walk's ``(k0, hot, admissions)``: the chunks from ``k0`` on that some stage may serve, ascending (every
    # one whose fingerprint is registered among them; ends with len(fps)), and the store's admissions then; else None
    hot: tuple | None = None
    # ``chunks`` are the first ones of a kept list found all ready and whole (PromptIndex._whole), or there are none
    whole: bool = False


def nothing_known(st, got: Analysis, keys: tuple) -> Analysis | None:
    """The lookup's analysis (every chunk a miss: no use, ``hot`` only the end) of a prompt of no exact prefix laid out
    from scratch (``got``; ``keys``: its chunks' head and tail keys first) when store ``st``'s prefilters are counters
    and it knows none of its fingerprints, head keys and (with a tail trie) tail keys; else None (the walk decides).

    NOTE (speed): three C-level ``isdisjoint`` passes, no walk (most Azure conversation lookups: no prefix, ~5 chunks)."""
    heads, hk, tk, fl = st._heads, keys[0], keys[1], got.fps
    if type(heads) is not KeyCounts or not (st.entries.keys().isdisjoint(fl) and heads.keys().isdisjoint(hk) and (
            st.rtrie is None or st._tails.keys().isdisjoint(tk))):
        return None
    return Analysis(got.bounds, fl, got.anchors, got.hard, got.marked, got.toks, 0, [], 0, hk, tk, None,
                    (0, [len(fl)], st._admissions), False)


def first_of(ks: Sequence[int], fps: list[int]) -> list[int]:
    """Those of chunk indices ``ks`` (ascending) whose fingerprint no earlier one of them has."""
    first: dict[int, int] = {}
    for k in ks:
        first.setdefault(fps[k], k)
    return list(first.values())


def gaps(views: list[tuple[int, int, list[Extent]]], i: int, a: int, b: int) -> list[tuple[int, int]]:
    """The recomputed runs of target ``[a, b)``: what no reused range covers (``views`` in target order;
    ``views[i]`` is the first that ends after ``a``)."""
    out, pos = [], a
    for j in range(i, len(views)):
        s, e, _ = views[j]
        if s >= b:
            break
        if s > pos:
            out.append((pos, s))
        pos = max(pos, e)
    if pos < b:
        out.append((pos, b))
    return out


def pieces(views: list[tuple[int, int, list[Extent]]], i: int, own: list[Extent], gaps: list[tuple[int, int]],
            a: int, b: int) -> list[list]:
    """Pieces ``[extent, offset, length]`` of target ``[a, b)``: views into the locked extents of the
    reused ranges (from ``views[i]``, the first that ends after ``a``), and the chunk's own new extents
    over its recomputed runs, in token order."""
    parts: list[tuple[int, list]] = [(g0, [x, 0, g1 - g0]) for x, (g0, g1) in zip(own, gaps, strict=True)]
    parts += _view_pieces(views, i, a, b)
    parts.sort(key=lambda p: p[0])
    return tuple([p for _, p in parts])


def tail_pieces(views: list[tuple[int, int, list[Extent]]], i: int, x: Extent, g0: int, a: int, b: int) -> tuple:
    """``pieces(views, i, [x], [(g0, b)], a, b)`` of a chunk ``[a, b)`` whose one recomputed run ``[g0, b)`` (its
    own extent ``x``) ends it (the chunk straddling the end of a reused prefix: most of those a reused range
    overlaps): the reused ranges' pieces (in target order already: the views are disjoint and end before ``g0``),
    then ``x``'s. NOTE (speed): no sort, no key function."""
    out: list = [p for _, p in _view_pieces(views, i, a, b)]
    out.append([x, 0, b - g0])
    return tuple(out)


def _view_pieces(views: list[tuple[int, int, list[Extent]]], i: int, a: int, b: int) -> list[tuple[int, tuple]]:
    """``(target start, (extent, offset, length))`` of the reused ranges' pieces inside target ``[a, b)``, in
    target order (from ``views[i]``, the first that ends after ``a``)."""
    out = []
    for j in range(i, len(views)):
        s, e, xs = views[j]
        if s >= b:
            break
        t = s
        for x in xs:                       # the locked extents tile [s, e) in order
            lo, hi = max(t, a), min(t + x.size, b)
            if lo < hi:
                out.append((lo, (x, lo - t, hi - lo)))
            t += x.size
    return out


_REUSE, _ROTATED, _RECOMPUTE = Action.REUSE, Action.REUSE_ROTATED, Action.RECOMPUTE

def plan_of_uses(n: int, uses: list[Use]) -> tuple[Plan, int, int]:
    """The plan of a prompt of ``n`` tokens that reuses ``uses`` (a walk's, disjoint, in target order) and
    recomputes the rest, its reused and rotated tokens: abutting uses of equal delta (target - source) are one
    span (:func:`_plan_of`)."""
    if not uses:        # NOTE (speed): nothing reused (most Azure conversation lookups): no hits list, no call
        return (Plan.recompute_all(n) if n > 0 else Plan.from_spans(n, [])), 0, 0
    hits: list[list[int]] = []            # [start, end, source]: abutting pieces of equal delta merged
    for t, e, x, lo in uses:
        src = x.base_pos + lo
        if hits and hits[-1][1] == t and t - src == hits[-1][0] - hits[-1][2]:
            hits[-1][1] = e
        else:
            hits.append([t, e, src])
    return _plan_of(n, hits)


def _plan_of(n: int, hits: list[list[int]]) -> tuple[Plan, int, int]:
    """``Plan.from_spans(n, spans of hits)``, its reused and rotated tokens: ``hits`` (``[start, end, source]``
    in target order, abutting ones of equal delta merged) are valid spans as they are and leave nothing to
    merge (equal delta is equal action), so the spans are built without the checks (frozen dataclass inits:
    ~1 us each), gaps recomputed; anything else takes ``Plan.from_spans`` (which raises where it would)."""
    spans, pos, reused, rotated = [], 0, 0, 0
    for a, b, src in hits:
        if not pos <= a < b <= n:
            return _checked(n, hits)
        if a > pos:
            spans.append(_span(pos, a, _RECOMPUTE, -1))
        if a == src:
            spans.append(_span(a, b, _REUSE, src))
        elif src >= 0:
            spans.append(_span(a, b, _ROTATED, src))
            rotated += b - a
        else:
            return _checked(n, hits)
        reused += b - a
        pos = b
    if not spans:
        return (Plan.recompute_all(n) if n > 0 else Plan.from_spans(n, [])), 0, 0
    if pos < n:
        spans.append(_span(pos, n, _RECOMPUTE, -1))
    return _plan(n, tuple(spans)), reused, rotated


def _checked(n: int, hits: list[list[int]]) -> tuple[Plan, int, int]:
    plan = Plan.from_spans(n, [Span(a, b, _REUSE if a == src else _ROTATED, src) for a, b, src in hits])
    return plan, plan.num_reused, plan.num_rotated
