"""``fixed-chunk`` told, not asked (``prefix_twin``'s ``tally``, #12): the state a replay in arrival order leaves,
from every request's exact prefix, where the prompts' tokens past their prefixes are fresh (:func:`fresh_past`).

**Fresh past the prefix.** Every prompt is made of opaque rows (no stored tokens); an opaque row of length ``L``
holds the positions ``[t, t + L)`` of one line (token ``j`` is ``mix(base + j * golden)``: position ``t + j``
with ``t = base * golden^-1 mod 2^64``, :mod:`traces.content`). :func:`fresh_past` checks that no two rows of
different lines overlap on that line (an overlapping or shifted line: equal tokens under another key), that no
request holds a line twice, and that no earlier request holds a position that a request has past its prefix
(the trace-level oracle's ``unmet_past_prefix`` on lines; it reads keys, not lines, and not inside a prompt).
Then every token past a prefix is a line position held nowhere before it and nowhere else in its prompt: a run
of ``w >= coverage.UNMET_MIN`` tokens that holds such a token equals no other run (by chance: 1 in 2^17 a token,
as the oracle counts). A run of ``w`` tokens that ends past its request's prefix (at a new node of the tree of
prompts) therefore equals no run of an earlier request and no other run of its prompt: it is met for the first
time (if it has fewer than ``w`` tokens past the prefix, the rest is the prefix, met at one place only: its
equal would extend the exact prefix).

**fixed-chunk there** (prefix stage on, page size 1, no partial chunks stored, unbounded, unverified, chunk size
``C >= UNMET_MIN``): each lookup's prefix stage matches the exact prefix ``pfx`` (the tree holds every committed
prompt whole); a window of ``C`` tokens from ``pfx`` on ends past the prefix: no stored chunk (an earlier
request's) equals it, so every plan is ``Plan.from_prefix(N, pfx)``. A grid chunk ``[jC, (j+1)C)`` inside the
prefix is the earlier prompt's there (stored); one that ends past it is new and distinct: the store gains
``N // C - pfx // C`` chunks a request. The tree holds ``N - pfx`` tokens more a request and never evicts; every
chunk lies in its prompt, held whole by the tree's edges (``chunk_footprint``'s held runs): the duplicate stored
tokens are ``C`` per chunk (``C >= window``) plus the edges' own, none (their windows of ``window >= UNMET_MIN``
tokens that touch an edge's tokens end at distinct nodes)."""

from __future__ import annotations

import numpy as np

from pic.engine.policies.base import Footprint, Usage

#: ``golden^-1 mod 2^64`` (the opaque line step's inverse: a row's first line position is ``base * _GINV``)
_GINV = np.uint64(pow(0x9E3779B97F4A7C15, -1, 1 << 64))
_WIDTH = 64                   # the held runs' width (chunk_footprint: edges with 63 tokens of context)


def prompt_rows(work) -> tuple | None:
    """``(store, rows, item_offs, views)``: the workload's prompts as segment rows of one store (item ``i``: rows
    ``rows[item_offs[i]:item_offs[i + 1]]``) and their views, or None (a prompt given by its tokens, two stores)."""
    n = work.num_requests
    views = [work.view(i) for i in range(n)]
    if not n or views[0].source is None:
        return None
    src = views[0].source
    got = [v.segment_rows for v in views]
    if any(v.source is not src for v in views) or any(r is None for r in got):
        return None
    offs = np.zeros(n + 1, np.int64)
    np.cumsum([r.shape[0] for r in got], out=offs[1:])
    return src, np.concatenate(got).astype(np.int64), offs, views


def fresh_past(work, pfx: np.ndarray) -> bool:
    """Whether every token past each request's prefix ``pfx`` is a line position held by no earlier request and by
    no other row of its own (module docstring): opaque rows only, no two lines overlapping, no line twice in a
    request, and per row the longest row of its line in earlier requests ends at or before its first position
    past the prefix (one sort by line, then request; a running maximum)."""
    got = prompt_rows(work)
    if got is None:
        return False
    src, rows, offs, _ = got
    if src.keys is None:
        return False
    L = np.diff(src.offsets)[rows]
    item = np.repeat(np.arange(offs.shape[0] - 1, dtype=np.int64), np.diff(offs))
    cum = np.zeros(L.shape[0] + 1, np.int64)
    np.cumsum(L, out=cum[1:])
    if not np.array_equal(cum[offs[1:]] - cum[offs[:-1]], np.asarray(work.num_prompt, np.int64)):
        return False
    keep = L > 0
    if not src.opaque_mask[rows[keep]].all():
        return False
    from pic.traces.content import opaque_bases

    r, it, L = rows[keep], item[keep], L[keep]
    past = np.clip(np.asarray(pfx, np.int64)[it] - (cum[:-1][keep] - cum[offs[:-1]][it]), 0, L)
    t = opaque_bases(src.keys[r], src.salts[r]) * _GINV              # each row's first line position
    o = np.lexsort((it, t))
    t, it, L, past = t[o], it[o], L[o], past[o]
    new = np.ones(t.shape[0], bool)
    new[1:] = t[1:] != t[:-1]
    if not new.shape[0]:
        return True
    if (~new[1:] & (it[1:] == it[:-1])).any():                      # a line twice in one request
        return False
    g = np.cumsum(new) - 1
    span = int(L.max()) + 1
    top = np.maximum.accumulate(g * span + L) - g * span            # the line's longest row so far
    heads = np.flatnonzero(new)
    ends = np.maximum.reduceat(L, heads).astype(np.uint64)           # each line's longest row
    u = t[heads]
    if (u[1:] - u[:-1] < ends[:-1]).any() or u[-1] > np.uint64(2 ** 64 - 1) - ends[-1]:
        return False                                                  # lines overlapping (or wrapping around)
    before = np.where(new, 0, np.r_[0, top[:-1]])
    return bool(((before <= past) | (past >= L)).all())


def tally(self, work, pfx: np.ndarray, m: int, window: int) -> bool:
    """``FixedChunkCache.tally`` (``prefix_twin``): its stats, usage, footprint and peak as a replay in arrival order
    leaves them, where :func:`fresh_past` (module docstring); False (nothing set) elsewhere."""
    from pic.engine.coverage import UNMET_MIN

    c, ctx = self.config, self.ctx
    C = c.chunk_size
    if (not c.prefix_stage or c.save_unfull_chunk or c.prefix_page_size != 1 or ctx.verify
            or ctx.capacity_tokens != float("inf") or self.stats.lookups or self._store or self._live
            or C < UNMET_MIN or not UNMET_MIN <= window <= _WIDTH):
        return False
    pfx = np.asarray(pfx, np.int64)
    n = np.asarray(work.num_prompt, np.int64)
    if pfx.shape[0] != work.num_requests or (pfx < 0).any() or (pfx > n).any() or not fresh_past(work, pfx):
        return False
    entries = int((n // C - pfx // C).sum())
    tree = int((n - pfx).sum())
    s, e = self.stats, self.stats.extra
    s.lookups, s.hits = int(n.shape[0]), int(np.count_nonzero(pfx))
    e["prefix_tokens"], e["chunk_tokens"] = int(pfx.sum()), 0
    b = ctx.bytes_per_token
    total = (tree + C * entries) * b
    self.usage = lambda: Usage(total, 0, total, ctx.capacity_bytes)
    self.resident_bytes = lambda: total
    dup = C * entries if C >= window else 0
    self.footprint = lambda: Footprint(entries, None, dup)
    self.peak_bytes = total
    return True
