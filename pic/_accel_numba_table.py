"""An open-addressing hash table of ``uint64`` keys, shared by the ``oracle`` group (:mod:`pic._accel_numba_oracle`:
the window index, a key's first value) and the ``irm`` group (:mod:`pic._accel_numba_irm`: irminsul's prefilter
counts). The table is one ``uint64`` array of ``(key, value)`` pairs, so a probe touches one cache line; a slot
whose value is 0 is empty (a new table is ``np.zeros``: pages the OS zeroes when first touched, no initializing
pass); the slot of a key is its Fibonacci hash (the top bits of ``key * golden``), collisions probe linearly.
Imported by both groups (each re-exports :func:`table_rehash`), so it loads with whichever loads first.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from pic._accel_numba import _GOLDEN, _OPTS, _U64

EMPTY = np.uint64(0)


@njit(inline="always", **_OPTS)
def _slot(key, shift):
    """The home slot of ``key`` in a table of ``2**(64 - shift)`` slots."""
    return np.int64((key * _GOLDEN) >> shift)


@njit(inline="always", **_OPTS)
def _find(tab, shift, key):
    """The slot holding ``key``, or the empty slot where it would go."""
    mask = (tab.shape[0] >> 1) - 1
    j = _slot(key, shift)
    while tab[2 * j + 1] != EMPTY and tab[2 * j] != key:
        j = (j + 1) & mask
    return j


@njit(types.void(types.uint64[::1], types.uint64, _U64), **_OPTS)
def table_rehash(tab, shift, old):
    """Move every used slot of table ``old`` into ``tab`` (new, empty, below its load limit; the keys are
    distinct)."""
    for s in range(old.shape[0] >> 1):
        v = old[2 * s + 1]
        if v != EMPTY:
            j = _find(tab, shift, old[2 * s])
            tab[2 * j] = old[2 * s]
            tab[2 * j + 1] = v
