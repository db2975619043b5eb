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
name, the union of the earlier items' intervals of window starts (:func:`engine.intervals._earlier_cover`; pieces may be
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

import weakref

import numpy as np

from pic.engine.resident import _UNMET_MIN, _unmet_past_prefix, resident_prefixes
from pic.engine.rolling import ramp
from pic.traces.content import splitmix64

# NOTE (speed): anchors, intervals, window_parts (~6 ms CPU to import) only where windows are counted (covered_counts*)


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
    from pic.engine import anchors
    from pic.engine.intervals import _Earlier, _union_length
    from pic.engine.window_parts import HashedWindows

    W = int(width)
    sid_of, lens, _ = _store_cols(store)
    same = _one_length(sid_of, lens) if whole else None
    # cut pieces (stored runs): the records of a name filtered by their content (the left one across a boundary)
    ids = int(sid_of.max()) + 1 if sid_of.shape[0] else 0
    buckets = ids if not whole and ids <= _FILTER_IDS else None
    narrow = bool(ids) and int(lens.max()) < 1 << 31
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


def covered_none(store, chunks, width: int, keep: int = 1 << 18) -> tuple[bool, list | None]:
    """Whether :func:`covered_counts_chunked` of ``chunks`` (its form) is all zeros, decided from the content names
    alone where it can be (False: not decided); and the chunks read, or None past ``keep`` pieces (read them again;
    ~8 MB of chunks at the default).

    Decided (True) when every piece is opaque, every item's context is shorter than ``width`` (each window
    touches its own tokens), no prefix is given, no own token (stream, offset) lies in two pieces, and no two items
    each hold the other's own content in their context: an item's window seen in an earlier item holds its own
    tokens there, so in that item's context, and that item's own tokens (every window touches them) in its own
    context. NOTE (speed): a radix tree's stored runs (Mooncake and Azure conversation ``prefix``, ``irminsul``)
    hold each content once, a child's context its parent's tail: Mooncake ``prefix`` 0.074 -> ~0.04 CPU s."""
    W = int(width)
    sid_of, lens, opq = _store_cols(store)
    ok = bool(opq.all()) and (not len(store) or int(lens.max()) < 1 << 31)
    got: list | None = []
    oa, ob, oi, ctx, i0, n = [], [], [], [], 0, 0
    for ch in chunks:
        rows, offs, cf, pf, p_lo, p_hi = ch
        n += rows.shape[0]
        if got is not None:
            got.append(ch)
            got = got if n <= keep else None
        ok = ok and not pf.any() and not (cf >= W).any()
        if not ok:
            continue                           # (read to the end: a caller's chunks may be kept as they are read)
        rows, p_lo, p_hi, cum = _pieces(store, rows, offs, p_lo, p_hi)
        L = p_hi - p_lo
        item = np.repeat(np.arange(offs.shape[0] - 1), np.diff(offs))
        cut = np.clip(cf[item] - (cum[:-1] - cum[offs[:-1]][item]), 0, L)     # context tokens of each piece
        key = sid_of[rows] << np.int64(32)
        o, c = np.flatnonzero(cut < L), np.flatnonzero(cut > 0)
        oa.append(key[o] + p_lo[o] + cut[o])
        ob.append(key[o] + p_hi[o])
        oi.append((item[o] + i0).astype(np.int32))
        ctx.append((key[c] + p_lo[c], key[c] + p_lo[c] + cut[c], (item[c] + i0).astype(np.int32)))
        i0 += offs.shape[0] - 1
    if not ok or not oa:
        return ok, got
    # NOTE (memory): each column concatenated, its parts dropped, then put in order; item numbers int32; chunks
    # kept up to ``keep`` pieces only (irminsul's 0.37 M Mooncake runs: the count's traced peak 62 -> 24 MB;
    # 28.5 MB before this check)
    k = np.argsort(oa := _joined(oa))
    oa, ob, oi = oa[k], _joined(ob)[k], _joined(oi)[k]
    del k
    if (oa[1:] < ob[:-1]).any():
        return False, got                      # an own token in two pieces
    ca, cb, ci = (np.concatenate([x[j] for x in ctx]) for j in range(3))
    f = np.searchsorted(ob, ca, side="right")
    cnt = np.maximum(np.searchsorted(oa, cb, side="left") - f, 0)
    oi, ci = oi[np.repeat(f, cnt) + ramp(cnt)], np.repeat(ci, cnt)   # (item whose own content, item whose context)
    m = oi != ci
    oi, ci = oi[m].astype(np.int64), ci[m].astype(np.int64)
    return not np.isin(oi * i0 + ci, ci * i0 + oi).any(), got


def _joined(parts: list) -> np.ndarray:
    """``np.concatenate(parts)``, ``parts`` emptied."""
    out = np.concatenate(parts)
    parts.clear()
    return out


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
    p_hi = _store_cols(store)[1][rows] if p_hi is None else p_hi
    cum = np.zeros(O + 1, np.int64)
    np.cumsum(p_hi - p_lo, out=cum[1:])
    return rows, p_lo, p_hi, cum


