"""Window coverage over prompts made of trace segments, without hashing what the segments already tell.

Question (the trace-level oracle): for each item (a prompt, made of whole segments) in order, which of
its positions lie inside a ``W``-token window whose content occurred in an *earlier* item? The token-level answer hashes every window of every item (:func:`engine.oracle.trace_oracle`).
Here most windows are decided from the segment structure, vectorized over the whole trace:

* a window inside a segment that occurred in an earlier item: seen (same tokens);
* a window inside an opaque segment (:mod:`traces.content`): seen iff an earlier item held the same
  ``(key, salt)`` stream at least that far (a shorter block of the same key is a prefix of a longer one);
* a window across the boundary of two segments that stood side by side in an earlier item: seen; across
  two opaque segments that never did: not seen;
* every other window (inside a stored segment met for the first time, across a boundary with stored
  content, over three or more segments) is hashed (:func:`engine.rolling.window_hashes`) and looked up
  among the hashed windows of earlier items (batches of items; sorted arrays, one ``searchsorted`` pass
  per level).

Equal to the token-level count except when opaque content equals other content by chance (pseudo-random
ids from a 2^17 vocabulary: a 64-token coincidence has probability ~2^-1088) or two hashes collide (64-bit).
"""

from __future__ import annotations

import numpy as np

from pic.engine.rolling import _powers, prefix_hashes
from pic.traces.content import opaque_bases, opaque_run, splitmix64

_BATCH_TOKENS = 1 << 23       # tokens hashed per batch of items


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
    opq = store.opaque_mask[rows] if store.token_offsets is not None else np.zeros(O, bool)
    whole = (p_lo == 0) & (p_hi == seg_len)
    big = np.iinfo(np.int64).max
    first_whole = np.full(store.ids.shape[0], big, np.int64)
    w = np.flatnonzero(whole)
    if w.shape[0]:
        first_whole[rows[w][::-1]] = item[w][::-1]            # the last write per row is its first item
    seen = first_whole[rows] < item                           # the whole segment was in an earlier item
    head = opq & (p_lo == 0)                                  # an opaque stream from its start
    smax = _stream_max_before(store, rows, item, p_hi, head, I)
    opq = head                                                # (other opaque pieces: hashed)
    has_next = np.zeros(O, bool)
    has_next[:-1] = item[1:] == item[:-1]
    nxt = np.minimum(np.arange(O) + 1, O - 1)
    pair_seen = np.zeros(O, bool)
    if has_next.any():
        p = np.flatnonzero(has_next)
        # NOTE: the key holds both pieces' whole extents: an earlier pair with a shorter left or right
        # piece (a run's context tail, an edge cut short) did not hold every window across its boundary
        pkey = _mix_keys(rows[p], p_lo[p], p_hi[p], rows[p + 1], p_lo[p + 1], p_hi[p + 1])
        pair_seen[p] = _first_item(pkey, item[p], None) < item[p]
    last = N[item] - W                                        # last window start of the item
    hit_a, hit_b, hash_a, hash_b, hit_item, hash_item = [], [], [], [], [], []

    def add(dst_a, dst_b, dst_i, mask, a, b) -> None:
        a, b = a[mask], np.minimum(b[mask], last[mask])
        ok = a <= b
        dst_a.append(a[ok])
        dst_b.append(b[ok])
        dst_i.append(item[mask][ok])

    inner = L >= W
    add(hit_a, hit_b, hit_item, inner & seen, lo, end - W)
    m = np.minimum(L, smax)
    add(hit_a, hit_b, hit_item, inner & ~seen & opq & (m >= W), lo, lo + m - W)
    add(hash_a, hash_b, hash_item, inner & ~seen & ~opq, lo, end - W)
    # windows across the boundary after each occurrence
    e = end
    two_a = np.maximum(lo, e - W + 1)
    two_b = np.minimum(e - 1, end[nxt] - W)
    both_opq = (store.opaque_mask[rows] if store.token_offsets is not None else np.zeros(O, bool))
    both_opq = both_opq & both_opq[nxt]
    add(hit_a, hit_b, hit_item, has_next & pair_seen, two_a, two_b)
    add(hash_a, hash_b, hash_item, has_next & ~pair_seen & ~both_opq, two_a, two_b)
    # windows over three or more segments: hashed
    add(hash_a, hash_b, hash_item, has_next & (lo > e - W + 1), np.maximum(e - W + 1, 0), lo - 1)
    add(hash_a, hash_b, hash_item, has_next & (end[nxt] - W + 1 <= e - 1), np.maximum(end[nxt] - W + 1, lo),
        e - 1)
    ha, hb, hi = (np.concatenate(x) for x in (hash_a, hash_b, hash_item))
    ha, hb, hi = _union(hi, ha, hb)
    ja, ji = _hashed_hits(store, rows, p_lo, offs, cum, ha, hb, hi, W)
    a = np.concatenate([*hit_a, ja])
    b = np.concatenate([*hit_b, ja])
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
    """uint64 key of a piece boundary (both pieces' rows and extents): splitmix-combined."""
    z = np.zeros(cols[0].shape[0], np.uint64)
    with np.errstate(over="ignore"):
        for x in cols:
            z = splitmix64(z * np.uint64(0x9E3779B97F4A7C15) + np.asarray(x).astype(np.uint64))
    return z


