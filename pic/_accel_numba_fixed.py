"""numba kernels of the ``fixed-chunk`` policy behind :mod:`pic.accel`: attributes of :mod:`pic._accel_numba`, loaded
from there on first use (a run that never calls them does not load them). Same rules as there: each computes
exactly what its numpy reference computes, tested both ways; compiled eagerly, cached on disk."""

from __future__ import annotations

import numpy as np
from numba import njit, types

from pic._accel_numba import _GOLDEN, _I32, _OPTS, _U64, _mix


@njit(types.int64[::1](_U64, types.int64, types.Array(types.uint8, 1, "C", readonly=True),
                       types.Array(types.uint8, 1, "C", readonly=True), types.uint64, types.uint64), **_OPTS)
def filter_candidates(w, start, bits1, bits2, shift, mask):
    """Offsets ``i >= start`` whose window hash ``w[i]`` has bit ``w[i] >> shift`` set in ``bits1`` and bit
    ``w[i] & mask`` set in ``bits2`` (little-endian bit order), ascending (``fixed-chunk``'s two filters:
    :meth:`engine.policies.fixed_chunk._Filters.candidates`). One pass, no temporaries; the bitsets (512 KB
    each) stay in cache where the counting filters (8 MB each) do not."""
    n = w.shape[0]
    out = np.empty(max(n - start, 0), np.int64)
    k = 0
    one, seven, three = np.uint64(1), np.uint64(7), np.uint64(3)
    for i in range(start, n):
        x = w[i]
        a = x >> shift
        if (np.uint64(bits1[a >> three]) >> (a & seven)) & one:
            c = x & mask
            if (np.uint64(bits2[c >> three]) >> (c & seven)) & one:
                out[k] = i
                k += 1
    return out[:k]


_BASE = np.uint64(0x9E3779B97F4A7C15 | 1)


@njit(types.Tuple((types.uint64[::1], types.uint64[::1]))(_I32, types.int64), **_OPTS)
def prefix_window_hashes(toks, width):
    """``(H, W)``: :func:`engine.rolling.prefix_hashes` of ``toks`` (``H[i]`` hashes ``toks[:i]``) and
    :func:`engine.rolling.window_hashes` at ``width`` (``W[i] = H[i + width] - H[i] * B^width``), in one
    Horner pass ``H[i + 1] = H[i] * B + mix(t_i)`` (the closed form's values modulo 2**64, exactly)."""
    n = toks.shape[0]
    h = np.empty(n + 1, np.uint64)
    acc = np.uint64(0)
    h[0] = acc
    for i in range(n):
        acc = acc * _BASE + _mix(np.uint64(np.int64(toks[i])) + _GOLDEN)
        h[i + 1] = acc
    m = n - width + 1 if n >= width else 0
    w = np.empty(m, np.uint64)
    bw = np.uint64(1)
    for _ in range(width):
        bw *= _BASE
    for i in range(m):
        w[i] = h[i + width] - h[i] * bw
    return h, w
