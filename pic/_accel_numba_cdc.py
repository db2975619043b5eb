"""numba kernels of content-defined chunking (:mod:`pic.engine.cdc`): the Gear candidate scans, the fused
layout and the repeat screen of over-long gaps; the chunks' xxh64 fingerprints (:mod:`pic._accel_numba_xxh`)
are re-exported here. Loaded through ``pic.accel.kernels(n, "cdc")`` (imported only through it). Each one computes exactly what its numpy
reference computes (uint64 arithmetic wraps the same way); tests compare both on random inputs.

Compiled with explicit signatures and cached on disk (``cache=True``), as :mod:`pic._accel_numba`, each on its first
use (:func:`pic.accel.lazy`: a run loads the kernels it calls, ``irminsul`` on opaque prompts one of ten).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.extending import intrinsic
from numba.cpython.unsafe.numbers import trailing_zeros

from pic import _accel_numba_xxh, accel
from pic._accel_numba import (
    _GOLDEN,
    _I32,
    _I64,
    _IR32,
    _IR64,
    _M1,
    _OPTS,
    _U64,
    _V32,
    _V64,
    _mix,
    _splat,
    _transpose8,
    _vc,
)
from pic._accel_numba_xxh import _fps, _xxh


@njit(inline="always", **_OPTS)
def _g(toks, table, i):
    """Gear table entry of token ``toks[i]``: ``G[(t * 0x9E3779B1 mod 2**32) >> 16]`` (:mod:`engine.cdc`).

    NOTE (speed): unsigned indices (``i`` as uint64, the table index as uint32) spare numba's
    negative-index wraparound (a shift, an and and an add per load); 32-bit arithmetic: one ``imul``."""
    return table[np.uint32(np.uint32(toks[np.uint64(i)]) * np.uint32(0x9E3779B1)) >> np.uint32(16)]


@njit(inline="always", **_OPTS)
def _gm(toks, key, i):
    """Table-free Gear value of token ``toks[i]`` (``CDCConfig(gear="mix")``): ``z ^ (z >> 32)`` with ``z = ((t mod
    2**32) ^ key) * 0xBF58476D1CE4E5B9 mod 2**64`` (:func:`engine.cdc.gear_values`)."""
    z = (np.uint64(np.uint32(toks[np.uint64(i)])) ^ key) * _M1
    return z ^ (z >> np.uint64(32))


@njit(inline="always", **_OPTS)
def _gv(toks, table, key, i):
    """Gear value of ``toks[i]``: from ``table``, or table-free (:func:`_gm`) when ``table`` is empty."""
    return _g(toks, table, i) if table.shape[0] else _gm(toks, key, i)


_PREFETCH = 64     # tokens ahead of each lane


def _lanes(table_values):
    """The 8-lane Gear scan as an intrinsic: with table values (``table_values``: :func:`_g`) or table-free ones
    (:func:`_gm` with ``key``). Both take ``(toks, pos, st, q0, q1, table, key, thr, ev, rec, ib)``: lane ``l``
    reads ``toks[pos[l] + q]`` for ``q`` in ``[q0, q1)`` (``q1 - q0`` a multiple of 8, every read inside
    ``toks``), its hash carried in ``st[l]`` (read, then written back). With ``rec`` nonzero, each block of 8
    steps at ``q`` with a hash ``< thr`` is recorded as ``ev[2k] = q``, ``ev[2k + 1] = mask`` (bit ``8 j + l``:
    lane ``l`` after step ``q + j``); returns the number of blocks recorded (``ev`` needs ``2 * (q1 - q0) / 8``
    slots). ``ib``: 64 uint32 of scratch (the table's indices; unused without a table).

    NOTE (speed): written as LLVM vector IR (numba does not vectorize a loop-carried recurrence): per step one
    vector of 8 Gear values and ``h = 2h + g`` on 8 lanes, the candidate test one compare per step and one
    branch-free event store per block; each lane's tokens are prefetched ``_PREFETCH`` tokens ahead (the 8
    streams of a long input from memory: 0.78 -> 0.69 ns per token with the table, 256 ahead measured 0.78). Table-free: 8 tokens of each lane
    loaded at once and transposed in registers (no gathers: they ran at ~1.3 ns per token on this VM), one
    multiply and one xor-shift per vector. Table: the 8 tokens of each lane give 8 table indices in one
    vector multiply and shift, stored to ``ib``; the table entries are 64 scalar loads per block, put
    together in vectors (vector gathers ran 2x slower than the four-lane scalar scan on this VM). The
    random loads from the 512 KB table bound it (~0.56 ns per load on this VM with nothing else to do):
    fewer instructions per token keep more of them in flight (0.86 -> 0.63 ns per token on cached tokens
    against the scalar four-lane scan, which also tested and branched per token)."""
    @intrinsic
    def lanes(typingctx, toks, pos, st, q0, q1, table, key, thr, ev, rec, ib):
        sig = types.int64(toks, pos, st, q0, q1, table, key, thr, ev, rec, ib)

        def codegen(context, builder, sig, args):
            tarr, parr, sarr, garr, earr, iarr = (context.make_array(sig.args[i])(context, builder, args[i])
                                                  for i in (0, 1, 2, 5, 8, 10))
            q0v, q1v, keyv, thrv, recv = args[3], args[4], args[6], args[7], args[9]

            def c64(x):
                return ir.Constant(_IR64, x)
            mod = builder.module
            i8p = ir.IntType(8).as_pointer()
            pf = mod.globals.get("llvm.prefetch.p0") or ir.Function(
                mod, ir.FunctionType(ir.VoidType(), [i8p, _IR32, _IR32, _IR32]), "llvm.prefetch.p0")
            sp = builder.bitcast(sarr.data, _V64.as_pointer())
            h0 = builder.load(sp, align=8)
            keys, thrs = _splat(builder, keyv), _splat(builder, thrv)
            rec1 = builder.icmp_signed("!=", recv, c64(0))
            lanes = [builder.load(builder.gep(parr.data, [ir.Constant(_IR32, j)])) for j in range(8)]
            entry = builder.block
            loop = builder.append_basic_block("gear_loop")
            body = builder.append_basic_block("gear_body")
            out = builder.append_basic_block("gear_out")
            builder.branch(loop)
            builder.position_at_end(loop)
            q, h, k = builder.phi(_IR64), builder.phi(_V64), builder.phi(_IR64)
            q.add_incoming(q0v, entry)
            h.add_incoming(h0, entry)
            k.add_incoming(c64(0), entry)
            builder.cbranch(builder.icmp_signed("<", q, q1v), body, out)
            builder.position_at_end(body)
            for j in range(8):
                a = builder.gep(tarr.data, [builder.add(lanes[j], builder.add(q, c64(_PREFETCH)))])
                builder.call(pf, [builder.bitcast(a, i8p), ir.Constant(_IR32, 0), ir.Constant(_IR32, 3),
                                  ir.Constant(_IR32, 1)])
            v = [builder.load(builder.bitcast(builder.gep(tarr.data, [builder.add(lanes[j], q)]), _V32.as_pointer()),
                              align=4) for j in range(8)]
            if table_values:
                ibp = builder.bitcast(iarr.data, _V32.as_pointer())
                for j in range(8):          # lane j's 8 table indices: (t * 0x9E3779B1 mod 2**32) >> 16
                    ix = builder.lshr(builder.mul(v[j], ir.Constant(_V32, [0x9E3779B1] * 8)),
                                      ir.Constant(_V32, [16] * 8))
                    builder.store(ix, builder.gep(ibp, [ir.Constant(_IR32, j)]), align=4)
                gs = []
                for s in range(8):
                    z = ir.Constant(_V64, ir.Undefined)
                    for j in range(8):
                        e = builder.load(builder.gep(iarr.data, [c64(8 * j + s)]), align=4)
                        z = builder.insert_element(z, builder.load(builder.gep(garr.data, [builder.zext(e, _IR64)]),
                                                                   align=8), ir.Constant(_IR32, j))
                    gs.append(z)
            else:
                gs = []
                for u in _transpose8(builder, v):
                    z = builder.mul(builder.xor(builder.zext(u, _V64), keys), _vc(0xBF58476D1CE4E5B9))
                    gs.append(builder.xor(z, builder.lshr(z, _vc(32))))
            mask = c64(0)
            hc = h
            for j, z in enumerate(gs):
                hc = builder.add(builder.add(hc, hc), z)
                c = builder.bitcast(builder.icmp_unsigned("<", hc, thrs), ir.IntType(8))
                mask = builder.or_(mask, builder.shl(builder.zext(c, _IR64), c64(8 * j)))
            ep = builder.gep(earr.data, [builder.shl(k, c64(1))])
            builder.store(q, ep)
            builder.store(mask, builder.gep(ep, [ir.Constant(_IR32, 1)]))
            hit = builder.and_(builder.icmp_unsigned("!=", mask, c64(0)), rec1)
            q.add_incoming(builder.add(q, c64(8)), body)
            h.add_incoming(hc, body)
            k.add_incoming(builder.add(k, builder.zext(hit, _IR64)), body)
            builder.branch(loop)
            builder.position_at_end(out)
            builder.store(h, sp, align=8)
            return k
        return sig, codegen
    return lanes


_table_lanes, _mix_lanes = _lanes(True), _lanes(False)


@njit(inline="always", **_OPTS)
def _gt(toks, table, key, i):
    return _g(toks, table, i)


@njit(inline="always", **_OPTS)
def _gx(toks, table, key, i):
    return _gm(toks, key, i)


def _scan(lanes, gval):
    """The candidate scan with the lanes ``lanes`` (:func:`_lanes`) and the scalar Gear values ``gval`` (one
    compiled scan per kind of Gear values, no branch between them)."""
    @njit(inline="always", **_OPTS)
    def scan(toks, table, key, thr, first, last):
        """Indices ``i`` in ``[first, last)`` (``first >= 63``) whose 64-token Gear hash ``h_i = sum_{j<64}
        G(t_{i-j}) << j mod 2**64`` is below ``thr``, ascending; ``G`` as ``lanes`` and ``gval`` take it (from
        ``table``, or table-free with ``key``).

        Eight lanes (:func:`_lanes`): lane ``l`` owns positions ``[p_l, p_l + span)``, ``p_l = first + l * span``,
        ``span - 1`` a multiple of 8; its 64 warm-up steps over tokens ``p_l - 63 .. p_l`` leave it at ``h_{p_l}``
        (checked here), the scan then records blocks of 8 steps with a candidate. The lanes' events are read
        lane by lane (ascending); what is left after lane 7 (< 72 tokens) goes on one token at a time from lane
        7's hash. Short ranges (< 1024) run one token at a time."""
        n = last - first
        out = np.empty(max(n, 0), np.int64)
        if n <= 0:
            return out
        one = np.uint64(1)
        k = 0
        steps = (n // 8 - 1) // 8 * 8 if n >= 1024 else 0
        if steps:
            span = steps + 1
            pos = np.empty(8, np.int64)
            st = np.zeros(8, np.uint64)
            ev = np.empty(2 * (steps // 8), np.int64)
            ib = np.empty(64, np.uint32)
            for j in range(8):
                pos[j] = first + j * span - 63
            lanes(toks, pos, st, 0, 64, table, key, thr, ev, 0, ib)
            at0 = st.copy()                              # h at p_l
            for j in range(8):
                pos[j] += 64
            ne = lanes(toks, pos, st, 0, steps, table, key, thr, ev, 1, ib)
            # lane-major output: count each lane's candidates, then place them (one pass over the set bits each)
            at = np.zeros(8, np.int64)
            for e in range(ne):
                mask = np.uint64(ev[2 * e + 1])
                while mask:
                    at[trailing_zeros(mask) & 7] += 1
                    mask &= mask - np.uint64(1)
            for j in range(8):
                p = first + j * span
                if at0[j] < thr:
                    out[k] = p
                    k += 1
                at[j], k = k, k + at[j]
            for e in range(ne):
                q, mask = ev[2 * e], np.uint64(ev[2 * e + 1])
                while mask:
                    b = np.int64(trailing_zeros(mask))
                    j = b & 7
                    out[at[j]] = first + j * span + 1 + q + (b >> 3)
                    at[j] += 1
                    mask &= mask - np.uint64(1)
            h, start = st[7], 8 * span
        else:
            h, start = np.uint64(0), 0
            for j in range(-63, 0):
                h = (h << one) + gval(toks, table, key, first + j)
        for j in range(start, n):
            h = (h << one) + gval(toks, table, key, first + j)
            if h < thr:
                out[k] = first + j
                k += 1
        return out[:k].copy()
    return scan


_table_scan, _mix_scan = _scan(_table_lanes, _gt), _scan(_mix_lanes, _gx)
_NO_TABLE = np.zeros(0, np.uint64)


def gear_candidates(toks, table, thr, first, last):
    """Indices ``i`` in ``[first, last)`` (``first >= 63``) whose 64-token Gear hash ``h_i = sum_{j<64}
    G[t_{i-j}] << j mod 2**64`` is below ``thr``, ascending (:func:`engine.cdc._natural`'s candidates;
    :func:`_scan` with the table's lanes)."""
    return _table_scan(toks, table, np.uint64(0), thr, first, last)


def mix_candidates(toks, key, thr, first, last):
    """:func:`gear_candidates` with the table-free Gear values (:func:`_gm` with ``key``)."""
    return _mix_scan(toks, _NO_TABLE, key, thr, first, last)


def gear_cuts(toks, table, key, thr, first, last, shift, m):
    """:func:`gear_candidates` (:func:`mix_candidates` with ``key`` when ``table`` is empty) ``+ shift`` (the
    cut offsets ``b``) with :func:`engine.cdc._natural`'s min-size rule when there is no hard boundary: keep
    ``b`` when ``b >= m`` and the next candidate (none: the end of the prompt, which never suppresses) is at
    least ``m`` after it."""
    if table.shape[0]:
        cand = _gear_candidates(toks, table, thr, first, last)
    else:
        cand = _mix_candidates(toks, key, thr, first, last)
    k = cand.shape[0]
    keep = np.zeros(k, np.bool_)
    num = 0
    for j in range(k):
        b = cand[j] + shift
        if b >= m and (j + 1 == k or cand[j + 1] - cand[j] >= m):
            keep[j] = True
            num += 1
    out = np.empty(num, np.int64)
    num = 0
    for j in range(k):
        if keep[j]:
            out[num] = cand[j] + shift
            num += 1
    return out


def gear_hash(toks, table, key):
    """``h_i = sum_{j<min(64, i+1)} G[t_{i-j}] << j mod 2**64`` for every ``i`` (:func:`engine.cdc.gear_hash`;
    ``G`` table-free, :func:`_gm` with ``key``, when ``table`` is empty)."""
    n = toks.shape[0]
    out = np.empty(n, np.uint64)
    h = np.uint64(0)
    if table.shape[0]:
        for i in range(n):
            h = (h << np.uint64(1)) + _g(toks, table, i)
            out[i] = h
    else:
        for i in range(n):
            h = (h << np.uint64(1)) + _gm(toks, key, i)
            out[i] = h
    return out


@njit(inline="always", **_OPTS)
def _gap_repeats(toks, table, key, s, e, bm, lst):
    """Whether some Gear hash value of the 64-token windows wholly inside ``toks[s:e]`` (ending at ``i`` in
    ``[s + 63, e)``) occurs at least 3 times (``bm``: 1024 words, ``lst``: ``e - s`` slots, scratch).

    Exact: every occurrence of a value after its first finds its 16-bit bucket marked, so lands in ``lst``;
    a value occurs 3 times exactly when it is twice in ``lst`` (sorted, neighbours compared).
    NOTE (speed): one bitmap test-and-set per window in 8 KB (a rare, predictable branch) instead of a
    probed hash set (a data-dependent probe loop per window): random content has no repeat and ``lst``
    holds ~n**2 / 2**17 bucket collisions."""
    bm[:] = 0
    one, six, low, top = np.uint64(1), np.uint64(6), np.uint64(63), np.uint64(48)
    k = 0
    h = np.uint64(0)
    tab = table.shape[0] != 0
    for i in range(s, s + 63):
        h = (h << one) + (_g(toks, table, i) if tab else _gm(toks, key, i))
    for i in range(s + 63, e):
        h = (h << one) + (_g(toks, table, i) if tab else _gm(toks, key, i))
        # NOTE (speed): written out here: a helper taking the arrays costs a refcount call pair per window
        q = (h * _GOLDEN) >> top
        w, bit = q >> six, one << (q & low)
        old = bm[w]
        bm[w] = old | bit
        if old & bit:
            lst[k] = h
            k += 1
    if k < 2:
        return False
    srt = np.sort(lst[:k])
    for j in range(k - 1):
        if srt[j] == srt[j + 1]:
            return True
    return False


def gear_repeats(toks, table, key, starts, ends):
    """For each gap ``[starts[g], ends[g])``: whether some Gear hash value of the 64-token windows wholly
    inside it (ending at ``i`` in ``[s + 63, e)``) may occur at least 3 times. False only where none does:
    :func:`engine.cdc._periodic_cuts` finds no cut there (False also for gaps of <= 66 tokens, which it
    skips); True for gaps of more than ``2**16`` windows without looking (the numpy rule then decides).

    NOTE (speed): random content has over-long gaps too (~1 in 180 chunks) and none repeats; this screens
    them in one call (:func:`_gap_repeats`) instead of a hash pass and a sort per gap in numpy."""
    out = np.zeros(starts.shape[0], np.bool_)
    cap = 1 << 16
    bm = np.empty(1024, np.uint64)
    lst = np.empty(0, np.uint64)
    for g in range(starts.shape[0]):
        s, e = starts[g], ends[g]
        if e - s <= 66:
            continue
        if e - s - 63 > cap:
            out[g] = True
            continue
        if lst.shape[0] < e - s:
            lst = np.empty(e - s, np.uint64)
        out[g] = _gap_repeats(toks, table, key, s, e, bm, lst)
    return out


_LAYOUT = types.Tuple((types.int64[::1], types.boolean[::1], types.uint64[::1], types.boolean))


def gear_layout(toks, table, key, thr, first, last, base, m, start, n, mx, fps):
    """:func:`engine.cdc._layout` without hard boundaries, and the chunks' :func:`fingerprints`, in one call:
    ``(bounds, anchor, fingerprints, ok)`` for a prompt of ``n`` tokens of which ``toks`` holds ``[base, n)``,
    bounds ``>= start``; candidates ``i`` in ``[first, last)`` (indices into ``toks``: :func:`gear_cuts` with
    ``shift = base + 1``). An over-long gap (``> mx``) where no Gear hash value repeats
    (:func:`_gap_repeats`: :func:`engine.cdc._periodic_cuts` finds nothing there) gets
    :func:`engine.cdc._forced_cuts` (not anchors). ``ok`` is False (and the arrays empty) when some
    over-long gap may hold a periodic run: the numpy rules decide then. ``fps`` False: no fingerprints
    (an empty array).

    NOTE (speed): one compiled call per prompt instead of ~3 calls and ~10 numpy calls of set-up (a
    per-prompt cost as large as the scan itself at 4096 tokens), and the forced cuts of random content's
    over-long gaps (~1 prompt in 14 at 4096 tokens) without the numpy rules (~50 us each)."""
    cuts = _gear_cuts(toks, table, key, thr, first, last, base + 1, m)
    k = cuts.shape[0]
    extra = 0
    prev = start
    big = 0
    for j in range(k + 1):
        e = cuts[j] if j < k else n
        g = e - prev
        if g > mx:
            big = max(big, g)
            extra += g // mx - (1 if g % mx == 0 else 0)
        prev = e
    if big:
        cap = 1 << 16
        if big - 63 > cap:
            return np.empty(0, np.int64), np.empty(0, np.bool_), np.empty(0, np.uint64), False
        bm = np.empty(1024, np.uint64)
        lst = np.empty(big, np.uint64)
        prev = start
        for j in range(k + 1):
            e = cuts[j] if j < k else n
            if e - prev > max(mx, 66) and _gap_repeats(toks, table, key, prev - base, e - base, bm, lst):
                return np.empty(0, np.int64), np.empty(0, np.bool_), np.empty(0, np.uint64), False
            prev = e
    total = k + 2 + extra
    bounds = np.empty(total, np.int64)
    anchor = np.empty(total, np.bool_)
    bounds[0] = start
    anchor[0] = True
    q = 1
    prev = start
    for j in range(k + 1):
        e = cuts[j] if j < k else n
        g = e - prev
        if g > mx:
            rem = g % mx
            num = g // mx - (1 if rem == 0 else 0)
            for c in range(1, num + 1):
                bounds[q] = prev + c * mx if (c < num or rem == 0) else prev + (c - 1) * mx + (mx + rem) // 2
                anchor[q] = False
                q += 1
        bounds[q] = e
        anchor[q] = True
        q += 1
        prev = e
    if not fps:
        return bounds, anchor, np.empty(0, np.uint64), True
    out = np.empty(total - 1, np.uint64)
    _fps(toks, bounds, base, out)
    return bounds, anchor, out, True


_PROMPT = types.Tuple((types.int32[::1], types.uint64[::1], types.boolean))


def prompt_layout(kx, lens, rows, lo, mask, table, key, thr, base, m, start, n, mx, mm, q):
    """A prompt of opaque segments from ``lo`` on, chunked from ``start``, in one call: ``(toks, meta, ok)``.
    ``toks``: its tokens ``[lo, n)`` (:func:`pic._accel_numba.opaque_fill` of its segments ``rows`` from the one
    holding ``lo``, ``kx`` / ``lens`` the store's ``key ^ salt`` and lengths per segment); ``meta``: for the ``nb``
    bounds of :func:`gear_layout` of ``toks[base - lo:]`` (tokens ``[base, n)``, bounds ``>= start``, fingerprints
    made), in one ``uint64`` array of ``5 * nb - 2``: the bounds, the ``nb - 1`` fingerprints, heads and tails
    (:func:`pic._accel_numba_xxh.edge_keys` of those bounds in ``toks``, ``mm`` tokens), the anchors (0/1), the key of
    the ``mm`` tokens from ``q`` (0 unless ``lo <= q <= n - mm``: where the exact prefix ends); empty if not ``ok``.

    NOTE (speed): one call per prompt, not three (tokens, layout, edge keys: ~20 us of numpy set-up), its answers in
    one array (~0.6 us to box each), the segment holding ``lo`` found from the lengths (its bounds: ~12 us)."""
    out = np.empty(n - lo, np.int32)
    i, s0, last = 0, 0, rows.shape[0] - 1
    while i < last and s0 + lens[rows[i]] <= lo:
        s0 += lens[rows[i]]
        i += 1
    k = 0
    s = lo - s0
    for p in range(i, rows.shape[0]):     # (NOTE (speed): a piece's tokens from its own base, a view: vectorized)
        r = rows[p]
        x, ln = _mix(kx[r]) + np.uint64(s) * _GOLDEN, max(0, min(lens[r] - s, n - lo - k))
        o = out[k:k + ln]
        for j in range(ln):
            o[j] = np.int32(_mix(x + np.uint64(j) * _GOLDEN) & mask)
        k, s = k + ln, 0
    toks = out[base - lo:]
    first = max(start, 63) - base
    bounds, anchor, fps, ok = _gear_layout(toks, table, key, thr, first, n - 1 - base, base, m, start, n, mx, True)
    if not ok:
        return out, np.empty(0, np.uint64), False
    nb = bounds.shape[0]
    meta, h0, t0, a0 = np.zeros(5 * nb - 2, np.uint64), 2 * nb - 1, 3 * nb - 2, 4 * nb - 3
    for c in range(nb):
        meta[c] = np.uint64(bounds[c])
        meta[a0 + c] = np.uint64(1) if anchor[c] else np.uint64(0)
    tot = n - lo
    for c in range(nb - 1):
        meta[nb + c] = fps[c]
        a, e = bounds[c] - lo, bounds[c + 1] - lo
        if tot - a >= mm:
            meta[h0 + c] = _xxh(out, a, a + mm)
        if e - a >= mm:
            meta[t0 + c] = _xxh(out, e - mm, e)
    if lo <= q <= n - mm:
        meta[5 * nb - 3] = _xxh(out, q - lo, q - lo + mm)
    return out, meta, True


# kernels that other kernels call, as those call them (signature-free: see pic.accel.lazy)
_gear_candidates, _mix_candidates = njit(**_OPTS)(gear_candidates), njit(**_OPTS)(mix_candidates)
_gear_cuts, _gear_layout = njit(**_OPTS)(gear_cuts), njit(**_OPTS)(gear_layout)

# NOTE (speed): each compiled (cached code loaded) on first use, not at import (pic.accel.lazy); the chunks'
# fingerprints and edge keys are :mod:`pic._accel_numba_xxh`'s, served here
__getattr__ = accel.lazy(globals(), {
    "gear_candidates": types.int64[::1](_I32, _U64, types.uint64, types.int64, types.int64),
    "mix_candidates": types.int64[::1](_I32, types.uint64, types.uint64, types.int64, types.int64),
    "gear_cuts": types.int64[::1](_I32, _U64, types.uint64, types.uint64, types.int64, types.int64, types.int64,
                                  types.int64),
    "gear_hash": types.uint64[::1](_I32, _U64, types.uint64),
    "gear_repeats": types.boolean[::1](_I32, _U64, types.uint64, _I64, _I64),
    "gear_layout": _LAYOUT(_I32, _U64, types.uint64, types.uint64, types.int64, types.int64, types.int64, types.int64,
                           types.int64, types.int64, types.int64, types.boolean),
    "prompt_layout": _PROMPT(_U64, _I64, _I64, types.int64, types.uint64, _U64, types.uint64, types.uint64,
                             types.int64, types.int64, types.int64, types.int64, types.int64, types.int64, types.int64),
}, _OPTS, {"fingerprints": _accel_numba_xxh, "edge_keys": _accel_numba_xxh})
