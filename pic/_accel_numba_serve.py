"""numba kernel of the serving simulation behind :mod:`pic.accel` (group ``"serve"``): one replica, open loop, every
request's plan known before its prefill (an exact-prefix policy whose answers follow from the arrival order alone:
:mod:`engine.serving.timeline`). Same rules as :mod:`pic._accel_numba`: it computes exactly what its reference
computes (the serving model's event loop, :class:`engine.serving.model.ServingModel`), tested both ways; compiled
eagerly, cached on disk.

:func:`serve_one` runs the replica's timeline (``engine.serving.replica``: chunked prefills with the decode batch
riding along, decode-only phases cut at the next step boundary by an arrival, the decoders' heap) with the cost
model's step pricing (``engine.cost_fns.prefill_step_fn``, ``CostModel.decode_step_coeffs``, the model's
attention FLOPs) as the same float operations in the same order on the same constants (``timeline.constants``), and
each request's counterfactual full prefill (``Replica.prefill_share``) where it reused something.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from pic._accel_numba import _I64, _OPTS

_F64 = types.Array(types.float64, 1, "C", readonly=True)

# fc: the cost model's float constants (timeline.constants)
_PEAK, _BW, _KVB, _KVR, _DEC, _LM, _STATE, _LIN, _OVER, _WABOVE, _AL, _AP, _AA, _AR, _AH, _AQ = range(16)
# ic: its integer ones
_DENSE, _WK, _MLA = range(3)
_IDLE, _PREFILL, _DECODE, _WAKE = 0, 1, 2, 3


@njit(**_OPTS)
def _attn(n_i, c_i, fc, mla):
    """``ModelSpec.attention_flops_fn``'s ``gqa`` / ``mla`` (``n_i`` > 0)."""
    n, c = float(n_i), float(c_i)
    if mla:
        x = n * c * fc[_AA]
        y = 2.0 * c * fc[_AR] * fc[_AH] * fc[_AQ] + n * c * fc[_AP]
        return fc[_AL] * (fc[_AP] * (n * (n + 1) / 2) + (y if y < x else x))
    return fc[_AL] * fc[_AP] * (n * c + n * (n + 1) / 2)


@njit(**_OPTS)
def _weights(k, wtab, fc):
    return wtab[k] if k < wtab.shape[0] else fc[_WABOVE]


@njit(**_OPTS)
def _step(num_new, num_cached, nd, dctx, fc, wtab, dense, mla):
    """``cost_fns.prefill_step_fn``'s ``prefill_step`` (``num_new`` > 0): ``(step seconds, share)``."""
    peak, bw, kvb, kv_read, overhead = fc[_PEAK], fc[_BW], fc[_KVB], fc[_KVR], fc[_OVER]
    n, c = num_new, num_cached
    num_tokens = n + nd
    lm_f = fc[_LM] * (1 + nd)
    v = 2.0 * (1 + nd) * fc[_STATE] / bw
    z = 0.0 / peak
    t_rec = v if v > z else z
    lin_f = fc[_LIN] * num_tokens + lm_f
    w = _weights(num_tokens, wtab, fc)
    lin_b = w + num_tokens * kvb
    pre_f = _attn(n, c, fc, mla)
    x, y = lin_f / peak, lin_b / bw
    t_lin = y if y > x else x
    dec_f = dctx * fc[_DEC]
    xa, ya = (pre_f + dec_f) / peak, ((n + c) * kvb + dctx * kv_read) / bw
    t_a = ya if ya > xa else xa
    step = t_lin + t_a + t_rec + overhead
    tok = num_new / (num_new + nd)
    if not nd:
        return step, step * tok
    pre_b = (num_new + num_cached) * kvb
    dec_b = dctx * kvb
    if dense:
        t_att = t_a
    else:
        x, y = (pre_f + dec_f) / peak, (pre_b + dec_b) / bw
        t_att = y if y > x else x
    x, y = pre_f / peak, pre_b / bw
    a_pre = y if y > x else x
    x, y = dec_f / peak, dec_b / bw
    a_dec = y if y > x else x
    att_share = a_pre / (a_pre + a_dec) if a_pre + a_dec > 0 else tok
    share = ((t_lin + overhead) * tok + t_att * att_share + t_rec / (1 + nd))
    return step, share


@njit(**_OPTS)
def _coeffs(nd, fc, wtab):
    """``CostModel.decode_step_coeffs(nd)`` (``nd`` > 0, no profile)."""
    peak, bw = fc[_PEAK], fc[_BW]
    lin_f = (fc[_LIN] + fc[_LM]) * nd
    lin_b = _weights(nd, wtab, fc) + nd * fc[_KVB]
    a, b = lin_f / peak, lin_b / bw
    p1 = b if b > a else a
    a, b = 0.0 / peak, 2.0 * nd * fc[_STATE] / bw
    p2 = b if b > a else a
    fixed = p1 + p2 + fc[_OVER]
    a, b = fc[_DEC] / peak, fc[_KVR] / bw
    return fixed, (b if b > a else a)