def _first_item(keys: np.ndarray, item: np.ndarray, size: int | None) -> np.ndarray:
    """For each entry: the first (smallest) item holding its key (entries come in item order)."""
    if size is not None:
        first = np.full(size, np.iinfo(np.int64).max, np.int64)
        first[keys[::-1]] = item[::-1]                        # the last write per key is its first item
        return first[keys]
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    head = np.ones(sk.shape[0], bool)
    head[1:] = sk[1:] != sk[:-1]
    out = np.empty(keys.shape[0], np.int64)
    out[order] = item[order][head][np.cumsum(head) - 1]
    return out


def _stream_max_before(store, rows, item, L, opq, I) -> np.ndarray:
    """Per opaque occurrence: the longest occurrence of its (key, salt) stream in earlier items."""
    out = np.zeros(rows.shape[0], np.int64)
    k = np.flatnonzero(opq)
    if not k.shape[0]:
        return out
    pair = np.stack([store.keys[rows[k]], store.salts[rows[k]]], axis=1)
    _, stream = np.unique(pair, axis=0, return_inverse=True)
    stream = stream.ravel().astype(np.int64)
    key = stream * np.int64(I + 1) + item[k]
    order = np.argsort(key, kind="stable")
    sk, sl, ss = key[order], L[k][order], stream[order]
    big = np.int64(1) << 36
    run = np.maximum.accumulate(ss * big + sl) - ss * big        # max length so far within each stream
    pos = np.searchsorted(sk, stream * np.int64(I + 1) + item[k], side="left") - 1
    okp = pos >= 0
    same = np.zeros(k.shape[0], bool)
    same[okp] = ss[pos[okp]] == stream[okp]
    out[k[same]] = run[pos[same]]
    return out


