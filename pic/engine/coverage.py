"""Window coverage over prompts made of trace segments, without hashing what the segments already tell.

Question (the trace-level oracle, and the duplicate count over what a cache stores): for each item (a
prompt made of whole segments, or a stored run: a piece of a prompt, its first tokens context) in order,
which of its positions lie inside a ``W``-token window whose content occurred in an *earlier* item? The
token-level answer hashes every window of every item (:func:`engine.oracle.trace_oracle`,
:func:`engine.oracle.duplicate_tokens` on token runs). Here most windows are decided from the segment
structure, vectorized over the whole trace. A window's content is named by where it lies:

* inside one piece: ``(segment row, offset)``; for an opaque segment (:mod:`traces.content`)
  ``(stream, offset)``: a shorter block of a ``(key, salt)`` stream is a prefix of a longer one;
* across one boundary, over two pieces: ``(left content and its end, right content and its start,
  offset)``;

and a window is seen when an earlier item's piece (or pair of pieces) with the same name held it: per
name, the union of the earlier items' intervals of window starts (:func:`_earlier_cover`; pieces may be
cut anywhere, e.g. a radix edge that starts mid-segment). Every other window touching stored content
(met for the first time under its name, or over three or more pieces) is hashed
(:func:`engine.rolling.window_hashes`) and looked up among the hashed windows of earlier items (batches
of items; sorted arrays, one ``searchsorted`` pass per level); a window of opaque content only that no
earlier item held under its name is not seen.

Equal to the token-level count except when opaque content equals other content by chance (pseudo-random
ids from a 2^17 vocabulary: a 64-token coincidence has probability ~2^-1088) or two hashes collide (64-bit).
"""

from __future__ import annotations

import numpy as np

from pic.engine.rolling import prefix_hashes, ramp, range_window_hashes
from pic.traces.content import opaque_bases, opaque_run, splitmix64

_BATCH_TOKENS = 1 << 21       # tokens hashed per batch of ranges


