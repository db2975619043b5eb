"""numba kernels of the ``oracle`` policy's window index behind :mod:`pic.accel`, reached through
``accel.kernels(n, "oracle")`` and loaded on first use: the shared open-addressing table
(:mod:`pic._accel_numba_table`) of ``uint64`` window hashes with an ``int64`` value ``>= 0`` each, stored as
``value + 1`` (:class:`engine.oracle.WindowIndex`'s compiled form). Same answers as the sorted levels (the first
value added for a key is kept), tested both ways."""

from __future__ import annotations

import numpy as np
from numba import njit, types

from pic._accel_numba import _I64, _OPTS, _U64
from pic._accel_numba_table import EMPTY, _ahead, _find, table_rehash  # noqa: F401  (re-exported: the "oracle" group serves it)


@njit(types.void(types.uint64[::1], types.uint64, _U64, types.boolean[::1], types.int64[::1]), **_OPTS)
def table_lookup(tab, shift, keys, found, value):
    """``found[i]``/``value[i]`` of each of ``keys`` (left as they are where the key is absent)."""
    for i in range(keys.shape[0]):
        _ahead(tab, shift, keys, i)
        j = _find(tab, shift, keys[i])
        if tab[2 * j + 1] != EMPTY:
            found[i] = True
            value[i] = np.int64(tab[2 * j + 1]) - 1


@njit(types.int64(types.uint64[::1], types.uint64, _U64, _I64), **_OPTS)
def table_add(tab, shift, keys, values):
    """Insert each key not present yet with its value (``>= 0``), in order (the first of duplicates wins);
    returns how many were inserted. The caller keeps the table below its load limit."""
    n = 0
    for i in range(keys.shape[0]):
        _ahead(tab, shift, keys, i)
        k = keys[i]
        j = _find(tab, shift, k)
        if tab[2 * j + 1] == EMPTY:
            tab[2 * j] = k
            tab[2 * j + 1] = np.uint64(values[i] + 1)
            n += 1
    return n


@njit(types.int64(_I64, _I64, _I64, _I64, types.int64, types.int64, types.int64[::1], types.int64[::1],
                  types.int64[::1], types.int64[::1], types.int64[::1], types.int64[::1]), **_OPTS)
def line_layout(rows, bounds, sid, crow, S, m, key, a, b, pos, ha, hb):
    """:class:`engine.oracle_lines.Layout` of one prompt (its numpy form, the reference): the named ranges in
    ``key``/``a``/``b``/``pos`` (inside pieces first, then the pairs; ``2 * pieces`` entries of room) and the
    hashed windows' ranges in ``ha``/``hb`` (``2 * pieces + 1``); returns ``ranges * 2^42 + pairs * 2^21 +
    hashed ranges`` (each below 2^21: the caller checks the pieces)."""
    K = rows.shape[0]
    n = bounds[K] - m + 1
    ni, np_, nh = 0, 0, 0
    nxt = 0                          # the first window position no range covers yet
    prev = -1                        # the last non-empty piece
    s, e, sk = 0, 0, -1
    for k in range(K + 1):
        if k < K:
            s, e = bounds[k], bounds[k + 1]
            if e == s:
                continue
            sk = sid[rows[k]]
        if prev >= 0 and m > 1 and k < K:
            # the pair (prev, k): over exactly these two pieces (>= 1 token of each, <= m - 1 of either)
            ps, pe = bounds[prev], bounds[prev + 1]
            La, Lb = pe - ps, e - s
            sa = sid[rows[prev]]
            if sa >= 0 and sk >= 0 and La + Lb >= m:
                lo = max(0, m - 1 - La)
                p = s - (m - 1)
                j = K + np_
                key[j], a[j], b[j], pos[j] = crow[rows[prev]] * S + sk, lo, min(m - 2, Lb - 1), p
                np_ += 1
                if p + lo > nxt:
                    ha[nh], hb[nh] = nxt, p + lo - 1
                    nh += 1
                nxt = p + min(m - 2, Lb - 1) + 1
        if k == K:
            break
        if sk >= 0 and e - s >= m:
            key[ni], a[ni], b[ni], pos[ni] = sk, 0, e - s - m, s
            ni += 1
            if s > nxt:
                ha[nh], hb[nh] = nxt, s - 1
                nh += 1
            nxt = e - m + 1
        prev = k
    if n - 1 >= nxt:
        ha[nh], hb[nh] = nxt, n - 1
        nh += 1
    for j in range(np_):
        key[ni + j], a[ni + j], b[ni + j], pos[ni + j] = key[K + j], a[K + j], b[K + j], pos[K + j]
    return ((ni + np_) << 42) + (np_ << 21) + nh
