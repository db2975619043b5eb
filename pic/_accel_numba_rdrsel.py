"""numba kernel of ``rdr`` told (:func:`pic.engine.policies.rdr_told.allocate_all`): the allocation of many distinct
requests in one call (:func:`rdr_cases`), each the value of :func:`pic._accel_numba_rdr.rdr_request` (its numpy
reference :meth:`RateDistortionRetention._allocate`) bit for bit. Group ``"rdrsel"`` of :mod:`pic.accel`, its kernel
loaded on first use (:func:`pic.accel.lazy`); ``"rdr"``'s kernels are not loaded with it (the pairwise sum they
share is :mod:`pic._accel_numba_psum`'s).

NOTE (speed): the greedy's cut from the units' product structure instead of passes over every unit (Mooncake
conversation, 6,789 distinct requests of ~5,100 units: ``rdr_batch`` 0.37 -> ``rdr_cases`` 0.14 CPU s). A unit is a
block ``b`` x a (layer, head) ``h``: weight ``w = bw[b] * hw[h]``, key of hull step ``k`` ``(w / size[b]) * eff[k]``.
Every rounding is monotone, so over the blocks of one size sorted by ``bw`` (or over the heads sorted by ``hw``) one
(head, step)'s (or one block's) keys do not decrease: a list. The pairs above a threshold ``t`` are a suffix of
every list; ``t`` is found by galloping from the previous request's (the requests come in order of length) and
bisecting its bits, the lists over blocks counted by one merge of their thresholds ``t * size / (hw * eff)`` with the
sorted block weights (no division), until few pairs lie between two thresholds; then counted exactly, and only
those pairs sorted and walked, with ``_accel_numba_rdr._greedy_select``'s error bounds. A request whose cut those
bounds do not prove (or with more than ``_BAND_MAX`` equal keys there) is answered ``redo``: the caller takes
``rdr_request``'s exact merge for it. A full block's weight (the prior summed over it) is computed once per position
of the prior table; the sums are numpy's pairwise sums with the eight partial sums of a leaf in one vector
(:func:`pic._accel_numba_psum._lanes8`). With two hull steps (MLA's), the levels of the blocks the lists run over
are counted in the last pass over the units, options chosen by selects (0.117 -> 0.099 CPU s on Mooncake)."""

from __future__ import annotations

import numpy as np
from numba import njit, types

from pic import accel
from pic._accel_numba import _I64, _OPTS
from pic._accel_numba_psum import _bits, _float, _pairwise

_F64 = types.Array(types.float64, 1, "C", readonly=True)
_EPS = 2.0 ** -53                          # unit roundoff of float64
# the greedy's passes: numpy's error model (a float division is IEEE's, no zero check: the loops vectorize)
_FAST = dict(_OPTS, error_model="numpy")
_BAND = 24                     # pairs between the two thresholds at which the search stops
_BAND_MAX = 1024               # more pairs there (equal keys): the exact path
@njit(**_FAST)
def _isort(ix, n, v):
    """``ix[:n]`` sorted by ``v[ix]`` ascending, stably (insertion: short or nearly sorted runs)."""
    for a in range(1, n):
        x = ix[a]
        q = a - 1
        while q >= 0 and v[ix[q]] > v[x]:
            ix[q + 1] = ix[q]
            q -= 1
        ix[q + 1] = x


