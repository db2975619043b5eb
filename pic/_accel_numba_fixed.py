"""numba kernels of the ``fixed-chunk`` policy behind :mod:`pic.accel`, reached through ``accel.kernels(n, "fixed")``
and loaded on first use (a run that never calls them does not load them). Same rules as there: each computes
exactly what its numpy reference computes, tested both ways; compiled eagerly, cached on disk."""

from __future__ import annotations

import numpy as np
from numba import njit, types

from pic._accel_numba import _GOLDEN, _I32, _I64, _OPTS, _U64, _mix

_BITS = types.Array(types.uint8, 1, "C", readonly=True)
#: a trace's stored tokens as the kernels reading them in place take them: int32, or uint16 where every one fits
#: (traces.content.narrow_tokens); a token is read by value (``_horner``), so both give the same hashes
_TOKS = (_I32, types.Array(types.uint16, 1, "C", readonly=True))


@njit(**_OPTS)
def _window_candidates(h, width, bw, start, bits1, bits2, shift, mask):
    """``(offsets, keys)``: offsets ``i >= start`` whose window hash ``x = h[i + width] - h[i] * bw``
    (:func:`engine.rolling.window_hashes` from the prefix hashes ``h``, ``bw = B^width``) has bit ``x >> shift``
    set in ``bits1`` and bit ``x & mask`` set in ``bits2`` (little-endian bit order), ascending, and those
    hashes (``fixed-chunk``'s two filters: :meth:`engine.policies.fixed_chunk_filters._Filters.candidates`). One pass,
    no temporaries: the window hashes are never stored; the bitsets (512 KB each) stay in cache where the
    counting filters (8 MB each) do not."""
    n = h.shape[0] - width
    m = max(n - start, 0)
    pos = np.empty(m, np.int64)
    keys = np.empty(m, np.uint64)
    k = 0
    one, seven, three = np.uint64(1), np.uint64(7), np.uint64(3)
    for i in range(start, n):
        x = h[i + width] - h[i] * bw
        a = x >> shift
        if (np.uint64(bits1[a >> three]) >> (a & seven)) & one:
            c = x & mask
            if (np.uint64(bits2[c >> three]) >> (c & seven)) & one:
                pos[k] = i
                keys[k] = x
                k += 1
    return pos[:k], keys[:k]


@njit(types.Tuple((types.int64[::1], types.uint64[::1]))(_U64, types.int64, types.uint64, types.int64, _BITS, _BITS,
                                                         types.uint64, types.uint64), **_OPTS)
def window_candidates(h, width, bw, start, bits1, bits2, shift, mask):
    """:func:`_window_candidates`."""
    return _window_candidates(h, width, bw, start, bits1, bits2, shift, mask)


@njit(types.void(_U64, types.uint16[::1], types.uint16[::1], types.uint8[::1], types.uint8[::1], types.uint64,
                 types.uint64), **_OPTS)
def filter_add(keys, counts1, counts2, bits1, bits2, shift, mask):
    """Count each key in both counting filters (bucket ``key >> shift`` of the first, ``key & mask`` of the
    second; uint16 counts, wrapping as ``np.add.at`` does) and set its bit in each bitset
    (:meth:`engine.policies.fixed_chunk_filters._Filters.add`): one pass instead of four ``ufunc.at`` calls."""
    one, seven, three = np.uint8(1), np.uint64(7), np.uint64(3)
    for x in keys:
        a = x >> shift
        counts1[a] += np.uint16(1)
        bits1[a >> three] |= one << np.uint8(a & seven)
        b = x & mask
        counts2[b] += np.uint16(1)
        bits2[b >> three] |= one << np.uint8(b & seven)


@njit(types.void(_U64, types.uint8[::1], types.uint8[::1], types.uint64, types.uint64), **_OPTS)
def bits_add(keys, bits1, bits2, shift, mask):
    """Set each key's bit in both bitsets (:func:`filter_add` without the counts: a filter whose keys are never
    removed, :meth:`engine.policies.fixed_chunk_filters._Filters.add`)."""
    one, seven, three = np.uint8(1), np.uint64(7), np.uint64(3)
    for x in keys:
        a = x >> shift
        bits1[a >> three] |= one << np.uint8(a & seven)
        b = x & mask
        bits2[b >> three] |= one << np.uint8(b & seven)


_BASE = np.uint64(0x9E3779B97F4A7C15 | 1)       # engine.rolling.BASE


@njit(inline="always", **_OPTS)
def _horner(acc, tok):
    """One step of :func:`engine.rolling.prefix_hashes`: ``H[i + 1] = H[i] * B + mix(t_i)``."""
    return acc * _BASE + _mix(np.uint64(np.int64(tok)) + _GOLDEN)


@njit(types.uint64[::1](_I32), **_OPTS)
def prefix_hashes(toks):
    """:func:`engine.rolling.prefix_hashes` of ``toks`` (``H[i]`` hashes ``toks[:i]``) in one Horner pass
    ``H[i + 1] = H[i] * B + mix(t_i)`` (the closed form's values modulo 2**64, exactly)."""
    n = toks.shape[0]
    h = np.empty(n + 1, np.uint64)
    acc = np.uint64(0)
    h[0] = acc
    for i in range(n):
        acc = _horner(acc, toks[i])
        h[i + 1] = acc
    return h


