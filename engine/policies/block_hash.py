"""``block-hash`` — vLLM automatic prefix caching: chained hashes over fixed full blocks.

Keeps: one entry per distinct full block of ``block_size`` tokens, keyed by its chained hash (the
hash of the block's tokens *and* everything before it; here the polynomial hash of the whole prefix
up to the block's end, :func:`engine.rolling.prefix_hashes`). Each entry has a reference count (the
running requests holding it); blocks with ``ref == 0`` sit in an LRU free queue. A partial last block
is never cached.

Lookup: the leading run of blocks whose chained hash is present (``Plan.from_prefix``), so matches
are always whole blocks. Under ``--verify`` every hit block's tokens and parent hash are compared.

Eviction: the free queue in LRU order; a finished request frees its blocks tail first (vLLM
``free_blocks(reversed(...))``), so the end of a prompt goes before its shared beginning. Evicting a
middle block leaves its descendants resident but unreachable until it is cached again (as in vLLM).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from engine.plan import Plan
from engine.policies import register
from engine.policies.base import CachePolicy, PolicyContext, RequestView, Usage
from engine.rolling import prefix_hashes


@dataclass(frozen=True, slots=True)
class BlockHashConfig:
    block_size: int = field(default=16, metadata={"help": "tokens per block; only whole blocks are "
                                                          "hashed, cached and matched"})

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block-hash.block_size must be >= 1, got {self.block_size}")


class _Block:
    __slots__ = ("parent", "tokens", "ref")

    def __init__(self, parent: int, tokens: np.ndarray) -> None:
        self.parent = parent
        self.tokens = tokens
        self.ref = 0


@register
class BlockHashCache(CachePolicy):
    name = "block-hash"
    Config = BlockHashConfig

    def __init__(self, ctx: PolicyContext, config: BlockHashConfig | None = None) -> None:
        super().__init__(ctx, config)
        self._bs = self.config.block_size
        self._blocks: dict[int, _Block] = {}
        self._free: OrderedDict[int, None] = OrderedDict()     # ref == 0, LRU first
        self._num_locked = 0                                  # blocks with ref > 0
        self._reserved = 0                                    # blocks reserved, not yet committed
        self._live: dict[int, tuple[list[int], int]] = {}     # request_id -> (held hashes, reserved)
        self._cap_blocks = ctx.capacity_tokens // self._bs if ctx.capacity_tokens != float("inf") \
            else float("inf")

    # ---- Public API -------------------------------------------------------------------------------
    def lookup(self, req: RequestView, now_us: int) -> Plan:
        self.stats.lookups += 1
        num = len(self._match(req, self._hashes(req))) * self._bs
        if num:
            self.stats.hits += 1
        return Plan.from_prefix(req.num_tokens, num)

    def admit(self, req: RequestView, plan: Plan, now_us: int) -> bool:
        if req.request_id in self._live:
            raise ValueError(f"request {req.request_id} admitted twice")
        hashes = self._hashes(req)
        want = plan.leading_reuse // self._bs
        held = self._match(req, hashes)[:want]
        if len(held) < want:
            self.stats.rejected += 1
            self.stats.extra["stale_plans"] = self.stats.extra.get("stale_plans", 0) + 1
            return False
        for h in held:
            self._ref(h)
        need = len(hashes) - want
        over = len(self._blocks) + self._reserved + need - self._cap_blocks
        if over > 0:
            self._evict_blocks(int(over))
            if len(self._blocks) + self._reserved + need > self._cap_blocks:
                for h in reversed(held):
                    self._unref(h)
                self.stats.rejected += 1
                return False
        self._reserved += need
        self._live[req.request_id] = (held, need)
        return True

    def commit(self, req: RequestView, now_us: int) -> None:
        held, need = self._live[req.request_id]
        self._reserved -= need
        hashes = self._hashes(req)
        bs = self._bs
        out = list(held)
        for i in range(len(held), len(hashes)):
            h = hashes[i]
            b = self._blocks.get(h)
            if b is None:
                b = self._blocks[h] = _Block(hashes[i - 1] if i else 0, req.tokens[i * bs:(i + 1) * bs].copy())
            self._ref(h)
            out.append(h)
        self._live[req.request_id] = (out, 0)

    def release(self, req: RequestView, now_us: int) -> None:
        held, need = self._live.pop(req.request_id)
        self._reserved -= need
        for h in reversed(held):          # tail first into the free queue: evicted first
            self._unref(h)

    def evict(self, num_bytes: int, now_us: int) -> int:
        per = self._bs * self.ctx.bytes_per_token
        return self._evict_blocks(-(-int(num_bytes) // per)) * per

    def usage(self) -> Usage:
        per = self._bs * self.ctx.bytes_per_token
        n = len(self._blocks)
        return Usage((n - self._num_locked) * per, (self._num_locked + self._reserved) * per,
                     (n + self._reserved) * per, self.ctx.capacity_bytes)

    # ---- Internal helpers -------------------------------------------------------------------------
    def _hashes(self, req: RequestView) -> list[int]:
        h = prefix_hashes(req.tokens)
        return h[self._bs::self._bs].tolist()

    def _match(self, req: RequestView, hashes: list[int]) -> list[int]:
        out: list[int] = []
        bs, blocks, verify = self._bs, self._blocks, self.ctx.verify
        prev = 0
        for i, h in enumerate(hashes):
            b = blocks.get(h)
            if b is None:
                break
            if verify:
                self.stats.verified_hits += 1
                if b.parent != prev or not np.array_equal(b.tokens, req.tokens[i * bs:(i + 1) * bs]):
                    self.stats.collisions += 1
                    break
            out.append(h)
            prev = h
        return out

    def _ref(self, h: int) -> None:
        b = self._blocks[h]
        if b.ref == 0:
            self._free.pop(h, None)
            self._num_locked += 1
        b.ref += 1

    def _unref(self, h: int) -> None:
        b = self._blocks[h]
        b.ref -= 1
        if b.ref == 0:
            self._num_locked -= 1
            self._free[h] = None

    def _evict_blocks(self, num_blocks: int) -> int:
        freed = 0
        while freed < num_blocks and self._free:
            h, _ = self._free.popitem(last=False)
            del self._blocks[h]
            freed += 1
        self.stats.evictions += freed
        self.stats.evicted_bytes += freed * self._bs * self.ctx.bytes_per_token
        return freed
