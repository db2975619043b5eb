"""numba kernel of ``linearkv``'s tally (:mod:`engine.policies.linearkv_tally`): every prompt of opaque segments
chunked as the asked pass chunks it (resumed from an earlier prompt with the same first segments, as
``linearkv_tally._reference`` resumes it) and its chunks' fingerprints checked against those stored so far, in
arrival order, in one call. Loaded through ``pic.accel.kernels(n, "lkvtally")``: one kernel, :func:`lkv_pass`.

The stored fingerprints are an open-addressing table (:mod:`pic._accel_numba_table`; a prompt's slots prefetched
before they are probed): ``(fingerprint, (request + 1) << 32 | size)`` pairs, the request and size of the
fingerprint's first chunk. Same answers as the reference, tested both ways (tests/policies/test_linearkv_tally_fast.py).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from pic import _accel_numba_cdc, accel
from pic._accel_numba import _GOLDEN, _I64, _M1, _OPTS, _U64, _mix
from pic._accel_numba_table import _find, _grown, _prefetch, _slot
from pic._accel_numba_xxh import _xxh

_gear_layout = _accel_numba_cdc._gear_layout
DONE, NUMPY, HIT = 0, 1, 2   # st[7]: every prompt tallied / prompt st[0] needs the numpy layout (gb, gf) / a hit
#: st's slots: next prompt, table shift, stored fingerprints, chunk lookups, stored chunk tokens, bounds kept,
#: sources made (0/1), status
_I, _SHIFT, _USED, _LOOKS, _TOKENS, _NLB, _SRC, _STATUS = range(8)
_ROW0 = np.uint64(0x243F6A8885A308D3)   # the hash of no rows
_LOW = np.uint64(0xFFFFFFFF)


@njit(inline="always", **_OPTS)
def _fill(kx, lens, rows, r0, r1, lo, hi, mask, buf):
    """``buf[:hi - lo]`` = the prompt's tokens ``[lo, hi)`` (its segments ``rows[r0:r1]``), as ``opaque_fill``
    derives them (a piece's tokens into a view of ``buf``: vectorized)."""
    s0 = 0
    for q in range(r0, r1):
        r = rows[q]
        s1 = s0 + lens[r]
        if s1 > lo:
            a, b = max(lo, s0) - s0, min(hi, s1) - s0
            x = _mix(kx[r]) + np.uint64(a) * _GOLDEN
            o = buf[s0 + a - lo:s0 + b - lo]
            for j in range(b - a):
                o[j] = np.int32(_mix(x + np.uint64(j) * _GOLDEN) & mask)
        s0 = s1
        if s0 >= hi:
            break


@njit(inline="always", **_OPTS)
def _sources(rows, roffs, lens, pfx, src, shared):
    """``linearkv_tally.sources`` compiled: per item an earlier item (-1: none) holding its first segment rows
    within its prefix, as many as one holds (``shared`` tokens); items in order, each sequence of an item's first
    ``k`` rows hashed and looked up in a table of the first item holding it (then the rows compared)."""
    n = roffs.shape[0] - 1
    tot = rows.shape[0] + n
    size = 16
    while 3 * size < 4 * tot:
        size *= 2
    shift = np.uint64(64)
    s = size
    while s > 1:
        s >>= 1
        shift -= np.uint64(1)
    tab = np.zeros(2 * size, np.uint64)
    for i in range(n):
        r0, r1, p = roffs[i], roffs[i + 1], pfx[i]
        h, cum = _ROW0, 0
        best, bo, bcum = -1, -1, 0
        for k in range(r1 - r0 + 1):
            if k:
                r = rows[r0 + k - 1]
                h = _mix(h ^ (np.uint64(r + 1) * _M1))
                cum += lens[r]
            j = _find(tab, shift, h)
            v = tab[2 * j + 1]
            if v == 0:
                tab[2 * j] = h
                tab[2 * j + 1] = np.uint64(i + 1)
            elif np.int64(v) - 1 < i and cum <= p:
                best, bo, bcum = k, np.int64(v) - 1, cum
        if best >= 0:
            q0 = roffs[bo]
            for q in range(best):
                if rows[r0 + q] != rows[q0 + q]:
                    bo = -1
                    break
        src[i] = bo if best >= 0 else -1
        shared[i] = bcum if src[i] >= 0 else 0


@njit(inline="always", **_OPTS)
def _resume(lb, la, b0, b1, shared, mn, n):
    """``(k, c)``: the leading chunks ``k`` of an earlier prompt's kept layout (bounds ``lb[b0:b1]``, anchors
    ``la[b0:b1]``) a prompt of ``n`` tokens sharing its first ``shared`` tokens takes, and the bound ``c`` it chunks
    from (``bisect_right(bounds, shared - mn) - 1``, back to an anchor, as ``opaque_layout`` accepts it); (0, 0):
    chunked whole."""
    x, lo, hi = shared - mn, b0, b1
    while lo < hi:
        mid = (lo + hi) >> 1
        if lb[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    k = lo - b0 - 1
    while k > 0 and la[b0 + k] == 0:
        k -= 1
    if k <= 0:
        return 0, 0
    c = lb[b0 + k]
    if not (c < n and n - 1 > max(c, 63) and n > 64):
        return 0, 0
    return k, c


def lkv_pass(kx, lens, rows, roffs, ntok, pfx, src, shared, loff, st, tab, lb, la, gb, gf, mask, table, key, thr, mn,
             mx):
    """The prompts from ``st[0]`` on (prompt ``i``: segments ``rows[roffs[i]:roffs[i + 1]]`` of a store whose ``key ^
    salt`` and lengths per segment are ``kx`` / ``lens``; ``ntok[i]`` tokens, exact prefix ``pfx[i]``) chunked
    (``table`` / ``key`` / ``thr`` / ``mn`` / ``mx``: the CDC configuration's kernel arguments; tokens as
    ``opaque_fill`` derives them, ``mask``) and their chunks checked against the fingerprints stored so far (table
    ``tab``). Each prompt resumes from its source ``src[i]`` (``shared[i]`` tokens; made by :func:`_sources` on the
    first call), whose kept layout is ``lb[loff[s]:loff[s + 1]]`` with anchors ``la`` (a prompt laid out by other
    than the kernel: none kept, chunked whole). State in ``st`` (``_I`` ...); ``gb`` / ``gf``: the layout of prompt
    ``st[0]`` made by the numpy rules where the last call asked for it (else empty). Returns ``(tab, lb, la)``
    (grown) and sets ``st[_STATUS]``: ``DONE``, ``NUMPY`` (prompt ``st[0]`` needs the numpy layout: call again with
    it) or ``HIT`` (a chunk of prompt ``st[0]`` is a hit)."""
    nreq = ntok.shape[0]
    if st[_SRC] == 0:
        _sources(rows, roffs, lens, pfx, src, shared)
        st[_SRC] = 1
    i0 = first = st[_I]
    shift, used, looks, tokens, nlb = np.uint64(st[_SHIFT]), st[_USED], st[_LOOKS], st[_TOKENS], st[_NLB]
    big = 1
    for i in range(i0, nreq):
        big = max(big, ntok[i])
    buf = np.empty(big, np.int32)
    status = DONE
    for i in range(i0, nreq):
        n, p, r0, r1 = ntok[i], pfx[i], roffs[i], roffs[i + 1]
        s = src[i]
        k, c, b0 = 0, 0, 0
        if s >= 0 and shared[i] > 0:
            b0 = loff[s]
            k, c = _resume(lb, la, b0, loff[s + 1], shared[i], mn, n)
        if i == first and gb.shape[0]:
            k, c = 0, 0
            bounds, fps = gb, gf
            anchor = np.zeros(gb.shape[0], np.bool_)    # (not kept: a prompt sharing its rows is chunked whole)
        elif n > 64:
            while True:
                base = max(0, c - 63)
                _fill(kx, lens, rows, r0, r1, base, n, mask, buf)
                bounds, anchor, fps, ok = _gear_layout(buf[:n - base], table, key, thr, max(c, 63) - base,
                                                       n - 1 - base, base, mn, c, n, mx, True)
                if ok or not k:
                    break
                k, c = 0, 0          # (resumed, not exact: whole, as the reference tries it)
            if not ok:
                status = NUMPY
                break
        elif n > 0:
            if n > mx:
                status = NUMPY
                break
            _fill(kx, lens, rows, r0, r1, 0, n, mask, buf)
            bounds = np.zeros(2, np.int64)
            bounds[1] = n
            fps = np.empty(1, np.uint64)
            fps[0] = _xxh(buf, 0, n)
            anchor = np.zeros(2, np.bool_)
        else:
            bounds, fps, anchor = np.zeros(1, np.int64), np.empty(0, np.uint64), np.zeros(1, np.bool_)
        # the layout kept: the source's first k bounds, then these
        need = nlb + k + bounds.shape[0]
        if need > lb.shape[0]:
            size = max(2 * lb.shape[0], need)
            lb2, la2 = np.empty(size, np.int64), np.empty(size, np.uint8)
            lb2[:nlb] = lb[:nlb]
            la2[:nlb] = la[:nlb]
            lb, la = lb2, la2
        for q in range(k):
            lb[nlb + q] = lb[b0 + q]
            la[nlb + q] = la[b0 + q]
        nlb += k
        for q in range(bounds.shape[0]):
            lb[nlb + q] = bounds[q]
            la[nlb + q] = 1 if anchor[q] else 0
        nlb += bounds.shape[0]
        loff[i + 1] = nlb
        looks += k + fps.shape[0]
        hit = False
        for q in range(fps.shape[0]):           # (their slots asked for first: the misses overlap)
            _prefetch(tab, 2 * _slot(fps[q], shift))
        for q in range(fps.shape[0]):
            a, e, f = bounds[q], bounds[q + 1], fps[q]
            j = _find(tab, shift, f)
            v = tab[2 * j + 1]
            if v != 0:
                if np.int64(v >> np.uint64(32)) - 1 < i and a >= p and np.int64(v & _LOW) == e - a:
                    hit = True
                    break
                continue
            tab[2 * j] = f
            tab[2 * j + 1] = (np.uint64(i + 1) << np.uint64(32)) | np.uint64(e - a)
            used += 1
            tokens += e - a
            if 4 * used > 3 * (tab.shape[0] >> 1):       # (load limit 3/4: grown, the keys moved)
                tab = _grown(tab, shift)
                shift -= np.uint64(1)
        if hit:
            status = HIT
            break
        i0 = i + 1
    st[_I] = i0
    st[_SHIFT], st[_USED], st[_LOOKS], st[_TOKENS], st[_NLB], st[_STATUS] = np.int64(shift), used, looks, tokens, \
        nlb, status
    return tab, lb, la


_TAB, _U8 = types.uint64[::1], types.uint8[::1]
__getattr__ = accel.lazy(globals(), {
    "lkv_pass": types.Tuple((_TAB, types.int64[::1], _U8))(
        _U64, _I64, _I64, _I64, _I64, _I64, types.int64[::1], types.int64[::1], types.int64[::1], types.int64[::1],
        _TAB, types.int64[::1], _U8, types.int64[::1], _TAB, types.uint64, _U64, types.uint64, types.uint64, types.int64,
        types.int64),
}, _OPTS)
