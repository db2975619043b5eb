"""numba kernels of the chunks' xxh64 fingerprints (:func:`pic.engine.cdc.fingerprints`: xxh64 of each chunk's
int32 token bytes, seed 0) and the chunks' edge keys, 8 chunks per vector; used by :mod:`pic._accel_numba_cdc`
(which re-exports :func:`fingerprints` and :func:`edge_keys`, and fingerprints the fused layout with
:func:`_fps`), so they load with the ``"cdc"`` group (``pic.accel.kernels(n, "cdc")``). Each computes exactly
what the ``xxhash`` package computes; tests compare both on random inputs.

Compiled with explicit signatures and cached on disk (``cache=True``), as :mod:`pic._accel_numba`, each on its
first use (:func:`pic.accel.lazy`); :func:`_fps`, which the fused layout calls too, is compiled for its callers.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.extending import intrinsic

from pic import accel
from pic._accel_numba import (
    _I32,
    _I64,
    _IR32,
    _IR64,
    _OPTS,
    _V64,
    _shuf,
    _splat,
    _vc,
)

_P1, _P2, _P3 = np.uint64(0x9E3779B185EBCA87), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)
_P4, _P5 = np.uint64(0x85EBCA77C2B2AE63), np.uint64(0x27D4EB2F165667C5)


@njit(inline="always", **_OPTS)
def _avalanche(h):
    """xxh64's final mix of a 64-bit state."""
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


@njit(inline="always", **_OPTS)
def _rotl(x, r):
    return (x << r) | (x >> (np.uint64(64) - r))


@njit(inline="always", **_OPTS)
def _round(acc, v):
    return _rotl(acc + v * _P2, np.uint64(31)) * _P1


@intrinsic
def _lane(typingctx, toks, k):
    """Little-endian 8 bytes = tokens ``k`` and ``k + 1``: one unaligned 64-bit load.

    NOTE (speed): building the lane from two int32 loads (mask, shift, or) made the fingerprints 2x slower
    than xxhash's C over the same bytes; the direct load keeps them within ~15 % of it (one int32 token is
    4-byte aligned, a pair of them need not be 8-byte aligned: the load says align 4)."""
    def codegen(context, builder, sig, args):
        arr = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = builder.gep(arr.data, [args[1]])
        return builder.load(builder.bitcast(ptr, ir.IntType(64).as_pointer()), align=4)
    return types.uint64(toks, k), codegen


@njit(inline="always", **_OPTS)
def _xxh(toks, k, e):
    """xxh64 (seed 0) of the little-endian int32 token bytes ``toks[k:e]`` (the XXH64 specification,
    4-byte inputs)."""
    m32 = np.uint64(0xFFFFFFFF)
    nbytes = np.uint64(4 * (e - k))
    if e - k >= 8:
        v1, v2, v3, v4 = _P1 + _P2, _P2, np.uint64(0), np.uint64(0) - _P1
        while k + 8 <= e:
            v1 = _round(v1, _lane(toks, k))
            v2 = _round(v2, _lane(toks, k + 2))
            v3 = _round(v3, _lane(toks, k + 4))
            v4 = _round(v4, _lane(toks, k + 6))
            k += 8
        h = _rotl(v1, np.uint64(1)) + _rotl(v2, np.uint64(7)) + _rotl(v3, np.uint64(12)) + _rotl(v4, np.uint64(18))
        for v in (v1, v2, v3, v4):
            h = (h ^ _round(np.uint64(0), v)) * _P1 + _P4
    else:
        h = _P5
    h += nbytes
    while k + 2 <= e:
        h = _rotl(h ^ _round(np.uint64(0), _lane(toks, k)), np.uint64(27)) * _P1 + _P4
        k += 2
    if k < e:
        h = _rotl(h ^ ((np.uint64(toks[k]) & m32) * _P1), np.uint64(23)) * _P2 + _P3
    return _avalanche(h)


_V4 = ir.VectorType(_IR64, 4)
_XXH_INIT = ((0x9E3779B185EBCA87 + 0xC2B2AE3D27D4EB4F) % 2**64, 0xC2B2AE3D27D4EB4F, 0, (-0x9E3779B185EBCA87) % 2**64)


