"""numba kernels of the ``oracle`` policy's window index behind :mod:`pic.accel`, reached through
``accel.kernels(n, "oracle")`` and loaded on first use: the shared open-addressing table
(:mod:`pic._accel_numba_table`) of ``uint64`` window hashes with an ``int64`` value ``>= 0`` each, stored as
``value + 1`` (:class:`engine.oracle.WindowIndex`'s compiled form). Same answers as the sorted levels (the first
value added for a key is kept), tested both ways."""

from __future__ import annotations

import numpy as np
from numba import njit, types

from pic._accel_numba import _I64, _OPTS, _U64, _mix
from pic._accel_numba_table import EMPTY, _ahead, _find, table_rehash  # noqa: F401  (re-exported: the "oracle" group serves it)
from pic.engine.oracle_lines import layout_ranges


@njit(types.void(types.uint64[::1], types.uint64, _U64, types.boolean[::1], types.int64[::1]), **_OPTS)
def table_lookup(tab, shift, keys, found, value):
    """``found[i]``/``value[i]`` of each of ``keys`` (left as they are where the key is absent)."""
    for i in range(keys.shape[0]):
        _ahead(tab, shift, keys, i)
        j = _find(tab, shift, keys[i])
        if tab[2 * j + 1] != EMPTY:
            found[i] = True
            value[i] = np.int64(tab[2 * j + 1]) - 1


@njit(types.int64(types.uint64[::1], types.uint64, _U64, _I64), **_OPTS)
def table_add(tab, shift, keys, values):
    """Insert each key not present yet with its value (``>= 0``), in order (the first of duplicates wins);
    returns how many were inserted. The caller keeps the table below its load limit."""
    n = 0
    for i in range(keys.shape[0]):
        _ahead(tab, shift, keys, i)
        k = keys[i]
        j = _find(tab, shift, k)
        if tab[2 * j + 1] == EMPTY:
            tab[2 * j] = k
            tab[2 * j + 1] = np.uint64(values[i] + 1)
            n += 1
    return n


_M = types.int64[:, ::1]

#: :func:`engine.oracle_lines.layout_ranges` compiled (the plain-Python function is the reference)
line_layout = njit(types.int64(_I64, _I64, types.Array(types.int64, 2, "C", readonly=True), types.int64,
                               types.int64, _I64, _I64, _I64, _M), **_OPTS)(layout_ranges)


@njit(inline="always", **_OPTS)
def _pair_id(tab, shift, pack):
    """The name id of a pair (its packed key) in the pair table, or -1."""
    j = _find(tab, shift, _mix(np.uint64(pack)))
    return np.int64(tab[2 * j + 1]) - 1 if tab[2 * j + 1] != EMPTY else -1


@njit(types.int64(_M, types.int64, types.int64, types.int64, types.uint64[::1], types.uint64, _M, _M, _M), **_OPTS)
def line_lookup(z, nr, ins, off, ptab, pshift, state, ext, out):
    """:meth:`engine.oracle_lines.LineIndex.lookup` of the named ranges ``z[0:4, :nr]`` (numpy form: the
    reference): the held windows from position ``off`` on into ``out`` (row 0: position - ``off``, row 1: value),
    ranges in order; returns how many. ``state``: rows lo, hi, base, cut, head, tail, pack per name id; ``ext``:
    rows start, base, next per extension entry."""
    key, a, b, pos = z[0], z[1], z[2], z[3]
    hi, base, cut, head = state[1], state[2], state[3], state[4]
    ext_o, ext_b, ext_next = ext[0], ext[1], ext[2]
    n = 0
    for r in range(nr):
        if pos[r] + b[r] < off:
            continue
        i = key[r] if r < ins else _pair_id(ptab, pshift, key[r])
        if i < 0:
            continue
        qa = max(a[r], off - pos[r])
        cb = min(b[r], hi[i] - 1)
        e = head[i]
        for o in range(qa, cb + 1):
            v = base[i] + o
            if o >= cut[i]:
                while ext_next[e] >= 0 and ext_o[ext_next[e]] <= o:
                    e = ext_next[e]
                v = ext_b[e] + o
            out[0, n] = pos[r] + o - off
            out[1, n] = v
            n += 1
    return n


@njit(types.int64(_M, types.int64, types.int64, types.int64, types.uint64[::1], types.uint64, _M, _M,
                  types.int64[::1]), **_OPTS)
def line_commit(z, nr, ins, off, ptab, pshift, state, ext, st):
    """:meth:`engine.oracle_lines.LineIndex.commit` of the named ranges ``z[0:4, :nr]`` (numpy form: the
    reference): new pairs get the next ids (``st[0]``) in the pair table, each range's offsets past its name's
    ``hi`` are added (the first range of a name sets ``base``, later ones append to its extension list, ``st[1]``
    entries used); ``st[2]`` counts the windows added, ``st[3]`` the pairs. The caller makes room (ids, entries,
    table)."""
    key, a, b, pos = z[0], z[1], z[2], z[3]
    lo, hi, base, cut, head, tail, pack = state[0], state[1], state[2], state[3], state[4], state[5], state[6]
    ext_o, ext_b, ext_next = ext[0], ext[1], ext[2]
    for r in range(nr):
        if pos[r] + b[r] < off:
            continue
        if r < ins:
            i = key[r]
        else:
            k = _mix(np.uint64(key[r]))
            j = _find(ptab, pshift, k)
            if ptab[2 * j + 1] == EMPTY:
                i = st[0]
                ptab[2 * j], ptab[2 * j + 1] = k, np.uint64(i + 1)
                lo[i] = hi[i] = a[r]
                pack[i] = key[r]
                st[0] += 1
                st[3] += 1
            else:
                i = np.int64(ptab[2 * j + 1]) - 1
        h = hi[i]
        na = max(h, a[r], off - pos[r])
        if na > b[r]:
            continue
        if h == lo[i]:
            base[i] = pos[r]
        else:
            e = st[1]
            ext_o[e], ext_b[e], ext_next[e] = na, pos[r], -1
            if head[i] < 0:
                head[i], cut[i] = e, na
            else:
                ext_next[tail[i]] = e
            tail[i] = e
            st[1] += 1
        hi[i] = b[r] + 1
        st[2] += b[r] - na + 1
    return 0


