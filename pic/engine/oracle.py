"""The any-position reuse oracle: how many prompt tokens an ideal cache could take from earlier requests.

Definition (docs/metrics.md): with infinite capacity, a prompt token is reusable when it lies in a run of
at least ``min_match`` tokens (default 64) that appeared anywhere in an earlier request of the trace, at
any position (arrival order; content repeated inside one prompt does not count), or in the longest exact
prefix the prompt shares with an earlier request (any length: what an exact-prefix cache reuses, so the
oracle bounds it too). The oracle's reuse of a request is the number of such tokens.

Algorithm: every request's windows are hashed with the vectorized polynomial rolling hash
(:func:`engine.rolling.window_hashes`, O(1) per window) and looked up in a :class:`WindowIndex`, a log-
structured set of sorted ``uint64`` arrays (``searchsorted`` per level; levels merge like a binary
counter, so an insert is amortized O(log n)), or with the compiled kernels an open-addressing hash table
(about one probe per window); covered positions come from one running maximum. No Python
loop per token. Equal windows always hash equal; a false hit needs a 64-bit collision (~n/2^64 per
lookup), and ``verify`` in :class:`WindowIndex` callers compares tokens where they keep them.

:func:`trace_oracle` gives the per-request reuse of a whole trace, :func:`cached_oracle` memoizes it by
the trace's content digest (:func:`trace_digest`) and ``min_match`` in this process and, only when the user
sets ``PIC_CACHE_DIR``, on disk in ``$PIC_CACHE_DIR/oracle/``. :func:`duplicate_tokens` applies the same
coverage to what a cache stores: the stored tokens whose content is stored elsewhere too.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import xxhash

from pic.engine.radix import RadixTree
from pic.engine.rolling import prefix_hashes, ramp, range_window_hashes, window_hashes

#: bump when the oracle's definition or hashing changes (part of the cache key)
ORACLE_VERSION = 2
DEFAULT_MIN_MATCH = 64
CACHE_ENV = "PIC_CACHE_DIR"

_MEMO: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}


class WindowIndex:
    """Set of uint64 window hashes, each with an int64 value ``>= 0`` (the source position where it was first
    added): sorted arrays in levels merged when a newer level grows to the size of an older one; or, once
    the compiled kernels load (``accel.kernels(n, "oracle")``, :mod:`pic._accel_numba_oracle`), an
    open-addressing hash table, which the levels move into (oldest first, so the first value of a key is the
    one kept in both forms: the same answers).

    NOTE (speed): a lookup in the levels is a binary search per key over arrays of up to ~10^7 keys (~20
    cache misses each): the ``oracle`` policy on Azure conversation spent ~2/3 of its ~40 CPU s there; the
    table probes about one slot per key."""

    _LOAD = 0.75         # the table grows (doubles) past this fraction of used slots

    def __init__(self) -> None:
        self._levels: list[tuple[np.ndarray, np.ndarray]] = []   # (sorted keys, values), largest first
        self._table: np.ndarray | None = None    # uint64 [2 x slots]: (key, value) pairs
        self._shift = np.uint64(64)
        self._n = 0               # keys in the table

    def __len__(self) -> int:
        return self._n if self._table is not None else sum(k.shape[0] for k, _ in self._levels)

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(found, value)`` for each key (value -1 where not found)."""
        found = np.zeros(keys.shape[0], bool)
        value = np.full(keys.shape[0], -1, np.int64)
        if self._table is not None:
            if keys.shape[0] and self._n:
                _table_kernels().table_lookup(self._table, self._shift, np.ascontiguousarray(keys, np.uint64),
                                        found, value)
            return found, value
        if not self._levels or not keys.shape[0]:
            return found, value
        # NOTE: sorted queries make searchsorted walk each level nearly sequentially (3x on 10^4 keys);
        # a level is searched only for the keys no larger level held
        order = np.argsort(keys)
        ks = keys[order]
        hit_s, val_s = np.zeros(ks.shape[0], bool), np.full(ks.shape[0], -1, np.int64)
        todo = np.arange(ks.shape[0])
        for lk, lv in self._levels:
            q = ks[todo]
            pos = np.searchsorted(lk, q)
            np.minimum(pos, lk.shape[0] - 1, out=pos)
            hit = lk[pos] == q
            got = todo[hit]
            hit_s[got], val_s[got] = True, lv[pos[hit]]
            todo = todo[~hit]
            if not todo.shape[0]:
                break
        found[order], value[order] = hit_s, val_s
        return found, value

    def add(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Insert keys not yet present (the first of duplicates within ``keys`` wins)."""
        if keys.shape[0] == 0:
            return
        if self._table is None:
            from pic import accel

            if accel.kernels(keys.shape[0], "oracle") is not None:
                self._to_table()
        if self._table is not None:
            self._reserve(self._n + keys.shape[0])
            self._n += _table_kernels().table_add(self._table, self._shift, np.ascontiguousarray(keys, np.uint64),
                                            np.ascontiguousarray(values, np.int64))
            return
        order = np.argsort(keys, kind="stable")
        k, v = keys[order], values[order]
        first = np.ones(k.shape[0], bool)
        first[1:] = k[1:] != k[:-1]
        k, v = k[first], v[first]
        levels = self._levels
        while levels and levels[-1][0].shape[0] <= 2 * k.shape[0]:
            ok, ov = levels.pop()
            k, v = np.concatenate([ok, k]), np.concatenate([ov, v])
            order = np.argsort(k, kind="stable")     # two sorted runs: timsort merges them in O(n)
            k, v = k[order], v[order]
        levels.append((k, v))

    # ---- Internal helpers -------------------------------------------------------------------------
    def _to_table(self) -> None:
        """Move the levels into an empty table, oldest (largest) first: a key in two levels keeps the value
        the levels' lookup answers (the larger level's)."""
        levels, self._levels = self._levels, []
        self._table, self._n = self._empty(sum(k.shape[0] for k, _ in levels)), 0
        for k, v in levels:
            self._n += _table_kernels().table_add(self._table, self._shift, k, v)

    def _empty(self, n: int) -> np.ndarray:
        """An empty table for ``n`` keys below the load limit (a power of two >= 1024 slots)."""
        bits = max(10, int(np.ceil(np.log2(max(n, 1) / self._LOAD + 1))))
        self._shift = np.uint64(64 - bits)
        return np.zeros(2 << bits, np.uint64)     # (key, value + 1) pairs; 0: empty

    def _reserve(self, n: int) -> None:
        """Grow (rehash into a larger table) so that ``n`` keys stay below the load limit."""
        if n <= self._LOAD * (self._table.shape[0] >> 1):
            return
        old = self._table
        self._table = self._empty(max(n, 2 * self._n))
        _table_kernels().table_rehash(self._table, self._shift, old)


def _table_kernels():
    """The table kernels (loaded: a table exists only once ``accel.kernels(n, "oracle")`` gave them)."""
    from pic import _accel_numba_oracle

    return _accel_numba_oracle


def covered(hit: np.ndarray, num_tokens: int, width: int) -> np.ndarray:
    """bool [num_tokens]: positions inside at least one window ``[j, j + width)`` with ``hit[j]``."""
    out = np.zeros(num_tokens, bool)
    if not hit.shape[0]:
        return out
    reach = np.maximum.accumulate(np.where(hit, np.arange(hit.shape[0]) + width, 0))
    last = np.minimum(np.arange(num_tokens), hit.shape[0] - 1)
    return reach[last] > np.arange(num_tokens)


def trace_oracle(prompts: Iterable[np.ndarray], min_match: int = DEFAULT_MIN_MATCH) -> np.ndarray:
    """int64 [R]: the oracle's reused tokens of each prompt, in the order given (arrival order)."""
    index, tree, out = WindowIndex(), RadixTree(), []
    for toks in prompts:
        pfx = tree.match_prefix(toks, None, split=False)[0]
        tree.insert(toks, 0)
        # NOTE: windows that lie inside the shared prefix were indexed with the earlier prompt: only the
        # rest is hashed and looked up (a continued prompt costs its new tail, not its whole length)
        start = max(0, pfx - min_match + 1)
        w = window_hashes(toks[start:], min_match)
        if not w.shape[0]:
            out.append(pfx)
            continue
        hit, _ = index.lookup(w)
        out.append(pfx + int(covered(hit, toks.shape[0] - start, min_match)[pfx - start:].sum()))
        new = np.flatnonzero(~hit)
        index.add(w[new], new + start)
    return np.asarray(out, np.int64)