def _union(item: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge inclusive intervals ``[a, b]`` per item (sorted by item, then start)."""
    if not a.shape[0]:
        return a, b, item
    order = np.lexsort((a, item))
    item, a, b = item[order], a[order], b[order]
    big = np.int64(1) << 36
    reach = np.maximum.accumulate(item * big + b) - item * big
    start = np.ones(a.shape[0], bool)
    start[1:] = (item[1:] != item[:-1]) | (a[1:] > reach[:-1] + 1)
    grp = np.cumsum(start) - 1
    s = np.flatnonzero(start)
    ends = np.zeros(s.shape[0], np.int64)
    np.maximum.at(ends, grp, b)
    return a[s], ends, item[s]


def _union_length(item: np.ndarray, a: np.ndarray, b: np.ndarray, I: int) -> np.ndarray:
    """Per item: length of the union of half-open intervals ``[a, b)``."""
    out = np.zeros(I, np.int64)
    if not a.shape[0]:
        return out
    ma, mb, mi = _union(item, a, b - 1)
    np.add.at(out, mi, mb - ma + 1)
    return out


def _hashed_hits(store, rows, p_lo, offs, cum, ha, hb, hi, W) -> tuple[np.ndarray, np.ndarray]:
    """Window starts (and their items) in the inclusive ranges ``[ha, hb]`` whose content occurred in an
    earlier item's hashed windows. Items are processed in order, in batches."""
    hits_j, hits_i = [], []
    if not ha.shape[0]:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    levels: list[np.ndarray] = []
    span = hb - ha + W                                           # tokens per range
    cut = np.searchsorted(np.cumsum(span), np.arange(1, int(span.sum()) // _BATCH_TOKENS + 2) * _BATCH_TOKENS)
    heads = np.flatnonzero(np.r_[True, hi[1:] != hi[:-1]])       # NOTE: a batch never splits an item:
    cut = heads[np.minimum(np.searchsorted(heads, cut), heads.shape[0] - 1)]   # in-batch order decides
    bounds = np.unique(np.r_[0, cut, ha.shape[0]].clip(0, ha.shape[0]))        # "earlier" there
    for lo_r, hi_r in zip(bounds[:-1], bounds[1:], strict=False):
        a, b, it = ha[lo_r:hi_r], hb[lo_r:hi_r], hi[lo_r:hi_r]
        toks, starts = _range_tokens(store, rows, p_lo, offs, cum, it, a, b + W)
        h = prefix_hashes(toks)
        nwin = b - a + 1
        rng_of = np.repeat(np.arange(a.shape[0]), nwin)
        within = np.arange(int(nwin.sum())) - np.repeat(np.cumsum(nwin) - nwin, nwin)
        p = starts[rng_of] + within                              # window start in the concatenation
        pw, _ = _powers(W)
        wh = h[p + W] - h[p] * pw[W]
        wj, wi = a[rng_of] + within, it[rng_of]
        seen = _in_levels(levels, wh)
        order = np.argsort(wh, kind="stable")                    # items stay in order within a key
        sh, si = wh[order], wi[order]
        first = np.ones(sh.shape[0], bool)
        first[1:] = sh[1:] != sh[:-1]
        grp_first_item = si[first][np.cumsum(first) - 1]
        earlier = np.zeros(wh.shape[0], bool)
        earlier[order] = grp_first_item < si
        hit = seen | earlier
        hits_j.append(wj[hit])
        hits_i.append(wi[hit])
        _add_level(levels, _sorted_unique(wh[~seen]))
    return np.concatenate(hits_j), np.concatenate(hits_i)


def _sorted_unique(x: np.ndarray) -> np.ndarray:
    s = np.sort(x)
    keep = np.ones(s.shape[0], bool)
    keep[1:] = s[1:] != s[:-1]
    return s[keep]


def _in_levels(levels: list[np.ndarray], keys: np.ndarray) -> np.ndarray:
    out = np.zeros(keys.shape[0], bool)
    if not levels or not keys.shape[0]:
        return out
    order = np.argsort(keys)
    ks = keys[order]
    got = np.zeros(ks.shape[0], bool)
    for lv in levels:
        pos = np.minimum(np.searchsorted(lv, ks), lv.shape[0] - 1)
        got |= lv[pos] == ks
    out[order] = got
    return out


def _add_level(levels: list[np.ndarray], keys: np.ndarray) -> None:
    """Append a sorted level; merge while the newest is at least as large as the one before it."""
    levels.append(keys)
    while len(levels) > 1 and levels[-1].shape[0] >= levels[-2].shape[0]:
        b, a = levels.pop(), levels.pop()
        levels.append(_sorted_unique(np.concatenate([a, b])))


def _ramp(lens: np.ndarray) -> np.ndarray:
    """0..len-1 for each length, concatenated."""
    total = int(lens.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)


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
    occ = np.repeat(o0, cnt) + np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
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
        step = _ramp(plen[s])
        out[np.repeat(dst0[s], plen[s]) + step] = store.tokens[np.repeat(t[r[s]] + p_lo[s], plen[s]) + step]
    if not stored.all():
        q = np.flatnonzero(~stored)
        out[np.repeat(dst0[q], plen[q]) + _ramp(plen[q])] = opaque_run(
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
    rows = idx[np.repeat(offs[order], cnt) + _ramp(cnt)]
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