def _chunk(store, piece, offs, item0, W, cf, pf, sid_of, one, two, same=None):
    """One chunk of items (local numbering; global = ``item0`` + local; ``piece``: :func:`_pieces`): the
    covered intervals decided from the structure, plus ``[0, prefix)``, merged and cut at
    ``counted_from``, as ``(a, b, item)`` half-open; and the windows the structure cannot decide, as
    ranges ``ha, hb, hi`` (inclusive window starts, local items). ``same`` (bool per content id, whole pieces
    only): the content has one length, so each of its names has one interval (:meth:`_Earlier.cover`)."""
    from pic.engine.intervals import _complement, _union

    rows, p_lo, p_hi, cum = piece
    I, O = offs.shape[0] - 1, rows.shape[0]
    L = p_hi - p_lo
    item = np.repeat(np.arange(I), np.diff(offs))
    lo = cum[:-1] - cum[offs[:-1]][item]                      # offset of each piece in its item
    end = lo + L
    N = cum[offs[1:]] - cum[offs[:-1]]
    opq = _store_cols(store)[2][rows]
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


# ---- Internal helpers -----------------------------------------------------------------------------
def _mix_keys(*cols) -> np.ndarray:
    """uint64 name of a piece boundary (left content id and end, right content id and start):
    splitmix-combined."""
    z = np.zeros(cols[0].shape[0], np.uint64)
    with np.errstate(over="ignore"):
        for x in cols:
            z = splitmix64(z * np.uint64(0x9E3779B97F4A7C15) + np.asarray(x).astype(np.uint64))
    return z


def _store_cols(store) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per segment row of ``store`` (read only): its content id (:func:`_content_ids`), length, opaque mask.
    NOTE (speed): the last store's are kept (weak references to its arrays: no store is kept alive); a replay's
    oracle and duplicate count read one trace's segments, a chunk at a time (Mooncake conversation: ~4 ms of
    content ids, and ~3 ms of lengths and masks per chunk pass, each time)."""
    import weakref

    parts = (store.offsets, store.token_offsets, store.keys, store.salts)
    if _COLS[0] is not None and all(r() is x for r, x in zip(_COLS[0], parts, strict=True)):
        return _COLS[1]
    cols = (_content_ids(store), np.diff(store.offsets), store.opaque_mask)
    for c in cols:
        c.flags.writeable = False
    _COLS[:] = [tuple(weakref.ref(x) if x is not None else (lambda: None) for x in parts), cols]
    return cols


_COLS: list = [None, None]


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


def _one_length(sid_of: np.ndarray, n: np.ndarray) -> np.ndarray:
    """bool per content id (:func:`_content_ids`): all its rows have one length (a stored row; an opaque
    stream met at one length)."""
    lo = np.full(int(sid_of.max()) + 1 if sid_of.shape[0] else 0, np.iinfo(np.int64).max, np.int64)
    hi = np.full(lo.shape[0], -1, np.int64)
    np.minimum.at(lo, sid_of, n)
    np.maximum.at(hi, sid_of, n)
    return lo == hi


def _first_held(levels: list[np.ndarray], wh: np.ndarray, wi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Windows (hashes ``wh`` of items ``wi``, in item order) held by the sorted ``levels`` or by an
    earlier item of this batch: ``(indices, their items)``; their hashes are added to ``levels``.

    NOTE (speed): one ``np.sort`` of the hashes (2x cheaper than an argsort) tells which hashes are
    held by a level or repeated in the batch; only windows with such a hash are located and ordered
    (content met for the first time is nearly all unique)."""
    from pic.engine.intervals import _add_level, _in_levels_sorted

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


def prompt_oracle(trace, order: np.ndarray, min_match: int) -> np.ndarray:
    """int64 [len(order)]: the trace-level oracle's reuse (:func:`engine.oracle.trace_oracle`) of the
    requests ``order`` (rows of ``trace.requests``, arrival order), from the segment structure."""
    order = np.asarray(order, np.int64)
    rows, item_offs = _order_rows(trace, order)
    pfx = _prefixes(trace, order, rows, item_offs)
    _PREFIXES.clear()
    # NOTE (speed): where nothing past the prefixes was met earlier, the reuse is the prefixes (Azure and Mooncake
    # conversation: ~0.09 CPU s of covered_counts on Mooncake)
    own: list = []
    if _unmet_past_prefix(trace.segments, rows, item_offs, pfx, min_match, own):
        _PREFIXES[:] = [(weakref.ref(trace), _digest(order), own[0])]
        return pfx
    return covered_counts(trace.segments, rows, item_offs, min_match, prefix=pfx)


UNMET_MIN = _UNMET_MIN           # (below it, windows of opaque tokens met elsewhere by chance are counted: hashed)