def trace_digest(trace) -> str:
    """16-hex content digest of a trace's requests in arrival order: segment ids (content hashes) and
    their grouping into prompts. Same prompts in the same order -> same digest."""
    arrival = trace.column("arrival_us").astype(np.int64)
    order = np.lexsort((trace.column("request_id"), arrival))
    offs, idx = trace._csr
    lens = np.diff(offs)[order]
    starts = np.repeat(offs[:-1][order] - (np.cumsum(lens) - lens), lens)     # segment rows, request order
    ids = trace.segments.ids[idx[starts + np.arange(starts.shape[0])]]
    h = xxhash.xxh64(f"pic-oracle/{ORACLE_VERSION}".encode())
    h.update(np.ascontiguousarray(lens, "<i8").tobytes())
    h.update(np.ascontiguousarray(ids, "<u8").tobytes())
    return h.hexdigest()


def cached_oracle(trace, prompts: Iterable[np.ndarray], *, request_ids: np.ndarray,
                  min_match: int = DEFAULT_MIN_MATCH, compute=None) -> np.ndarray:
    """The oracle's reuse of each request in ``request_ids`` (the first requests of ``trace`` in arrival
    order; ``prompts``: their tokens, same order, read only when nothing is cached), computed once per
    (trace content, min_match): memoized in this process and, when ``PIC_CACHE_DIR`` is set, in
    ``$PIC_CACHE_DIR/oracle/<digest>-m<min_match>.npz``. Only whole-trace results are cached.
    ``compute()``, when given, returns the same array as ``trace_oracle(prompts, min_match)`` (the
    segment-structure version, :func:`engine.coverage.prompt_oracle`) and is used instead."""
    request_ids = np.asarray(request_ids, np.int64)
    complete = request_ids.shape[0] == trace.num_requests
    key = (trace_digest(trace), int(min_match))
    got = _MEMO.get(key)
    path = _cache_path(*key)
    if got is None and path is not None and path.is_file():
        try:
            with np.load(path) as z:
                got = (z["request_ids"], z["reused"])
        except (OSError, ValueError, KeyError):
            got = None                     # unreadable cache file: recompute (and rewrite it)
    if got is None:
        reused = compute() if compute is not None else trace_oracle(prompts, min_match)
        if not complete:
            return reused
        got = (request_ids, reused)
        if path is not None:
            _write_cache(path, got)
    _MEMO[key] = got
    rid, reused = got
    k = request_ids.shape[0]
    if not np.array_equal(rid[:k], request_ids):
        raise ValueError("oracle: cached result does not match the trace's request order")
    return reused[:k]


