"""numba kernels of the ``rdr`` policy behind :mod:`pic.accel`: attributes of :mod:`pic._accel_numba`, loaded
from there on first use (a run that never calls them does not load them). Same rules as there: each computes
exactly what its numpy reference computes, tested both ways; cached on disk, each loaded on its first use
(:func:`pic.accel.lazy`). Numpy's pairwise sum is :mod:`pic._accel_numba_psum`'s (shared with ``rdr`` told,
:mod:`pic._accel_numba_rdrsel`).

NOTE (speed): one call per request (:func:`rdr_request`) does what the numpy path of
:meth:`engine.policies.rdr.RateDistortionRetention._allocate` does in ~45 calls, with the same float operations in
the same order: the per-token prior is read from a table numpy computed (numpy's ``power`` is not libm's: the
compiled code must not recompute it), numpy's sums are its pairwise summation (:func:`_pairwise`, the same
additions), and the greedy's cut is found without sorting every (unit, hull step) pair (:func:`_greedy_select`)."""

from __future__ import annotations

import numpy as np
from numba import njit, types

from pic import accel
from pic._accel_numba import _I64, _OPTS
from pic._accel_numba_psum import _bits, _float, _pairwise
from pic._accel_numba_rdrsel import _EPS, _F64, _FAST

_U8 = types.Array(types.uint8, 1, "C", readonly=True)
_B1 = types.Array(types.boolean, 1, "C", readonly=True)
_SPANS = types.Array(types.int64, 2, "C", readonly=True)


def np_sum(a):
    """``np.sum(a)`` of a float64 array, the same additions (tests compare the two)."""
    return 0.0 + _pairwise(a, 0, a.shape[0])


@njit(**_OPTS)
def _greedy_steps(w, size, free, step_frac, eff, lim, level):
    """Hull steps (unit ``free[i]``, step ``k``) in the order of a stable sort of ``-(w/size * eff[k])`` over
    the flat index ``i * K + k``, each adding one level while the running cost (summed in that order) stays
    within ``lim``. NOTE (speed): no sort of all pairs: one unit's keys fall with ``k``, so the pairs are a
    K-way merge of the units sorted by density, each step's run of equal keys put back in index order.
    The exact path, taken where :func:`_greedy_select` cannot decide the cut."""
    nf, K = free.shape[0], step_frac.shape[0]
    d = np.empty(nf, np.float64)
    for i in range(nf):
        u = free[i]
        d[i] = w[u] / size[u]
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


@njit(**_FAST)
def _unfree(d, level):
    """Level 0 again for the free units (``d >= 0``): what :func:`_greedy_select` leaves when it gives up."""
    for u in range(d.shape[0]):
        if d[u] >= 0:
            level[u] = 0


@njit(**_FAST)
def _classify(d, isize, eff, t_hi, t_lo, level, above, cn):
    """One pass per hull step ``k`` over the units: ``level[u] += 1`` where the key ``d[u] * eff[k]`` is above
    ``t_hi``, ``above[k]`` their tokens, ``cn[c]`` the keys within ``[t_lo, t_hi]`` among units ``16c ..
    16c + 15``; answers their count. NOTE (speed): chunks of a constant 16 units (the loops vectorize)."""
    U, K = d.shape[0], eff.shape[0]
    nfull = U >> 4
    cn[:] = 0
    for k in range(K):
        e = eff[k]
        c = np.int64(0)
        for ch in range(nfull + 1):
            base = ch << 4
            na, nn = np.int64(0), np.int64(0)
            if ch < nfull:
                for i in range(16):
                    key = d[base + i] * e
                    a = np.int64(key > t_hi)
                    level[base + i] += a
                    c += a * isize[base + i]
                    na += a
                    nn += np.int64(key >= t_lo)
            else:
                for u in range(base, U):
                    key = d[u] * e
                    a = np.int64(key > t_hi)
                    level[u] += a
                    c += a * isize[u]
                    na += a
                    nn += np.int64(key >= t_lo)
            cn[ch] += nn - na
        above[k] = c
    return np.sum(cn)


