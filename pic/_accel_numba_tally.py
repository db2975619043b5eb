"""numba kernels of ``irminsul``'s tally (:mod:`engine.policies.irminsul_tally`): every prompt of opaque segments
laid out as irminsul lays it out (its whole-prompt CDC layout and chunk fingerprints: :mod:`pic._accel_numba_cdc`'s
``gear_layout``, the tokens as ``prompt_layout`` derives them) and its chunks checked against the registry the
asked pass would build, in arrival order, in one call. Loaded through ``pic.accel.kernels(n, "tally")``.

The registry is the shared open-addressing table (:mod:`pic._accel_numba_table`): ``(fingerprint, position + 1)``
pairs, the position where the fingerprint's first chunk starts. Same answers as the numpy reference
(``irminsul_tally._reference``), tested both ways.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from pic import _accel_numba_cdc, accel
from pic._accel_numba import _GOLDEN, _I64, _OPTS, _U64, _mix
from pic._accel_numba_table import _find, _grown
from pic._accel_numba_xxh import _xxh

_gear_layout = _accel_numba_cdc._gear_layout
_gear_candidates, _mix_candidates = _accel_numba_cdc._gear_candidates, _accel_numba_cdc._mix_candidates
DONE, NUMPY, INEXACT = 0, 1, 2       # status: every prompt tallied / prompt i needs the numpy layout / not exact at i
_TAB = types.uint64[::1]
_OUT = types.Tuple((types.int64, types.int64, _TAB, types.uint64, types.int64, types.int64))


@njit(inline="always", **_OPTS)
def _chunks(tab, shift, used, bounds, fps, p):
    """Register a prompt's chunks (``bounds``, ``fps``; exact prefix ``p``) in arrival order: ``(ok, tab, shift,
    used, lookups)``; ``ok`` False where a chunk ending past ``p`` was registered before (a fingerprint hit past the
    exact prefix, or a fingerprint repeated in the prompt's new chunks: not stored twice), or one was registered at
    another position (its KV would serve this one rotated); ``lookups``: the chunks starting at or after ``p``."""
    look = 0
    for c in range(fps.shape[0]):
        a, b = bounds[c], bounds[c + 1]
        if a >= p:
            look += 1
        j = _find(tab, shift, fps[c])
        v = tab[2 * j + 1]
        if v != 0:
            if b > p or v != np.uint64(a + 1):
                return False, tab, shift, used, look
            continue
        tab[2 * j] = fps[c]
        tab[2 * j + 1] = np.uint64(a + 1)
        used += 1
        if 4 * used > 3 * (tab.shape[0] >> 1):       # (load limit 3/4: grown, the keys moved)
            tab = _grown(tab, shift)
            shift -= np.uint64(1)
    return True, tab, shift, used, look


def tally_chunks(bounds, fps, p, tab, shift, used):
    """One prompt's chunks laid out elsewhere (:func:`_chunks`): ``(status, 0, tab, shift, used, lookups)``."""
    ok, tab, shift, used, look = _chunks(tab, shift, used, bounds, fps, p)
    return (DONE if ok else INEXACT), 0, tab, shift, used, look


@njit(inline="always", **_OPTS)
def _fill(kx, lens, rows, r0, r1, lo, hi, mask, buf):
    """``buf[:hi - lo]`` = the prompt's tokens ``[lo, hi)`` (its segments ``rows[r0:r1]``), as ``opaque_fill``
    derives them."""
    s0 = 0
    for q in range(r0, r1):
        r = rows[q]
        s1 = s0 + lens[r]
        if s1 > lo:
            x = _mix(kx[r])
            for j in range(max(lo, s0) - s0, min(hi, s1) - s0):
                buf[s0 + j - lo] = np.int32(_mix(x + np.uint64(j) * _GOLDEN) & mask)
        s0 = s1
        if s0 >= hi:
            break


@njit(inline="always", **_OPTS)
def _anchor(kx, lens, rows, r0, r1, p, mask, table, key, thr, mn, buf):
    """The last anchor ``c`` (a cut ``b = i + 1`` of a candidate ``i`` with ``b >= mn`` and no other candidate in
    ``(i, i + mn)``: :func:`pic._accel_numba_cdc.gear_cuts`' rule, which reads no token from ``b + mn - 1`` on) with
    ``c + mn <= p``, from the tokens before ``p`` in windows of growing size; 0 where there is none. The prompt's
    whole-prompt layout has every bound of a layout from ``c`` on (``gear_layout`` from ``start = c``: the asked
    pass's resumed layout), and the same bounds before it as any prompt sharing its first ``p`` tokens."""
    hi, w = p - 1, _WINDOW0
    while True:
        lo = max(63, hi - w)
        _fill(kx, lens, rows, r0, r1, lo - 63, hi, mask, buf)
        toks = buf[:hi - lo + 63]
        if table.shape[0]:
            cand = _gear_candidates(toks, table, thr, 63, hi - lo + 63)
        else:
            cand = _mix_candidates(toks, key, thr, 63, hi - lo + 63)
        nxt = hi + mn        # (past the scanned indices: an index i with i + mn <= hi has none after it unseen)
        for j in range(cand.shape[0] - 1, -1, -1):
            i = cand[j] + lo - 63
            if i + mn <= hi and nxt - i >= mn and i + 1 >= mn:
                return i + 1
            nxt = i
        if lo == 63:
            return 0
        w *= 4


_WINDOW0 = 1024         # tokens before the exact prefix scanned first for an anchor
_RESUME = 2048          # exact prefixes from which the layout resumes at an anchor


def tally_pass(kx, lens, rows, roffs, ntok, pfx, i0, mask, table, key, thr, mn, mx, tab, shift, used):
    """The prompts ``i0, i0 + 1, ...`` (prompt ``i``: segments ``rows[roffs[i]:roffs[i + 1]]`` of a store whose
    ``key ^ salt`` and lengths per segment are ``kx`` / ``lens``; ``ntok[i]`` tokens, exact prefix ``pfx[i]``)
    laid out (``gear_layout``, ``table`` / ``key`` / ``thr`` / ``mn`` / ``mx``: the CDC configuration's kernel
    arguments; a prompt of at most 64 tokens is one chunk) and registered (:func:`_chunks`) in table ``tab``
    (``2 ** (64 - shift)`` slots, ``used`` keys); tokens as ``opaque_fill`` derives them (``mask``). Returns
    ``(status, i, tab, shift, used, lookups)``: ``DONE`` (``i``: the number of prompts), ``NUMPY`` (prompt ``i``
    needs the numpy rules: tallied up to it), ``INEXACT`` (prompt ``i`` is not exactly prefix's); ``lookups``: the
    chunks starting at or after the exact prefix.

    NOTE (speed): a prompt whose exact prefix is long is laid out from its last anchor ``c`` with ``c + mn <= p``
    (:func:`_anchor`): its chunks before ``c`` are those of the earlier prompt that shared the prefix, registered
    where they are (checked when it was tallied), and no lookup; only its tokens from ``c - 63`` on are made
    (Mooncake conversation: ~40 % of the tokens are shared prefixes)."""
    nreq = ntok.shape[0]
    big = 0
    for i in range(i0, nreq):
        big = max(big, ntok[i])
    buf = np.empty(max(big, 1), np.int32)
    look = 0
    for i in range(i0, nreq):
        n, p, r0, r1 = ntok[i], pfx[i], roffs[i], roffs[i + 1]
        c = _anchor(kx, lens, rows, r0, r1, p, mask, table, key, thr, mn, buf) if p >= _RESUME else 0
        if n - 1 <= max(c, 63):
            c = 0
        base = max(0, c - 63)
        _fill(kx, lens, rows, r0, r1, base, n, mask, buf)
        toks = buf[:n - base]
        if n <= 64:
            if n > mx:
                return NUMPY, i, tab, shift, used, look
            bounds = np.zeros(2, np.int64)
            bounds[1] = n
            fps = np.empty(1, np.uint64)
            fps[0] = _xxh(toks, 0, n)
        else:
            bounds, _, fps, ok = _gear_layout(toks, table, key, thr, max(c, 63) - base, n - 1 - base, base, mn, c, n,
                                              mx, True)
            if not ok:
                return NUMPY, i, tab, shift, used, look
        ok, tab, shift, used, got = _chunks(tab, shift, used, bounds, fps, p)
        look += got
        if not ok:
            return INEXACT, i, tab, shift, used, look
    return DONE, nreq, tab, shift, used, look


__getattr__ = accel.lazy(globals(), {
    "tally_pass": _OUT(_U64, _I64, _I64, _I64, _I64, _I64, types.int64, types.uint64, _U64, types.uint64, types.uint64,
                       types.int64, types.int64, _TAB, types.uint64, types.int64),
    "tally_chunks": _OUT(_I64, _U64, types.int64, _TAB, types.uint64, types.int64),
}, _OPTS)