@njit(**_OPTS)
def _segment_prefix_hashes(buf, lo, hi, keys, lengths, mask, skip, h0):
    """:func:`prefix_hashes` of a prompt given as its segments' pieces (:meth:`traces.content.Segments.pieces`):
    piece ``p`` is ``buf[lo[p]:hi[p]]`` when ``hi[p] > lo[p]``, else ``lengths[p]`` opaque tokens derived
    from ``keys[p]`` as :func:`pic._accel_numba.opaque_fill` derives them (keys given as ``key ^ salt``). The
    same values as ``prefix_hashes(Segments.gather(rows))``, without gathering the tokens. ``skip``: its first
    ``skip`` tokens are not read, ``h0`` is their hash: the values from ``H[skip]`` on (``n - skip + 1``)."""
    n = 0
    for p in range(lengths.shape[0]):
        n += lengths[p]
    h = np.empty(n - skip + 1, np.uint64)
    acc = h0
    h[0] = acc
    k = 1
    at = 0                       # the piece's first token in the prompt
    for p in range(lengths.shape[0]):
        size = lengths[p]
        if at + size <= skip:
            at += size
            continue
        o = skip - at if skip > at else 0
        if hi[p] > lo[p]:
            for j in range(lo[p] + o, hi[p]):
                acc = _horner(acc, buf[j])
                h[k] = acc
                k += 1
        else:
            b = _mix(keys[p])
            for j in range(o, size):
                acc = _horner(acc, np.int32(_mix(b + np.uint64(j) * _GOLDEN) & mask))
                h[k] = acc
                k += 1
        at += size
    return h


@njit([types.uint64[::1](t, _I64, _I64, _U64, _I64, types.uint64) for t in _TOKS], **_OPTS)
def segment_prefix_hashes(buf, lo, hi, keys, lengths, mask):
    """:func:`_segment_prefix_hashes` of the whole prompt."""
    return _segment_prefix_hashes(buf, lo, hi, keys, lengths, mask, 0, np.uint64(0))


@njit([types.Tuple((types.uint64[::1], types.int64[::1], types.uint64[::1], types.uint64[::1]))(
    t, _I64, _I64, _U64, _U64, _I64, types.uint64, types.int64, types.uint64, types.int64, _BITS, _BITS,
    types.uint64, types.uint64, _U64) for t in _TOKS], **_OPTS)
def prompt_scan(buf, tok_offs, offs, keys, salts, rows, mask, width, bw, start, bits1, bits2, shift, fmask, known):
    """``fixed-chunk``'s lookup work on a prompt in one call: its prefix hashes ``h`` (:func:`segment_prefix_hashes`
    of segment rows ``rows`` of a :class:`traces.content.Segments` given as ``tokens``, ``token_offsets`` (or
    ``offsets`` where it has none), ``offsets``, ``keys``, ``salts`` (both empty: no opaque segments), as
    :meth:`~traces.content.Segments.pieces` reads them), the filters' candidate windows from ``start``
    (:func:`window_candidates`) and the keys of its grid chunks (window ``j * width`` of each whole chunk).

    ``known``: the keys of the prompt's first grid chunks, when known (another prompt with the same first
    ``g = len(known) * width`` tokens gave them; ``start >= g``): those tokens are not read, their hash is
    ``H[g] = sum(known[j] * bw^(len - 1 - j))`` (``H[(j + 1) * width] = H[j * width] * bw + key_j``), and ``h`` starts
    at ``H[g]`` (its ``n - g + 1`` values); the candidates' offsets and the grid are the whole prompt's."""
    m = rows.shape[0]
    lo, hi = np.empty(m, np.int64), np.empty(m, np.int64)
    ks, lengths = np.zeros(m, np.uint64), np.empty(m, np.int64)
    for p in range(m):
        r = rows[p]
        lo[p], hi[p], lengths[p] = tok_offs[r], tok_offs[r + 1], offs[r + 1] - offs[r]
        if keys.shape[0]:
            ks[p] = keys[r] ^ salts[r]
    k0 = known.shape[0]
    g = k0 * width
    if start < g:
        raise ValueError("prompt_scan: start before the known grid chunks' end")
    h0 = np.uint64(0)
    for j in range(k0):
        h0 = h0 * bw + known[j]
    h = _segment_prefix_hashes(buf, lo, hi, ks, lengths, mask, g, h0)
    pos, cand = _window_candidates(h, width, bw, start - g, bits1, bits2, shift, fmask)
    pos += g
    k = (h.shape[0] - 1 + g) // width
    grid = np.empty(k, np.uint64)
    grid[:k0] = known
    for j in range(k0, k):
        grid[j] = h[(j + 1) * width - g] - h[j * width - g] * bw
    return h, pos, cand, grid
