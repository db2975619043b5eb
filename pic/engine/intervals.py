"""Per name, the union of intervals that earlier items held (:mod:`engine.coverage`'s "seen under its name"
test): :class:`_Earlier` keeps them across chunks of items (sorted by name, merged per name), :func:`_earlier_cover`
answers which records an earlier item's interval holds, with the interval helpers (:func:`_union`,
:func:`_complement`, :func:`_union_length`) and the sorted levels of keys met so far (:func:`_in_levels_sorted`,
:func:`_add_level`) they and :func:`engine.coverage._first_held` share.
"""

from __future__ import annotations

import numpy as np

from pic.engine.rolling import ramp, sorted_unique, unique_inverse


class _Earlier:
    """Per content name (a key), the union of the window-start intervals of the items seen so far."""

    def __init__(self, ids: int | None = None, buckets: int | None = None, narrow: bool = False) -> None:
        self.key = self.a = self.b = None
        self.seen: list[np.ndarray] = []        # sorted levels of the keys of one interval met so far
        # or, for keys that are ids in [0, ids): each one's first item in this chunk, -1 once met
        self.first = None if ids is None else np.full(ids, np.iinfo(np.int64).max, np.int64)
        # the filter of records given with a bucket in [0, buckets) (:meth:`_filtered`): per bucket the hull of
        # the intervals added (empty: lo > hi; ``narrow``: positions fit int32), a scratch count; the records kept
        # out of the intervals
        self.lo = self.hi = self.cnt = None
        self.pend: list[tuple[np.ndarray, ...]] = []
        if buckets is not None:
            dt = np.int32 if narrow else np.int64
            self.lo = np.full(buckets, np.iinfo(dt).max, dt)
            self.hi = np.full(buckets, -1, dt)
            self.cnt = np.zeros(buckets, np.int32)

    def cover(self, key: np.ndarray, item: np.ndarray, a: np.ndarray, b: np.ndarray, same: np.ndarray | None = None,
              bucket: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:func:`_earlier_cover` of the records ``(key, item, [a, b])`` of this chunk, earlier chunks'
        intervals counting as items before all of them; then adds the records (merged per key).
        ``same`` (bool per record, a function of its key): every record of that key, in every chunk, has
        this interval; such a record is held whole exactly when its key was met in an earlier item.
        ``bucket`` (int per record in ``[0, buckets)``, a function of its key), where this was made with
        ``buckets``: the records are filtered first (:meth:`_filtered`).

        NOTE (speed): only the kept intervals of this chunk's keys take part (found by bisection: the
        intervals are kept sorted by key); the rest is carried over in one merge of two sorted runs."""
        if same is not None and same.any():
            f, g = np.flatnonzero(same), np.flatnonzero(~same)
            r1 = f[self._met(key[f], item[f])]
            r2, ca, cb = self.cover(key[g], item[g], a[g], b[g], bucket=None if bucket is None else bucket[g])
            r2 = g[r2]
            return np.concatenate([r1, r2]), np.concatenate([a[r1], ca]), np.concatenate([b[r1], cb])
        if bucket is not None and self.lo is not None:
            return self._filtered(key, item, a, b, bucket)
        return self._cover(key, item, a, b)

    def _filtered(self, key: np.ndarray, item: np.ndarray, a: np.ndarray, b: np.ndarray, bucket: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`cover` (``a <= b``), where a bucket's records in this chunk that follow each other in order,
        each starting after the one before it ends (one block), and miss the hull of the bucket's earlier
        intervals are held by no earlier record: they are set aside (``pend``) instead of merged into the
        intervals; a bucket's other records take the exact path (:meth:`_cover`), its records set aside
        before joining the intervals first. Same answers: records of one key share a bucket. ``bucket is key``:
        the keys are the buckets (set aside once).

        NOTE (speed): the stored runs of ``irminsul`` are its chunks, ~370 k on Mooncake conversation, most of
        them whole pieces of a segment that no other run holds: the count's merge of every record into the
        sorted intervals per chunk was ~0.2 of its ~0.28 CPU s; the filter is a few passes over the records
        and the buckets' arrays (content ids: up to ``engine.coverage._FILTER_IDS``, :func:`engine.coverage.covered_counts_chunked`).
        NOTE (memory): buckets and, where every segment is shorter than 2^31 tokens, positions as int32."""
        n = key.shape[0]
        none = np.zeros(0, np.int64)
        if not n:
            return none, none, none
        keyed = bucket is key
        lo, hi, cnt = self.lo, self.hi, self.cnt
        a, b, bucket = a.astype(lo.dtype), b.astype(lo.dtype), bucket.astype(np.int32)
        cont = np.zeros(n, bool)
        cont[1:] = (bucket[1:] == bucket[:-1]) & (a[1:] > b[:-1])
        head = np.flatnonzero(~cont)
        hk, ha, hb = bucket[head], a[head], b[np.r_[head[1:], n] - 1]      # (b grows within a block)
        # buckets of more than one block (ufunc.at only for those: for all, ~0.03 of the ~0.1 CPU s on Mooncake)
        num = np.arange(1, hk.shape[0] + 1, dtype=np.int32)
        cnt[hk] = num
        multi = cnt[hk] != num                 # (all but a bucket's last block)
        cnt[hk] = 0
        if multi.any():
            cnt[hk[multi]] = 1
            multi = cnt[hk] == 1
            cnt[hk] = 0
        sus = multi | ((ha <= hi[hk]) & (hb >= lo[hk]))
        one = np.flatnonzero(~multi)
        k1 = hk[one]
        lo[k1] = np.minimum(lo[k1], ha[one])
        hi[k1] = np.maximum(hi[k1], hb[one])
        if multi.any():
            np.minimum.at(lo, hk[multi], ha[multi])
            np.maximum.at(hi, hk[multi], hb[multi])
        if not sus.any():
            self.pend.append((None if keyed else key, a, b, bucket))
            return none, none, none
        cnt[hk[sus]] = 1
        exact = cnt[bucket] == 1
        pend, fk, fa, fb = [], [], [], []
        for p in self.pend:
            m = cnt[p[3]] == 1
            if not m.any():
                pend.append(p)
                continue
            fk.append(p[3][m].astype(np.int64) if p[0] is None else p[0][m])
            fa.append(p[1][m])
            fb.append(p[2][m])
            if not m.all():
                pend.append(tuple(None if x is None else x[~m] for x in p))
        cnt[hk[sus]] = 0
        if fk:                 # (as one item: their union joins the intervals, before this chunk's records)
            k = np.concatenate(fk)
            self._cover(k, np.zeros(k.shape[0], np.int64), np.concatenate(fa), np.concatenate(fb))
        self.pend = pend
        o = np.flatnonzero(~exact)
        if o.shape[0]:
            self.pend.append((None if keyed else key[o], a[o], b[o], bucket[o]))
        e = np.flatnonzero(exact)
        rec, ca, cb = self._cover(key[e], item[e], a[e], b[e])
        return e[rec], ca, cb

    def _cover(self, key: np.ndarray, item: np.ndarray, a: np.ndarray, b: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`cover` without ``same`` or a filter."""
        if self.key is None:
            self.key, self.a, self.b = key[:0], np.zeros(0, np.int64), np.zeros(0, np.int64)
        uk = sorted_unique(key)
        lo, hi = np.searchsorted(self.key, uk, "left"), np.searchsorted(self.key, uk, "right")
        sel = np.repeat(lo, hi - lo) + ramp(hi - lo)
        n0 = sel.shape[0]
        k = np.concatenate([self.key[sel], key])
        A = np.concatenate([self.a[sel], a.astype(np.int64)])
        B = np.concatenate([self.b[sel], b.astype(np.int64)])
        rec, ca, cb = _earlier_cover(k, np.concatenate([np.full(n0, -1, np.int64), item]), A, B)
        m = rec >= n0
        if k.shape[0]:
            names, g = unique_inverse(k)
            A, B, g = _union(g, A, B)
            keep = np.ones(self.key.shape[0], bool)
            keep[sel] = False
            k = np.concatenate([self.key[keep], names[g]])
            order = np.argsort(k, kind="stable")              # (two sorted runs: merged)
            self.key, self.a = k[order], np.concatenate([self.a[keep], A])[order]
            self.b = np.concatenate([self.b[keep], B])[order]
        return rec[m] - n0, ca[m], cb[m]

    def _met(self, key: np.ndarray, item: np.ndarray) -> np.ndarray:
        """Indices of the records (in item order) whose key an earlier chunk or an earlier item met; the
        keys are added (one sort of the chunk's keys; the levels merge like a binary counter; keys that are
        ids: no sort, one array over the ids)."""
        if self.first is not None:
            f = self.first
            np.minimum.at(f, key, item)
            held = f[key] < item
            f[key] = -1
            return np.flatnonzero(held)
        # NOTE (speed): a key's first item is its least one (reduceat), so the sort need not be stable (numpy's
        # stable argsort of uint64 keys costs ~2-5x the default one)
        order = np.argsort(key)
        k, it = key[order], item[order]
        head = np.ones(k.shape[0], bool)
        head[1:] = k[1:] != k[:-1]
        hs = np.flatnonzero(head)
        old = _in_levels_sorted(self.seen, k)
        held = old | (np.minimum.reduceat(it, hs)[np.cumsum(head) - 1] < it) if hs.shape[0] else old
        _add_level(self.seen, k[head & ~old])
        return np.sort(order[held])


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
    cuts = sorted_unique(np.concatenate([base + A, base + B + 1]))
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
    order = np.argsort(item * big + a)                        # (how ties go changes no union)
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
        levels.append(sorted_unique(np.concatenate([a, b]), kind="stable"))   # two sorted runs: merged