def covered_counts(store, rows: np.ndarray, item_offs: np.ndarray, width: int,
                   counted_from: np.ndarray | None = None, prefix: np.ndarray | None = None,
                   p_lo: np.ndarray | None = None, p_hi: np.ndarray | None = None) -> np.ndarray:
    """int64 [I]: per item, positions in ``[counted_from, N)`` inside a ``width``-token window seen in an
    earlier item, or inside ``[0, prefix)``. Item ``i`` concatenates the pieces ``item_offs[i]`` ..
    ``item_offs[i+1]``: piece ``o`` is tokens ``[p_lo[o], p_hi[o])`` (default: all) of segment row
    ``rows[o]`` of ``store`` (a :class:`~pic.traces.content.Segments`)."""
    W = int(width)
    rows = np.asarray(rows, np.int64)
    offs = np.asarray(item_offs, np.int64)
    I, O = offs.shape[0] - 1, rows.shape[0]
    seg_len = np.diff(store.offsets)[rows]
    p_lo = np.zeros(O, np.int64) if p_lo is None else np.asarray(p_lo, np.int64)
    p_hi = seg_len if p_hi is None else np.asarray(p_hi, np.int64)
    L = p_hi - p_lo
    item = np.repeat(np.arange(I), np.diff(offs))
    cum = np.zeros(O + 1, np.int64)
    np.cumsum(L, out=cum[1:])
    lo = cum[:-1] - cum[offs[:-1]][item]                      # offset of each piece in its item
    end = lo + L
    N = cum[offs[1:]] - cum[offs[:-1]]
    cf = np.zeros(I, np.int64) if counted_from is None else np.asarray(counted_from, np.int64)
    pf = np.zeros(I, np.int64) if prefix is None else np.asarray(prefix, np.int64)
    opq = store.opaque_mask[rows]
    sid = _content_ids(store, rows, opq)
    last = N[item] - W                                        # last window start of the item
    hit_a, hit_b, hit_item, hash_a, hash_b, hash_item = [], [], [], [], [], []

    def decide(k, key, a, b, to_pos, hash_rest) -> None:
        """Window starts ``[a, b]`` (content coordinates) of pieces ``k``: held by an earlier item's piece
        of the same ``key`` -> seen; the rest hashed (``hash_rest``) or, opaque on every side, unseen."""
        ok = a <= b
        k, key, a, b, to_pos, hash_rest = k[ok], key[ok], a[ok], b[ok], to_pos[ok], hash_rest[ok]
        rec, ca, cb = _earlier_cover(key, item[k], a, b)
        hit_a.append(ca + to_pos[rec])
        hit_b.append(cb + to_pos[rec])
        hit_item.append(item[k][rec])
        h = np.flatnonzero(hash_rest)
        sel = hash_rest[rec]
        ga, gb, gr = _complement(h, a[h], b[h], np.searchsorted(h, rec[sel]), ca[sel], cb[sel])
        hash_a.append(ga + to_pos[h][gr])
        hash_b.append(gb + to_pos[h][gr])
        hash_item.append(item[k][h][gr])

    # windows inside one piece: content (segment row, offset), or (stream, offset) for opaque content
    k = np.flatnonzero(L >= W)
    decide(k, sid[k], p_lo[k], p_hi[k] - W, lo[k] - p_lo[k], ~opq[k])
    # windows across the boundary after a piece, over two pieces: content (left content and its end,
    # right content and its start, offset in the left piece)
    k = np.flatnonzero(item[1:] == item[:-1]) if O > 1 else np.zeros(0, np.int64)
    e, n = end[k], k + 1
    two_a, two_b = np.maximum(lo[k], e - W + 1), np.minimum(e - 1, end[n] - W)
    pkey = _mix_keys(sid[k], p_hi[k], sid[n], p_lo[n])
    decide(k, pkey, two_a - lo[k] + p_lo[k], two_b - lo[k] + p_lo[k], lo[k] - p_lo[k], ~(opq[k] & opq[n]))
    # windows over three or more pieces: hashed
    for a, b, m in ((np.maximum(e - W + 1, 0), lo[k] - 1, lo[k] > e - W + 1),
                    (np.maximum(end[n] - W + 1, lo[k]), e - 1, end[n] - W + 1 <= e - 1)):
        b = np.minimum(b, last[k])
        m &= a <= b
        hash_a.append(a[m])
        hash_b.append(b[m])
        hash_item.append(item[k][m])
    ha, hb, hi = (np.concatenate(x) for x in (hash_a, hash_b, hash_item))
    ha, hb, hi = _union(hi, ha, hb)
    ja, jb, ji = _hashed_hits(store, rows, p_lo, offs, cum, ha, hb, hi, W)
    a = np.concatenate([*hit_a, ja])
    b = np.concatenate([*hit_b, jb])
    it = np.concatenate([*hit_item, ji])
    # covered positions: [j, j + W) for every seen window start j, plus [0, prefix)
    pa = np.concatenate([a, np.zeros(I, np.int64)])
    pb = np.concatenate([b + W, pf])
    pi = np.concatenate([it, np.arange(I)])
    pa = np.maximum(pa, cf[pi])
    ok = pb > pa
    return _union_length(pi[ok], pa[ok], pb[ok], I)


# ---- Internal helpers -----------------------------------------------------------------------------
def _mix_keys(*cols) -> np.ndarray:
    """uint64 name of a piece boundary (left content id and end, right content id and start):
    splitmix-combined."""
    z = np.zeros(cols[0].shape[0], np.uint64)
    with np.errstate(over="ignore"):
        for x in cols:
            z = splitmix64(z * np.uint64(0x9E3779B97F4A7C15) + np.asarray(x).astype(np.uint64))
    return z


def _content_ids(store, rows: np.ndarray, opq: np.ndarray) -> np.ndarray:
    """int64 per piece: its content's identity. A stored segment is its row; an opaque segment is its
    ``(key, salt)`` stream (a shorter block of a stream is a prefix of a longer one), numbered after the
    rows."""
    sid = rows.astype(np.int64, copy=True)
    k = np.flatnonzero(opq)
    if k.shape[0]:
        pair = np.stack([store.keys[rows[k]], store.salts[rows[k]]], axis=1)
        _, stream = np.unique(pair, axis=0, return_inverse=True)
        sid[k] = len(store) + stream.ravel().astype(np.int64)
    return sid


