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