_BASE = np.uint64(0x9E3779B97F4A7C15 | 1)       # engine.rolling.BASE
_GOLD = np.uint64(0x9E3779B97F4A7C15)


@njit(inline="always", **_OPTS)
def _hash_ranges(keyx, rows, bounds, z, nh, off, m, mask, bm, h, hs, ps):
    """The hashes ``hs`` (:func:`engine.rolling.window_hashes`) and positions ``ps`` of the hashed windows (``z``
    rows 4-5, ``nh`` ranges, ascending) from ``off`` on, hashing only their tokens: the prompt's pieces are opaque
    segments ``rows`` at ``bounds``, their tokens derived from ``keyx[row]`` (``key ^ salt``) as
    ``segment_prefix_hashes`` derives them (a window's hash does not depend on where hashing starts; ``bm``:
    ``B^m``, ``h``: scratch); returns how many."""
    k, q = 0, 0
    for r in range(nh):
        s, last = max(z[4, r], off), z[5, r]
        if s > last:
            continue
        e = last + m
        while bounds[q] > s:
            q -= 1
        acc = np.uint64(0)
        h[0] = acc
        b = _mix(keyx[rows[q]])
        for t in range(s, e):
            while bounds[q + 1] <= t:
                q += 1
                b = _mix(keyx[rows[q]])
            tok = np.int32(_mix(b + np.uint64(t - bounds[q]) * _GOLD) & mask)
            acc = acc * _BASE + _mix(np.uint64(np.int64(tok)) + _GOLD)
            h[t - s + 1] = acc
        for i in range(last - s + 1):
            hs[k] = h[i + m] - h[i] * bm
            ps[k] = s + i
            k += 1
    return k


_HSIG = (_U64, _I64, _I64, _M, types.int64, types.int64, types.int64, types.uint64, types.uint64,
         types.uint64[::1], types.uint64)


@njit(types.int64(*_HSIG, _M, types.int64, types.uint64[::1], types.int64[::1]), **_OPTS)
def hashed_lookup(keyx, rows, bounds, z, nh, off, m, mask, bm, tab, shift, out, k0, hs, ps):
    """The hashed windows of a prompt (:func:`line_layout`'s ranges in ``z``) from ``off`` on, looked up in the
    window table: the held ones appended to ``out`` from column ``k0`` (row 0: position - ``off``, row 1: value);
    their hashes and positions left in ``hs``/``ps`` (room for every window from ``off`` on) for
    :func:`hashed_insert`. Returns ``new end * 2^32 + hashed windows``. The prompt: opaque segments ``rows``
    at ``bounds`` (:func:`_hash_ranges`)."""
    size = 0
    for r in range(nh):
        size = max(size, z[5, r] - z[4, r] + m + 1)
    n = _hash_ranges(keyx, rows, bounds, z, nh, off, m, mask, bm, np.empty(size, np.uint64), hs, ps)
    k = k0
    for i in range(n):
        _ahead(tab, shift, hs, i)
        j = _find(tab, shift, hs[i])
        if tab[2 * j + 1] != EMPTY:
            out[0, k] = ps[i] - off
            out[1, k] = np.int64(tab[2 * j + 1]) - 1
            k += 1
    return (k << 32) + n


@njit(types.int64(types.uint64[::1], types.uint64, _U64, _I64), **_OPTS)
def hashed_insert(tab, shift, hs, ps):
    """Insert each hash of ``hs`` not in the table yet with its position (the first of duplicates wins); returns
    how many (the caller keeps the table below its load limit)."""
    added = 0
    for i in range(hs.shape[0]):
        _ahead(tab, shift, hs, i)
        j = _find(tab, shift, hs[i])
        if tab[2 * j + 1] == EMPTY:
            tab[2 * j] = hs[i]
            tab[2 * j + 1] = np.uint64(ps[i] + 1)
            added += 1
    return added


@njit(types.int64(*_HSIG), **_OPTS)
def hashed_add(keyx, rows, bounds, z, nh, off, m, mask, bm, tab, shift):
    """Insert the hashed windows of a prompt from ``off`` on not in the table yet (the first of duplicates wins)
    with their positions; returns how many (the caller keeps the table below its load limit)."""
    size, n = 0, 0
    for r in range(nh):
        size = max(size, z[5, r] - z[4, r] + m + 1)
        n += max(0, z[5, r] - max(z[4, r], off) + 1)
    hs, ps = np.empty(n, np.uint64), np.empty(n, np.int64)
    n = _hash_ranges(keyx, rows, bounds, z, nh, off, m, mask, bm, np.empty(size, np.uint64), hs, ps)
    return hashed_insert(tab, shift, hs[:n], ps[:n])