def _earlier_cover(key: np.ndarray, item: np.ndarray, a: np.ndarray, b: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Records ``(key, item, [a, b])`` (inclusive, in item order): the parts of each record's interval held by the union
    of the intervals of records with the same key in earlier (smaller) items, as ``(record, a, b)``
    pieces. Vectorized over elementary intervals: each key's interval ends cut its line into pieces, and
    a piece is held for a record when a record of a smaller item covers it too."""
    none = np.zeros(0, np.int64)
    n = key.shape[0]
    if n < 2:
        return none, none, none
    order = np.argsort(key, kind="stable")                    # records come in item order
    k, it = key[order], item[order]
    head = np.ones(n, bool)
    head[1:] = k[1:] != k[:-1]
    gid = np.cumsum(head) - 1
    hs = np.flatnonzero(head)
    he = np.r_[hs[1:], n] - 1
    multi = (it[he] > it[hs])[gid]                             # keys met in more than one item
    sel = order[multi]
    if not sel.shape[0]:
        return none, none, none
    g, it, A, B = gid[multi], it[multi], a[sel].astype(np.int64), b[sel].astype(np.int64)
    span = np.int64(max(int(B.max()) + 2, 1))
    base = g * span
    cuts = np.unique(np.concatenate([base + A, base + B + 1]))
    s = np.searchsorted(cuts, base + A)
    cnt = np.searchsorted(cuts, base + B + 1) - s
    rec = np.repeat(np.arange(sel.shape[0]), cnt)
    el = np.repeat(s, cnt) + ramp(cnt)
    first = np.full(cuts.shape[0], np.iinfo(np.int64).max, np.int64)
    first[el[::-1]] = it[rec][::-1]                           # the last write per piece is its first item
    held = first[el] < it[rec]
    rec, el = rec[held], el[held]
    return sel[rec], cuts[el] - base[rec], cuts[el + 1] - base[rec] - 1


def _complement(recs: np.ndarray, A: np.ndarray, B: np.ndarray, rec: np.ndarray, a: np.ndarray,
                b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per record ``r`` (index into ``recs``/``A``/``B``): ``[A[r], B[r]]`` minus its pieces
    ``(rec, [a, b])`` (inclusive, inside it), as ``(a, b, r)`` gaps."""
    if not rec.shape[0]:
        return A, B, np.arange(A.shape[0])
    ma, mb, mr = _union(rec, a, b)                            # sorted by record, then start
    first = np.ones(mr.shape[0], bool)
    first[1:] = mr[1:] != mr[:-1]
    lastm = np.ones(mr.shape[0], bool)
    lastm[:-1] = mr[1:] != mr[:-1]
    prev_end = np.where(first, A[mr] - 1, np.r_[np.int64(0), mb[:-1]])
    bare = np.ones(A.shape[0], bool)
    bare[mr] = False
    ga = np.concatenate([prev_end + 1, mb[lastm] + 1, A[bare]])
    gb = np.concatenate([ma - 1, B[mr[lastm]], B[bare]])
    gr = np.concatenate([mr, mr[lastm], np.flatnonzero(bare)])
    ok = ga <= gb
    return ga[ok], gb[ok], gr[ok]


def _union(item: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge inclusive intervals ``[a, b]`` per item (sorted by item, then start)."""
    if not a.shape[0]:
        return a, b, item
    big = np.int64(1) << 36                                   # positions < 2^36, items < 2^27
    order = np.argsort(item * big + a, kind="stable")         # (timsort: runs come mostly in order)
    item, a, b = item[order], a[order], b[order]
    reach = np.maximum.accumulate(item * big + b) - item * big
    start = np.ones(a.shape[0], bool)
    start[1:] = (item[1:] != item[:-1]) | (a[1:] > reach[:-1] + 1)
    s = np.flatnonzero(start)
    return a[s], reach[np.r_[s[1:], a.shape[0]] - 1], item[s]    # a group's end: its last running max


def _union_length(item: np.ndarray, a: np.ndarray, b: np.ndarray, I: int) -> np.ndarray:
    """Per item: length of the union of half-open intervals ``[a, b)``."""
    out = np.zeros(I, np.int64)
    if not a.shape[0]:
        return out
    ma, mb, mi = _union(item, a, b - 1)
    np.add.at(out, mi, mb - ma + 1)
    return out


def _hashed_hits(store, rows, p_lo, offs, cum, ha, hb, hi, W) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs ``(a, b, item)`` (inclusive) of window starts in the ranges ``[ha, hb]`` (of items ``hi``,
    in item order) whose content occurred in an earlier item's hashed windows.

    NOTE (memory): a window is held when another hashed window of a smaller item has its hash. The
    hashes are made batch by batch and appended, with their window's running index, to partitions by
    their top bits (:class:`_Parts`: in memory, or in one temporary file when there are more than
    ``_SPILL_WINDOWS``); each partition is then decided alone. What stays in memory is one batch or one
    partition, never an index of every distinct window (chat 10^6: ~430 M windows, 3.4 GB as sorted
    levels, several times that while two merged)."""
    none = np.zeros(0, np.int64)
    if not ha.shape[0]:
        return none, none, none
    nwin = hb - ha + 1
    wcum = np.zeros(nwin.shape[0] + 1, np.int64)             # running index of each range's first window
    np.cumsum(nwin, out=wcum[1:])
    total = int(wcum[-1])
    nbits = min(max(int(np.ceil(np.log2(max(total / _PART_WINDOWS, 1)))), 0), 12)
    span = np.cumsum(nwin + W - 1)                            # tokens per range, running
    cut = np.searchsorted(span, np.arange(1, int(span[-1]) // _BATCH_TOKENS + 2) * _BATCH_TOKENS)
    bounds = np.unique(np.r_[0, cut, ha.shape[0]].clip(0, ha.shape[0]))
    with _Parts(1 << nbits, total > _SPILL_WINDOWS) as parts:
        for lo_r, hi_r in zip(bounds[:-1], bounds[1:], strict=False):
            a, b, it = ha[lo_r:hi_r], hb[lo_r:hi_r], hi[lo_r:hi_r]
            toks, starts = _range_tokens(store, rows, p_lo, offs, cum, it, a, b + W)
            wh = range_window_hashes(prefix_hashes(toks), starts, b - a + 1, W)[0]
            del toks
            if nbits:
                key = (wh >> np.uint64(64 - nbits)).astype(np.uint16)
                perm = np.argsort(key, kind="stable")       # (a radix sort: windows stay in order)
                parts.add(wh[perm], perm.astype(np.uint32) if perm.shape[0] < 1 << 32 else perm,
                          int(wcum[lo_r]), np.bincount(key, minlength=1 << nbits))
            else:
                parts.add(wh, np.arange(wh.shape[0], dtype=np.uint32), int(wcum[lo_r]),
                          np.array([wh.shape[0]], np.int64))
        held = [_held_windows(*parts.get(p), wcum, hi) for p in range(1 << nbits)]
    g = np.sort(np.concatenate(held))
    if not g.shape[0]:
        return none, none, none
    r = np.searchsorted(wcum, g, side="right") - 1
    j = ha[r] + (g - wcum[r])
    head = np.ones(g.shape[0], bool)
    head[1:] = (g[1:] != g[:-1] + 1) | (r[1:] != r[:-1])
    s = np.flatnonzero(head)
    e = np.r_[s[1:], g.shape[0]] - 1
    return j[s], j[e], hi[r[s]]


_SPILL_WINDOWS = 1 << 24      # hashed windows above which the partitions go to a temporary file
_PART_WINDOWS = 1 << 22       # hashed windows per partition (about)


def _held_windows(h: np.ndarray, g: np.ndarray, wcum: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Running indices ``g`` (increasing) of the windows whose hash ``h`` a window of a smaller item
    has too (items: ``hi`` of the range holding each index, ranges starting at ``wcum``).

    NOTE (speed): one ``np.sort`` (2x cheaper than an argsort) finds the repeated hashes; only windows
    with such a hash (nearly none: content met for the first time is nearly all unique) are ordered."""
    sh = np.sort(h)
    rep = sh[1:] == sh[:-1]
    if not rep.any():
        return np.zeros(0, np.int64)
    dup = np.unique(sh[1:][rep])
    del sh, rep
    pos = np.minimum(np.searchsorted(dup, h), dup.shape[0] - 1)
    k = np.flatnonzero(dup[pos] == h)
    ch, cg = h[k], g[k]
    order = np.argsort(ch, kind="stable")                    # equal hashes keep their window order
    ch, cg = ch[order], cg[order]
    ci = hi[np.searchsorted(wcum, cg, side="right") - 1]
    head = np.ones(ch.shape[0], bool)
    head[1:] = ch[1:] != ch[:-1]
    return cg[ci > ci[head][np.cumsum(head) - 1]]


class _Parts:
    """Hashed windows by partition: per batch, ``(hash, index in batch)`` pairs grouped by partition,
    kept in memory or appended to one temporary file (removed on exit); :meth:`get` gathers a
    partition's pairs over all batches, as ``(hashes, running window indices)``, indices increasing."""

    def __init__(self, num: int, spill: bool) -> None:
        self.num, self.spill, self.batches = num, spill, []
        self._dir = self._f = None

    def __enter__(self) -> _Parts:
        if self.spill:
            import tempfile
            self._dir = tempfile.TemporaryDirectory(prefix="pic-windows-")
            self._f = open(f"{self._dir.name}/windows.bin", "w+b")   # noqa: SIM115 - closed in __exit__
        return self

    def __exit__(self, *exc) -> None:
        if self._f is not None:
            self._f.close()
            self._dir.cleanup()
        self.batches = []

    def add(self, h: np.ndarray, k: np.ndarray, base: int, counts: np.ndarray) -> None:
        at = np.zeros(self.num + 1, np.int64)
        np.cumsum(counts, out=at[1:])
        if self.spill:
            pos = self._f.seek(0, 2)
            self._f.write(memoryview(h))
            self._f.write(memoryview(k))
            h, k = pos, (pos + 8 * h.shape[0], k.dtype)
        self.batches.append((h, k, base, at))

    def get(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        n = sum(int(at[p + 1] - at[p]) for *_, at in self.batches)
        hs, gs, o = np.empty(n, np.uint64), np.empty(n, np.int64), 0
        for h, k, base, at in self.batches:
            a, c = int(at[p]), int(at[p + 1] - at[p])
            if not c:
                continue
            if self.spill:
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


def _first_held(levels: list[np.ndarray], wh: np.ndarray, wi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Windows (hashes ``wh`` of items ``wi``, in item order) held by the sorted ``levels`` or by an
    earlier item of this batch: ``(indices, their items)``; their hashes are added to ``levels``.

    NOTE (speed): one ``np.sort`` of the hashes (2x cheaper than an argsort) tells which hashes are
    held by a level or repeated in the batch; only windows with such a hash are located and ordered
    (content met for the first time is nearly all unique)."""
    sh = np.sort(wh)
    seen = _in_levels_sorted(levels, sh)
    first = np.ones(sh.shape[0], bool)
    first[1:] = sh[1:] != sh[:-1]
    need = seen | ~first
    need[:-1] |= ~first[1:]
    _add_level(levels, sh[first & ~seen])
    cand = sh[need & first]
    if not cand.shape[0]:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if cand.shape[0] > wh.shape[0] // 8:                         # (many: order them all)
        idx = np.arange(wh.shape[0])
    else:
        # NOTE: a bitmap of the candidates' top bits passes ~cand/2^23 of the other windows; only those
        # are binary-searched (8 M unsorted queries into 1 M candidates cost ~2 s CPU, cache misses)
        bits = np.zeros(1 << 23, bool)
        bits[cand >> np.uint64(41)] = True
        idx = np.flatnonzero(bits[wh >> np.uint64(41)])
        pos = np.minimum(np.searchsorted(cand, wh[idx]), cand.shape[0] - 1)
        idx = idx[cand[pos] == wh[idx]]
    ch, ci = wh[idx], wi[idx]
    held = sh[seen & first]
    pos = np.minimum(np.searchsorted(held, ch), max(held.shape[0] - 1, 0))
    hit = held[pos] == ch if held.shape[0] else np.zeros(ch.shape[0], bool)
    order = np.argsort(ch, kind="stable")                        # items stay in order within a key
    oh, oi = ch[order], ci[order]
    head = np.ones(oh.shape[0], bool)
    head[1:] = oh[1:] != oh[:-1]
    earlier = np.zeros(ch.shape[0], bool)
    earlier[order] = oi[head][np.cumsum(head) - 1] < oi
    hit |= earlier
    return idx[hit], ci[hit]


def _sorted_unique(x: np.ndarray, kind: str = "quicksort") -> np.ndarray:
    s = np.sort(x, kind=kind)
    keep = np.ones(s.shape[0], bool)
    keep[1:] = s[1:] != s[:-1]
    return s[keep]


def _in_levels_sorted(levels: list[np.ndarray], ks: np.ndarray) -> np.ndarray:
    """bool per key of the sorted ``ks``: held by one of the sorted ``levels`` (sorted queries make each
    ``searchsorted`` walk a level nearly sequentially)."""
    got = np.zeros(ks.shape[0], bool)
    for lv in levels:
        if lv.shape[0]:
            pos = np.minimum(np.searchsorted(lv, ks), lv.shape[0] - 1)
            got |= lv[pos] == ks
    return got


def _add_level(levels: list[np.ndarray], keys: np.ndarray) -> None:
    """Append a sorted level; merge while the newest is at least as large as the one before it."""
    levels.append(keys)
    while len(levels) > 1 and levels[-1].shape[0] >= levels[-2].shape[0]:
        b, a = levels.pop(), levels.pop()
        levels.append(_sorted_unique(np.concatenate([a, b]), kind="stable"))   # two sorted runs: merged


def _range_tokens(store, rows, pl0, offs, cum, it, a, b) -> tuple[np.ndarray, np.ndarray]:
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
    if stored.any():
        s = np.flatnonzero(stored)
        step = ramp(plen[s])
        out[np.repeat(dst0[s], plen[s]) + step] = store.tokens[np.repeat(t[r[s]] + p_lo[s], plen[s]) + step]
    if not stored.all():
        q = np.flatnonzero(~stored)
        out[np.repeat(dst0[q], plen[q]) + ramp(plen[q])] = opaque_run(
            opaque_bases(store.keys[r[q]], store.salts[r[q]]), p_lo[q], plen[q])
    return out, starts

def prompt_oracle(trace, order: np.ndarray, min_match: int) -> np.ndarray:
    """int64 [len(order)]: the trace-level oracle's reuse (:func:`engine.oracle.trace_oracle`) of the
    requests ``order`` (rows of ``trace.requests``, arrival order), from the segment structure."""
    from pic.engine.radix import RadixTree
    from pic.engine.seq import Seq

    offs, idx = trace._csr
    order = np.asarray(order, np.int64)
    cnt = offs[order + 1] - offs[order]
    item_offs = np.zeros(order.shape[0] + 1, np.int64)
    np.cumsum(cnt, out=item_offs[1:])
    rows = idx[np.repeat(offs[order], cnt) + ramp(cnt)]
    seg = trace.segments
    lens = np.diff(seg.offsets)[rows]
    bounds = np.zeros(rows.shape[0] + 1, np.int64)
    np.cumsum(lens, out=bounds[1:])
    tree, pfx = RadixTree(), np.zeros(order.shape[0], np.int64)
    io = item_offs.tolist()
    for i in range(order.shape[0]):
        a, b = io[i], io[i + 1]
        q = Seq.of_segments(seg, rows[a:b], bounds[a:b + 1] - bounds[a])
        pfx[i] = q.end - tree.insert(q, 0)[0]         # inserting walks the longest resident prefix
    return covered_counts(seg, rows, item_offs, min_match, prefix=pfx)