@njit(**_OPTS)
def _series(k, f, p, c, d):
    return k * f + p * (k * c + d * k * (k - 1) / 2)


@njit(**_OPTS)
def _boundary(f, p, d, c, elapsed, max_steps):
    """``scheduler.decode_boundary``."""
    if elapsed <= 0:
        return 0, _series(0, f, p, c, d)
    a = p * d / 2
    b = f + p * (c - d / 2)
    if a > 0:
        n = math.ceil((-b + math.sqrt(b * b + 4 * a * elapsed)) / (2 * a))
    elif b > 0:
        n = math.ceil(elapsed / b)
    else:
        return 0, _series(0, f, p, c, d)
    if n > max_steps:
        n = max_steps
    if n < 0:
        n = 0
    while n > 0:
        k = n - 1
        if not _series(k, f, p, c, d) >= elapsed:
            break
        n = k
    while n < max_steps:
        t = _series(n, f, p, c, d)
        if t >= elapsed:
            return n, t
        n += 1
    return n, _series(n, f, p, c, d)


@njit(**_OPTS)
def _to_us(t):
    return math.ceil(t * 1e6 - 1e-6)


@njit(**_OPTS)
def _push(hf, hq, hi, ht, hn, f, q, i, t):
    """heapq.heappush of ``(f, q, i, t)`` (ordered by ``(f, q)``; ``q`` unique) onto the heap's ``hn`` entries."""
    k = hn
    while k > 0:
        p = (k - 1) >> 1
        if hf[p] < f or (hf[p] == f and hq[p] < q):
            break
        hf[k], hq[k], hi[k], ht[k] = hf[p], hq[p], hi[p], ht[p]
        k = p
    hf[k], hq[k], hi[k], ht[k] = f, q, i, t


@njit(**_OPTS)
def _pop(hf, hq, hi, ht, hn):
    """Remove the heap's smallest of its ``hn`` entries (returned: its request and term)."""
    i0, t0 = hi[0], ht[0]
    hn -= 1
    f, q, i, t = hf[hn], hq[hn], hi[hn], ht[hn]
    k = 0
    while True:
        c = 2 * k + 1
        if c >= hn:
            break
        if c + 1 < hn and (hf[c + 1] < hf[c] or (hf[c + 1] == hf[c] and hq[c + 1] < hq[c])):
            c += 1
        if f < hf[c] or (f == hf[c] and q < hq[c]):
            break
        hf[k], hq[k], hi[k], ht[k] = hf[c], hq[c], hi[c], ht[c]
        k = c
    if hn > 0:
        hf[k], hq[k], hi[k], ht[k] = f, q, i, t
    return i0, t0


@njit(**_OPTS)
def _room(a, n):
    """``a`` (its first ``n`` items kept) twice as long."""
    out = np.empty(2 * a.shape[0], a.dtype)
    out[:n] = a[:n]
    return out


@njit(**_OPTS)
def _itl_room(itl, ni):
    if ni + 4 <= itl.shape[0]:
        return itl
    out = np.empty(itl.shape[0] + (itl.shape[0] >> 1) + 4, np.float64)     # (1.5 times: bounded memory)
    out[:ni] = itl[:ni]
    return out


