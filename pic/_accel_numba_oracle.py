"""numba kernels of the ``oracle`` policy's window index behind :mod:`pic.accel`, reached through
``accel.kernels(n, "oracle")`` and loaded on first use: an open-addressing hash table of ``uint64`` window
hashes with an ``int64`` value ``>= 0`` each (:class:`engine.oracle.WindowIndex`'s compiled form). The table is
one ``uint64`` array of ``(key, value + 1)`` pairs, so a probe touches one cache line; an empty slot holds 0
(a new table is ``np.zeros``: pages the OS zeroes when first touched, no initializing pass); the slot of a key is its Fibonacci hash (the top bits of
``key * golden``), collisions probe linearly. Same answers as the sorted levels (the first value added for a
key is kept), tested both ways."""

from __future__ import annotations

import numpy as np
from numba import njit, types

from pic._accel_numba import _GOLDEN, _I64, _OPTS, _U64

EMPTY = np.uint64(0)


@njit(inline="always", **_OPTS)
def _slot(key, shift):
    return np.int64((key * _GOLDEN) >> shift)


@njit(types.void(types.uint64[::1], types.uint64, _U64, types.boolean[::1], types.int64[::1]), **_OPTS)
def table_lookup(tab, shift, keys, found, value):
    """``found[i]``/``value[i]`` of each of ``keys`` (left as they are where the key is absent)."""
    mask = (tab.shape[0] >> 1) - 1
    for i in range(keys.shape[0]):
        k = keys[i]
        j = _slot(k, shift)
        while tab[2 * j + 1] != EMPTY:
            if tab[2 * j] == k:
                found[i] = True
                value[i] = np.int64(tab[2 * j + 1]) - 1
                break
            j = (j + 1) & mask


@njit(types.int64(types.uint64[::1], types.uint64, _U64, _I64), **_OPTS)
def table_add(tab, shift, keys, values):
    """Insert each key not present yet with its value (``>= 0``), in order (the first of duplicates wins);
    returns how many were inserted. The caller keeps the table below its load limit."""
    mask = (tab.shape[0] >> 1) - 1
    n = 0
    for i in range(keys.shape[0]):
        k = keys[i]
        j = _slot(k, shift)
        while tab[2 * j + 1] != EMPTY and tab[2 * j] != k:
            j = (j + 1) & mask
        if tab[2 * j + 1] == EMPTY:
            tab[2 * j] = k
            tab[2 * j + 1] = np.uint64(values[i] + 1)
            n += 1
    return n


@njit(types.void(types.uint64[::1], types.uint64, types.uint64[::1]), **_OPTS)
def table_rehash(tab, shift, old):
    """Move every used slot of table ``old`` into ``tab`` (new, empty; the keys are distinct)."""
    mask = (tab.shape[0] >> 1) - 1
    for s in range(old.shape[0] >> 1):
        v = old[2 * s + 1]
        if v != EMPTY:
            k = old[2 * s]
            j = _slot(k, shift)
            while tab[2 * j + 1] != EMPTY:
                j = (j + 1) & mask
            tab[2 * j] = k
            tab[2 * j + 1] = v
