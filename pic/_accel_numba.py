"""numba kernels behind :mod:`pic.accel` (imported only through it). Each one computes exactly what its
numpy reference computes (uint64 arithmetic wraps the same way); tests compare both on random inputs.

Compiled eagerly with explicit signatures and cached on disk (``cache=True``): the first import after an
install compiles, later ones load the machine code (~0.3-0.4 s CPU with numba's import). NOTE (speed): this
module holds the opaque-token kernel and what the groups share; the kernels of CDC
(:mod:`pic._accel_numba_cdc`: ~17 s CPU to compile on the loaded 2-core VM, once per install), fixed-chunk
(:mod:`pic._accel_numba_fixed`) and rdr (:mod:`pic._accel_numba_rdr`) are modules of their own, loaded on
their first use through ``pic.accel.kernels(n, group)``: a run loads only the kernels its policies call.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_OPTS = {"cache": True, "nogil": True, "boundscheck": False}
# inputs typed read-only: trace arrays are read-only views of Arrow buffers (a writable array converts)
_I32, _I64, _U64 = (types.Array(t, 1, "C", readonly=True) for t in (types.int32, types.int64, types.uint64))


@njit(inline="always", **_OPTS)
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(types.void(_U64, types.boolean, _I64, _I64, types.uint64, types.int32[::1]), **_OPTS)
def opaque_fill(keys, mix, starts, lengths, mask, out):
    """``out`` = tokens ``starts[p] .. starts[p] + lengths[p]`` of each opaque piece ``p`` concatenated; its
    base is ``keys[p]`` (``mix``: ``splitmix64(keys[p])``, i.e. keys given as ``key ^ salt``). Token ``j`` is
    ``splitmix64(base + j * golden) & mask`` (:func:`traces.content.opaque_run`)."""
    k = 0
    for p in range(keys.shape[0]):
        b = _mix(keys[p]) if mix else keys[p]
        s = np.uint64(starts[p])
        for j in range(lengths[p]):
            out[k] = np.int32(_mix(b + (s + np.uint64(j)) * _GOLDEN) & mask)
            k += 1
