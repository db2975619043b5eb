"""An open-addressing hash table of ``uint64`` keys, shared by the ``oracle`` group (:mod:`pic._accel_numba_oracle`:
the window index, a key's first value), the ``irm`` group (:mod:`pic._accel_numba_irm`: irminsul's prefilter
counts) and the told tallies (``tally``, ``lkvtally``: the chunk fingerprints stored so far; :func:`_grown`).
The table is one ``uint64`` array of ``(key, value)`` pairs, so a probe touches one cache line; a slot
whose value is 0 is empty (a new table is ``np.zeros``: pages the OS zeroes when first touched, no initializing
pass); the slot of a key is its Fibonacci hash (the top bits of ``key * golden``), collisions probe linearly.
Imported by each of them (``oracle`` and ``irm`` re-export :func:`table_rehash`), so it loads with whichever loads
first.

NOTE (speed): a table of millions of keys is far larger than the caches, so a probe is a cache miss, and a loop
over a batch of keys waits for them one after another (its next probe depends on a branch on this one). The
batch loops ask for the slot of the key :data:`AHEAD` places on (``llvm.prefetch``, :func:`_ahead`) before
probing this one, so ~16 misses are in flight at once: 10 M lookups in a 2 GiB table 1.30 -> 0.46 CPU s,
90 M inserts 7.6 -> 2.5 s (this 2-core VM). A prefetch changes no value.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from pic import accel
from pic._accel_numba import _GOLDEN, _OPTS, _U64

EMPTY = np.uint64(0)
AHEAD = 16          # keys between a slot's prefetch and its probe (8-16 measured best, 32 worse)


@intrinsic
def _prefetch(typingctx, arr, idx):
    """Ask the CPU for the cache line of ``arr[idx]`` (``llvm.prefetch``: a read, kept in every cache level);
    ``idx`` must be in bounds. Returns nothing and changes nothing."""

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]])
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p],
                                              ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]))
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(arr, idx), codegen


@njit(inline="always", **_OPTS)
def _slot(key, shift):
    """The home slot of ``key`` in a table of ``2**(64 - shift)`` slots."""
    return np.int64((key * _GOLDEN) >> shift)


@njit(inline="always", **_OPTS)
def _ahead(tab, shift, keys, i):
    """Prefetch the home slot of ``keys[i + AHEAD]``, if there is one (a batch loop, before probing ``keys[i]``)."""
    if i + AHEAD < keys.shape[0]:
        _prefetch(tab, 2 * _slot(keys[i + AHEAD], shift))


@njit(inline="always", **_OPTS)
def _find(tab, shift, key):
    """The slot holding ``key``, or the empty slot where it would go."""
    mask = (tab.shape[0] >> 1) - 1
    j = _slot(key, shift)
    while tab[2 * j + 1] != EMPTY and tab[2 * j] != key:
        j = (j + 1) & mask
    return j


@njit(inline="always", **_OPTS)
def _grown(tab, shift):
    """``tab`` moved into a table twice its size (its keys distinct)."""
    new = np.zeros(2 * tab.shape[0], np.uint64)
    for s in range(tab.shape[0] >> 1):
        v = tab[2 * s + 1]
        if v != 0:
            j = _find(new, shift - np.uint64(1), tab[2 * s])
            new[2 * j] = tab[2 * s]
            new[2 * j + 1] = v
    return new


def table_rehash(tab, shift, old):
    """Move every used slot of table ``old`` into ``tab`` (new, empty, below its load limit; the keys are
    distinct)."""
    # (no prefetch: a key's slot in a table twice as large is about twice its old one, so the writes go nearly in
    # order; what a rehash costs is the new table's first touch, page faults)
    for s in range(old.shape[0] >> 1):
        v = old[2 * s + 1]
        if v != EMPTY:
            j = _find(tab, shift, old[2 * s])
            tab[2 * j] = old[2 * s]
            tab[2 * j + 1] = v


# (loaded on its first use, :func:`pic.accel.lazy`: the "irm" group needs it only when a table grows)
__getattr__ = accel.lazy(globals(), {"table_rehash": types.void(types.uint64[::1], types.uint64, _U64)}, _OPTS)
