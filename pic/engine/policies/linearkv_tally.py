"""``linearkv`` told, not asked (``prefix_twin``'s ``tally``, #12): the state a replay in arrival order leaves,
from every request's exact prefix ``pfx``, without its prefix stage's tree, its plans or its entries.

With one replica, the open loop and unbounded capacity (no admission gate, nothing evicted), unverified, an
attention-only model (no recurrent state stored: a plan without chunk hits is ``Plan.from_prefix``) and the prefix
stage on (page size 1: it matches the exact prefix ``pfx``), the asked pass stores every chunk whose fingerprint is
not resident yet and reuses a chunk only where it starts at or after ``pfx`` and is resident (a hit). Here every
prompt is chunked as the asked pass chunks it (``linearkv_layout.prompt_chunks``: a prompt's layout is that of
chunking it whole), resumed from an earlier prompt that holds the same first segments (``shared`` tokens: the same
cuts and fingerprints up to its last anchor ``c`` with ``c + min_chunk <= shared``, each of those chunks resident
since that prompt was admitted), and the other chunks' fingerprints are looked up in a set of every fingerprint
stored so far (the asked pass's entries: a chunk's first occurrence is always in the part that is chunked, never
taken from an earlier prompt's layout, which would hold it earlier). A hit anywhere: False (the plan is not
``prefix``'s); else the stats (chunk lookups, stored chunks), usage and peak are the asked pass's exactly.

NOTE (speed): where every prompt is a store's opaque segments without S2 markers (Mooncake, Azure) and the kernels
are loaded, one compiled call does it all (:func:`_compiled`, :mod:`pic._accel_numba_lkvtally`: the sources, each
prompt chunked from its source's kept layout, its new chunks' fingerprints looked up in a table of those stored so
far): the tally on Mooncake conversation ~0.47 -> ~0.26 CPU s. :func:`_reference` (each prompt's layout in Python,
``np.unique``) is the reference and the path elsewhere; tests/policies/test_linearkv_tally_fast.py compares them."""

from __future__ import annotations

from array import array
from bisect import bisect_right

import numpy as np

from pic import accel
from pic.engine import cdc
from pic.engine.policies.base import Usage
from pic.engine.policies.irminsul_layout import _columns, _may_mark, opaque_layout
from pic.engine.policies.linearkv_layout import _NO_EDGES, prompt_chunks
from pic.engine.rolling import ramp
from pic.traces.content import _MASK


def _row_hashes(rows: np.ndarray, offs: np.ndarray) -> np.ndarray:
    """uint64 per (item, k <= its row count): a hash of the item's first ``k`` segment rows (``offs[i] + i + k``),
    equal for equal row sequences (a polynomial over the rows, made by one cumulative sum)."""
    n = offs.shape[0] - 1
    cnt = np.diff(offs)
    inv = np.uint64(pow(0x9E3779B97F4A7C15, -1, 1 << 64))
    x = (rows.astype(np.uint64) + np.uint64(1)) * np.uint64(0xBF58476D1CE4E5B9)
    k = np.arange(rows.shape[0], dtype=np.int64) - np.repeat(offs[:-1], cnt)          # a row's index in its item
    pw = np.cumprod(np.full(int(cnt.max(initial=0)) + 1, inv, np.uint64))             # inv^(k+1)
    out = np.zeros(rows.shape[0] + n, np.uint64)
    pos = np.arange(rows.shape[0], dtype=np.int64) + np.repeat(np.arange(n, dtype=np.int64), cnt) + 1
    out[pos] = x * pw[k]
    # (cumulative within an item: each item's slots start at 0 and only add its own rows)
    c = np.cumsum(out)
    heads = offs[:-1] + np.arange(n, dtype=np.int64)
    return c - np.repeat(c[heads], cnt + 1)


