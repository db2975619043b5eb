"""``block-hash`` — vLLM automatic prefix caching: chained hashes over fixed full blocks.

Keeps: one entry per distinct full block of ``block_size`` tokens, keyed by its chained hash (the hash of the
block's tokens *and* everything before it; here the polynomial hash of the whole prefix up to the block's end,
:class:`engine.rolling.BlockHasher`: from per-segment partial sums, so a prompt is never rehashed token by
token). Each entry has a reference count (the running requests holding it); blocks with ``ref == 0`` sit in an
LRU free queue. A partial last block is never cached.

Lookup: the leading run of blocks whose chained hash is present (``Plan.from_prefix``), so matches
are always whole blocks. Under ``--verify`` every hit block's tokens and parent hash are compared.

Eviction: the free queue in LRU order; a finished request frees its blocks tail first (vLLM
``free_blocks(reversed(...))``), so the end of a prompt goes before its shared beginning.

NOTE (speed): residency is prefix-closed along every chain: a block's parent is resident whenever the block is.
Whoever holds a block holds its whole chain (admit locks a leading run, commit the rest), so ``ref(parent) >=
ref(block)``; a release frees tail first, so a free parent always sits behind its free children in the LRU queue,
and eviction (strictly in queue order) never takes a parent before its children. Hence the resident blocks form a
tree of chains, kept as a radix tree of block-hash runs (:class:`~engine.policies.block_chains.BlockChains`): a
request's resident blocks are the run its walk matches, and commit adds everything after it as one edge. Until #12
they were a dict from hash to slot, one entry per block: on Mooncake conversation (5.6 M resident blocks) its cache
misses were ~430 of ~690 us per request (~290 inserting, ~140 looking up); numpy open-addressing tables were tried
twice in its place and lost to the dict at the 70-470 keys a request brings. A chained-hash collision (2^-64 per
pair) used to merge two chains in the dict; in the tree, blocks match only along their whole path. A request's held
blocks are the walk's slot pieces (a slice per run of consecutive slots, an array only for recycled ones), so ref
counts and the free order are updated through views: per request the cost is numpy calls per piece, not per block
(docs/bench-bh8.md).

Unbounded and without --verify (every replay's baseline at the default capacity) the cache never evicts, and none
of the above is kept: it is a token radix tree over the committed prompts' full blocks
(:mod:`engine.policies.block_radix`) until the policy API first asks it to evict.
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from pic.engine.plan import Plan
from pic.engine.policies import register
from pic.engine.policies.base import CachePolicy, Footprint, PolicyContext, RequestView, Usage
from pic.engine.policies.block_chains import BlockChains, cat_pieces, chain_runs, head_pieces, tail_pieces
from pic.engine.policies.block_radix import RadixAnswers, RadixBlocks, answer_all
from pic.engine.rolling import BlockHasher


@dataclass(frozen=True, slots=True)
class BlockHashConfig:
    block_size: int = field(default=16, metadata={"help": "tokens per block; only whole blocks are "
                                                          "hashed, cached and matched"})

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block-hash.block_size must be >= 1, got {self.block_size}")


@register
class BlockHashCache(CachePolicy):
    name = "block-hash"
    Config = BlockHashConfig
    commit_never_grows = True     # (commit stores at most what admit reserved: resident_bytes() never rises)

    def __init__(self, ctx: PolicyContext, config: BlockHashConfig | None = None, *, radix: bool = True) -> None:
        super().__init__(ctx, config)
        self._bs = bs = self.config.block_size
        # NOTE (memory, speed): unbounded and unverified, the cache is a token radix tree until it is first
        # asked to evict (engine.policies.block_radix: the same plans and counts, no per-block state, no
        # hashing); then the state below is rebuilt by replaying the admissions, commits and releases it logged
        self._radix = RadixBlocks(bs) if radix and ctx.capacity_tokens == float("inf") and not ctx.verify else None
        self._hasher = BlockHasher(bs)
        self._tree = BlockChains()                            # the resident blocks, by chain
        # NOTE (memory): a cache that is unbounded (and not --verify) never evicts by itself: until evict() is
        # called it is *lean*: per block only ``ref`` (1 B) and the tree's hash (8 B), no free order, no free
        # queue and no edge id per block (~25 B per block before #12's tenth round; rag-reorder makes ~230
        # distinct blocks per request). Its releases are logged instead (:meth:`_unlock`), and the first
        # evict() rebuilds the free order from the log (:meth:`_end_lean`)
        self._lean = ctx.capacity_tokens == float("inf") and not ctx.verify
        self._log = array("q")                               # lean: (first, end) slot of each run released
        self._num_resident = 0
        self._num_born = 0
        # NOTE: per-slot state lives in numpy arrays so ref counting and eviction are vectorized (NOTE (memory): 5 B
        # per block, 17 with the tree's, 9 while lean; hashes, parents, storing order and tokens, read only by the
        # --verify check and footprint, only under --verify). ref: uint8 while <= 255 requests are live, then int32
        self._ref = np.zeros(0, np.uint8)
        self._ref_max = 255
        # order in the LRU free queue (ref == 0; None while lean). NOTE (memory): int32 until 2^31 releases, then int64
        self._free_seq = None if self._lean else np.zeros(0, np.int32)
        if not self._lean:
            self._tree.track()
        self._hash = np.zeros(0, np.uint64)                   # --verify only: chained hash,
        self._parent = np.zeros(0, np.uint64)                 # its parent's,
        self._birth = np.zeros(0, np.int64)                   # storing order,
        self._tok = np.zeros((0, bs), np.int32)               # and tokens
        self._top = 0                                         # slots [0, top) were ever used
        self._spare = np.zeros(0, np.int64)                   # evicted slots to recycle (a stack)
        self._num_spare = 0
        self._next_free_seq = 0
        # LRU free queue as a FIFO of (seq, slot) array pieces in increasing seq; entries whose slot
        # was re-referenced, re-released or evicted since are stale and skipped on pop.
        self._queue: deque[tuple[np.ndarray, np.ndarray]] = deque()
        self._num_queued = 0
        # (while lean there is no queue: the first evict() builds it from the free order, which orders the
        # free blocks exactly as the queue's valid entries would)
        self._num_locked = 0                                  # blocks with ref > 0
        self._reserved = 0                                    # blocks reserved, not yet committed
        # request -> (held slot pieces, blocks reserved, hashes, want, walk position after the `want` held
        # blocks); a piece is a slice of consecutive slots or an int64 array of slots (:meth:`BlockChains.walk`)
        self._live: dict[int, tuple[list, int, np.ndarray, int, tuple | None]] = {}
        self._memo: tuple[RequestView, np.ndarray] | None = None   # (request, hashes) of the last one
        self._walked: tuple | None = None       # (request, tree version, end, pieces, position) of the last walk
        cap = ctx.capacity_tokens
        self._cap_blocks, self._bpb = (cap if cap == float("inf") else cap // bs), bs * ctx.bytes_per_token   # (per block)
        self.peak_bytes = 0      # the most resident_bytes() at the end of an admission (PrefixCache.peak_bytes)

    @property
    def order_only(self) -> bool:     # (answering from the prefix replay: engine.serving.timeline)
        return type(self._radix) is RadixAnswers

    answer_all = answer_all           # (every request at once, there: block_radix.answer_all)

    # ---- Public API -------------------------------------------------------------------------------
    def lookup(self, req: RequestView, now_us: int) -> Plan:
        if self._radix is not None:
            return Plan.from_prefix(req.num_tokens, self._radix_lookup(req))
        self.stats.lookups += 1
        hashes = self._hashes(req)
        if self.ctx.verify:
            num = self._match(req, hashes).shape[0] * self._bs
        else:
            num = self._walk(req, hashes)[0] * self._bs
        if num:
            self.stats.hits += 1
        return Plan.from_prefix(req.num_tokens, num)

    def start_prefix(self, req: RequestView, now_us: int) -> int:
        """:meth:`PrefixCache.start_prefix <engine.policies.prefix.PrefixCache.start_prefix>`'s: lookup + admit, no Plan."""
        if self._radix is None or req.request_id in self._radix.live:      # (admitted twice: admit's error)
            plan = self.lookup(req, now_us)
            return plan.leading_reuse if self.admit(req, plan, now_us) else -1
        self.stats.lookups += 1
        r = self._radix
        num = r.start(req, now_us)       # (lookup, admit of its whole blocks: no more than num_tokens)
        self.stats.hits += num > 0
        b = (r.num_resident + r.reserved) * self._bpb        # resident_bytes()
        if b > self.peak_bytes:
            self.peak_bytes = b
        return num

    def admit(self, req: RequestView, plan: Plan, now_us: int) -> bool:
        if self._radix is not None:
            return self._radix_admit(req, plan.leading_reuse // self._bs, now_us)
        if req.request_id in self._live:
            raise ValueError(f"request {req.request_id} admitted twice")
        want = plan.leading_reuse // self._bs
        hashes = self._hashes(req)
        if self.ctx.verify:
            run = self._match(req, hashes, want)
            num, held = run.shape[0], [run] if run.shape[0] else []
        else:
            num, pieces = self._walk(req, hashes)
            held = pieces if num <= want else head_pieces(pieces, want)
        if num < want:
            self.stats.rejected += 1
            self.stats.extra["stale_plans"] = self.stats.extra.get("stale_plans", 0) + 1
            return False
        w = self._walked                                    # (this request's walk: _match walks too)
        pos = self._tree.back(w[4], w[2] - want)
        if len(self._live) >= self._ref_max:
            self._widen_ref()
        self._lock(held)
        need = hashes.shape[0] - want
        over = self._num_resident + self._reserved + need - self._cap_blocks
        if over > 0:
            self._evict_blocks(int(over))
            if self._num_resident + self._reserved + need > self._cap_blocks:
                self._unlock(held)
                self.stats.rejected += 1
                return False
        self._reserved += need
        self._live[req.request_id] = (held, need, hashes, want, pos)
        self.peak_bytes = max(self.peak_bytes, self.resident_bytes())
        return True

    def commit(self, req: RequestView, now_us: int) -> None:
        if self._radix is not None:
            return self._radix.commit(req, now_us)
        held, need, hashes, want, pos = self._live[req.request_id]
        self._reserved -= need
        n = hashes.shape[0]
        # the first `want` blocks are held: walk on from the last of them
        w = self._walked
        if w is not None and w[0] is req and w[1] == self._tree.version and not self.ctx.verify:
            # NOTE (speed): the tree is unchanged since lookup's walk (one replica commits a request before
            # it admits the next): that walk went on from block `want` to where this one would end
            run, pieces, pos = w[2], tail_pieces(w[3], want), w[4]
        else:
            # (from admit's position after the held blocks: they stayed resident, edges may have split)
            run, pieces, pos = self._tree.walk(hashes, want, self._tree.resume(pos, hashes, want), n)
        if pieces:
            self._lock(pieces)
        if run < n:                                         # nothing after the matched run is resident
            new = self._allocate(req, hashes, run, pos)
            self._ref[new] = 1          # (fresh slots are 0, recycled ones were evicted at 0: locked now)
            self._num_locked += n - run
            pieces.append(new)
        self._live[req.request_id] = (held + pieces, 0, hashes, want, None)

    def release(self, req: RequestView, now_us: int) -> None:
        if self._radix is not None:
            return self._radix.release(req, now_us)
        held, need, _, _, _ = self._live.pop(req.request_id)
        self._reserved -= need
        self._unlock(held)

    def evict(self, num_bytes: int, now_us: int) -> int:
        if self._radix is not None:
            self._end_radix()
        per = self._bs * self.ctx.bytes_per_token
        return self._evict_blocks(-(-int(num_bytes) // per)) * per

    def usage(self) -> Usage:
        per = self._bs * self.ctx.bytes_per_token
        r = self._radix
        n, locked, reserved = ((self._num_resident, self._num_locked, self._reserved) if r is None
                               else (r.num_resident, r.num_locked, r.reserved))
        return Usage((n - locked) * per, (locked + reserved) * per, (n + reserved) * per, self.ctx.capacity_bytes)

    def resident_bytes(self) -> int:
        r = self._radix
        n, reserved = (self._num_resident, self._reserved) if r is None else (r.num_resident, r.reserved)
        return (n + reserved) * (self._bs * self.ctx.bytes_per_token)      # usage().total

    def footprint(self) -> Footprint:
        """Registry entries = resident blocks; runs (only under --verify, the one mode that keeps block
        tokens): each block after up to 3 ancestor blocks of context."""
        if not self.ctx.verify:
            return Footprint(self._num_resident if self._radix is None else self._radix.num_resident, None)
        alive = np.flatnonzero(self._alive)
        alive = alive[np.argsort(self._birth[alive])]
        return Footprint(self._num_resident, chain_runs(alive, self._hash, self._parent, self._tok, self._bs))

    # ---- Internal helpers -------------------------------------------------------------------------
    def _end_radix(self) -> None:
        """Before the first eviction of an unbounded cache: its per-block state, by replaying what it served into an
        exact cache (its stats are this cache's own)."""
        exact = BlockHashCache(self.ctx, self.config, radix=False)
        self._radix.replay(exact)
        vars(self).update({**vars(exact), "stats": self.stats, "peak_bytes": self.peak_bytes})

    def _radix_lookup(self, req: RequestView) -> int:
        """:meth:`lookup`'s reuse while the cache is a radix tree, in tokens."""
        self.stats.lookups += 1
        num = self._radix.lookup(req)
        self.stats.hits += num > 0
        return num

    def _radix_admit(self, req: RequestView, want: int, now_us: int) -> bool:
        """:meth:`admit` of ``want`` leading blocks while the cache is a radix tree."""
        if req.request_id in self._radix.live:
            raise ValueError(f"request {req.request_id} admitted twice")
        if self._radix.admit(req, want, now_us) < want:
            self.stats.rejected += 1
            self.stats.extra["stale_plans"] = self.stats.extra.get("stale_plans", 0) + 1
            return False
        self.peak_bytes = max(self.peak_bytes, self.resident_bytes())
        return True

    def _hashes(self, req: RequestView) -> np.ndarray:
        """Chained hashes of the full blocks: uint64 [N // block_size] (memoized for lookup -> commit;
        from the segments' cached partial sums, :class:`engine.rolling.BlockHasher`)."""
        if self._memo is None or self._memo[0] is not req:
            self._memo = (req, self._hasher.hashes(req))
        return self._memo[1]

    def _walk(self, req: RequestView, hashes: np.ndarray) -> tuple[int, list[np.ndarray]]:
        """``(length, slot pieces)`` of the resident leading run of ``req``'s blocks (memoized while the
        tree is unchanged: admit reuses lookup's walk)."""
        w = self._walked
        if w is None or w[0] is not req or w[1] != self._tree.version:
            run, pieces, pos = self._tree.walk(hashes, 0, (self._tree.root, 0), hashes.shape[0])
            self._walked = w = (req, self._tree.version, run, pieces, pos)
        return w[2], w[3]

    def _match(self, req: RequestView, hashes: np.ndarray, limit: int | None = None) -> np.ndarray:
        """Slots of the leading run of present blocks, at most ``limit``, verified (--verify only)."""
        end = hashes.shape[0] if limit is None else min(limit, hashes.shape[0])
        num, pieces = self._walk(req, hashes)
        run = cat_pieces(pieces)[:end] if num else np.zeros(0, np.int64)
        if self.ctx.verify and run.shape[0]:
            k, bs = run.shape[0], self._bs
            self.stats.verified_hits += k
            ok = (self._tok[run] == req.tokens[:k * bs].reshape(k, bs)).all(axis=1)
            ok &= self._parent[run] == np.r_[np.uint64(0), hashes[:k - 1]]
            if not ok.all():
                self.stats.collisions += 1
                run = run[: int(np.argmin(ok))]
        return run

    def _allocate(self, req: RequestView, hashes: np.ndarray, lo: int, pos) -> slice | np.ndarray:
        """Fresh slots for blocks ``[lo, len(hashes))`` (none of them resident), stored after walk
        position ``pos``: a slice where they are consecutive (never-used ones), else an int64 array.
        Their ``ref`` is 0 (never used, or evicted at 0); their ``free_seq`` is stale until a release sets
        it (read only for blocks at ref 0 that a release queued)."""
        k, bs = hashes.shape[0] - lo, self._bs
        take = min(k, self._num_spare)                      # evicted slots first, then never-used ones
        self._num_spare -= take
        fresh, top = k - take, self._top
        if top + fresh > self._ref.shape[0]:
            n = max(top + fresh, _grown(self._ref.shape[0]))
            arrays = [self._ref] if self._lean else [self._ref, self._free_seq]
            if self.ctx.verify:
                arrays += [self._hash, self._parent, self._birth, self._tok]
            for a in arrays:
                _extend(a, n)
            self._tree.grow(n)
        self._top = top + fresh
        if take:
            slots = np.concatenate([self._spare[self._num_spare:self._num_spare + take], np.arange(top, top + fresh)])
        else:
            slots = slice(top, top + fresh)
        if self.ctx.verify:
            if not take:
                slots = np.arange(top, top + fresh)
            self._hash[slots] = hashes[lo:]
            self._parent[slots[0]] = hashes[lo - 1] if lo else 0
            self._parent[slots[1:]] = hashes[lo:-1]
            self._birth[slots] = np.arange(self._num_born, self._num_born + k)
            self._num_born += k
            self._tok[slots] = req.tokens[lo * bs:(lo + k) * bs].reshape(k, bs)
        self._tree.insert(pos, hashes[lo:], top if not take else slots)     # (consecutive: their first)
        self._num_resident += k
        return slots

    def _push_spare(self, slots: np.ndarray) -> None:
        """Push dead slots on the recycling stack."""
        n = self._num_spare + slots.shape[0]
        if n > self._spare.shape[0]:
            _extend(self._spare, max(n, _grown(self._spare.shape[0])))
        self._spare[self._num_spare:n] = slots
        self._num_spare = n

    def _lock(self, pieces: list) -> None:
        """ref += 1 on the slots of ``pieces``."""
        ref, num = self._ref, 0
        for p in pieces:
            v = ref[p]                      # a view (slice) or a copy (array)
            num += v.shape[0] - int(np.count_nonzero(v))
            if type(p) is slice:
                v += 1
            else:
                ref[p] = v + 1
        self._num_locked += num

    def _unlock(self, pieces: list) -> None:
        """ref -= 1 on the slots of ``pieces``; those that reach 0 join the free queue, tail first (vLLM frees
        reversed(blocks): the tail is evicted first)."""
        if self._lean:
            # NOTE (memory, speed): no free order per block: the runs that freed a block are logged in the
            # order a kept queue would number them (_end_lean); pieces are slices while lean
            ref, log, z = self._ref, self._log, 0
            for p in reversed(pieces):
                v = ref[p]
                v -= 1
                k = v.shape[0] - int(np.count_nonzero(v))
                if k:
                    log.append(p.start)
                    log.append(p.stop)
                    z += k
            self._num_locked -= z
            return
        ref, nxt = self._ref, self._next_free_seq
        parts: list[tuple[np.ndarray, np.ndarray]] = []        # (seq, slots) per piece, for the queue
        for p in reversed(pieces):
            if type(p) is slice:
                v = ref[p]
                v -= 1
                k = v.shape[0]
                z = k - int(np.count_nonzero(v))
                if not z:
                    continue
                if z == k:                  # (the common case: all of them)
                    zero = np.arange(p.stop - 1, p.start - 1, -1)
                else:
                    zero = (v == 0).nonzero()[0][::-1] + p.start     # (not np.flatnonzero: ~0.9 us less)
            else:
                k = -1
                v = ref[p] - 1
                ref[p] = v
                zero = p[v == 0][::-1]
                z = zero.shape[0]
                if not z:
                    continue
            if nxt + z > _I32_MAX and self._free_seq.dtype != np.int64:
                self._free_seq = self._free_seq.astype(np.int64)
            seq = np.arange(nxt, nxt + z, dtype=np.int64)
            if z == k:
                self._free_seq[p][::-1] = seq
            else:
                self._free_seq[zero] = seq
            parts.append((seq, zero))
            nxt += z
        z = nxt - self._next_free_seq
        self._num_locked -= z
        self._next_free_seq = nxt
        if not parts:
            return
        # one queue entry per release, as one array pair (fewer entries for eviction to check)
        self._queue.append(parts[0] if len(parts) == 1 else tuple(np.concatenate(a) for a in zip(*parts, strict=True)))
        self._num_queued += z
        if self._num_queued > 2 * self._num_resident + 65_536:
            seq, sl = (np.concatenate(a) for a in zip(*self._queue, strict=True))
            keep = self._valid(seq, sl)
            self._queue = deque([(seq[keep], sl[keep])])
            self._num_queued = int(keep.sum())

    def _end_lean(self) -> None:
        """Before the first eviction of a lean cache: the per-block free order from the release log (each run
        numbered tail first, after the runs logged before it; a block's last release is the one that freed
        it, so the free blocks are ordered as a kept queue's valid entries would be), the edge ids, and the
        queue of the free blocks in that order."""
        fs = np.zeros(self._ref.shape[0], np.int64)
        c, it = 0, iter(self._log)
        for a, b in zip(it, it, strict=True):
            fs[a:b] = np.arange(c + b - a - 1, c - 1, -1)
            c += b - a
        self._free_seq = fs if c > _I32_MAX else fs.astype(np.int32)
        self._next_free_seq = c
        self._log = None
        self._tree.track()
        self._lean = False
        free = np.flatnonzero(self._ref[:self._top] == 0)       # (every used slot is resident while lean)
        free = free[np.argsort(self._free_seq[free])]
        self._queue = deque([(self._free_seq[free], free)])
        self._num_queued = free.shape[0]

    def _widen_ref(self) -> None:
        """ref as int32 (more than 255 live requests)."""
        self._ref = self._ref.astype(np.int32)
        self._ref_max = 1 << 62

    def _evict_blocks(self, num_blocks: int) -> int:
        if self._lean:
            self._end_lean()
        got: list[np.ndarray] = []
        num = 0
        while num < num_blocks and self._queue:
            seq, sl = self._queue.popleft()
            self._num_queued -= seq.shape[0]
            idx = self._valid(seq, sl).nonzero()[0][: num_blocks - num]
            if idx.shape[0]:
                got.append(sl[idx])
                num += idx.shape[0]
                rest = int(idx[-1]) + 1
                if rest < seq.shape[0] and num >= num_blocks:
                    self._queue.appendleft((seq[rest:], sl[rest:]))
                    self._num_queued += seq.shape[0] - rest
        if not got:
            return 0
        cand = np.concatenate(got)
        self._free_seq[cand] = -1       # (so that their queue entries are stale: see _valid)
        self._tree.evicted(cand)
        self._num_resident -= cand.shape[0]
        self._push_spare(cand)
        freed = cand.shape[0]
        self.stats.evictions += freed
        self.stats.evicted_bytes += freed * self._bs * self.ctx.bytes_per_token
        return freed


    def _valid(self, seq: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Whether queue entries ``(seq, slots)`` still stand: the block is free and was last freed at ``seq``
        (eviction sets ``free_seq`` to -1 and a recycled slot is locked at once, so a block evicted since, or
        recycled, fails the check without reading ``eid``)."""
        return (self._ref[slots] == 0) & (self._free_seq[slots] == seq)

    @property
    def _alive(self) -> np.ndarray:
        """bool per slot ever used: resident (held by an edge of the tree; NOTE (memory): no array of its own;
        while lean, every used slot)."""
        return np.ones(self._top, np.bool_) if self._lean else self._tree.eid[:self._top] != 0


_I32_MAX = (1 << 31) - 1


def _grown(n: int) -> int:
    """The next size of a per-slot array of ``n`` rows. NOTE (memory): x1.0625 (the unused rows are
    zero-filled, hence resident: doubling left up to half of ~25 B per block idle; a larger array grows by
    realloc, which remaps its pages instead of copying them, so many small steps cost little)."""
    return n + (n >> 4) + 4096


def _extend(a: np.ndarray, n: int) -> None:
    """Grow ``a`` (which owns its data and has no views) to ``n`` rows in place, zero-filled: a realloc,
    which for large arrays remaps pages instead of copying them (``np.r_`` copies were 0.9 of 4.3 CPU s
    on Mooncake conversation)."""
    a.resize((n,) + a.shape[1:], refcheck=False)