@njit(**_FAST)
def _blocks(n, r, sinks, block, rprior, memo, have, bw, bsz, bprot):
    """The blocks of a request of ``n`` tokens, ``[r, n)`` new, one segment of an unprotected kind (as
    ``_accel_numba_rdr._request`` cuts them: the first ``sinks`` positions protected, one block per ``block`` new
    tokens, one more where protection changes): their weights, sizes and protection; answers their number."""
    L, k = rprior.shape[0], n - r
    sp = max(0, min(sinks, n) - r)                  # protected new tokens (sinks)
    nb = 0
    i = 0
    while i < k:
        pr = i < sp
        e = min((i // block + 1) * block, sp if pr else k)
        c = e - i
        a = L - n + r + i                           # rprior index of the block's first token
        if c == block:
            if not have[a]:
                memo[a] = rprior[a] + _pairwise(rprior, a + 1, c - 1)
                have[a] = True
            bw[nb] = memo[a]
        else:
            bw[nb] = rprior[a] + _pairwise(rprior, a + 1, c - 1)
        bsz[nb] = c
        bprot[nb] = pr
        nb += 1
        i = e
    return nb


@njit(**_FAST)
def _select(bw, w, bsz, bprot, B, H, horder, hwp, hwe, step_frac, eff, lim, nf, level, tk, guess, ws):
    """The greedy's cut (what ``_greedy_steps`` takes) from lists (module doc): ``level`` += the steps taken,
    ``tk[k]`` the tokens of step ``k`` taken; answers the threshold found (the next request's guess), or -1.0 where
    the cut is not proven (``level`` untouched: the exact path must run). ``hwp[h * K + k]``: ``head_weight[h] *
    eff[k]``, ``hwe`` those indices by it descending.

    List ``l``'s item ``i`` is unit ``lbase[l] + lmul[l] * ix[loff[l] + i]`` (``ix``: the regular blocks by weight,
    then the heads by weight), its key ``(w[unit] / lfs[l]) * leff[l]``. NOTE (speed): written out in every loop (a
    helper taking the arrays costs ~100 ns a call in reference counts)."""
    K = step_frac.shape[0]
    ln, lk, ltok, lbase, lmul, loff, b0, b1, bm, ix, tok, bws, fac, lfs, leff, rk = ws
    # regular blocks: free, of the largest size (the full block); lists over them where they outnumber heads
    full = 0
    for b in range(B):
        if not bprot[b]:
            full = max(full, bsz[b])
    nr, srt, prev = 0, True, -1.0
    for b in range(B):
        if not bprot[b] and bsz[b] == full:
            ix[nr] = b
            nr += 1
            srt = srt and bw[b] >= prev
            prev = bw[b]
    byhead = nr > H
    nl, nreg = 0, 0
    if byhead:
        if not srt:                                # (insertion sort: the weights rise with b but for ulps)
            _isort(ix, nr, bw)
        for i in range(nr):
            bws[i] = bw[ix[i]]
        fs = np.float64(full)
        for h in range(H):
            for k in range(K):
                ln[nl], lk[nl], ltok[nl], lbase[nl], lmul[nl], loff[nl] = nr, k, full, h, H, 0
                lfs[nl], leff[nl], fac[nl] = fs, eff[k], fs / hwp[nl]
                nl += 1
        nreg = nl
    else:
        nr = 0
    for h in range(H):
        ix[nr + h] = horder[h]
    for b in range(B):
        if not bprot[b] and not (byhead and bsz[b] == full):
            for k in range(K):
                ln[nl], lk[nl], ltok[nl], lbase[nl], lmul[nl], loff[nl] = H, k, bsz[b], b * H, 1, nr
                lfs[nl], leff[nl] = np.float64(bsz[b]), eff[k]
                nl += 1
    m = 0
    for li in range(nl):
        b0[li], b1[li] = 0, ln[li]
        m += ln[li]
    # the thresholds' bits: every pair is above lo's (-1: no threshold), none above hi's (+inf). Two phases: the
    # lists over blocks counted approximately (nap = nreg), then, within 2^8 ulps or where the estimates were off,
    # every list exactly (nap = 0)
    lo, hi = np.int64(-1), _bits(np.inf)
    p = _bits(guess) if guess > 0.0 else _bits(1.0)
    gallop, sdir, step, first, nap = True, False, np.int64(1) << 40, True, nreg
    while True:
        while m > _BAND and hi - lo > (256 if nap else 1):
            if p <= lo or p >= hi:
                p = lo + (hi - lo) // 2
                gallop = False
            # per list the count of items with a key <= t (bm), per step the tokens above it (tok): the lists over
            # blocks approximately (one merge of their thresholds t * fac, ascending in hwe, with the block
            # weights), the others by a binary search within [b0, b1]
            t = _float(p)
            tok[:] = 0
            j = 0
            for q in range(nap):
                li = hwe[q]
                y = t * fac[li]
                while j < nr and bws[j] <= y:
                    j += 1
                bm[li] = j
                tok[lk[li]] += (nr - j) * ltok[li]
            for li in range(nap, nl):
                a, z = b0[li], b1[li]
                base, mul, off, fl, ef = lbase[li], lmul[li], loff[li], lfs[li], leff[li]
                while a < z:
                    mid = (a + z) >> 1
                    if (w[base + mul * ix[off + mid]] / fl) * ef > t:
                        z = mid
                    else:
                        a = mid + 1
                bm[li] = a
                tok[lk[li]] += (ln[li] - a) * ltok[li]
            c = 0.0
            for k in range(K):
                c += np.float64(tok[k]) * step_frac[k]
            up = c > lim
            if up:
                lo = p
                b0[:nl] = bm[:nl]
            else:
                hi = p
                b1[:nl] = bm[:nl]
            m = 0
            for li in range(nl):
                m += b1[li] - b0[li]
            if gallop:
                if first:
                    sdir, first = up, False
                if up == sdir:
                    p = p + step if up else p - step
                    step <<= 2
                    continue
                gallop = False
            p = lo + (hi - lo) // 2
        if nap == 0:
            break
        # the lists over blocks: exact counts from the estimates (the keys do not decrease)
        tlo, thi = _float(lo) if lo >= 0 else -1.0, _float(hi)
        for li in range(nreg):
            base, mul, fl, ef, n = lbase[li], lmul[li], lfs[li], leff[li], ln[li]
            for side in range(2):
                t, c = (tlo, b0[li]) if side == 0 else (thi, max(b1[li], b0[li]))
                if t < 0.0:
                    c = 0
                else:
                    while c > 0 and (w[base + mul * ix[c - 1]] / fl) * ef > t:
                        c -= 1
                    while c < n and not (w[base + mul * ix[c]] / fl) * ef > t:
                        c += 1
                if side == 0:
                    b0[li] = c
                else:
                    b1[li] = c
        nap, gallop, m = 0, False, 0
        for li in range(nl):
            m += b1[li] - b0[li]
        c0 = c1 = 0.0                              # the bracket holds (else both ends start over)
        for k in range(K):
            x0 = x1 = 0
            for li in range(nl):
                if lk[li] == k:
                    x0 += (ln[li] - b0[li]) * ltok[li]
                    x1 += (ln[li] - b1[li]) * ltok[li]
            c0 += np.float64(x0) * step_frac[k]
            c1 += np.float64(x1) * step_frac[k]
        if not ((lo < 0 or c0 > lim) and c1 <= lim):
            lo, hi, m = np.int64(-1), _bits(np.inf), 1 << 62
            for li in range(nl):
                b0[li], b1[li] = 0, ln[li]
        p = lo + (hi - lo) // 2
    tlo, thi = _float(lo) if lo >= 0 else -1.0, _float(hi)
    # the band: pairs with a key in (tlo, thi], in the greedy's order (keys descending, then flat index)
    nkey = np.empty(m, np.float64)
    flat = np.empty(m, np.int64)
    j = 0
    tok[:] = 0
    for li in range(nl):
        base, mul, off, fl, ef, k = lbase[li], lmul[li], loff[li], lfs[li], leff[li], lk[li]
        for i in range(b0[li], b1[li]):
            u = base + mul * ix[off + i]
            nkey[j] = -((w[u] / fl) * ef)
            flat[j] = u * K + k
            j += 1
        tok[k] += (ln[li] - b1[li]) * ltok[li]
    if m > _BAND_MAX:                              # (many equal keys: the exact path)
        return -1.0
    order = np.arange(m)
    for a in range(1, m):                          # insertion sort on (-key, flat)
        x = order[a]
        q = a - 1
        while q >= 0 and (nkey[order[q]] > nkey[x] or (nkey[order[q]] == nkey[x] and flat[order[q]] > flat[x])):
            order[q + 1] = order[q]
            q -= 1
        order[q + 1] = x
    total = 0.0
    for k in range(K):
        total += np.float64(tok[k]) * step_frac[k]
    rel = 4.0 * (nf * K + m + 16) * _EPS
    if not total * (1.0 + rel) < lim:
        return -1.0
    take, nxt = 0, 0.0
    while take < m:
        jj = flat[order[take]]
        nxt = total + np.float64(bsz[jj // K // H]) * step_frac[jj % K]
        if nxt > lim:
            break
        total = nxt
        take += 1
    if take == m or not (total * (1.0 + rel) < lim and nxt * (1.0 - rel) > lim):
        return -1.0
    # taken: every list's items from b1 on, and the band's first ``take``
    for k in range(K):
        tk[k] = tok[k]
    if byhead:
        for k in range(K):                         # (bm: the boundaries by step, then head)
            for h in range(H):
                bm[k * H + h] = b1[h * K + k]
        uH = np.uint64(H)
        for i in range(nr if K == 2 else 0):       # (two steps: the caller counts these in its last pass)
            rk[ix[i]] = i
        for i in range(0 if K == 2 else nr):
            ub = np.uint64(ix[i]) * uH
            for k in range(K):
                kb = np.uint64(k) * uH
                for h in range(uH):
                    level[ub + h] += i >= bm[kb + h]
    for li in range(nreg, nl):
        base, off = lbase[li], loff[li]
        for i in range(b1[li], ln[li]):
            level[base + ix[off + i]] += 1
    for q in range(take):
        jj = flat[order[q]]
        level[jj // K] += 1
        tk[jj % K] += bsz[jj // K // H]
    return thi


@njit(**_FAST)
def _case(n, r, rprior, memo, have, sinks, block, head_weight, horder, hwp, hwe, hull, step_frac, eff, hf, he,
          budget, guess, bw, bsz, bprot, w, level, p1, p2, tk, ws, per):
    """One request of :func:`rdr_cases`: ``(used, forced, distortion, Σ w, protected tokens, next guess)``, its
    tokens per option into ``per``."""
    H, K = head_weight.shape[0], step_frac.shape[0]
    top = hull.shape[0] - 1
    B = _blocks(n, r, sinks, block, rprior, memo, have, bw, bsz, bprot)
    rk, bk = ws[15], ws[8]                         # (regular blocks' ranks, boundaries: _select, two steps)
    rk[:B] = -1
    U = B * H
    ptok, ftok, nf = 0, 0, 0
    uH = np.uint64(H)                              # (unsigned indices: no wraparound test, the loops vectorize)
    for b in range(B):
        x, u0 = bw[b], np.uint64(b) * uH
        lv = top if bprot[b] else 0
        for h in range(uH):
            w[u0 + h] = x * head_weight[h]
            level[u0 + h] = lv
        ptok += bsz[b] * bprot[b]
        ftok += bsz[b] * (not bprot[b])
        nf += H * (not bprot[b])
    forced = np.float64(ptok * H) * hf[top]        # integer-valued token sum: exact in any order
    room = budget - forced
    tk[:] = 0
    if room > 0 and nf and K:
        lim = room * (1 + 1e-12)
        total = 0.0
        for k in range(K):
            total += np.float64(ftok * H) * step_frac[k]
        if total * (1.0 + 4.0 * nf * K * 2.0 ** -52) <= lim:    # every step fits in any summation order
            for b in range(B):
                if not bprot[b]:
                    for h in range(H):
                        level[b * H + h] = K
            tk[:] = ftok * H
        else:
            t = -1.0 if total <= lim else _select(bw, w, bsz, bprot, B, H, horder, hwp, hwe, step_frac, eff, lim,
                                                  nf, level, tk, guess, ws)
            if t < 0.0:                            # not proven (a cut within rounding of the budget): redo
                return 0.0, 0.0, 0.0, 0.0, 0, guess, True
            guess = t if t > 0.0 else guess
    per[:] = 0.0
    prev = np.int64((ptok + ftok) * H)
    for L in range(top):
        c = tk[L] + ptok * H                       # tokens at level > L (a unit takes its steps in order)
        per[hull[L]] = np.float64(prev - c)        # integer-valued: np.bincount's sums exactly
        prev = c
    per[hull[top]] = np.float64(prev)
    for b in range(B):
        s, u0, i = np.float64(bsz[b]), np.uint64(b) * uH, rk[b]
        if i >= 0:                                 # NOTE (speed): levels and options in one pass, by selects
            a0, a1, a2, e0, e1, e2 = s * hf[0], s * hf[1], s * hf[2], he[0], he[1], he[2]
            for h in range(uH):
                lv = level[u0 + h] + (i >= bk[h]) + (i >= bk[uH + h])
                p1[u0 + h] = a2 if lv >= 2 else (a1 if lv >= 1 else a0)
                p2[u0 + h] = w[u0 + h] * (e2 if lv >= 2 else (e1 if lv >= 1 else e0))
            continue
        for h in range(uH):
            lv = np.uint64(level[u0 + h])
            p1[u0 + h] = s * hf[lv]
            p2[u0 + h] = w[u0 + h] * he[lv]
    return (0.0 + _pairwise(p1, 0, U), forced, 0.0 + _pairwise(p2, 0, U), 0.0 + _pairwise(w, 0, U),
            max(0, min(sinks, n) - r), guess, False)


def rdr_cases(ntok, reuse, rprior, sinks, block, head_weight, hull, step_frac, eff, frac, eps2, nbits, budget):
    """``_accel_numba_rdr.rdr_request`` of requests ``q``: ``[reuse[q], ntok[q])`` new (ascending length: the
    search starts from the last threshold), one segment of an unprotected kind, ``budget[q]``: ``(used, forced,
    distortion, Σ w, protected tokens, tokens per option [q, nbits])``."""
    m, H, K = ntok.shape[0], head_weight.shape[0], step_frac.shape[0]
    used, forced, dist, wsum, npr = np.empty(m), np.empty(m), np.empty(m), np.empty(m), np.empty(m, np.int64)
    per, redo = np.zeros((m, nbits)), np.zeros(m, np.bool_)
    if m == 0:
        return used, forced, dist, wsum, npr, per, redo
    cap = np.max(ntok - reuse) // block + sinks // block + 4
    bw, bsz, bprot = np.empty(cap), np.empty(cap, np.int64), np.empty(cap, np.bool_)
    w, level, p1, p2 = np.empty(cap * H), np.empty(cap * H, np.int64), np.empty(cap * H), np.empty(cap * H)
    nlc = (H + cap) * K + 1
    ws = (np.empty(nlc, np.int64), np.empty(nlc, np.int64), np.empty(nlc, np.int64), np.empty(nlc, np.int64),
          np.empty(nlc, np.int64), np.empty(nlc, np.int64), np.empty(nlc, np.int64), np.empty(nlc, np.int64),
          np.empty(nlc, np.int64), np.empty(cap + H, np.int64), np.empty(K + 1, np.int64), np.empty(cap),
          np.empty(nlc), np.empty(nlc), np.empty(nlc), np.empty(cap, np.int64))
    memo, have = np.empty(rprior.shape[0]), np.zeros(rprior.shape[0], np.bool_)
    horder, hwe = np.arange(H), np.arange(H * K)
    _isort(horder, H, head_weight)
    hwp = np.empty(H * K)
    for h in range(H):
        for k in range(K):
            hwp[h * K + k] = head_weight[h] * eff[k]
    _isort(hwe, H * K, -hwp)
    hf, he = frac[hull], eps2[hull]
    tk = np.zeros(K + 1, np.int64)
    guess = -1.0
    for q in range(m):
        used[q], forced[q], dist[q], wsum[q], npr[q], guess, redo[q] = _case(
            ntok[q], reuse[q], rprior, memo, have, sinks, block, head_weight, horder, hwp, hwe, hull, step_frac, eff,
            hf, he, budget[q], guess, bw, bsz, bprot, w, level, p1, p2, tk, ws, per[q])
    return used, forced, dist, wsum, npr, per, redo


_W = types.float64[::1]
__getattr__ = accel.lazy(globals(), {
    "rdr_cases": types.Tuple((_W, _W, _W, _W, types.int64[::1], types.float64[:, ::1], types.boolean[::1]))(
        _I64, _I64, _F64, types.int64, types.int64, _F64, _I64, _F64, _F64, _F64, _F64, types.int64, _F64),
}, _FAST)
