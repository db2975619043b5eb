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
(:func:`engine.rolling.window_hashes`) and looked up among the hashed windows of earlier items
(:class:`engine.window_parts.HashedWindows`); when the chunks can be read twice (:func:`covered_counts`),
only those whose anchor (least k-gram hash) is met in another item too are (:mod:`engine.anchors`: nearly
all first-met content is unique). A window of opaque content only that no earlier item held under its
name is not seen.

Equal to the token-level count except when opaque content equals other content by chance (pseudo-random
ids from a 2^17 vocabulary: a 64-token coincidence has probability ~2^-1088) or two hashes collide (64-bit).
"""

from __future__ import annotations

import numpy as np

from pic.engine import anchors
from pic.engine.resident import resident_prefixes
from pic.engine.rolling import ramp, sorted_unique, unique_inverse
from pic.engine.window_parts import HashedWindows
from pic.traces.content import splitmix64


def covered_counts(store, rows: np.ndarray, item_offs: np.ndarray, width: int,
                   counted_from: np.ndarray | None = None, prefix: np.ndarray | None = None,
                   p_lo: np.ndarray | None = None, p_hi: np.ndarray | None = None) -> np.ndarray:
    """int64 [I]: per item, positions in ``[counted_from, N)`` inside a ``width``-token window seen in an
    earlier item, or inside ``[0, prefix)``. Item ``i`` concatenates the pieces ``item_offs[i]`` ..
    ``item_offs[i+1]``: piece ``o`` is tokens ``[p_lo[o], p_hi[o])`` (default: all) of segment row
    ``rows[o]`` of ``store`` (a :class:`~pic.traces.content.Segments`).

    NOTE (memory): items are taken in chunks of about ``_CHUNK_PIECES`` pieces; what a chunk needs of the
    earlier ones is, per content name, the union of their window intervals (:class:`_Earlier`), the
    hashed windows (:class:`engine.window_parts.HashedWindows`) and its own covered intervals."""
    W = int(width)
    rows = np.asarray(rows, np.int64)
    offs = np.asarray(item_offs, np.int64)
    I = offs.shape[0] - 1
    cf = np.zeros(I, np.int64) if counted_from is None else np.asarray(counted_from, np.int64)
    pf = np.zeros(I, np.int64) if prefix is None else np.asarray(prefix, np.int64)

    def chunks():
        for i0, i1 in _chunks(offs, _CHUNK_PIECES):
            piece = slice(int(offs[i0]), int(offs[i1]))
            yield (rows[piece], offs[i0:i1 + 1] - offs[i0], cf[i0:i1], pf[i0:i1],
                   None if p_lo is None else np.asarray(p_lo[piece], np.int64),
                   None if p_hi is None else np.asarray(p_hi[piece], np.int64))

    return covered_counts_chunked(store, chunks(), W, again=chunks, whole=p_lo is None and p_hi is None)


def covered_counts_chunked(store, chunks, width: int, again=None, whole: bool = False) -> np.ndarray:
    """:func:`covered_counts` of items given chunk by chunk, in order: each chunk is ``(rows, item_offs
    (from 0), counted_from, prefix, p_lo, p_hi)`` of its items (``p_lo``/``p_hi`` may be None). Only one
    chunk's pieces are held at a time. ``again()``, when given, yields the same chunks once more: then only
    the windows whose anchor is met twice (:mod:`engine.anchors`) are hashed exactly, read on that pass.
    ``whole``: every piece of every chunk is a whole segment (``p_lo``/``p_hi`` None): a name whose content
    has one length then has one interval, and is decided by whether an earlier item met it."""
    W = int(width)
    sid_of = _content_ids(store)
    same = _one_length(store, sid_of) if whole else None
    # cut pieces (stored runs): the records of a name filtered by their content (the left one across a boundary)
    ids = int(sid_of.max()) + 1 if sid_of.shape[0] else 0
    buckets = ids if not whole and ids <= _FILTER_IDS else None
    narrow = bool(ids) and int(np.diff(store.offsets).max()) < 1 << 31
    one = _Earlier(None if same is None else same.shape[0], buckets, narrow)      # (its keys are content ids)
    two, kept, cfs, i0 = _Earlier(None, buckets, narrow), [], [], 0
    todo = []
    with HashedWindows(W) as windows:
        for rows, offs, cf, pf, p_lo, p_hi in chunks:
            piece = _pieces(store, rows, offs, p_lo, p_hi)
            got, ha, hb, hi = _chunk(store, piece, offs, i0, W, cf, pf, sid_of, one, two, same)
            kept.append(got)
            if again is None:
                windows.add(store, piece[0], piece[1], offs, piece[3], ha, hb, hi, i0)
            else:
                fp, ln = anchors.runs(store, piece[0], piece[1], offs, piece[3], ha, hb, hi, W)
                todo.append((fp, ln, ha, hb, hi, i0))
            cfs.append(cf)
            i0 += offs.shape[0] - 1
        # NOTE (speed): a second pass only where a window is left to hash (none where the segment structure
        # decides everything: every stored run of Mooncake or Azure conversation)
        if again is not None and any(t[2].shape[0] for t in todo):
            rep = anchors.repeated([t[0] for t in todo])
            for (rows, offs, _, _, p_lo, p_hi), (fp, ln, ha, hb, hi, c0) in zip(again(), todo, strict=True):
                ka, kb, ki = anchors.keep(fp, ln, ha, hb, hi, W, rep)
                if ka.shape[0]:
                    r, lo, _, cum = _pieces(store, rows, offs, p_lo, p_hi)
                    windows.add(store, r, lo, offs, cum, ka, kb, ki, c0)
        ja, jb, ji = windows.runs()
    cf = np.concatenate(cfs) if cfs else np.zeros(0, np.int64)
    ka, kb, ki = (np.concatenate([k[x] for k in kept]) if kept else np.zeros(0, np.int64) for x in range(3))
    pa, pb, pi = np.concatenate([ka, ja]), np.concatenate([kb, jb + W]), np.concatenate([ki, ji])
    pa = np.maximum(pa, cf[pi])
    ok = pb > pa
    return _union_length(pi[ok], pa[ok], pb[ok], i0)


_CHUNK_PIECES = 1 << 15       # pieces per chunk of items (about; an item is never split)
# NOTE (memory): the filter of cut pieces' records (:meth:`_Earlier._filtered`) keeps 12-20 B per content id, twice:
# up to this many ids (Mooncake conversation 0.37 M; chat 10^6's ~1.8 M are past it: its count's peak is the
# replay's, 3.94 GiB)
_FILTER_IDS = 1 << 20


def _chunks(offs: np.ndarray, size: int) -> list[tuple[int, int]]:
    """Item ranges ``[i0, i1)`` of about ``size`` pieces each (at least one item each)."""
    I = offs.shape[0] - 1
    cut = np.searchsorted(offs, np.arange(size, int(offs[-1]), size), side="right") - 1
    b = np.unique(np.r_[0, cut, I].clip(0, I))
    return list(zip(b[:-1].tolist(), b[1:].tolist(), strict=True)) or [(0, I)]


def _pieces(store, rows, offs, p_lo, p_hi):
    """A chunk's pieces: ``(rows, p_lo, p_hi, cum)`` (defaults filled in; ``cum``: running token offsets)."""
    O = rows.shape[0]
    p_lo = np.zeros(O, np.int64) if p_lo is None else p_lo
    p_hi = np.diff(store.offsets)[rows] if p_hi is None else p_hi
    cum = np.zeros(O + 1, np.int64)
    np.cumsum(p_hi - p_lo, out=cum[1:])
    return rows, p_lo, p_hi, cum


