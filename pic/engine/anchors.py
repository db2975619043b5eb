"""Which hashed windows could have their content elsewhere: a conservative filter before exact hashing.

:func:`engine.coverage.covered_counts` hashes the windows the segment structure cannot decide (content met
for the first time under its name, windows over three or more pieces) and finds which of them an earlier
item's hashed window equals (:class:`engine.window_parts.HashedWindows`: every window hashed, then sorted
a partition at a time). Nearly all of them are unique (chat 10^5: 1.8 M of 44.6 M hashed windows held;
rag-reorder 10^5: 0.3 M of 28.7 M), and sorting them all was most of the oracle's time.

The filter: a window's *anchor* is the least hash of its ``k``-token substrings (a minimizer, ``k``
:func:`kgram` of the window width ``W``; one of every ~``(W - k) / 2`` positions is an anchor). Two windows
with the same tokens have the same anchor value, at the same offset in each. Over the windows of each
range (one item's; a window's anchor is the same for the consecutive windows of a *run*), an anchor value
met in one run only cannot belong to two equal windows of different items: such windows are not held
by any other window and hold none. So only the windows whose anchor value is met in two or more runs
(:func:`repeated`, over every range of the trace) are hashed exactly (:func:`keep`); each equal pair is
kept whole, and the answer is the same. Anchor values are kept as 32-bit fingerprints (a shared one only
keeps more windows).

Cost: the ranges' tokens are read twice more (once to collect the anchors, once to keep), a k-gram hash
and a sliding minimum per token, and one sort of ~``2 / (W - k + 2)`` of the hashed tokens' fingerprints.
"""

from __future__ import annotations

import numpy as np

from pic.engine.window_parts import range_tokens

_BATCH_TOKENS = 1 << 19       # tokens read per batch of ranges


