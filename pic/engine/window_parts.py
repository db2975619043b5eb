"""Hashed windows of many items decided in bounded memory: which windows' content an earlier item held.

:func:`engine.coverage.covered_counts` hashes the windows the segment structure cannot decide (stored
content met for the first time under its name, windows over three or more pieces). A window is *held*
when another hashed window of a smaller (earlier) item has the same hash. :class:`HashedWindows` takes
those windows chunk by chunk of items, hashes them in batches of ``_BATCH_TOKENS`` tokens and appends
each ``(hash, window index)`` pair to a partition chosen by the hash's top bits (in memory, or in one
temporary file once more than ``_SPILL_WINDOWS`` are held, removed when done); :meth:`HashedWindows.runs`
then decides each partition alone (one sort). What is held at any time is one batch or one partition
(plus the ranges, one triple per hashed range), never an index of every distinct window: at chat 10^6
that index was ~430 M hashes, 3.4 GB as sorted levels and several times that while two merged.
"""

from __future__ import annotations

import numpy as np

from pic.engine.rolling import prefix_hashes, ramp, range_window_hashes
from pic.traces.content import opaque_bases, opaque_run

_BATCH_TOKENS = 1 << 19       # tokens hashed per batch of ranges
_SPILL_WINDOWS = 1 << 20      # hashed windows held in memory at most; more go to a temporary file
_PART_WINDOWS = 1 << 20       # hashed windows per partition when they are decided (about)
# NOTE (memory): both were 4x / 2x larger: chat 10^5 irminsul's duplicate count (3.8 M windows, the run's peak) held
# them all in memory (46 MB) and a partition of 1.9 M with its sort (~70 MB): its high point +166 -> +96 MB over its
# start, the trace-level oracle's +148 -> +118 MB; the same CPU (1.2 s, 2.5 s)
_RUN_SLICE = 1 << 22          # held windows turned into runs at a time
_BITS = 12                    # finest partition: the hash's top 12 bits (coarser ones are unions of them)


