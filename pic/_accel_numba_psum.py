"""numpy's pairwise float64 sum for the numba kernels of ``rdr`` (:mod:`pic._accel_numba_rdr`,
:mod:`pic._accel_numba_rdrsel`, which import it): the same additions in the same order, bit for bit (tested against
``np.sum``), and the float64 <-> bits casts of their threshold searches. No kernel of its own."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.extending import intrinsic

from pic._accel_numba import _OPTS

_VD = ir.VectorType(ir.DoubleType(), 8)


@intrinsic
def _lanes8(typingctx, a, lo, m):
    """``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))`` where ``r_q`` sums ``a[lo + q + 8 j]`` in order of ``j``
    over ``[0, m / 8)`` (``m`` a multiple of 8, >= 8): numpy's eight partial sums of a pairwise leaf. NOTE (speed):
    one vector of 8 lanes (numba keeps the eight sums scalar: ~0.65 ns an addition -> ~0.1); each lane's additions
    are the scalar ones, in the same order."""
    sig = types.float64(a, lo, m)

    def codegen(context, builder, sig, args):
        arr = context.make_array(sig.args[0])(context, builder, args[0])
        lov, mv = args[1], args[2]
        i64 = ir.IntType(64)

        def vload(i):
            ptr = builder.gep(arr.data, [builder.add(lov, i)])
            return builder.load(builder.bitcast(ptr, _VD.as_pointer()), align=8)
        acc0 = vload(ir.Constant(i64, 0))
        entry = builder.block
        loop = builder.append_basic_block("lanes8_loop")
        body = builder.append_basic_block("lanes8_body")
        out = builder.append_basic_block("lanes8_out")
        builder.branch(loop)
        builder.position_at_end(loop)
        i, acc = builder.phi(i64), builder.phi(_VD)
        i.add_incoming(ir.Constant(i64, 8), entry)
        acc.add_incoming(acc0, entry)
        builder.cbranch(builder.icmp_signed("<", i, mv), body, out)
        builder.position_at_end(body)
        nacc = builder.fadd(acc, vload(i))
        ni = builder.add(i, ir.Constant(i64, 8))
        i.add_incoming(ni, body)
        acc.add_incoming(nacc, body)
        builder.branch(loop)
        builder.position_at_end(out)
        r = [builder.extract_element(acc, ir.Constant(ir.IntType(32), q)) for q in range(8)]
        f = builder.fadd
        return f(f(f(r[0], r[1]), f(r[2], r[3])), f(f(r[4], r[5]), f(r[6], r[7])))
    return sig, codegen


@intrinsic
def _bits(typingctx, x):
    """The IEEE bits of the float64 ``x`` as an int64 (for x >= 0 they order as the values)."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _float(typingctx, bits):
    """The float64 whose IEEE bits are ``bits``."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@njit(**_OPTS)
def _pairwise_leaf(a, lo, n):
    """numpy's pairwise sum of ``a[lo:lo + n]`` for ``n <= 128`` (no split): below 8 values one by one, else 8
    interleaved partial sums combined as a tree (:func:`_lanes8`), then the rest."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[lo + i]
        return res
    m = n - n % 8
    res = _lanes8(a, np.int64(lo), np.int64(m))
    for i in range(lo + m, lo + n):
        res += a[i]
    return res


@njit(**_OPTS)
def _pairwise(a, lo, n):
    """``a[lo:lo + n]`` summed as numpy sums a contiguous float64 run (``DOUBLE_pairwise_sum``: below 8 values
    one by one; up to 128 in 8 interleaved partial sums combined as a tree, then the rest; above that both
    halves, split at a multiple of 8, left + right). ``np.sum(x) == 0.0 + _pairwise(x, 0, x.size)`` and
    ``np.add.reduceat``'s segment ``[s, e)`` is ``x[s] + _pairwise(x, s + 1, e - s - 1)`` (tested). The
    halving by an explicit stack (a recursive kernel does not load from numba's cache)."""
    if n <= 128:
        return _pairwise_leaf(a, lo, n)
    slo = np.empty(64, np.int64)
    sn = np.empty(64, np.int64)
    st = np.empty(64, np.int64)
    sv = np.empty(64, np.float64)
    top = 0
    slo[0], sn[0] = lo, n
    while True:
        cl, cn = slo[top], sn[top]
        if cn > 128:                       # split: left half first
            st[top] = 1
            h = cn // 2
            h -= h % 8
            top += 1
            slo[top], sn[top] = cl, h
            continue
        v = _pairwise_leaf(a, cl, cn)
        while True:                        # hand v to the parents
            top -= 1
            if top < 0:
                return v
            if st[top] == 1:               # a left half: keep it, sum the right half
                sv[top] = v
                st[top] = 2
                h = sn[top] // 2
                h -= h % 8
                slo[top + 1], sn[top + 1] = slo[top] + h, sn[top] - h
                top += 1
                break
            v = sv[top] + v