def _serve_one(arrival, ntok, reuse, nout, price_full, budget, fc, ic, wtab, extra, corr, start, first, fin, share,
               full):
    """The timeline of one replica, open loop: requests in arrival order, request ``i`` reusing ``reuse[i]`` of its
    ``ntok[i]`` prompt tokens (an exact prefix: it prefills the rest, at least one), ``extra[i]`` seconds more (a
    plan's correction: ``Replica.run_prefill``'s ``extra_s``; ``corr[i]``: it has one) and decoding ``nout[i]``
    tokens. Writes per request its prefill's start and end (``start``, ``first``), its finish (``fin``), its share of
    the prefill steps' seconds (``share``) and, where ``price_full`` and its plan is not plain (it reused something
    or has a correction), that of a full prefill (``full``: ``Replica.prefill_share``; left as it is elsewhere).
    Returns the ITL segments (flat, as ``ItlLog``) and ``stats``: busy µs, events (as the event loop counts them),
    scheduler steps."""
    r_n = arrival.shape[0]
    dense, mla = ic[_DENSE] != 0, ic[_MLA] != 0
    itl = np.empty(1024, np.float64)
    ni = 0
    # the decoders' heap (grown: _room)
    hf, hq, hi, ht = np.empty(64, np.int64), np.empty(64, np.int64), np.empty(64, np.int64), np.empty(64, np.int64)
    hn = 0
    s, nd, base, seq = 0, 0, 0, 0
    busy, events = 0, r_n          # (every arrival is an event)
    j, q = 0, 0                    # arrivals so far; the queue is requests q .. j-1
    phase = _IDLE
    now = 0
    while True:
        if phase == _IDLE:
            if j >= r_n:
                break
            now = arrival[j]      # an arrival wakes it: its SCHEDULE at once (after every arrival at that time)
        # ---- a SCHEDULE at ``now`` (every arrival up to now queued first)
        events += 1
        while j < r_n and arrival[j] <= now:
            j += 1
        while hn and hf[0] <= s:
            idx, term = _pop(hf, hq, hi, ht, hn)
            hn -= 1
            nd -= 1
            base -= term
            fin[idx] = now
        if q < j:
            i = q
            q += 1
            n, r = ntok[i], reuse[i]
            num_new = n - r if n - r > 1 else 1
            start[i] = now
            if price_full and (r > 0 or corr[i]):    # Replica.prefill_share(n, n), before it changes the batch
                sh, done, s2, nd2, base2 = 0.0, 0, s, nd, base
                while done < n:
                    chunk, cap = n - done, budget - nd2
                    if cap < chunk:
                        chunk = cap if cap > 1 else 1
                    sh += _step(chunk, done, nd2, base2 + nd2 * s2 if nd2 else 0, fc, wtab, dense, mla)[1]
                    done += chunk
                    s2 += 1
                    if done >= n:
                        break
                    for k in range(hn):
                        if hf[k] == s2:      # (every decoder with finish step <= s2 leaves: the earlier ones left)
                            nd2 -= 1
                            base2 -= ht[k]
                full[i] = sh
            # Replica.run_prefill
            num_cached = n - num_new
            ex = extra[i]
            t, done, sh = ex, 0, ex
            while done < num_new:
                chunk, cap = num_new - done, budget - nd
                if cap < chunk:
                    chunk = cap if cap > 1 else 1
                dt, x = _step(chunk, num_cached + done, nd, base + nd * s if nd else 0, fc, wtab, dense, mla)
                sh += x
                if nd:          # (the ITL of the first step: the extra seconds too)
                    d = dt + ex if done == 0 else dt
                    if ni and itl[ni - 3] == 0.0 and itl[ni - 4] == d and itl[ni - 1] == nd:
                        itl[ni - 2] += 1
                    else:
                        itl = _itl_room(itl, ni)
                        itl[ni], itl[ni + 1], itl[ni + 2], itl[ni + 3] = d, 0.0, 1, nd
                        ni += 4
                t += dt
                done += chunk
                s += 1
                while hn and hf[0] <= s:
                    idx, term = _pop(hf, hq, hi, ht, hn)
                    hn -= 1
                    nd -= 1
                    base -= term
                    fin[idx] = now + _to_us(t)      # a FINISH event
                    events += 1
            if nout[i] > 1:
                term = n + 1 - s
                if hn == hf.shape[0]:
                    hf, hq, hi, ht = _room(hf, hn), _room(hq, hn), _room(hi, hn), _room(ht, hn)
                _push(hf, hq, hi, ht, hn, s + nout[i] - 1, seq, i, term)
                hn += 1
                seq += 1
                nd += 1
                base += term
            end = now + _to_us(t)
            share[i] = sh
            busy += end - now
            first[i] = end
            events += 1                 # its PREFILL_DONE
            if nout[i] <= 1:
                fin[i] = end
            phase = _PREFILL
            now = end
        elif nd:
            # Replica.run_decode, then the arrivals during it (Replica.cut: the first one inside ends it)
            n = hf[0] - s
            fixed, per = _coeffs(nd, fc, wtab)
            ctx = base + nd * s
            end = now + _to_us(n * fixed + per * (n * ctx + nd * n * (n - 1) / 2))
            pos = ni
            itl = _itl_room(itl, ni)
            itl[ni], itl[ni + 1], itl[ni + 2], itl[ni + 3] = fixed + per * ctx, per * nd, n, nd
            ni += 4
            s0 = s
            s = s0 + n
            busy += end - now
            t0 = now
            phase = _DECODE
            while j < r_n and arrival[j] < end:
                m, secs = _boundary(fixed, per, nd, ctx, (arrival[j] - t0) / 1e6, n)
                e = t0 + _to_us(secs)
                j += 1
                if e < end:
                    busy -= end - e
                    s = s0 + m
                    if m:
                        itl[pos + 2] = m
                    else:
                        ni = pos
                    end = e
                    phase = _WAKE
                    break
            now = end
        else:
            phase = _IDLE
    stats = np.zeros(3, np.int64)
    stats[0], stats[1], stats[2] = busy, events, s
    return itl[:ni], stats


_W64, _WF64 = _I64.copy(readonly=False), _F64.copy(readonly=False)
_B1 = types.Array(types.boolean, 1, "C", readonly=True)
serve_one = njit(types.Tuple((_WF64, _W64))(_I64, _I64, _I64, _I64, types.boolean, types.int64, _F64, _I64, _F64,
                                            _F64, _B1, _W64, _W64, _W64, _WF64, _WF64), **_OPTS)(_serve_one)
