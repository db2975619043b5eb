"""numba kernels of the ``irminsul`` chunk store's key tables behind :mod:`pic.accel`, reached through
``accel.kernels(n, "irm")`` and loaded on first use: a multiset of ``uint64`` keys in the shared
open-addressing table (:mod:`pic._accel_numba_table`) as ``(key, count)`` pairs
(:class:`engine.policies.irminsul_index.KeyTable`, the compiled form of the store's prefilter counters
``Counter[int]``); a key whose count drops to 0 is deleted by backward shift (no tombstones). Same answers as the counters, tested both ways.

NOTE (speed): the store asks its prefilters about every chunk of a prompt after the exact prefix (does an
indexed chunk begin or end with its first / last ``min_match`` tokens: two tables of ~370 k keys on Mooncake
conversation) and counts every new chunk's keys at commit. In Python each is a dict probe or update that
misses the cache, one at a time, behind a few hundred bytecodes."""

from __future__ import annotations

from array import array

import numpy as np
from numba import njit, typeof, types

from pic import _accel_numba_table, accel
from pic._accel_numba import _I64, _OPTS, _U64
from pic._accel_numba_table import _find, _slot

_TAB = types.uint64[::1]
_RTAB = types.Array(types.uint64, 1, "C", readonly=True)
ZERO, ONE = np.uint64(0), np.uint64(1)


@njit(inline="always", **_OPTS)
def _add(tab, shift, keys):
    """Count each of ``keys`` (an array, or an ``array('Q')`` read in place) in table ``tab``; keys new to it."""
    n = 0
    for i in range(len(keys)):
        k = keys[i]
        j = _find(tab, shift, k)
        if tab[2 * j + 1] == ZERO:
            tab[2 * j] = k
            n += 1
        tab[2 * j + 1] += ONE
    return n


def kt_add(tab, shift, keys):
    """Count each of ``keys`` once more (a new key with count 1); returns how many keys were new. The caller
    keeps the table below its load limit."""
    return _add(tab, shift, keys)


def kt_remove(tab, shift, keys):
    """Count each of ``keys`` once less (absent ones: nothing); a key counted 0 is deleted (backward shift:
    later keys of its probe run move up). Returns how many keys were deleted."""
    mask = (tab.shape[0] >> 1) - 1
    n = 0
    for i in range(keys.shape[0]):
        j = _find(tab, shift, keys[i])
        if tab[2 * j + 1] == ZERO:
            continue
        tab[2 * j + 1] -= ONE
        if tab[2 * j + 1] != ZERO:
            continue
        n += 1
        # backward-shift deletion: move up each later key of the run whose home slot is not in (j, s]
        s = j
        while True:
            s = (s + 1) & mask
            if tab[2 * s + 1] == ZERO:
                break
            h = _slot(tab[2 * s], shift)
            if (j < s and j < h <= s) or (s < j and (h > j or h <= s)):
                continue                  # its home is after the hole: it stays
            tab[2 * j] = tab[2 * s]
            tab[2 * j + 1] = tab[2 * s + 1]
            tab[2 * s + 1] = ZERO
            j = s
    return n


def kt_count(tab, shift, key):
    """How many times ``key`` is counted (0: absent)."""
    return np.int64(tab[2 * _find(tab, shift, key) + 1])


def kt_hot(t1, s1, t2, s2, ask2, k1, k2, base, add1, add2):
    """One lookup's questions to two tables: first ``add1`` and ``add2`` (``array('Q')``: the keys held back since
    the last call, read in place) are counted into ``t1`` and ``t2``; then ``base + i`` for each ``i`` where ``k1[i]``
    is in ``t1`` or (when ``ask2``) ``k2[i]`` in ``t2``, ascending (``k1``, ``k2`` of one length), followed by how many
    of ``add1``'s keys were new to ``t1`` and of ``add2``'s to ``t2`` (the last two items). The caller keeps each table
    below its load limit with what is added.

    NOTE (speed): the held-back keys read where they are kept and the new-key counts in the answer: no array made
    of them, no counts array read back (~2 us a lookup of Mooncake conversation)."""
    n1 = _add(t1, s1, add1)
    n2 = _add(t2, s2, add2)
    n = k1.shape[0]
    out = np.empty(n + 2, np.int64)
    m = 0
    for i in range(n):
        if t1[2 * _find(t1, s1, k1[i]) + 1] != ZERO or (ask2 and t2[2 * _find(t2, s2, k2[i]) + 1] != ZERO):
            out[m] = base + i
            m += 1
    out[m] = n1
    out[m + 1] = n2
    return out[:m + 2]


def kt_fresh(tab, shift, kx, lens, rows, pos, n, add):
    """A prompt's content from ``pos`` on is new to table ``tab``: first the segments ``add`` (rows: those of the prompts
    analyzed since the last call) count their keys ``kx[row]`` into ``tab``; then whether no segment of ``rows`` (the prompt's, ``lens[row]`` tokens each, the prompt ``n`` tokens long) that
    holds a token at or after ``pos`` has its key in ``tab``. Returns ``2 * (keys new to tab) + (1 if so else 0)``.
    The caller keeps the table below its load limit with what is added."""
    new = np.int64(0)
    for i in range(len(add)):
        k = kx[add[i]]
        j = _find(tab, shift, k)
        if tab[2 * j + 1] == ZERO:
            tab[2 * j] = k
            new += 1
        tab[2 * j + 1] += ONE
    s = 0
    for p in range(rows.shape[0]):
        if s >= n:
            break
        r = rows[p]
        e = s + lens[r]
        if e > pos and lens[r] > 0 and tab[2 * _find(tab, shift, kx[r]) + 1] != ZERO:
            return 2 * new
        s = e
    return 2 * new + 1


_HELD = typeof(array("Q"))      # (numba's type of an array('Q') argument)


# NOTE (speed): each kernel compiled (its cached machine code loaded) on its first use (:func:`pic.accel.lazy`), and
# table_rehash served by :mod:`pic._accel_numba_table` on its own: an unbounded irminsul run calls kt_hot and
# kt_count, not kt_add, kt_remove (a bounded store's) nor table_rehash (~2-3 ms CPU each to load)
__getattr__ = accel.lazy(globals(), {
    "kt_add": types.int64(_TAB, types.uint64, _U64),
    "kt_remove": types.int64(_TAB, types.uint64, _U64),
    "kt_count": types.int64(_RTAB, types.uint64, types.uint64),
    "kt_hot": types.int64[::1](_TAB, types.uint64, _TAB, types.uint64, types.boolean, _U64, _U64, types.int64, _HELD,
                               _HELD),
    "kt_fresh": types.int64(_TAB, types.uint64, _U64, _I64, _I64, types.int64, types.int64, _I64),
}, _OPTS, {"table_rehash": _accel_numba_table})