def workload_oracle(trace, work, m: int) -> np.ndarray:
    """The trace-level oracle's reuse (``min_match`` ``m``) of each request of ``work`` (an
    ``engine.serving.Workload``: the first requests of ``trace`` in arrival order), once per trace
    (:func:`engine.oracle.cached_oracle`), from the segment structure (:func:`prompt_oracle`)."""
    from pic.engine.oracle import cached_oracle

    prompts = (work.view(i).tokens for i in range(work.num_requests))
    order = np.lexsort((trace.column("request_id"), trace.column("arrival_us")))[:work.num_requests]
    return cached_oracle(trace, prompts, request_ids=work.request_ids, min_match=m,
                         compute=lambda: prompt_oracle(trace, order, m))


def prompt_prefixes(trace, order: np.ndarray, reuse: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(pfx, rows, item_offs)`` of the requests ``order`` of ``trace`` (as :func:`prompt_oracle`), whose trace-level
    oracle (``min_match`` ``m``) gave ``reuse``: each one's longest prefix shared with an earlier one
    (:func:`engine.resident.resident_prefixes`) and their segment rows. NOTE (speed): ``reuse`` itself where the
    last :func:`prompt_oracle` of this trace and order found nothing past the prefixes met earlier
    (:func:`_unmet_past_prefix`: then the reuse is the prefixes at every ``m >= _UNMET_MIN``), not computed again
    (the ``oracle`` policy answering from the trace-level oracle, engine.policies.oracle)."""
    order = np.asarray(order, np.int64)
    rows, item_offs = _order_rows(trace, order)
    if m >= _UNMET_MIN and unmet_past_prefix(trace, order):
        return reuse, rows, item_offs
    return resident_prefixes(trace.segments, rows, item_offs), rows, item_offs


def unmet_past_prefix(trace, order: np.ndarray, prefixes: tuple | None = None) -> bool:
    """Whether every token past each request's prefix is met there for the first time (:func:`_unmet_past_prefix`):
    the trace-level oracle's reuse is then the prefixes at every ``min_match`` of :data:`UNMET_MIN` or more. Known
    where the last :func:`prompt_oracle` of ``trace`` and ``order`` found it; else tested on ``prefixes``
    (:func:`prompt_prefixes`' ``(pfx, rows, item_offs)`` of that order) where given (an oracle taken from a cache)."""
    got = _PREFIXES[0] if _PREFIXES else None
    if got is not None and got[0]() is trace and got[1] == _digest(np.asarray(order, np.int64)):
        return True
    if prefixes is None:
        return False
    pfx, rows, item_offs = prefixes
    return _unmet_past_prefix(trace.segments, rows, item_offs, np.asarray(pfx, np.int64), _UNMET_MIN)


def _order_rows(trace, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, item_offs)``: the segment rows of the requests ``order`` (int64 rows of ``trace.requests``), one
    request after another, and where each one's start (CSR offsets, ``len(order) + 1``)."""
    offs, idx = trace._csr
    cnt = offs[order + 1] - offs[order]
    item_offs = np.zeros(order.shape[0] + 1, np.int64)
    np.cumsum(cnt, out=item_offs[1:])
    return idx[np.repeat(offs[order], cnt) + ramp(cnt)], item_offs


def _digest(order: np.ndarray) -> str:
    """A content digest of an int64 array (the requests' order)."""
    import xxhash

    return xxhash.xxh64(np.ascontiguousarray(order, np.int64).tobytes()).hexdigest()


def _prefixes(trace, order: np.ndarray, rows: np.ndarray, item_offs: np.ndarray) -> np.ndarray:
    """:func:`resident_prefixes` of the requests ``order``; their points kept (``prefix_told.points``) where their
    prompts are opaque rows (NOTE (memory): nothing kept elsewhere, e.g. chat's stored tokens)."""
    seg = trace.segments
    pts = [] if seg.keys is not None and seg.opaque_mask[rows].all() else None
    pfx = resident_prefixes(seg, rows, item_offs, pts)
    _POINTS[:] = [(weakref.ref(trace), _digest(order), bool(pts), pfx, *(pts or ()))]
    return pfx


def kept_points(trace, order: np.ndarray) -> tuple | None:
    """``(known, pfx, shared, last, partial)`` :func:`_prefixes` kept for the requests ``order`` of ``trace`` (its last
    call), else None (another trace or order; nothing kept)."""
    got = _POINTS[0] if _POINTS else None
    if got is None or got[0]() is not trace or got[1] != _digest(np.asarray(order, np.int64)):
        return None
    return got[2:]


_POINTS: list = []        # [(weak reference to the trace, its order's digest, known, pfx, shared, last, partial)]
_PREFIXES: list = []      # [(weak reference to the trace, its order's digest, own once)]: the last prompt_oracle's whose reuse
#                           was its prefixes