@intrinsic
def _xxh_lanes(typingctx, toks, starts, nstr, lo, hi, snap, cur):
    """xxh64's stripe loop for 8 chunks at once (multi-buffer): lane ``l`` hashes chunks ``lo[l] .. hi[l] - 1``
    of a list in turn (chunk ``q``: ``nstr[q]`` stripes of 8 tokens from token ``starts[q]``; ``starts`` and
    ``nstr`` padded by one entry). When a chunk's stripes are done, its four accumulators and the 8 tokens
    after its last stripe (its tail, < 8 tokens, and what follows: every chunk needs 8 tokens of ``toks``
    after its stripes) go to ``snap[8 q .. 8 q + 7]``, and the lane starts its next chunk; a lane with no chunk
    left idles (reading tokens from 0 on, its state to the padding slot ``m = hi[7]``) until every lane is
    done (every lane needs a chunk). ``cur``: scratch.

    NOTE (speed): xxh64 is bound by its 64-bit multiplies (1 per token: one scalar multiplier); 8 chunks'
    accumulators in vectors multiply 8 at a time (the 8 lanes' stripes loaded and transposed in registers).
    The stripe loop alone ran at ~8 G tokens/s here against xxhash's C at ~2.6 (one buffer)."""
    sig = types.void(toks, starts, nstr, lo, hi, snap, cur)

    def codegen(context, builder, sig, args):
        tarr, sarr, narr, larr, harr, parr, carr = (context.make_array(t)(context, builder, a)
                                                    for t, a in zip(sig.args, args, strict=True))
        mod = builder.module
        fshl = mod.globals.get("llvm.fshl.v8i64") or ir.Function(
            mod, ir.FunctionType(_V64, [_V64, _V64, _V64]), "llvm.fshl.v8i64")

        def c(x):
            return ir.Constant(_IR64, x)

        def ld(arr, i):
            return builder.load(builder.gep(arr.data, [i]))

        def lane(i):
            return ir.Constant(_IR32, i)
        cur0 = [ld(larr, c(j)) for j in range(8)]
        his = [ld(harr, c(j)) for j in range(8)]
        base0 = [ld(sarr, cur0[j]) for j in range(8)]
        stop0 = ir.Constant(_V64, ir.Undefined)
        for j in range(8):
            stop0 = builder.insert_element(stop0, ld(narr, cur0[j]), lane(j))
        inits = [_vc(x) for x in _XXH_INIT]
        entry = builder.block
        head = builder.append_basic_block("xxh_head")
        cold = builder.append_basic_block("xxh_cold")
        body = builder.append_basic_block("xxh_body")
        out = builder.append_basic_block("xxh_out")
        builder.branch(head)
        builder.position_at_end(head)          # s: stripes done by every lane so far
        s = builder.phi(_IR64)
        nex = builder.phi(_IR64)                          # lanes with no chunk left
        cur = [builder.phi(_IR64) for _ in range(8)]
        base = [builder.phi(_IR64) for _ in range(8)]      # lane j's stripe s starts at token base[j] + 8 s
        stopv = builder.phi(_V64)                         # the s at which lane j's chunk is done
        acc = [builder.phi(_V64) for _ in range(4)]
        s.add_incoming(c(0), entry)
        nex.add_incoming(c(0), entry)
        for j in range(8):
            cur[j].add_incoming(cur0[j], entry)
            base[j].add_incoming(base0[j], entry)
        stopv.add_incoming(stop0, entry)
        for k in range(4):
            acc[k].add_incoming(inits[k], entry)
        hit = builder.icmp_signed("==", stopv, _splat(builder, s))
        head_end = builder.block
        builder.cbranch(builder.icmp_unsigned("!=", builder.bitcast(hit, ir.IntType(8)), ir.Constant(ir.IntType(8), 0)),
                        cold, body)
        # a chunk done: its state and tail to snap (every lane writes: a lane not done writes its chunk's slot
        # again at its end), the lane moves on (selects, no branch per lane)
        builder.position_at_end(cold)
        pp = builder.bitcast(parr.data, _IR64.as_pointer())
        off = builder.shl(s, c(3))
        ncur, nbase, nstop, nnex = [], [], stopv, nex
        for j in range(8):
            bit = builder.extract_element(hit, lane(j))
            slot = builder.shl(cur[j], c(3))
            for k in range(4):
                builder.store(builder.extract_element(acc[k], lane(j)), builder.gep(pp, [builder.add(slot, c(k))]))
            tail = builder.bitcast(builder.gep(tarr.data, [builder.add(base[j], off)]), _V4.as_pointer())
            builder.store(builder.load(tail, align=4),
                          builder.bitcast(builder.gep(pp, [builder.add(slot, c(4))]), _V4.as_pointer()), align=8)
            cj = builder.add(cur[j], builder.zext(bit, _IR64))
            done = builder.and_(bit, builder.icmp_signed("==", cj, his[j]))      # no chunk left: idle
            nnex = builder.add(nnex, builder.zext(done, _IR64))
            ncur.append(builder.select(done, his[7], cj))
            nbase.append(builder.select(bit, builder.select(done, builder.sub(c(0), off), builder.sub(ld(sarr, cj), off)),
                                        base[j]))
            nstop = builder.insert_element(nstop, builder.select(
                bit, builder.select(done, c(1 << 62), builder.add(s, ld(narr, cj))),
                builder.extract_element(stopv, lane(j))), lane(j))
        nacc = [builder.select(hit, inits[k], acc[k]) for k in range(4)]
        cold_end = builder.block
        builder.cbranch(builder.icmp_signed("==", nnex, c(8)), out, body)
        builder.position_at_end(body)
        bcur = [builder.phi(_IR64) for _ in range(8)]
        bbase = [builder.phi(_IR64) for _ in range(8)]
        bstop = builder.phi(_V64)
        bnex = builder.phi(_IR64)
        bacc = [builder.phi(_V64) for _ in range(4)]
        for j in range(8):
            bcur[j].add_incoming(cur[j], head_end)
            bcur[j].add_incoming(ncur[j], cold_end)
            bbase[j].add_incoming(base[j], head_end)
            bbase[j].add_incoming(nbase[j], cold_end)
        bstop.add_incoming(stopv, head_end)
        bstop.add_incoming(nstop, cold_end)
        bnex.add_incoming(nex, head_end)
        bnex.add_incoming(nnex, cold_end)
        for k in range(4):
            bacc[k].add_incoming(acc[k], head_end)
            bacc[k].add_incoming(nacc[k], cold_end)
        off = builder.shl(s, c(3))
        ln = [builder.load(builder.bitcast(builder.gep(tarr.data, [builder.add(bbase[j], off)]), _V4.as_pointer()),
                           align=4) for j in range(8)]
        # transpose: v[k][j] = 8-byte lane k of lane j's stripe
        cc = [_shuf(builder, ln[2 * p], ln[2 * p + 1], list(range(8))) for p in range(4)]
        ev, od = [0, 4, 8, 12, 1, 5, 9, 13], [2, 6, 10, 14, 3, 7, 11, 15]
        d0, d1 = _shuf(builder, cc[0], cc[1], ev), _shuf(builder, cc[0], cc[1], od)
        e0, e1 = _shuf(builder, cc[2], cc[3], ev), _shuf(builder, cc[2], cc[3], od)
        lo8, hi8 = [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]
        v = [_shuf(builder, d0, e0, lo8), _shuf(builder, d0, e0, hi8), _shuf(builder, d1, e1, lo8),
             _shuf(builder, d1, e1, hi8)]
        s.add_incoming(builder.add(s, c(1)), body)
        nex.add_incoming(bnex, body)
        for k in range(4):                      # round: rotl(acc + v * P2, 31) * P1
            x = builder.add(bacc[k], builder.mul(v[k], _vc(int(_P2))))
            acc[k].add_incoming(builder.mul(builder.call(fshl, [x, x, _vc(31)]), _vc(int(_P1))), body)
        for j in range(8):
            cur[j].add_incoming(bcur[j], body)
            base[j].add_incoming(bbase[j], body)
        stopv.add_incoming(bstop, body)
        builder.branch(head)
        builder.position_at_end(out)
        for j in range(8):
            builder.store(ncur[j], builder.gep(carr.data, [c(j)]))
        return context.get_dummy_value()
    return sig, codegen