class RefRuns:
    """Stored runs ``(seq, lo, hi, 0)`` (tokens ``[lo, hi)`` of a :class:`~pic.engine.seq.Seq`, no context) as
    columns: ``seqs`` the prompts, ``src`` (int64) each run's index into ``seqs``, ``lo``/``hi`` (int64). Iterates
    as those tuples; :func:`duplicate_tokens` reads the columns (a store of ~10^5 runs: no tuple per run)."""

    __slots__ = ("seqs", "src", "lo", "hi")

    def __init__(self, seqs: list, src: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        self.seqs, self.src, self.lo, self.hi = seqs, src, lo, hi

    def __len__(self) -> int:
        return int(self.lo.shape[0])

    def __iter__(self):
        seqs = self.seqs
        return ((seqs[k], lo, hi, 0) for k, lo, hi in zip(self.src.tolist(), self.lo.tolist(), self.hi.tolist(),
                                                           strict=True))


class HeldRuns:
    """Stored runs ``runs`` (any form :func:`duplicate_tokens` takes), then the runs ``held()`` returns
    (``(seq, lo, hi, 0)``), each of whose windows of up to ``width`` tokens lies in a run of ``runs`` (a
    policy that knows it: ``fixed-chunk``'s chunks of prompts its radix tree still holds whole); ``sizes``:
    their lengths (length -> how many). Iterates as ``runs`` then ``held()``, or as ``whole()`` when given.

    NOTE (speed): at ``min_match <= width`` a held run adds no window and is covered whole if it holds a
    window: counted by its length, never read (Mooncake conversation ``fixed-chunk``, ~350 K chunks: 0.53 ->
    0.09 CPU s)."""

    __slots__ = ("runs", "held", "sizes", "width", "whole")

    def __init__(self, runs, held, sizes: dict[int, int], width: int, whole=None) -> None:
        self.runs, self.held, self.sizes, self.width, self.whole = runs, held, sizes, width, whole

    def __iter__(self):
        return iter(self.whole()) if self.whole is not None else itertools.chain(self.runs, self.held())


def join_runs(parts: list) -> RefRuns | HeldRuns | list[tuple]:
    """Several policies' (replicas') stored runs as one sequence, in order: columns when all are
    :class:`RefRuns`, :class:`HeldRuns` when all are (each one's held runs after all their ``runs``: they add
    no window), else a list of tuples."""
    if parts and all(isinstance(p, HeldRuns) for p in parts):
        if len(parts) == 1:
            return parts[0]
        sizes = {n: sum(p.sizes.get(n, 0) for p in parts) for n in {n for p in parts for n in p.sizes}}
        return HeldRuns(join_runs([p.runs for p in parts]), lambda: [r for p in parts for r in p.held()], sizes,
                        min(p.width for p in parts), lambda: [r for p in parts for r in p])
    if parts and all(isinstance(p, RefRuns) for p in parts):
        if len(parts) == 1:
            return parts[0]
        base = np.cumsum([0] + [len(p.seqs) for p in parts[:-1]]).tolist()
        return RefRuns([q for p in parts for q in p.seqs],
                       np.concatenate([p.src + b for p, b in zip(parts, base, strict=True)]),
                       np.concatenate([p.lo for p in parts]), np.concatenate([p.hi for p in parts]))
    return [r for p in parts for r in p]


def duplicate_tokens(runs: Iterable[tuple] | RefRuns | HeldRuns, min_match: int = DEFAULT_MIN_MATCH) -> int:
    """Stored tokens whose content is stored elsewhere too: over ``runs`` of ``(tokens, context)`` (the
    first ``context`` tokens are only context, e.g. a radix edge's parent path), the counted tokens covered
    by a ``min_match`` window that occurs in an earlier run (windows that lie wholly in a run's context
    are not its content: they are looked up, not added). A run may also be a reference ``(seq, lo, hi,
    context)``: tokens ``[lo, hi)`` of a :class:`~pic.engine.seq.Seq`; or ``runs`` a :class:`RefRuns`, a
    :class:`HeldRuns`.

    NOTE (speed): when every run is a reference into one trace's segments, the count is decided from the
    segment structure (:func:`engine.coverage.covered_counts`), hashing only stored content met for the
    first time (Azure conversation, 22.4 M stored tokens: 12.6 -> ~0.3 CPU s), and of that only the windows
    whose anchor two runs share (:mod:`engine.anchors`; chat 10^5 ``prefix``, 42.8 M stored tokens: 5.7 ->
    2.7 CPU s; the runs' pieces are made twice), up to ``_ANCHOR_TOKENS`` stored tokens (memory). Otherwise
    runs are taken in batches of ~4 M tokens: one hash pass, then the same sorted-level test as the hashed
    windows there (:func:`engine.coverage._first_held`)."""
    W = int(min_match)
    if isinstance(runs, HeldRuns):
        if W <= runs.width:
            return duplicate_tokens(runs.runs, W) + sum(n * k for n, k in runs.sizes.items() if n >= W)
        runs = list(runs)
    if isinstance(runs, RefRuns):
        stores = {id(q.store): q.store for q in runs.seqs}
        if len(stores) == 1 and None not in stores.values():
            return _duplicate_cols(runs, next(iter(stores.values())), W)
    runs = list(runs)
    store = _common_store(runs)
    if store is not None:
        return _duplicate_refs(runs, store, W)
    levels: list[np.ndarray] = []
    num, batch, size = 0, [], 0
    for run in runs:
        toks, ctx = (run[0].tokens(run[1], run[2]), run[3]) if len(run) == 4 else run
        cut = max(0, ctx - (W - 1))          # only the last W - 1 context tokens reach an own window
        toks, ctx = toks[cut:], ctx - cut
        if toks.shape[0] < W:
            continue
        batch.append((toks, ctx))
        size += toks.shape[0]
        if size >= _DUP_BATCH_TOKENS:
            num += _duplicate_batch(batch, W, levels)
            batch, size = [], 0
    if batch:
        num += _duplicate_batch(batch, W, levels)
    return num


def _common_store(runs: list[tuple]):
    """The Segments every run refers to, or None (a token run, a private-array Seq, two stores)."""
    if set(map(len, runs)) - {4}:
        return None
    stores = {id(run[0].store): run[0].store for run in runs}
    return next(iter(stores.values())) if len(stores) == 1 else None


def _duplicate_refs(runs: list[tuple], store, W: int) -> int:
    """:func:`duplicate_tokens` over references into ``store``'s segments, from the segment structure.
    Each run is cut to the context its own windows need (its last ``W - 1`` context tokens), so every
    window of an item touches its own tokens, as the definition adds them.

    NOTE (memory): runs are turned into pieces a block of ``_REF_BLOCK`` runs at a time (chat 10^6
    `prefix`: ~2 M radix edges over ~10 M segment pieces).
    NOTE (speed): where the anchor filter reads the chunks twice (:func:`_covered_total`), each block's run
    columns (:func:`_ref_cols`: ~32 B a run) are read from the tuples once and kept for the second pass;
    only the pieces are made again (chat 10^5 ``prefix``: the Python reads were ~1/8 of the count)."""
    size = sum(r[2] - r[1] for r in runs)
    kept: list[tuple] | None = [] if size <= _ANCHOR_TOKENS else None
    read = [False]

    def chunks():
        if read[0]:
            yield from (_pieces_of(W, *c) for c in kept)
            return
        for b0 in range(0, len(runs), _REF_BLOCK):
            c = _ref_cols(runs[b0:b0 + _REF_BLOCK], W)
            if c is not None:
                if kept is not None:
                    kept.append(c)
                yield _pieces_of(W, *c)
        read[0] = kept is not None

    return _covered_total(store, chunks, W, size)


def _duplicate_cols(runs: RefRuns, store, W: int) -> int:
    """:func:`_duplicate_refs` of columns (every context 0): blocks of ``_COL_BLOCK`` runs."""
    def chunks():
        for b0 in range(0, len(runs), _COL_BLOCK):
            lo, hi = runs.lo[b0:b0 + _COL_BLOCK], runs.hi[b0:b0 + _COL_BLOCK]
            keep = np.flatnonzero(hi - lo >= W)
            if not keep.shape[0]:
                continue
            used, k = np.unique(runs.src[b0:b0 + _COL_BLOCK][keep], return_inverse=True)
            lo, hi = lo[keep], hi[keep]
            yield _pieces_of(W, [runs.seqs[i] for i in used.tolist()], k.reshape(-1).astype(np.int64), lo, hi,
                             np.zeros(lo.shape[0], np.int64))

    return _covered_total(store, chunks, W, int((runs.hi - runs.lo).sum()))


def _covered_total(store, chunks, W: int, size: int) -> int:
    """The covered tokens of the items ``chunks()`` yields (:func:`engine.coverage.covered_counts_chunked`), with
    the anchor filter (a second ``chunks()`` pass) for at most ``_ANCHOR_TOKENS`` stored tokens (``size``)."""
    from pic.engine.coverage import covered_counts_chunked, covered_none

    if size > _ANCHOR_TOKENS:
        return int(covered_counts_chunked(store, chunks(), W).sum())
    none, got = covered_none(store, chunks(), W)      # (a count of 0 told by the names alone)
    return 0 if none else int(covered_counts_chunked(store, iter(got or chunks()), W, again=chunks).sum())


_REF_BLOCK = 1 << 13
_COL_BLOCK = 1 << 15
# NOTE (memory): the anchor filter keeps a fingerprint and a length (8 B) per anchor run (about one per 7
# positions at min_match 16) of every run through both passes; the hashed windows it spares are spilled to
# disk a partition at a time (engine.window_parts). Above this many stored tokens the filter is skipped:
# at chat 10^6 ``prefix`` (~0.4 G stored tokens) it raised the replay's peak RSS from 3.99 to 4.18 GiB
_ANCHOR_TOKENS = 1 << 27


def _ref_cols(runs: list[tuple], W: int):
    """One block of runs as the arguments of :func:`_pieces_of` (None: no run holds a window)."""
    # NOTE (speed): per run only list-comprehension reads in Python; the segment pieces of each run are
    # found vectorized (:func:`_pieces_of`)
    lo = np.array([r[1] for r in runs], np.int64)
    hi = np.array([r[2] for r in runs], np.int64)
    own = lo + np.array([r[3] for r in runs], np.int64)
    lo = np.maximum(lo, own - (W - 1))
    keep = np.flatnonzero(hi - lo >= W)
    if not keep.shape[0]:
        return None
    where: dict[int, int] = {}
    seqs = [runs[i][0] for i in keep.tolist()]
    k = np.array([where.setdefault(id(q), len(where)) for q in seqs], np.int64)
    srcs = list({id(q): q for q in seqs}.values())          # in order of first use: index = where[id(q)]
    lo, hi, own = lo[keep], hi[keep], own[keep]
    return srcs, k, lo, hi, own - lo


def _pieces_of(W: int, srcs: list, k: np.ndarray, lo: np.ndarray, hi: np.ndarray, ctx: np.ndarray):
    """Runs ``[lo, hi)`` of ``srcs[k]`` (each holding a window; first ``ctx`` tokens context) as a chunk for
    :func:`engine.coverage.covered_counts_chunked`."""
    from array import array

    # NOTE (speed): the segment pieces of each run are found by one searchsorted over the concatenated bounds
    # of the distinct source prompts (each prompt's bounds offset by its index times a span above every
    # bound, so that they sort as one array), and gathered vectorized from their concatenated rows
    # (Seq arrays are int32 where their values fit: int32 buffers then, else int64 ones)
    code = "i" if all(q.rows.typecode == "i" and q.bounds.typecode == "i" for q in srcs) else "q"
    rows_a, bounds_a = array(code), array(code)            # (one buffer each: no array per prompt)
    for q in srcs:
        rows_a.extend(q.rows if q.rows.typecode == code else array(code, q.rows))
        bounds_a.extend(q.bounds if q.bounds.typecode == code else array(code, q.bounds))
    nrows = np.array([len(q.rows) for q in srcs], np.int64)
    base = np.zeros(nrows.shape[0] + 1, np.int64)
    np.cumsum(nrows, out=base[1:])
    all_rows = np.frombuffer(rows_a, np.int32 if code == "i" else np.int64).astype(np.int64)
    all_bd = np.frombuffer(bounds_a, np.int32 if code == "i" else np.int64).astype(np.int64)
    bbase = base[:-1] + np.arange(nrows.shape[0])            # a prompt's bounds hold one more entry
    span = int(all_bd.max()) + 1
    key = all_bd + np.repeat(np.arange(nrows.shape[0], dtype=np.int64) * span, nrows + 1)
    i0 = np.searchsorted(key, lo + k * span, side="right") - 1 - bbase[k]
    i1 = np.searchsorted(key, hi + k * span, side="left") - bbase[k]
    cnt = i1 - i0
    item_offs = np.zeros(cnt.shape[0] + 1, np.int64)
    np.cumsum(cnt, out=item_offs[1:])
    g = np.repeat(base[k] + i0, cnt) + ramp(cnt)
    gb = g + np.repeat(k, cnt)                               # a prompt's bounds hold one more entry
    s, e = all_bd[gb], all_bd[gb + 1]
    lo, hi = np.repeat(lo, cnt), np.repeat(hi, cnt)
    return all_rows[g], item_offs, ctx, np.zeros(ctx.shape[0], np.int64), np.maximum(lo, s) - s, np.minimum(hi, e) - s


_DUP_BATCH_TOKENS = 1 << 22


def _duplicate_batch(batch: list[tuple[np.ndarray, int]], W: int, levels: list[np.ndarray]) -> int:
    """:func:`duplicate_tokens` over one batch of runs (each cut to ``< W`` context tokens, so every
    window touches its run's own tokens), given the sorted ``levels`` of earlier windows (updated in
    place)."""
    from pic.engine.coverage import _first_held
    from pic.engine.intervals import _union_length

    lens = np.array([t.shape[0] for t, _ in batch], np.int64)
    ctx = np.array([c for _, c in batch], np.int64)
    starts = np.zeros(lens.shape[0], np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    wh, item, j = range_window_hashes(prefix_hashes(np.concatenate([t for t, _ in batch])), starts, lens - W + 1, W)
    k, it = _first_held(levels, wh, item)
    a = np.maximum(j[k], ctx[it])
    b = j[k] + W
    ok = b > a
    return int(_union_length(it[ok], a[ok], b[ok], lens.shape[0]).sum())


# ---- Internal helpers -----------------------------------------------------------------------------
def _cache_path(digest: str, min_match: int) -> Path | None:
    root = os.environ.get(CACHE_ENV)
    if not root:
        return None
    return Path(root) / "oracle" / f"{digest}-m{min_match}.npz"


def _write_cache(path: Path, got: tuple[np.ndarray, np.ndarray]) -> None:
    from pic.traces.outputs import atomic_path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.savez(f, request_ids=got[0], reused=got[1])
    except OSError:
        pass                               # a cache that cannot be written is only a cache
