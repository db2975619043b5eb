"""``prefix`` — exact-prefix cache over a token radix tree (SGLang RadixAttention; also the shadow
baseline the replay engine runs beside every policy).

Keeps: the KV of every committed prompt, stored once per distinct prefix in a :class:`RadixTree`
(whole pages of ``page_size`` tokens; a partial tail page is not cached). A lookup reuses the longest
resident prefix in place (``Plan.from_prefix``); everything after the first differing token is
recomputed.

Eviction: unlocked leaves of the tree, smallest ``engine.eviction`` key first (``lru`` = last access
time, ``lfu`` = hit count then recency, ``fifo`` = creation time).

Bytes: resident = tokens * ``bytes_per_token``; an admitted request reserves bytes for the tokens it
will add (its whole pages minus the reused prefix) until ``commit`` inserts them, so capacity is never
exceeded. Lookups compare prompts edge by edge (segment references first, tokens only where two
different segments meet: :mod:`engine.seq`), so a hit is always exact (``verified_hits`` counts them
under ``--verify``; ``collisions`` stays 0 by construction) and no token of an opaque segment is made
unless two segments differ there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pic.engine import eviction
from pic.engine.plan import Plan
from pic.engine.policies import register
from pic.engine.policies.base import CachePolicy, Footprint, PolicyContext, RequestView, Usage
from pic.engine.radix import RadixNode, RadixTree
from pic.engine.rolling import ramp


@dataclass(frozen=True, slots=True)
class PrefixConfig:
    page_size: int = field(default=1, metadata={"help": "tokens per KV page; matches are rounded down to "
                                                        "whole pages and only whole pages are cached"})
    eviction: str = field(default="lru", metadata={"help": "eviction order over unlocked leaves: "
                                                           "lru | lfu | fifo"})

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise ValueError(f"prefix.page_size must be >= 1, got {self.page_size}")
        eviction.key(self.eviction)


@register
class PrefixCache(CachePolicy):
    name = "prefix"
    Config = PrefixConfig
    commit_never_grows = True     # (commit stores at most what admit reserved: resident_bytes() never rises)

    def __init__(self, ctx: PolicyContext, config: PrefixConfig | None = None) -> None:
        super().__init__(ctx, config)
        # NOTE (memory): an unbounded cache never evicts on its own: no eviction heap until asked to
        self.tree = RadixTree(self.config.page_size, eviction.key(self.config.eviction),
                              evicts=not math.isinf(ctx.capacity_tokens))
        self._bpt = ctx.bytes_per_token
        self._cap_tokens = ctx.capacity_tokens
        self._unbounded = math.isinf(ctx.capacity_tokens)
        self._reserved = 0                                  # tokens reserved by admitted, uncommitted
        self._live: dict[int, tuple[RadixNode, int, int]] = {}  # request_id -> (locked node, reserved, its depth)
        #: the most :meth:`resident_bytes` at the end of an admission (the serving model's peak, one replica: read
        #: at the end instead of asked after every admission)
        self.peak_bytes = 0

    @property
    def order_only(self) -> bool:
        """Unbounded and unverified: it never refuses nor evicts, and its answer to a request depends only on the
        prompts committed before it (engine.serving.timeline: asked in arrival order ahead of the timeline)."""
        return self._unbounded and not self.ctx.verify

    # ---- Public API -------------------------------------------------------------------------------
    def lookup(self, req: RequestView, now_us: int) -> Plan:
        return Plan.from_prefix(req.num_tokens, self._lookup(req, now_us))

    def admit(self, req: RequestView, plan: Plan, now_us: int) -> bool:
        return self._admit(req, plan.leading_reuse, now_us)

    def start_prefix(self, req: RequestView, now_us: int) -> int:
        """``lookup`` then ``admit`` of its plan, ``Plan.from_prefix(req.num_tokens, r)``: returns ``r``, or -1
        when the plan is refused (the same state and stats). NOTE (speed): the serving model's exact-prefix
        path (engine.serving.model): no Plan built nor read per request."""
        if req.request_id in self._live:        # (admitted twice: lookup's walk, then admit's error)
            num = self._lookup(req, now_us)
            return num if self._admit(req, num, now_us) else -1
        # NOTE (speed): lookup's walk, admit's lock of its whole match (num <= num_tokens) in one tree call
        self.stats.lookups += 1
        q = req.seq
        num, node = self.tree.match_lock(q, now_us)
        if num:
            self.stats.hits += 1
            if self.ctx.verify:
                self.stats.verified_hits += 1
        p = self.tree.page_size
        need = req.num_tokens // p * p - num       # max(0, ...): num is whole pages of the prompt
        if not self._unbounded and not self._fits(node, need):
            return -1
        self._reserved += need
        self._live[req.request_id] = (node, need, num)
        t = self.tree
        b = (t.evictable_tokens + t.protected_tokens + self._reserved) * self._bpt      # resident_bytes()
        if b > self.peak_bytes:
            self.peak_bytes = b
        return num

    def _lookup(self, req: RequestView, now_us: int) -> int:
        """:meth:`lookup`'s reuse: the resident prefix of ``req``, in tokens."""
        self.stats.lookups += 1
        num, _ = self.tree.match_prefix(req.seq, now_us, split=False)
        if num:
            self.stats.hits += 1
            if self.ctx.verify:
                self.stats.verified_hits += 1
        return num

    def _admit(self, req: RequestView, want: int, now_us: int) -> bool:
        """:meth:`admit` of a plan whose leading reuse is ``want`` tokens."""
        if req.request_id in self._live:
            raise ValueError(f"request {req.request_id} admitted twice")
        num, node = self.tree.lock_point(req.seq, want, now_us)
        if num < want:                       # the plan's prefix was evicted since lookup
            self.stats.rejected += 1
            self.stats.extra["stale_plans"] = self.stats.extra.get("stale_plans", 0) + 1
            return False
        self.tree.inc_lock(node)
        p = self.tree.page_size
        need = req.num_tokens // p * p - num       # max(0, ...)
        if need < 0:
            need = 0
        # (unbounded: ``over`` is -inf; not computed)
        if not self._unbounded and not self._fits(node, need):
            return False
        self._reserved += need
        self._live[req.request_id] = (node, need, num)
        self.peak_bytes = max(self.peak_bytes, self.resident_bytes())
        return True

    def _fits(self, node: RadixNode, need: int) -> bool:
        """Room for ``need`` more tokens (evicting what it must) beside the admitted request's locked ``node``;
        when none, ``node`` unlocked and the request rejected."""
        over = self.tree.total_tokens + self._reserved + need - self._cap_tokens
        if over > 0:
            self._evict_tokens(int(over))
            if self.tree.total_tokens + self._reserved + need > self._cap_tokens:
                self.tree.dec_lock(node)
                self.stats.rejected += 1
                return False
        return True

    def commit(self, req: RequestView, now_us: int) -> None:
        node, need, num = self._live[req.request_id]
        self._reserved -= need
        # (node: locked since admit; insert_below, then move_lock(leaf, node))
        leaf = self.tree.insert_move(req.seq, now_us, num, node)[1]
        p = self.tree.page_size
        self._live[req.request_id] = (leaf, 0, req.num_tokens // p * p)

    def release(self, req: RequestView, now_us: int) -> None:
        node, need, _ = self._live.pop(req.request_id)
        self._reserved -= need
        self.tree.dec_lock(node)

    def evict(self, num_bytes: int, now_us: int) -> int:
        return self._evict_tokens(-(-int(num_bytes) // self._bpt)) * self._bpt

    def usage(self) -> Usage:
        b = self._bpt
        t = self.tree
        return Usage(t.evictable_tokens * b, (t.protected_tokens + self._reserved) * b,
                     (t.total_tokens + self._reserved) * b, self.ctx.capacity_bytes)

    def resident_bytes(self) -> int:
        t = self.tree
        return (t.evictable_tokens + t.protected_tokens + self._reserved) * self._bpt     # usage().total

    def footprint(self) -> Footprint:
        """Registry entries = radix nodes; runs = every node's edge (with its parent path as context); duplicates
        0 where :func:`stored_once` shows it (else counted from the runs).

        NOTE (speed): Mooncake conversation's 16 K edges: 0.063 CPU s of the count's segment-structure
        test (``engine.coverage.covered_none``) -> ~0.015 s."""
        runs = self.tree.run_refs()
        return Footprint(self.tree.num_nodes, runs, 0 if stored_once(runs) else None)

    # ---- Internal helpers -------------------------------------------------------------------------
    def _evict_tokens(self, num_tokens: int) -> int:
        before = self.tree.num_evicted
        freed = self.tree.evict(num_tokens)
        if freed:
            self.stats.evictions += self.tree.num_evicted - before
            self.stats.evicted_bytes += freed * self._bpt
        return freed


def stored_once(runs: list[tuple]) -> bool:
    """Whether a radix tree's stored runs ``runs`` (:meth:`RadixTree.run_refs`: ``(seq, lo, hi, context)``, an
    edge's context its parent path) hold no duplicate stored token (``engine.oracle.duplicate_tokens`` 0 at
    every ``min_match``), told from the segment names: every own token (past the context) is opaque and no
    (stream, offset) is owned by two runs or twice by one (False: not shown; count the runs).

    Why: opaque tokens are equal where their names (stream, offset) are (else by chance: 2^-17 a token, as
    ``engine.coverage`` assumes). Say a window of run ``e`` touching its own token ``x`` equals a window of run
    ``f`` touching ``f``'s own ``y`` (``f`` is ``e`` at another offset, or another run). ``f``'s window holds
    ``x``'s name at the same place; owned once, it lies there in ``f``'s path above its own tokens, whose every
    token is owned by an ancestor edge: ``e`` is a proper ancestor of ``f`` (so ``f`` is not ``e``); with ``y``
    likewise, ``f`` is a proper ancestor of ``e``: a contradiction."""
    if not runs:
        return True
    src, lo, hi, ctx = zip(*runs, strict=True)
    ids = np.fromiter(map(id, src), np.int64, len(src))
    _, first, k = np.unique(ids, return_index=True, return_inverse=True)
    srcs = [src[i] for i in first.tolist()]
    store = srcs[0].store
    if store is None or store.keys is None or len({id(q.store) for q in srcs}) != 1:
        return False
    rws, bds = [q.rows for q in srcs], [q.bounds for q in srcs]
    nrows = np.fromiter(map(len, rws), np.int64, len(rws))
    rows, bd = _joined(rws, int(nrows.sum())), _joined(bds, int(nrows.sum()) + len(bds))
    if not bd.shape[0] or int(bd.min()) < 0:
        return False
    base = np.zeros(nrows.shape[0] + 1, np.int64)
    np.cumsum(nrows, out=base[1:])
    bbase = base[:-1] + np.arange(nrows.shape[0])          # (a prompt's bounds hold one more entry)
    span = int(bd.max()) + 1
    key = bd + np.repeat(np.arange(nrows.shape[0], dtype=np.int64) * span, nrows + 1)
    lo = np.array(lo, np.int64) + np.array(ctx, np.int64)  # (its own tokens: [lo + context, hi))
    hi = np.array(hi, np.int64)
    k = k.reshape(-1).astype(np.int64)
    m = hi > lo
    k, lo, hi = k[m], lo[m], hi[m]
    i0 = np.searchsorted(key, lo + k * span, side="right") - 1 - bbase[k]
    cnt = np.searchsorted(key, hi + k * span, side="left") - bbase[k] - i0
    g = np.repeat(base[k] + i0, cnt) + ramp(cnt)          # the pieces of each run's own tokens
    r = rows[g]
    if (r < 0).any() or not store.opaque_mask[r].all():
        return False
    ident = store.keys[r] ^ store.salts[r]                 # (a stream: a row is its first tokens)
    s = np.sort(ident)
    twice = s[1:][s[1:] == s[:-1]]
    if not twice.shape[0]:
        return True
    sel = np.flatnonzero(np.isin(ident, twice))             # streams in two pieces: their offsets overlap?
    gb = g[sel] + np.repeat(k, cnt)[sel]
    st = bd[gb]
    a = np.maximum(np.repeat(lo, cnt)[sel], st) - st
    b = np.minimum(np.repeat(hi, cnt)[sel], bd[gb + 1]) - st
    return disjoint(ident[sel], a, b)


def disjoint(ident: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
    """Whether no two pieces ``[a, b)`` of the same stream ``ident`` overlap (offsets within the stream)."""
    if not ident.shape[0]:
        return True
    o = np.lexsort((a, ident))
    ident, a, b = ident[o], a[o], b[o]
    new = np.ones(o.shape[0], bool)
    new[1:] = ident[1:] != ident[:-1]
    span = int(b.max()) + 1
    grp = np.cumsum(new) - 1
    top = np.maximum.accumulate(grp * span + b) - grp * span       # (a stream's end so far)
    return not (~new[1:] & (a[1:] < top[:-1])).any()


def _joined(parts: list, n: int) -> np.ndarray:
    """int64: the ``array`` objects ``parts`` (``n`` values in all), concatenated."""
    buf = b"".join(parts)
    if len(buf) == 4 * n:                 # (every part int32; or every part int64 below; else mixed)
        return np.frombuffer(buf, np.int32).astype(np.int64)
    if len(buf) == 8 * n:
        return np.frombuffer(buf, np.int64).copy()
    return np.concatenate([np.asarray(p, np.int64) for p in parts])