def sources(rows: np.ndarray, offs: np.ndarray, seg_len: np.ndarray, pfx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(src, shared)`` per item: an earlier item (-1: none) whose first segment rows are the item's first rows
    within its prefix ``pfx`` (as many as one has: ``shared`` tokens, at most ``pfx``)."""
    n = offs.shape[0] - 1
    cnt = np.diff(offs)
    h = _row_hashes(rows, offs)
    item = np.repeat(np.arange(n, dtype=np.int64), cnt + 1)
    heads = offs[:-1] + np.arange(n, dtype=np.int64)
    cum = np.zeros(rows.shape[0] + n, np.int64)                 # tokens of an item's first k rows, per slot
    L = seg_len[rows]
    pos = np.arange(rows.shape[0], dtype=np.int64) + np.repeat(np.arange(n, dtype=np.int64), cnt) + 1
    cum[pos] = L
    cum = np.cumsum(cum)
    cum = cum - np.repeat(cum[heads], cnt + 1)
    o = np.lexsort((item, h))                                   # by hash, then item: a hash's first item first
    sh, si = h[o], item[o]
    first = np.ones(sh.shape[0], bool)
    first[1:] = sh[1:] != sh[:-1]
    owner = np.empty(sh.shape[0], np.int64)
    owner[o] = si[np.maximum.accumulate(np.where(first, np.arange(sh.shape[0]), 0))]
    # each item's deepest slot within its prefix whose row sequence an earlier item holds (the slots within the
    # prefix are a run from k = 0; the earlier holders of slot k hold every slot before it)
    ok = (cum <= pfx[item]) & (owner < item)
    k = np.where(ok, np.arange(cum.shape[0], dtype=np.int64), -1)
    best = np.maximum.reduceat(k, heads) if n else np.zeros(0, np.int64)
    src = np.where(best >= 0, owner[np.maximum(best, 0)], -1)
    shared = np.where(best >= 0, cum[np.maximum(best, 0)], 0)
    # (the rows themselves compared: a hash met twice by chance gives no source)
    num = np.where(src >= 0, np.maximum(best, 0) - heads, 0)
    at = np.repeat(offs[:-1], num) + ramp(num)
    bad = rows[at] != rows[np.repeat(offs[np.maximum(src, 0)], num) + ramp(num)]
    src[np.unique(np.repeat(np.arange(n, dtype=np.int64), num)[bad])] = -1
    return src, np.where(src >= 0, shared, 0)


def tally(self, work, pfx: np.ndarray, m: int, window: int) -> bool:
    """``LinearKV.tally`` (``prefix_twin``): its stats, usage and peak as a replay in arrival order leaves them
    (module docstring); False where a chunk would be a hit or the configuration is not covered."""
    from pic.engine.policies.fixed_chunk_tally import prompt_rows

    c, ctx = self.config, self.ctx
    if (self._tree is None or c.prefix_page_size != 1 or ctx.verify or not self._unbounded or self._gate
            or self._hybrid or self._state_b or self._op_b or self.stats.lookups or self._entries):
        return False
    n = work.num_requests
    pfx = np.ascontiguousarray(pfx, np.int64)
    num = np.ascontiguousarray(work.num_prompt, np.int64)
    if pfx.shape[0] != n or (pfx < 0).any() or (pfx > num).any():
        return False
    got = prompt_rows(work)
    counts = _compiled(self, got, num, pfx) if got is not None else None
    if counts is None:
        counts = _reference(self, work, got, pfx)
    if not counts:
        return False
    num_lookups, stored, tokens = counts
    s, e = self.stats, self.stats.extra
    s.lookups, s.hits = n, int(np.count_nonzero(pfx))
    e["chunk_lookups"], e["stored_chunks"], e["prefix_tokens"] = num_lookups, stored, int(pfx.sum())
    bpt = ctx.bytes_per_token
    total = (tokens + int((num - pfx).sum())) * bpt
    self.usage = lambda: Usage(total, 0, total, ctx.capacity_bytes)
    self.resident_bytes = lambda: total
    self.peak_bytes = total
    return True


_NO_BOUNDS, _NO_FPS = np.zeros(0, np.int64), np.zeros(0, np.uint64)


def _compiled(self, got: tuple, num: np.ndarray, pfx: np.ndarray) -> tuple | None | bool:
    """``(chunk lookups, stored chunks, their tokens)`` from one compiled pass over every prompt
    (:mod:`pic._accel_numba_lkvtally`: the sources, each prompt chunked as :func:`_reference` chunks it, its chunks
    checked against those stored so far), False where a chunk is a hit; None where it does not apply (prompts
    other than a store's opaque segments, possible S2 markers, no kernels): :func:`_reference` then.

    NOTE (speed): ~0.2 CPU s less than the reference's loop on Mooncake conversation (12,031 prompts: a call, two
    lists, ~5 array extends per prompt, the sources and the fingerprints' ``unique`` in numpy); one kernel loaded."""
    store, rows, offs, views = got
    c, cfg, n = self.config, self._cdc, num.shape[0]
    if any(v._tokens is not None for v in views) or n >= 1 << 31 or cfg.max_chunk >= 1 << 31:
        return None
    cols = _columns(store)
    if cols is None or not cols[5] or (c.s2 and _may_mark(store, self._marker)):
        return None
    fast = accel.kernels(int(store.offsets[-1]), "lkvtally")
    if fast is None:
        return None
    table, key = cdc._kernel_gear(cfg.seed, cfg.gear)
    st, tab, lb, la = _buffers(num, pfx, cfg)
    src, shared, loff = np.empty(n, np.int64), np.empty(n, np.int64), np.zeros(n + 1, np.int64)
    gb, gf = _NO_BOUNDS, _NO_FPS
    while True:
        tab, lb, la = fast.lkv_pass(cols[1], cols[2], rows, offs, num, pfx, src, shared, loff, st, tab, lb, la, gb,
                                    gf, _MASK, table, key, cfg.threshold, cfg.min_chunk, cfg.max_chunk)
        if st[7] != fast.NUMPY:
            return (int(st[3]), int(st[2]), int(st[4])) if st[7] == fast.DONE else False
        b, _, f = cdc.layout_fps(views[int(st[0])].tokens, cfg)      # (the numpy rules: no marker, no hard cut)
        gb, gf = np.array(b, np.int64), np.array(f, np.uint64)


def _buffers(num: np.ndarray, pfx: np.ndarray, cfg: cdc.CDCConfig) -> tuple:
    """``(state, table, bounds, anchors)`` of :func:`_compiled`'s first call: the table sized for about the chunks to
    store (load 3/4 at most), the kept bounds for about every chunk (both grown in the kernel where they fill)."""
    n = num.shape[0]
    est = int((num - pfx).sum()) // cfg.avg_chunk + 2 * n
    size = 1 << max(10, (4 * est // 3).bit_length())
    st = np.zeros(8, np.int64)
    st[1] = 65 - size.bit_length()                   # (the table's shift: 64 - log2(size))
    nb = int(num.sum()) // cfg.avg_chunk + 2 * n + 16
    return st, np.zeros(2 * size, np.uint64), np.empty(nb, np.int64), np.empty(nb, np.uint8)


def _reference(self, work, got: tuple | None, pfx: np.ndarray) -> tuple | bool:
    """:func:`_compiled`'s answer from each prompt's layout made in Python (one compiled call per prompt where it
    can: :func:`~engine.policies.irminsul_layout.opaque_layout`, else :func:`linearkv_layout.prompt_chunks`) and
    the fingerprints' first occurrences (``np.unique``): the reference."""
    c, n = self.config, work.num_requests
    if got is not None:
        store, rows, offs, views = got
        src, shared = sources(rows, offs, np.diff(store.offsets), pfx)
        src, shared = src.tolist(), shared.tolist()
        accel.kernels(int(store.offsets[-1]))          # (as the asked pass's first lookup announces them)
    else:
        store, src, shared, views = None, [-1] * n, [0] * n, [work.view(i) for i in range(n)]
    cfg, marker = self._cdc, self._marker
    kept: dict[int, tuple] = {}
    # every chunk not taken from an earlier prompt's layout, in order: fingerprint, start, end, request
    fps, starts, ends, cnt = array("Q"), array("q"), array("q"), array("q", bytes(8 * n))
    num_lookups = 0
    # NOTE (speed): a prompt of opaque segments without markers (Mooncake, Azure) is chunked by one compiled call
    # (irminsul_layout.opaque_layout), resumed as prompt_chunks resumes it, its layout kept as lists (the part taken
    # from the earlier prompt never converted: ~0.1 CPU s less on Mooncake conversation); others by prompt_chunks
    lean = store is not None and (not c.s2 or not _may_mark(store, marker))
    mn, win = cfg.min_chunk, cdc.WINDOW - 1
    for i, req in enumerate(views):
        s, sh = src[i], shared[i]
        other = kept.get(s) if s >= 0 and sh else None
        got, k = None, 0
        if lean and req.source is store:
            if other is not None:
                pb, pf, panc = other
                k = bisect_right(pb, sh - mn) - 1
                while k > 0 and not panc[k]:
                    k -= 1
                if k > 0:
                    base = max(0, pb[k] - win)
                    got = opaque_layout(req, base, base, pb[k], cfg, _NO_EDGES)
            if got is None:
                k = 0
                got = opaque_layout(req, 0, 0, 0, cfg, _NO_EDGES)
        if got is not None:
            bl, fl = got[1], got[3]
            kept[i] = (pb[:k] + bl, pf[:k] + fl, panc[:k] + got[2]) if k else (bl, fl, got[2])
        else:
            full = (None, array("q", other[0]), array("Q", other[1]), other[2]) if other is not None else None
            bl, fl, _, k, anc = prompt_chunks(req, c, cfg, marker, full, sh if other is not None else 0)
            if anc is not None:
                kept[i] = (bl, fl, anc)
            bl, fl = bl[k:], fl[k:]
        num_lookups += k + len(fl)
        fps.extend(fl)
        starts.extend(bl[:-1])
        ends.extend(bl[1:])
        cnt[i] = len(fl)
    del kept
    fp, a, b = (np.frombuffer(x, t) for x, t in ((fps, np.uint64), (starts, np.int64), (ends, np.int64)))
    who = np.repeat(np.arange(n, dtype=np.int64), np.frombuffer(cnt, np.int64))
    # the asked pass's entries: a fingerprint is stored by its first occurrence; a later one in another request that
    # starts at or after that request's prefix, of the stored size, is a hit (not prefix's plan)
    _, first, inv = np.unique(fp, return_index=True, return_inverse=True)
    size = b - a
    inv = inv.reshape(-1)
    if ((who[first][inv] < who) & (a >= pfx[who]) & (size[first][inv] == size)).any():
        return False
    return num_lookups, int(first.shape[0]), int(size[first].sum())
