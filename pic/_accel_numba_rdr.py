"""numba kernels of the ``rdr`` policy behind :mod:`pic.accel`: attributes of :mod:`pic._accel_numba`, loaded
from there on first use (a run that never calls them does not load them). Same rules as there: each computes
exactly what its numpy reference computes, tested both ways; compiled eagerly, cached on disk."""

from __future__ import annotations

import numpy as np
from numba import njit, types

from pic._accel_numba import _I64, _OPTS

_F64 = types.Array(types.float64, 1, "C", readonly=True)
_U8 = types.Array(types.uint8, 1, "C", readonly=True)
_B1 = types.Array(types.boolean, 1, "C", readonly=True)


@njit(types.Tuple((types.int64[::1], types.int64[::1], types.boolean[::1], types.int64))(
    _I64, _I64, _U8, _B1, types.int64, types.int64), **_OPTS)
def rdr_blocks(pos, bounds, kinds, protect, sinks, block):
    """``rdr``'s blocks of a request's new tokens ``pos`` (ascending): ``(starts, sizes, protected, protected
    tokens)``, a block starting every ``block`` tokens and wherever positions jump or protection changes;
    a token is protected when its segment's kind is (``protect[kind]``) or it is among the first ``sinks``
    (:meth:`engine.policies.rdr.RateDistortionRetention._allocate`'s numpy path)."""
    n = pos.shape[0]
    starts = np.empty(n, np.int64)
    prot = np.empty(n, np.bool_)
    nb, npr, j, last = 0, 0, -1, False
    for i in range(n):
        p = pos[i]
        while j + 1 < bounds.shape[0] and bounds[j + 1] <= p:
            j += 1
        pr = protect[kinds[j if j >= 0 else kinds.shape[0] - 1]] or p < sinks
        npr += pr
        if i % block == 0 or pos[i] - pos[i - 1] != 1 or pr != last:
            starts[nb] = i
            prot[nb] = pr
            nb += 1
        last = pr
    sizes = np.empty(nb, np.int64)
    for k in range(nb):
        sizes[k] = (starts[k + 1] if k + 1 < nb else n) - starts[k]
    return starts[:nb], sizes, prot[:nb], npr


@njit(**_OPTS)
def _greedy_steps(w, size, free, step_frac, eff, lim, level):
    """Hull steps (unit ``free[i]``, step ``k``) in the order of a stable sort of ``-(w/size * eff[k])`` over
    the flat index ``i * K + k``, each adding one level while the running cost (summed in that order) stays
    within ``lim``. NOTE (speed): no sort of all pairs: one unit's keys fall with ``k``, so the pairs are a
    K-way merge of the units sorted by density, each step's run of equal keys put back in index order."""
    nf, K = free.shape[0], step_frac.shape[0]
    d = np.empty(nf, np.float64)
    total = 0.0
    for i in range(nf):
        u = free[i]
        d[i] = w[u] / size[u]
        for k in range(K):
            total += size[u] * step_frac[k]
    if total * (1.0 + 4.0 * nf * K * 2.0 ** -52) <= lim:    # every step fits in any summation order
        for i in range(nf):
            level[free[i]] += K
        return
    by_d = np.argsort(-d, kind="mergesort")
    seqs = np.empty((K, nf), np.int64)
    for k in range(K):
        e = eff[k]
        for j in range(nf):
            seqs[k, j] = by_d[j]
        j = 0
        while j < nf:                      # equal products of unequal densities: index order, as the sort
            x = d[seqs[k, j]] * e
            r = j + 1
            while r < nf and d[seqs[k, r]] * e == x:
                r += 1
            if r - j > 1:
                seqs[k, j:r] = np.sort(seqs[k, j:r])
            j = r
    head = np.zeros(K, np.int64)
    acc = 0.0
    while True:
        best, bkey, bflat = -1, 0.0, 0
        for k in range(K):
            if head[k] < nf:
                i = seqs[k, head[k]]
                key, flat = -(d[i] * eff[k]), i * K + k
                if best < 0 or key < bkey or (key == bkey and flat < bflat):
                    best, bkey, bflat = k, key, flat
        if best < 0:
            return
        i = seqs[best, head[best]]
        acc += size[free[i]] * step_frac[best]
        if acc > lim:
            return
        level[free[i]] += 1
        head[best] += 1


@njit(types.Tuple((types.int64[::1], types.float64[::1], types.float64[::1], types.float64[::1], types.float64))(
    _F64, _I64, _B1, _F64, _I64, _F64, _F64, _F64, types.int64, types.float64), **_OPTS)
def rdr_greedy(block_w, sizes, prot, head_weight, hull, step_frac, eff, frac, nbits, budget):
    """:func:`engine.rdr_alloc.allocate` over the units of :meth:`RateDistortionRetention._allocate` (block
    ``b`` x head ``h`` is unit ``b * H + h``: weight ``block_w[b] * head_weight[h]``, size ``sizes[b]``),
    exactly: ``(option, weight, size, tokens per option, forced)``. The same float operations in the same
    order (stable sort of the negated keys, sequential cumulative cost); sums of non-integer values are left
    to numpy (its pairwise summation)."""
    B, H, K = block_w.shape[0], head_weight.shape[0], step_frac.shape[0]
    U = B * H
    w = np.empty(U, np.float64)
    size = np.empty(U, np.float64)
    level = np.zeros(U, np.int64)
    free = np.empty(U, np.int64)
    top = hull.shape[0] - 1
    psize, nf = 0.0, 0
    for b in range(B):
        s = np.float64(sizes[b])
        for h in range(H):
            u = b * H + h
            w[u] = block_w[b] * head_weight[h]
            size[u] = s
            if prot[b]:
                level[u] = top
                psize += s                 # integer-valued: exact in any order
            elif s > 0:
                free[nf] = u
                nf += 1
    forced = psize * frac[hull[top]]
    room = budget - forced
    if room > 0 and nf and K:
        _greedy_steps(w, size, free[:nf], step_frac, eff, room * (1 + 1e-12), level)
    option = np.empty(U, np.int64)
    per = np.zeros(nbits, np.float64)
    for u in range(U):
        o = hull[level[u]]
        option[u] = o
        per[o] += size[u]                  # integer-valued: np.bincount's sums exactly
    return option, w, size, per, forced