def _chunk(store, piece, offs, item0, W, cf, pf, sid_of, one, two, same=None):
    """One chunk of items (local numbering; global = ``item0`` + local; ``piece``: :func:`_pieces`): the
    covered intervals decided from the structure, plus ``[0, prefix)``, merged and cut at
    ``counted_from``, as ``(a, b, item)`` half-open; and the windows the structure cannot decide, as
    ranges ``ha, hb, hi`` (inclusive window starts, local items). ``same`` (bool per content id, whole pieces
    only): the content has one length, so each of its names has one interval (:meth:`_Earlier.cover`)."""
    rows, p_lo, p_hi, cum = piece
    I, O = offs.shape[0] - 1, rows.shape[0]
    L = p_hi - p_lo
    item = np.repeat(np.arange(I), np.diff(offs))
    lo = cum[:-1] - cum[offs[:-1]][item]                      # offset of each piece in its item
    end = lo + L
    N = cum[offs[1:]] - cum[offs[:-1]]
    opq = store.opaque_mask[rows]
    sid = sid_of[rows]
    last = N[item] - W                                        # last window start of the item
    hit_a, hit_b, hit_item, hash_a, hash_b, hash_item = [], [], [], [], [], []

    def decide(k, key, a, b, to_pos, hash_rest, earlier, uniform) -> None:
        """Window starts ``[a, b]`` (content coordinates) of pieces ``k``: held by an earlier item's piece
        of the same ``key`` -> seen; the rest hashed (``hash_rest``) or, opaque on every side, unseen."""
        ok = a <= b
        k, key, a, b, to_pos, hash_rest = k[ok], key[ok], a[ok], b[ok], to_pos[ok], hash_rest[ok]
        rec, ca, cb = earlier.cover(key, item[k], a, b, None if uniform is None else uniform[ok],
                                    key if earlier is one else sid[k])       # (a piece's name is its content)
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
    decide(k, sid[k], p_lo[k], p_hi[k] - W, lo[k] - p_lo[k], ~opq[k], one, None if same is None else same[sid[k]])
    # windows across the boundary after a piece, over two pieces: content (left content and its end,
    # right content and its start, offset in the left piece)
    k = np.flatnonzero(item[1:] == item[:-1]) if O > 1 else np.zeros(0, np.int64)
    e, n = end[k], k + 1
    two_a, two_b = np.maximum(lo[k], e - W + 1), np.minimum(e - 1, end[n] - W)
    pkey = _mix_keys(sid[k], p_hi[k], sid[n], p_lo[n])
    decide(k, pkey, two_a - lo[k] + p_lo[k], two_b - lo[k] + p_lo[k], lo[k] - p_lo[k], ~(opq[k] & opq[n]), two,
           None if same is None else same[sid[n]])      # (the left piece's length is in the key)
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
    # covered positions: [j, j + W) for every seen window start j, plus [0, prefix)
    pa = np.concatenate([*hit_a, np.zeros(I, np.int64)])
    pb = np.concatenate([*hit_b, pf - W]) + W
    pi = np.concatenate([*hit_item, np.arange(I)])
    pa = np.maximum(pa, cf[pi])
    ok = pb > pa
    a, b, i = _union(pi[ok], pa[ok], pb[ok] - 1)
    return (a, b + 1, i + item0), ha, hb, hi


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
        and the buckets' arrays (content ids: up to ``_FILTER_IDS``, :func:`covered_counts_chunked`).
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
        order = np.argsort(key, kind="stable")               # (items stay in order within a key)
        k, it = key[order], item[order]
        head = np.ones(k.shape[0], bool)
        head[1:] = k[1:] != k[:-1]
        old = _in_levels_sorted(self.seen, k)
        held = old | (it[head][np.cumsum(head) - 1] < it)
        _add_level(self.seen, k[head & ~old])
        return np.sort(order[held])


