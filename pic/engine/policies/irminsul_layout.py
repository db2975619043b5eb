"""Prompt-analysis helpers of the ``irminsul`` policy (:mod:`engine.policies.irminsul`): the prompt's tokens
from a position, S2 marker cuts, the lookup's analysis record, and the admit-time gap/piece arithmetic over
reused target ranges. Pure functions of their arguments, no policy state."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pic.engine.policies.base import RequestView
from pic.engine.policies.irminsul_records import Extent
from pic.traces.content import OPAQUE_VOCAB
from pic.traces.markers import find_markers
from pic.traces.schema import KIND_CODE

_MARKER_KIND = KIND_CODE["marker"]
NO_CUTS = np.zeros(0, np.int64)


def tokens_from(req: RequestView, lo: int) -> np.ndarray:
    """int32: the prompt's tokens ``[lo, N)``, its segments from the one holding ``lo`` gathered in one
    vectorized call (as ``req.tokens`` makes all of them; ``Seq.tokens`` derives opaque pieces one by one)."""
    if req.source is None or req.segment_rows is None:
        return req.tokens[lo:]
    sb = req.segment_bounds
    i = int(sb.searchsorted(lo, side="right")) - 1
    return req.source.gather(req.segment_rows[i:])[lo - int(sb[i]):]


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
    t = int(marker[0]) if marker.shape[0] else -1
    got = _MAY_MARK.get((id(store), t))
    if got is not None and got[0] is store:
        return got[1]
    may = bool((store.kinds == _MARKER_KIND).any()) or bool((store.tokens == t).any()) or \
        (store.token_offsets is not None and 0 <= t < OPAQUE_VOCAB)
    _MAY_MARK[(id(store), t)] = (store, may)
    if len(_MAY_MARK) > 8:
        del _MAY_MARK[next(iter(_MAY_MARK))]
    return may


_MAY_MARK: dict[tuple[int, int], tuple[object, bool]] = {}

Use = tuple[int, int, Extent, int]   # target start, target end, extent, offset in the extent
NO_TOKENS = np.zeros(0, np.int32)


class Analysis(NamedTuple):
    """A lookup's analysis of one prompt: its CDC layout (``bounds``, chunk fingerprints ``fps``, which
    bounds are ``anchors``, its cleaned ``hard`` boundaries, whether a marker occurrence was ``marked``;
    kept in the prompt index at commit), the reused target ranges ``uses``, and the prompt's tokens from
    ``off`` on (``toks``) that admit copies new chunks from."""

    bounds: list[int]
    fps: list[int]
    anchors: list[bool]
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
    for j in range(i, len(views)):
        s, e, xs = views[j]
        if s >= b:
            break
        t = s
        for x in xs:                       # the locked extents tile [s, e) in order
            lo, hi = max(t, a), min(t + x.size, b)
            if lo < hi:
                parts.append((lo, [x, lo - t, hi - lo]))
            t += x.size
    parts.sort(key=lambda p: p[0])
    return [p for _, p in parts]
