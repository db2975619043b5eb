"""numba kernels behind :mod:`pic.accel` (imported only through it). Each one computes exactly what its
numpy reference computes (uint64 arithmetic wraps the same way); tests compare both on random inputs.

Compiled eagerly with explicit signatures and cached on disk (``cache=True``): the first import after an
install compiles, later ones load the machine code (~0.3-0.4 s CPU with numba's import). NOTE (speed): this
module holds the opaque-token kernel and what the groups share; the kernels of CDC
(:mod:`pic._accel_numba_cdc` and the xxh64 fingerprints it imports, :mod:`pic._accel_numba_xxh`: ~17 s CPU to
compile on the loaded 2-core VM, once per install), fixed-chunk
(:mod:`pic._accel_numba_fixed`) and rdr (:mod:`pic._accel_numba_rdr`) are modules of their own, loaded on
their first use through ``pic.accel.kernels(n, group)``: a run loads only the kernels its policies call.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types

from pic import accel

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_OPTS = {"cache": True, "nogil": True, "boundscheck": False}
# inputs typed read-only: trace arrays are read-only views of Arrow buffers (a writable array converts)
_I32, _I64, _U64 = (types.Array(t, 1, "C", readonly=True) for t in (types.int32, types.int64, types.uint64))


# LLVM IR helpers of the 8-lane intrinsics (the CDC Gear scans, the xxh64 lanes of the fingerprints)
_IR32, _IR64 = ir.IntType(32), ir.IntType(64)
_V32, _V64 = ir.VectorType(_IR32, 8), ir.VectorType(_IR64, 8)


def _vc(c):
    return ir.Constant(_V64, [c] * 8)


def _shuf(builder, a, b, idx):
    return builder.shuffle_vector(a, b, ir.Constant(_V32, idx))


def _splat(builder, x):
    v = builder.insert_element(ir.Constant(_V64, ir.Undefined), x, ir.Constant(_IR32, 0))
    return builder.shuffle_vector(v, ir.Constant(_V64, ir.Undefined), ir.Constant(_V32, [0] * 8))


def _transpose8(builder, v):
    """``u[j][l] = v[l][j]`` for 8 vectors of 8 int32 (unpack 32, unpack 64, swap 128-bit halves: 24 shuffles)."""
    lo, hi = [0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15]
    a = []
    for p in range(4):
        a += [_shuf(builder, v[2 * p], v[2 * p + 1], lo), _shuf(builder, v[2 * p], v[2 * p + 1], hi)]
    l64, h64 = [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]
    b = []
    for half in (0, 4):
        x = a[half:half + 4]
        b += [_shuf(builder, x[0], x[2], l64), _shuf(builder, x[0], x[2], h64),
              _shuf(builder, x[1], x[3], l64), _shuf(builder, x[1], x[3], h64)]
    u = [None] * 8
    for j in range(4):
        u[j] = _shuf(builder, b[j], b[4 + j], [0, 1, 2, 3, 8, 9, 10, 11])
        u[4 + j] = _shuf(builder, b[j], b[4 + j], [4, 5, 6, 7, 12, 13, 14, 15])
    return u


@njit(inline="always", **_OPTS)
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


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


# NOTE (speed): loaded on its first use (accel.lazy): a run that calls no opaque-token kernel (the serve group's
# timeline alone: Mooncake conversation ``prefix``) does not load it
__getattr__ = accel.lazy(globals(), {"opaque_fill": types.void(_U64, types.boolean, _I64, _I64, types.uint64,
                                                                types.int32[::1])}, _OPTS)