class HashedWindows:
    """Window ranges of items (in item order, chunk by chunk), hashed as they come; :meth:`runs` gives the
    held windows. Use as a context manager (a spilled file is removed on exit)."""

    def __init__(self, width: int) -> None:
        self.W = int(width)
        self.ha, self.hb, self.hi = [], [], []      # ranges [a, b] of window starts, global item
        self.total = 0
        self._batches: list[tuple] = []             # (hashes or file offset, indices or file offset, base, at)
        self._held = 0
        self._dir = self._f = None

    def __enter__(self) -> HashedWindows:
        return self

    def __exit__(self, *exc) -> None:
        if self._f is not None:
            self._f.close()
            self._dir.cleanup()
            self._f = None
        self._batches = []

    def add(self, store, rows, p_lo, offs, cum, ha, hb, it, item0: int) -> None:
        """Hash the windows ``[ha[r], hb[r]]`` (starts) of local items ``it[r]`` (global: ``item0 +
        it[r]``) of a chunk whose pieces are ``rows``/``p_lo`` at item offsets ``offs``, running token
        offsets ``cum`` (sorted by item, then start)."""
        if not ha.shape[0]:
            return
        W = self.W
        nwin = hb - ha + 1
        span = np.cumsum(nwin + W - 1)                       # tokens per range, running
        cut = np.searchsorted(span, np.arange(1, int(span[-1]) // _BATCH_TOKENS + 2) * _BATCH_TOKENS)
        bounds = np.unique(np.r_[0, cut, ha.shape[0]].clip(0, ha.shape[0]))
        wbase = np.zeros(nwin.shape[0] + 1, np.int64)
        np.cumsum(nwin, out=wbase[1:])
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=False):
            a, b, i = ha[lo:hi], hb[lo:hi], it[lo:hi]
            toks, starts = range_tokens(store, rows, p_lo, offs, cum, i, a, b + W)
            wh = range_window_hashes(prefix_hashes(toks), starts, b - a + 1, W)[0]
            del toks
            key = (wh >> np.uint64(64 - _BITS)).astype(np.uint16)
            perm = np.argsort(key, kind="stable")            # (a radix sort: windows stay in order)
            self._append(wh[perm], perm.astype(np.uint32) if perm.shape[0] < 1 << 32 else perm,
                         self.total + int(wbase[lo]), np.bincount(key, minlength=1 << _BITS))
        self.ha.append(ha)
        self.hb.append(hb)
        self.hi.append(it + item0)
        self.total += int(wbase[-1])

    def runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Runs ``(a, b, item)`` (inclusive window starts) of the held windows, by item then start.

        NOTE (memory): the held windows' running indices are kept as uint32 where they fit, sorted in
        place, and turned into runs a slice of ``_RUN_SLICE`` at a time (chat 3*10^5: ~8 M held windows;
        int64 indices with their range, start and flags per window cost ~280 MB at once)."""
        none = np.zeros(0, np.int64)
        if not self.total:
            return none, none, none
        ha, hb, hi = (np.concatenate(x) for x in (self.ha, self.hb, self.hi))
        wcum = np.zeros(ha.shape[0] + 1, np.int64)         # running index of each range's first window
        np.cumsum(hb - ha + 1, out=wcum[1:])
        nbits = min(max(int(np.ceil(np.log2(max(self.total / _PART_WINDOWS, 1)))), 0), _BITS)
        step = 1 << (_BITS - nbits)
        small = self.total < 1 << 32
        held = []
        for p in range(1 << nbits):
            g = _held_windows(*self._part(p * step, (p + 1) * step), wcum, hi)
            held.append(g.astype(np.uint32) if small else g)
        g = np.concatenate(held) if held else none
        del held
        g.sort()
        if not g.shape[0]:
            return none, none, none
        starts, ends, rng = [], [], []
        for lo in range(0, g.shape[0], _RUN_SLICE):
            x = g[lo:lo + _RUN_SLICE].astype(np.int64)
            r = np.searchsorted(wcum, x, side="right") - 1
            head = np.ones(x.shape[0], bool)
            head[1:] = (x[1:] != x[:-1] + 1) | (r[1:] != r[:-1])
            s = np.flatnonzero(head)
            e = np.r_[s[1:], x.shape[0]] - 1
            starts.append(x[s])
            ends.append(x[e])
            rng.append(r[s])
        gs, ge, r = np.concatenate(starts), np.concatenate(ends), np.concatenate(rng)
        head = np.ones(gs.shape[0], bool)                   # runs cut by a slice boundary: joined
        head[1:] = (gs[1:] != ge[:-1] + 1) | (r[1:] != r[:-1])
        s = np.flatnonzero(head)
        e = np.r_[s[1:], gs.shape[0]] - 1
        r = r[s]
        return ha[r] + (gs[s] - wcum[r]), ha[r] + (ge[e] - wcum[r]), hi[r]

    # ---- Internal helpers -------------------------------------------------------------------------
    def _append(self, h: np.ndarray, k: np.ndarray, base: int, counts: np.ndarray) -> None:
        at = np.zeros(counts.shape[0] + 1, np.int64)
        np.cumsum(counts, out=at[1:])
        if self._f is not None:
            self._write(h, k, base, at)
            return
        self._batches.append((h, k, base, at))
        self._held += h.shape[0]
        if self._held > _SPILL_WINDOWS:
            import tempfile
            self._dir = tempfile.TemporaryDirectory(prefix="pic-windows-")
            self._f = open(f"{self._dir.name}/windows.bin", "w+b")   # noqa: SIM115 - closed in __exit__
            self._batches, old = [], self._batches
            for b in old:
                self._write(*b)

    def _write(self, h: np.ndarray, k: np.ndarray, base: int, at: np.ndarray) -> None:
        pos = self._f.seek(0, 2)
        self._f.write(memoryview(h))
        self._f.write(memoryview(k))
        self._batches.append((pos, (pos + 8 * h.shape[0], k.dtype), base, at))

    def _part(self, p0: int, p1: int) -> tuple[np.ndarray, np.ndarray]:
        """Hashes and running window indices of finest partitions ``[p0, p1)``, all batches; indices
        increase among equal hashes (equal hashes share a finest partition; batches come in order)."""
        n = sum(int(at[p1] - at[p0]) for *_, at in self._batches)
        hs, gs, o = np.empty(n, np.uint64), np.empty(n, np.int64), 0
        for h, k, base, at in self._batches:
            a, c = int(at[p0]), int(at[p1] - at[p0])
            if not c:
                continue
            if self._f is not None:
                self._f.seek(h + 8 * a)
                self._f.readinto(memoryview(hs[o:o + c]))
                kk = np.empty(c, k[1])
                self._f.seek(k[0] + kk.itemsize * a)
                self._f.readinto(memoryview(kk))
            else:
                hs[o:o + c] = h[a:a + c]
                kk = k[a:a + c]
            gs[o:o + c] = kk
            gs[o:o + c] += base
            o += c
        return hs, gs


def _held_windows(h: np.ndarray, g: np.ndarray, wcum: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Running indices ``g`` of the windows whose hash ``h`` a window of a smaller item has too (items:
    ``hi`` of the range holding each index, ranges starting at ``wcum``; among equal hashes ``g``
    increases).

    NOTE (speed): one stable sort (timsort: ~2x cheaper than the default sort here, the windows of a
    batch come by the hash's top bits) finds the repeated hashes; only windows with such a hash are looked
    at (a bitmap of the repeated hashes' low bits first, then a bisection): each one's hash numbered among
    them, and the first item of each hash is the one its first window (smallest ``g``: the first in this
    order) has, written last in reverse (no argsort of them). Chat 10^5 oracle (6.7 M windows, 2.2 M with
    a repeated hash): 1.12 -> ~0.45 CPU s. The indices come unordered."""
    sh = np.sort(h, kind="stable")
    rep = sh[1:] == sh[:-1]
    if not rep.any():
        return np.zeros(0, np.int64)
    dup = sh[1:][rep]
    del sh, rep
    keep = np.ones(dup.shape[0], bool)
    keep[1:] = dup[1:] != dup[:-1]
    dup = dup[keep]
    low = np.uint64((1 << min(max(int(dup.shape[0] * 32).bit_length(), 10), 26)) - 1)
    bits = np.zeros(int(low) + 1, bool)
    bits[(dup & low).astype(np.intp)] = True
    k = np.flatnonzero(bits[(h & low).astype(np.intp)])
    del bits
    pk = np.minimum(np.searchsorted(dup, h[k]), dup.shape[0] - 1)
    ok = dup[pk] == h[k]
    k, pk = k[ok], pk[ok]
    cg = g[k]
    ci = hi[np.searchsorted(wcum, cg, side="right") - 1]
    first = np.empty(dup.shape[0], ci.dtype)
    first[pk[::-1]] = ci[::-1]                               # (the last write per hash: its first window's)
    return cg[ci > first[pk]]


def range_tokens(store, rows, pl0, offs, cum, it, a, b) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of item ranges ``[a, b)`` (item ``it``), concatenated; ``starts`` [n]: where each begins.
    Vectorized over the ranges: each range is cut at segment bounds, stored pieces gathered by index,
    opaque ones derived in one call."""
    n = a.shape[0]
    lens = b - a
    starts = np.zeros(n, np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    base = cum[offs[it]]                                      # first occurrence of the item in `cum`
    # occurrence holding each range's first and last token
    o0 = np.searchsorted(cum, base + a, side="right") - 1
    o1 = np.searchsorted(cum, base + b - 1, side="right") - 1
    cnt = o1 - o0 + 1
    rid = np.repeat(np.arange(n), cnt)
    occ = np.repeat(o0, cnt) + ramp(cnt)
    p_lo = np.maximum(cum[occ], base[rid] + a[rid]) - cum[occ] + pl0[occ]   # offset within the segment
    p_hi = np.minimum(cum[occ + 1], base[rid] + b[rid]) - cum[occ] + pl0[occ]
    r = rows[occ]
    plen = p_hi - p_lo
    out = np.empty(int(lens.sum()), np.int32)
    dst0 = np.zeros(plen.shape[0], np.int64)
    np.cumsum(plen[:-1], out=dst0[1:])
    t = store.offsets if store.token_offsets is None else store.token_offsets
    stored = t[r + 1] > t[r]
    if stored.all():       # NOTE (speed): a token's source index is its own plus its piece's shift (4 passes, not 10)
        src = np.repeat(t[r] + p_lo - dst0, plen)
        src += np.arange(out.shape[0], dtype=np.int64)
        if store.tokens.dtype == out.dtype:
            np.take(store.tokens, src, out=out)
        else:
            out[:] = store.tokens[src]
        return out, starts
    if stored.any():
        s = np.flatnonzero(stored)
        step = ramp(plen[s])
        out[np.repeat(dst0[s], plen[s]) + step] = store.tokens[np.repeat(t[r[s]] + p_lo[s], plen[s]) + step]
    if not stored.all():
        q = np.flatnonzero(~stored)
        out[np.repeat(dst0[q], plen[q]) + ramp(plen[q])] = opaque_run(
            opaque_bases(store.keys[r[q]], store.salts[r[q]]), p_lo[q], plen[q])
    return out, starts