def kgram(width: int) -> int:
    """Length of the substrings whose least hash anchors a ``width``-token window."""
    return max(1, min(16, width // 4))


def runs(store, rows, p_lo, offs, cum, ha, hb, hi, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The runs of windows with one anchor of the ranges ``[ha[r], hb[r]]`` (window starts) of items
    ``hi[r]`` of a chunk (its pieces ``rows``/``p_lo`` at item offsets ``offs``, running token offsets
    ``cum``): ``(fingerprint uint32, length uint32)`` per run, in order. The runs tile the chunk's anchor
    positions (:func:`_layout`: each range's windows, then ``width - 1`` positions of no window); a range
    starts a run."""
    W = int(width)
    if not ha.shape[0]:
        return np.zeros(0, np.uint32), np.zeros(0, np.uint32)
    k = kgram(W)
    bounds, _, _ = _layout(ha, hb, W)
    fps, lens = [], []
    for lo, hi_ in zip(bounds[:-1], bounds[1:], strict=True):
        a, b, it = ha[lo:hi_], hb[lo:hi_], hi[lo:hi_]
        toks, starts = range_tokens(store, rows, p_lo, offs, cum, it, a, b + W)
        m = sliding_min(kgram_hashes(toks, k), W - k + 1)        # the anchor from each position
        del toks
        head = np.ones(m.shape[0], bool)
        np.not_equal(m[1:], m[:-1], out=head[1:])
        head[starts] = True
        s = np.flatnonzero(head)
        fps.append(m[s])
        lens.append(np.diff(np.r_[s, m.shape[0]]).astype(np.uint32))
    return np.concatenate(fps), np.concatenate(lens)


def repeated(prints: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The fingerprints met in two runs or more: ``(sorted uint32, bitmap of their top 24 bits)``."""
    s = np.concatenate(prints) if prints else np.zeros(0, np.uint32)
    s.sort()
    dup = s[1:][s[1:] == s[:-1]]
    keep = np.ones(dup.shape[0], bool)
    keep[1:] = dup[1:] != dup[:-1]
    dup = dup[keep]
    bits = np.zeros(1 << 24, bool)
    bits[dup >> np.uint32(8)] = True
    return dup, bits


def keep(fp: np.ndarray, ln: np.ndarray, ha, hb, hi, width: int, rep: tuple[np.ndarray, np.ndarray]
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The windows of the ranges (their :func:`runs` ``fp``, ``ln``) whose anchor fingerprint is repeated
    (``rep``: :func:`repeated`), as ranges ``(a, b, item)`` (inclusive window starts, in the same order).

    NOTE (speed): the bitmap passes the runs whose fingerprint's top bits a repeated one has; only those are
    bisected (a binary search per run cost more than the rest of this function)."""
    none = np.zeros(0, np.int64)
    dup, bits = rep
    if not dup.shape[0] or not fp.shape[0]:
        return none, none, none
    ok = np.flatnonzero(bits[fp >> np.uint32(8)])
    pos = np.minimum(np.searchsorted(dup, fp[ok]), dup.shape[0] - 1)
    ok = ok[dup[pos] == fp[ok]]
    end = np.cumsum(ln, dtype=np.int64)
    rs, re = (end - ln)[ok], end[ok]
    _, start, n = _layout(ha, hb, int(width))
    r = np.searchsorted(start, rs, side="right") - 1        # (a run lies in one range's positions)
    lo, hi_ = rs - start[r], np.minimum(re - start[r], n[r])  # its windows (the rest: no window starts there)
    m = hi_ > lo
    if not m.any():
        return none, none, none
    r, lo, hi_ = r[m], lo[m], hi_[m]
    head = np.ones(r.shape[0], bool)
    head[1:] = (r[1:] != r[:-1]) | (lo[1:] != hi_[:-1])
    s = np.flatnonzero(head)
    e = np.r_[s[1:], r.shape[0]] - 1
    return ha[r[s]] + lo[s], ha[r[s]] + hi_[e] - 1, hi[r[s]]


def _layout(ha, hb, W: int) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Batches of ranges (bounds, about ``_BATCH_TOKENS`` tokens each) and the anchor position of each
    range's first window, batches laid end to end (a batch of ``T`` tokens has ``T - W + 1`` positions);
    and the windows per range."""
    n = hb - ha + 1
    tok = np.zeros(n.shape[0] + 1, np.int64)
    np.cumsum(n + W - 1, out=tok[1:])                      # tokens before each range
    cut = np.searchsorted(tok[1:], np.arange(1, int(tok[-1]) // _BATCH_TOKENS + 2) * _BATCH_TOKENS)
    bounds = np.unique(np.r_[0, cut, n.shape[0]].clip(0, n.shape[0]))
    batch = np.repeat(np.arange(bounds.shape[0] - 1), np.diff(bounds))
    return bounds.tolist(), tok[:-1] - batch * (W - 1), n


def kgram_hashes(tokens: np.ndarray, k: int) -> np.ndarray:
    """uint32 [N - k + 1]: a hash of each ``k``-token substring of the int32 ``tokens`` (a polynomial over the
    multiplied tokens, built by doubling along the bits of ``k``, then the murmur3 finalizer). Any function of
    the substring would do: the filter only needs equal substrings to get equal values.

    NOTE (speed): ~2 log2(k) + 7 passes over 32-bit values; the 64-bit prefix hashes and their windows
    (:func:`engine.rolling.prefix_hashes`) took ~10x longer (chat 10^5 oracle: ~0.25 of its ~2.2 CPU s)."""
    x = np.ascontiguousarray(tokens, np.int32).view(np.uint32) * np.uint32(0x9E3779B1)
    L = x.shape[0] - k + 1
    if L <= 0:
        return np.zeros(0, np.uint32)
    res, off, cur, span = None, 0, x, 1
    while True:                                   # cur: the hash of the span-token substrings
        if k & span:
            part = cur[off:off + L]
            res = part.copy() if res is None else res * np.uint32(pow(_P, span, 1 << 32)) + part
            off += span
        if span * 2 > k:
            break
        cur = cur[:-span] * np.uint32(pow(_P, span, 1 << 32)) + cur[span:]
        span *= 2
    for sh, mul in ((16, 0x85EBCA6B), (13, 0xC2B2AE35), (16, None)):
        res ^= res >> np.uint32(sh)
        if mul is not None:
            res *= np.uint32(mul)
    return res


_P = 0x01000193           # (the 32-bit FNV prime: odd)


def sliding_min(x: np.ndarray, w: int) -> np.ndarray:
    """``out[p] = min(x[p:p + w])`` for ``p`` in ``[0, len(x) - w]``: minima over spans of 1, 2, 4, ...
    combined along the bits of ``w`` (about ``2 log2(w)`` passes)."""
    L = x.shape[0] - w + 1
    if L <= 0:
        return x[:0].copy()
    res, off, cur, span = None, 0, x, 1
    while True:
        if w & span:
            part = cur[off:off + L]
            res = part.copy() if res is None else np.minimum(res, part, out=res)
            off += span
        if span * 2 > w:
            return res
        cur = np.minimum(cur[:-span], cur[span:])
        span *= 2