@njit(**_FAST)
def _greedy_select(d, isize, step_frac, eff, lim, level):
    """What :func:`_greedy_steps` does, without ordering the (unit, step) pairs: True once ``level`` is
    updated, False (``level`` as it came) where the cut cannot be proven from error bounds and the exact
    path must run. Unit ``u`` takes steps where ``d[u] >= 0`` (its density; -1 for the others), costing
    ``isize[u] * step_frac[k]``; ``level`` is 0 on those units.

    The steps taken are the first ``j`` pairs of the order (keys ``d * eff[k]`` descending, flat index
    ``u * K + k`` ascending) with ``A_j <= lim``, ``A_j`` their costs summed one by one in that order
    (non-decreasing: costs are >= 0). Any other summation ``T_j`` of the same costs, in at most ``m``
    roundings per cost, is within ``(j + m) u S_j`` of ``A_j`` (``S_j`` the exact sum, ``u`` the unit
    roundoff), so a cut with ``T_j`` below ``lim`` and ``T_(j+1)`` above it by more than that is the order's.

    NOTE (speed): a histogram of the densities (by their bits: non-negative doubles order as their bits; ~2
    units a bucket) gives the key ``t`` where the cost above crosses ``lim`` to a few buckets (bisection on
    ``t``'s bits); one pass per step takes every pair with a key above ``t (1 + δ)`` (their costs summed as
    token counts: integers, one rounding per step), and only the pairs within ``t (1 ± δ)`` are sorted and
    walked. A cut outside them widens ``δ``, then gives up."""
    U, K = d.shape[0], step_frac.shape[0]
    dbits = d.view(np.int64)
    big = np.int64(0x7FF0000000000000)
    lo, hi, nfree = big, np.int64(-1), np.int64(0)
    for u in range(U):
        x = dbits[u]
        lo = min(lo, x if x >= 0 else big)
        hi = max(hi, x)
        nfree += np.int64(x >= 0)
    if hi < 0:
        return True
    nb = 16
    while nb < nfree // 2:
        nb <<= 1
    shift = 0
    while ((hi - lo) >> shift) >= nb:
        shift += 1
    nbu = ((hi - lo) >> shift) + 1
    suf = np.zeros(nbu + 2, np.int64)      # suf[1 + q]: tokens of the units in buckets >= q (suf[0]: not free)
    for u in range(U):
        x = dbits[u]
        suf[(((x - lo) >> shift) + 1) if x >= 0 else 0] += isize[u]     # (x - lo: no overflow for x >= 0)
    suf[0] = 0
    for q in range(nbu - 1, -1, -1):
        suf[1 + q] += suf[2 + q]
    # bisection on the threshold's bits: est(t) ~ the cost of the pairs with a key above t (half of the
    # bucket t falls in, for each step)
    tl = max(_bits(_float(lo) * eff[K - 1]) - 1, 0)
    th = _bits(_float(hi) * eff[0])
    while th - tl > (np.int64(1) << shift):
        mid = tl + (th - tl) // 2
        t = _float(mid)
        est = 0.0
        for k in range(K):
            q = (_bits(t / eff[k]) - lo) >> shift
            c = 2.0 * suf[1] if q < 0 else (0.0 if q >= nbu else np.float64(suf[1 + q] + suf[2 + q]))
            est += 0.5 * c * step_frac[k]
        if est > lim:
            tl = mid
        else:
            th = mid
    tstar = _float(th)
    N = nfree * K
    delta = 1.5 * 2.0 ** (shift - 52)      # 1.5 to 3 buckets either side (a bucket: 2^shift ulps)
    above = np.zeros(K, np.int64)
    cn = np.zeros((U >> 4) + 1, np.int64)
    for _attempt in range(4):
        t_hi, t_lo = tstar * (1.0 + delta), tstar * (1.0 - delta)
        m = _classify(d, isize, eff, t_hi, t_lo, level, above, cn)
        near = np.empty(m, np.int64)
        nkey = np.empty(m, np.float64)
        j = 0
        for ch in range(cn.shape[0]):
            if cn[ch]:
                for u in range(ch << 4, min(U, (ch + 1) << 4)):
                    x = d[u]
                    for k in range(K):
                        key = x * eff[k]
                        if key >= t_lo and key <= t_hi:
                            near[j] = u * K + k
                            nkey[j] = -key
                            j += 1
        total = 0.0
        for k in range(K):
            total += np.float64(above[k]) * step_frac[k]
        rel = 4.0 * (N + m + 16) * _EPS
        if total * (1.0 + rel) < lim:
            o = np.argsort(nkey, kind="mergesort")       # keys descending, flat index ascending on ties
            take, nxt = 0, 0.0
            while take < m:
                jj = near[o[take]]
                nxt = total + np.float64(isize[jj // K]) * step_frac[jj % K]
                if nxt > lim:
                    break
                total = nxt
                take += 1
            if take < m:
                if total * (1.0 + rel) < lim and nxt * (1.0 - rel) > lim:
                    for q in range(take):
                        level[near[o[q]] // K] += 1
                    return True
                _unfree(d, level)
                return False               # the cut is within the error bounds: only the exact order decides
        _unfree(d, level)
        delta *= 8.0
    return False


@njit(**_FAST)
def _choose(block_w, sizes, prot, head_weight, hull, step_frac, eff, frac, nbits, budget):
    """Body of :func:`rdr_greedy`: ``(level, w, size, per, forced, exact)`` per unit ``b * H + h`` (``level``: hull
    position; ``exact``: the sorting path ran)."""
    B, H, K = block_w.shape[0], head_weight.shape[0], step_frac.shape[0]
    U = B * H
    w = np.empty(U, np.float64)
    d = np.empty(U, np.float64)
    fsize = np.empty(U, np.float64)
    isize = np.empty(U, np.int64)
    level = np.zeros(U, np.int64)
    top = hull.shape[0] - 1
    ptok, ftok, tot, nf = 0, 0, 0, 0
    for b in range(B):
        sz = sizes[b]
        s = np.float64(sz)
        bw = block_w[b]
        u0 = b * H
        for h in range(H):
            w[u0 + h] = bw * head_weight[h]
            fsize[u0 + h] = s
            isize[u0 + h] = sz
        tot += sz
    for u in range(U):
        d[u] = w[u] / fsize[u]             # the reference's density (numpy error model: no zero check)
    for b in range(B):
        u0 = b * H
        if prot[b] or sizes[b] <= 0:
            for h in range(H):
                d[u0 + h] = -1.0
                level[u0 + h] = top if prot[b] else 0
            if prot[b]:
                ptok += sizes[b]
        else:
            ftok += sizes[b]
            nf += H
    forced = np.float64(ptok * H) * frac[hull[top]]       # integer-valued token sum: exact in any order
    room = budget - forced
    exact = False
    if room > 0 and nf and K:
        lim = room * (1 + 1e-12)
        total = 0.0
        for k in range(K):
            total += np.float64(ftok * H) * step_frac[k]
        if total * (1.0 + 4.0 * nf * K * 2.0 ** -52) <= lim:    # every step fits in any summation order
            for u in range(U):
                if d[u] >= 0:
                    level[u] = K
        elif not _greedy_select(d, isize, step_frac, eff, lim, level):
            exact = True
            free = np.empty(nf, np.int64)
            f = 0
            for u in range(U):
                if d[u] >= 0:
                    free[f] = u
                    f += 1
            _greedy_steps(w, fsize, free, step_frac, eff, lim, level)
    per = np.zeros(nbits, np.float64)
    prev = np.int64(tot * H)
    for L in range(1, top + 1):
        c = np.int64(0)
        for u in range(U):
            c += isize[u] * np.int64(level[u] >= L)
        per[hull[L - 1]] = np.float64(prev - c)        # integer-valued: np.bincount's sums exactly
        prev = c
    per[hull[top]] = np.float64(prev)
    return level, w, fsize, per, forced, exact


def rdr_greedy(block_w, sizes, prot, head_weight, hull, step_frac, eff, frac, nbits, budget):
    """:func:`engine.rdr_alloc.allocate` over the units of :meth:`RateDistortionRetention._allocate` (block
    ``b`` x head ``h`` is unit ``b * H + h``: weight ``block_w[b] * head_weight[h]``, size ``sizes[b]``),
    exactly: ``(option, weight, size, tokens per option, forced, exact)`` (``exact``: the cut needed the
    sorting path). The same float operations in the same order (stable sort of the negated keys, sequential
    cumulative cost) wherever they decide anything."""
    level, w, size, per, forced, exact = _choose(block_w, sizes, prot, head_weight, hull, step_frac, eff, frac,
                                                 nbits, budget)
    option = np.empty(w.shape[0], np.int64)
    for u in range(w.shape[0]):
        option[u] = hull[level[u]]
    return option, w, size, per, forced, exact


@njit(**_FAST)
def _request(spans, n, rprior, bounds, kinds, protect, sinks, block, head_weight, hull, step_frac, eff, frac,
             eps2, nbits, budget):
    """One request of :meth:`RateDistortionRetention._allocate`: its new tokens are the positions of
    ``spans`` (rows ``[start, end)``, ascending) of a prompt of ``n`` tokens; ``rprior[L - 1 - d]`` is the
    importance prior at distance ``d`` from the last token (numpy's values; ``L = rprior.size >= n``, reversed
    so that a block's tokens read it forwards). Answers ``(used, forced, distortion, Σ w, protected tokens,
    tokens per option, exact)``, the numpy path's values bit for bit (``exact``: the greedy needed the sorting
    path).

    Blocks: one starts at every ``block``-th new token and wherever positions jump or protection changes; a
    token is protected when its segment's kind is (``protect[kind]``) or it is among the first ``sinks``. A
    block's weight is its tokens' prior summed as ``np.add.reduceat`` sums it. NOTE (speed): by runs of
    tokens of one segment and one side of ``sinks``, not token by token."""
    ntok = 0
    for r in range(spans.shape[0]):
        ntok += spans[r, 1] - spans[r, 0]
    # block starts: <= one per run (span x segment x side of sinks) + one per multiple of block, + the end
    cap = ntok // block + 3 * spans.shape[0] + 2 * bounds.shape[0] + 4
    starts = np.empty(cap, np.int64)
    first = np.empty(cap, np.int64)      # position of each block's first token
    protb = np.empty(cap, np.bool_)
    nb, npr, j, last, prev, i = 0, 0, -1, False, np.int64(-2), np.int64(0)
    nbounds, nk = bounds.shape[0], kinds.shape[0]
    for r in range(spans.shape[0]):
        p, end = spans[r, 0], spans[r, 1]
        while p < end:
            while j + 1 < nbounds and bounds[j + 1] <= p:
                j += 1
            e = end
            if j + 1 < nbounds and bounds[j + 1] < e:
                e = bounds[j + 1]
            pr = protect[kinds[j if j >= 0 else nk - 1]]
            if p < sinks:
                pr = True
                if sinks < e:
                    e = sinks
            if pr:
                npr += e - p
            if i % block == 0 or p - prev != 1 or pr != last:
                starts[nb] = i
                first[nb] = p
                protb[nb] = pr
                nb += 1
            q = (i // block + 1) * block                   # the next block boundary of the token index
            while q < i + (e - p):
                starts[nb] = q
                first[nb] = p + (q - i)
                protb[nb] = pr
                nb += 1
                q += block
            i += e - p
            last, prev = pr, e - 1
            p = e
    starts[nb] = ntok
    L = rprior.shape[0]
    block_w = np.empty(nb, np.float64)
    sizes = np.empty(nb, np.int64)
    for k in range(nb):
        c = starts[k + 1] - starts[k]
        a = L - n + first[k]                               # rprior index of the block's first token
        block_w[k] = rprior[a] + _pairwise(rprior, a + 1, c - 1)
        sizes[k] = c
    level, w, size, per, forced, exact = _choose(block_w, sizes, protb[:nb], head_weight, hull, step_frac, eff,
                                                 frac, nbits, budget)
    U = w.shape[0]
    hf, he, prod = frac[hull], eps2[hull], np.empty(U, np.float64)
    for u in range(U):
        prod[u] = size[u] * hf[level[u]]
    used = 0.0 + _pairwise(prod, 0, U)
    for u in range(U):
        prod[u] = w[u] * he[level[u]]
    distortion = 0.0 + _pairwise(prod, 0, U)
    return used, forced, distortion, 0.0 + _pairwise(w, 0, U), npr, per, exact


def rdr_request(spans, n, rprior, bounds, kinds, protect, sinks, block, head_weight, hull, step_frac, eff, frac,
                eps2, nbits, budget):
    return _request(spans, n, rprior, bounds, kinds, protect, sinks, block, head_weight, hull, step_frac, eff, frac,
                    eps2, nbits, budget)


# NOTE (speed): each compiled (cached code loaded) on first use, not at import (pic.accel.lazy): ``rdr`` asked calls
# rdr_request only, ``rdr`` told none of them (its group, pic._accel_numba_rdrsel, imports the helpers above)
__getattr__ = accel.lazy(globals(), {
    "np_sum": types.float64(types.float64[::1]),
    "rdr_greedy": types.Tuple((types.int64[::1], types.float64[::1], types.float64[::1], types.float64[::1],
                               types.float64, types.boolean))(
        _F64, _I64, _B1, _F64, _I64, _F64, _F64, _F64, types.int64, types.float64),
    "rdr_request": types.Tuple((types.float64, types.float64, types.float64, types.float64, types.int64,
                                types.float64[::1], types.boolean))(
        _SPANS, types.int64, _F64, _I64, _U8, _B1, types.int64, types.int64, _F64, _I64, _F64, _F64, _F64, _F64,
        types.int64, types.float64),
}, _FAST)