# ---- Internal helpers -----------------------------------------------------------------------------
def _mix_keys(*cols) -> np.ndarray:
    """uint64 name of a piece boundary (left content id and end, right content id and start):
    splitmix-combined."""
    z = np.zeros(cols[0].shape[0], np.uint64)
    with np.errstate(over="ignore"):
        for x in cols:
            z = splitmix64(z * np.uint64(0x9E3779B97F4A7C15) + np.asarray(x).astype(np.uint64))
    return z


def _content_ids(store) -> np.ndarray:
    """int64 per segment row of ``store``: its content's identity. A stored segment is its row; an opaque
    segment is its ``(key, salt)`` stream (a shorter block of a stream is a prefix of a longer one),
    numbered after the rows."""
    sid = np.arange(len(store), dtype=np.int64)
    k = np.flatnonzero(store.opaque_mask)
    if k.shape[0]:
        key, salt = store.keys[k], store.salts[k]
        order = np.lexsort((salt, key))                       # (np.unique(axis=0): ~5x slower)
        head = np.ones(k.shape[0], bool)
        head[1:] = (key[order][1:] != key[order][:-1]) | (salt[order][1:] != salt[order][:-1])
        stream = np.empty(k.shape[0], np.int64)
        stream[order] = np.cumsum(head) - 1
        sid[k] = len(store) + stream
    return sid


def _one_length(store, sid_of: np.ndarray) -> np.ndarray:
    """bool per content id (:func:`_content_ids`): all its rows have one length (a stored row; an opaque
    stream met at one length)."""
    n = np.diff(store.offsets)
    lo = np.full(int(sid_of.max()) + 1 if sid_of.shape[0] else 0, np.iinfo(np.int64).max, np.int64)
    hi = np.full(lo.shape[0], -1, np.int64)
    np.minimum.at(lo, sid_of, n)
    np.maximum.at(hi, sid_of, n)
    return lo == hi


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


def prompt_oracle(trace, order: np.ndarray, min_match: int) -> np.ndarray:
    """int64 [len(order)]: the trace-level oracle's reuse (:func:`engine.oracle.trace_oracle`) of the
    requests ``order`` (rows of ``trace.requests``, arrival order), from the segment structure."""
    offs, idx = trace._csr
    order = np.asarray(order, np.int64)
    cnt = offs[order + 1] - offs[order]
    item_offs = np.zeros(order.shape[0] + 1, np.int64)
    np.cumsum(cnt, out=item_offs[1:])
    rows = idx[np.repeat(offs[order], cnt) + ramp(cnt)]
    pfx = resident_prefixes(trace.segments, rows, item_offs)
    return covered_counts(trace.segments, rows, item_offs, min_match, prefix=pfx)