@njit(inline="always", **_OPTS)
def _xxh_finish(snap, q, ntail, nbytes):
    """:func:`_xxh` of a chunk from the stripe loop's state in ``snap[8 q .. 8 q + 3]`` and its ``ntail`` (< 8)
    last tokens in ``snap[8 q + 4 ..]`` (little-endian pairs)."""
    m32 = np.uint64(0xFFFFFFFF)
    v1, v2, v3, v4 = snap[8 * q], snap[8 * q + 1], snap[8 * q + 2], snap[8 * q + 3]
    h = _rotl(v1, np.uint64(1)) + _rotl(v2, np.uint64(7)) + _rotl(v3, np.uint64(12)) + _rotl(v4, np.uint64(18))
    for v in (v1, v2, v3, v4):
        h = (h ^ _round(np.uint64(0), v)) * _P1 + _P4
    h += nbytes
    k = 0
    while k + 2 <= ntail:
        h = _rotl(h ^ _round(np.uint64(0), snap[8 * q + 4 + k // 2]), np.uint64(27)) * _P1 + _P4
        k += 2
    if k < ntail:
        h = _rotl(h ^ ((snap[8 * q + 4 + k // 2] & m32) * _P1), np.uint64(23)) * _P2 + _P3
    return _avalanche(h)


@njit(**_OPTS)
def _fps(toks, bounds, base, out):
    """``out[c]`` = :func:`_xxh` of ``toks[bounds[c] - base : bounds[c + 1] - base]`` for every chunk.

    Chunks of >= 64 tokens that end 8 or more tokens before the end of ``toks`` go through the 8-lane stripe
    loop (:func:`_xxh_lanes`), split into 8 runs of consecutive chunks with about equal stripes (the lanes
    run out at about the same time; one that does idles until the others are done); 8 such chunks at
    least, else all one at a time."""
    nc = bounds.shape[0] - 1
    n = toks.shape[0]
    idx = np.empty(nc + 1, np.int64)
    starts = np.empty(nc + 1, np.int64)
    nstr = np.empty(nc + 1, np.int64)
    m = 0
    total = 0
    for c in range(nc):
        a, e = bounds[c] - base, bounds[c + 1] - base
        if e - a >= 64 and e <= n - 8:
            idx[m] = c
            starts[m] = a
            nstr[m] = (e - a) >> 3
            total += nstr[m]
            m += 1
        else:
            out[c] = _xxh(toks, a, e)
    if m >= 8:
        starts[m] = 0
        nstr[m] = 1
        lo = np.empty(8, np.int64)
        hi = np.empty(8, np.int64)
        j = 0
        acc = 0
        for q in range(8):
            lo[q] = j
            target = total * (q + 1) // 8
            while j < m and (j == lo[q] or acc + nstr[j] // 2 <= target):
                acc += nstr[j]
                j += 1
            hi[q] = j
        hi[7] = m
        if hi[6] < m:                      # every lane holds a chunk
            cur = np.empty(8, np.int64)
            snap = np.empty(8 * (m + 1), np.uint64)
            _xxh_lanes(toks, starts, nstr, lo, hi, snap, cur)
            for r in range(m):
                c = idx[r]
                ln = bounds[c + 1] - bounds[c]
                out[c] = _xxh_finish(snap, r, ln & 7, np.uint64(4 * ln))
            return
    for r in range(m):
        c = idx[r]
        out[c] = _xxh(toks, bounds[c] - base, bounds[c + 1] - base)


def fingerprints(toks, bounds):
    """xxh64 (seed 0) of each chunk's little-endian int32 token bytes ``[bounds[c], bounds[c + 1])``
    (:func:`engine.cdc.fingerprints`; :func:`_fps`)."""
    out = np.empty(bounds.shape[0] - 1, np.uint64)
    _fps(toks, bounds, 0, out)
    return out


def edge_keys(toks, bounds, m):
    """xxh64 of each chunk's first ``m`` tokens (``toks[b_c : b_c + m]``, which may run past the chunk's end;
    0 where fewer than ``m`` tokens follow ``b_c``) and of its last ``m`` (``toks[b_{c+1} - m : b_{c+1}]``; 0
    for a chunk under ``m`` tokens) (:func:`engine.cdc.edge_keys`)."""
    k = bounds.shape[0] - 1
    heads = np.zeros(k, np.uint64)
    tails = np.zeros(k, np.uint64)
    n = toks.shape[0]
    for c in range(k):
        a, b = bounds[c], bounds[c + 1]
        if n - a >= m:
            heads[c] = _xxh(toks, a, a + m)
        if b - a >= m:
            tails[c] = _xxh(toks, b - m, b)
    return heads, tails


# NOTE (speed): compiled (cached code loaded) on first use, not at import (pic.accel.lazy)
__getattr__ = accel.lazy(globals(), {"fingerprints": types.uint64[::1](_I32, _I64),
                                     "edge_keys": types.UniTuple(types.uint64[::1], 2)(_I32, _I64, types.int64)}, _OPTS)
