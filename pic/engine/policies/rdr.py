"""``rdr`` — rate–distortion retention: compressed KV residency composed over any reuse policy.

``--policy irminsul+rdr`` (or ``rdr`` with ``over=NAME``) runs the reuse policy NAME unchanged for what
is reused, and decides for the KV every request adds *how* it is kept: per page-sized block of tokens
of every (attention layer, KV head) a residency z ∈ {0, 1} and an angle-domain (ADA) precision tier
b ∈ {8, 4, 3, 2} (:mod:`pic.engine.angle_codes`; ``pic.kernels.ada`` computes attention from these
codes), under a byte budget: ``budget`` × dense bf16 bytes per token. Protected spans — retrieved
evidence and tool results (segment kinds in ``protect``) and the first ``protect_sinks`` tokens (attention
sinks) — are forced to z = 1 at the best tier. The rest is chosen by greedy on marginal distortion
saved per byte (:mod:`pic.engine.rdr_alloc`), with the surrogate distortion w · ε(b)² where the
logit error of a state is ~ ‖q‖ r ε(b) (ε = 1 when evicted) and its importance w is a recency prior
(1 + distance/``recency_tokens``)^(−1/2) times a seeded log-normal weight per (layer, head) (r² and
head relevance; spread ``head_sigma``).

Composition: the reuse policy is built with ``bytes_per_token`` = the rdr charge (the budget, or the
all-best-tier size when that is smaller), so the same capacity holds more tokens; the replay's cost
model reads that many bytes per cached token in attention (decode HBM bytes per step); each request's
new tokens are encoded once (``Correction.reencode_tokens``). Evicted (z = 0) states only cost quality
here: a token stays a hit for the reuse policy. When protected spans alone exceed a request's budget
they are kept anyway and the excess is counted (``rdr_over_budget_bytes``).
Paper: the Spherical-KV design (angle-domain attention + RDR), DESIGN.md §5/§9 of this project.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from pic import accel
from pic.engine.angle_codes import EVICTED, TIERS
from pic.engine.plan import Action, Plan
from pic.engine.policies import register
from pic.engine.policies.base import CachePolicy, PolicyContext, RequestView, Usage
from pic.engine.rdr_alloc import Options, allocate, gqa_options, mla_options
from pic.traces.schema import KIND_CODE


@dataclass(frozen=True, slots=True)
class RdrConfig:
    over: str = field(default="prefix", metadata={
        "help": "reuse policy rdr composes over (`--policy NAME+rdr` sets it)"})
    budget: float = field(default=0.75, metadata={
        "help": "resident KV bytes as a fraction of dense bf16 KV, 0 < budget <= 1"})
    tiers: str = field(default="8,4,3,2", metadata={"help": "ADA tiers allowed (bits per coordinate: 8,4,3,2)"})
    protect: str = field(default="document,tool_output", metadata={
        "help": "segment kinds kept at z=1, best tier (retrieved evidence, tool results); empty = none"})
    protect_sinks: int = field(default=4, metadata={"help": "first tokens of a prompt (attention sinks) kept at the best tier"})
    block_tokens: int = field(default=64, metadata={"help": "tokens per page: one tier per page"})
    recency_tokens: int = field(default=256, metadata={"help": "recency scale of the importance prior"})
    head_sigma: float = field(default=1.0, metadata={"help": "log-normal spread of per-(layer, head) importance"})
    over_config: Any = field(default=None, metadata={"help": "(set by the registry) the reuse policy's config"})

    def __post_init__(self) -> None:
        if not 0 < self.budget <= 1 or math.isnan(self.budget):
            raise ValueError(f"budget: must be in (0, 1], got {self.budget}")
        if self.block_tokens < 1 or self.recency_tokens < 1 or self.protect_sinks < 0 or self.head_sigma < 0:
            raise ValueError("block_tokens and recency_tokens must be >= 1, protect_sinks and head_sigma >= 0")
        self.tier_bits  # noqa: B018 - validates
        self.protect_kinds  # noqa: B018

    @property
    def tier_bits(self) -> tuple[int, ...]:
        try:
            bits = tuple(sorted({int(x) for x in self.tiers.split(",") if x.strip()}, reverse=True))
        except ValueError:
            raise ValueError(f"tiers: expected comma-separated ints, got {self.tiers!r}") from None
        if not bits or any(b not in TIERS for b in bits):
            raise ValueError(f"tiers: {self.tiers!r}: each must be one of {', '.join(map(str, TIERS))}")
        return bits

    @property
    def protect_kinds(self) -> tuple[int, ...]:
        names = [x.strip() for x in self.protect.split(",") if x.strip()]
        bad = [n for n in names if n not in KIND_CODE]
        if bad:
            raise ValueError(f"protect: unknown segment kind(s) {', '.join(bad)}; known: {', '.join(KIND_CODE)}")
        return tuple(KIND_CODE[n] for n in names)


@register
class RateDistortionRetention(CachePolicy):
    """Compressed KV (ADA tiers + residency) under a byte budget, over any reuse policy."""

    name = "rdr"
    Config = RdrConfig
    is_wrapper: ClassVar[bool] = True

    def __init__(self, ctx: PolicyContext, config: RdrConfig | None = None) -> None:
        super().__init__(ctx, config)
        from pic.engine import policies as registry
        cfg = self.config
        over = registry.get(cfg.over)
        if getattr(over, "is_wrapper", False):
            raise ValueError(f"rdr: over={cfg.over!r} is itself a wrapper")
        if not over.bounded:
            raise ValueError(f"rdr: over={cfg.over!r} is an upper bound that stores no KV; nothing to compress")
        self.opts, self.num_layers, self.num_heads = _unit_options(ctx.model, cfg.tier_bits)
        self.charge_frac = min(cfg.budget, float(self.opts.frac[self.opts.best]))
        self.kv_bytes_per_token = max(1, math.ceil(ctx.bytes_per_token * self.charge_frac))
        inner_ctx = dataclasses.replace(ctx, bytes_per_token=self.kv_bytes_per_token)
        inner_cfg = cfg.over_config if cfg.over_config is not None else registry.make_config(cfg.over)
        self.inner = registry.get(cfg.over)(inner_ctx, inner_cfg)
        self.stats = self.inner.stats                   # one set of counters (replay reads evictions etc.)
        rng = np.random.default_rng([ctx.seed, 0x5D5])
        self.head_weight = rng.lognormal(0.0, cfg.head_sigma, self.num_layers * self.num_heads)
        self._protect = np.zeros(256, bool)              # segment kind code -> protected (a lookup, not isin)
        self._protect[list(cfg.protect_kinds)] = True
        self._last: tuple[int, Plan, Plan] | None = None
        # told, not asked (rdr_told.tally): (reuse, re-encoded tokens) of every request in arrival order, read by
        # engine.serving.timeline; the plans answered then (_answer), by request id
        self.told_plans: tuple[np.ndarray, np.ndarray] | None = None
        self._told_ids: np.ndarray | None = None
        self._told_at: dict[int, int] | None = None
        self._pending: dict[int, tuple[np.ndarray, int]] = {}     # request -> its new tokens' spans, their count
        self._rprior = np.zeros(0)                        # prior by distance from the last token, reversed
        self._dist = [0.0, 0.0]                          # Σ w·ε², Σ w  (allocated units)
        self._tier_keys = [f"rdr_unit_tokens_b{b}" for b in self.opts.bits]
        self._eff = self.opts.efficiency()
        for k in ("rdr_tokens", "rdr_bytes", "rdr_protected_tokens", "rdr_over_budget_bytes", *self._tier_keys):
            self.stats.extra.setdefault(k, 0)

    # ---- Public API -------------------------------------------------------------------------------
    def lookup(self, req: RequestView, now_us: int) -> Plan:
        if self.told_plans is not None:
            return self._answer(req)
        plan = self.inner.lookup(req, now_us)
        new = plan.tokens_by(Action.RECOMPUTE)
        out = plan.with_reencode(new) if new else plan
        self._last = (req.request_id, out, plan)
        return out

    def admit(self, req: RequestView, plan: Plan, now_us: int) -> bool:
        if self.told_plans is not None:
            return True
        inner = plan
        if self._last is not None and self._last[0] == req.request_id and self._last[1] is plan:
            inner = self._last[2]
        self._last = None
        ok = self.inner.admit(req, inner, now_us)
        if ok:
            self._pending[req.request_id] = _recomputed_spans(plan)
        return ok

    def commit(self, req: RequestView, now_us: int) -> None:
        if self.told_plans is not None:
            return
        self.inner.commit(req, now_us)
        new = self._pending.pop(req.request_id, None)
        if new is not None and new[1]:
            self._allocate(req, *new)

    def release(self, req: RequestView, now_us: int) -> None:
        if self.told_plans is not None:
            return
        self._pending.pop(req.request_id, None)
        self.inner.release(req, now_us)

    def evict(self, num_bytes: int, now_us: int) -> int:
        return self.inner.evict(num_bytes, now_us)

    def usage(self) -> Usage:
        return self.inner.usage()

    def holds(self, req: RequestView) -> bool | None:
        return self.inner.holds(req)

    def describe(self) -> dict[str, Any]:
        d = dataclasses.asdict(self.config)
        d["over_config"] = self.inner.describe()
        d.update(charge_bytes_per_token=self.kv_bytes_per_token, units_per_token=self.num_layers * self.num_heads,
                 options={str(b): {"frac": float(f), "eps": float(math.sqrt(e))}
                          for b, f, e in zip(self.opts.bits, self.opts.frac, self.opts.eps2, strict=True)},
                 hull=[self.opts.bits[i] for i in self.opts.hull])
        return d

    def tally(self, work: Any, pfx: np.ndarray, m: int, window: int) -> bool:
        """Told, not asked (``prefix_twin``; :func:`rdr_told.tally`): its final state where its plans are
        ``Plan.from_prefix(N, pfx[i])`` re-encoding the rest; False where that is not shown."""
        from pic.engine.policies.rdr_told import tally

        return bool(tally(self, work, pfx, m, window))

    @staticmethod
    def merged_summary(pols: list[RateDistortionRetention]) -> dict[str, float]:
        """summary.json fields over replicas: actual resident bytes/token and mean relative distortion."""
        toks = sum(p.stats.extra["rdr_tokens"] for p in pols)
        num, den = sum(p._dist[0] for p in pols), sum(p._dist[1] for p in pols)
        return {"rdr_resident_bytes_per_token": sum(p.stats.extra["rdr_bytes"] for p in pols) / toks if toks else 0.0,
                "rdr_distortion": num / den if den else 0.0,
                "rdr_over_budget_bytes": float(sum(p.stats.extra["rdr_over_budget_bytes"] for p in pols))}

    # ---- Internal helpers -------------------------------------------------------------------------
    def _answer(self, req: RequestView) -> Plan:
        """The plan of a request once told (:attr:`told`): what :meth:`lookup` answered when asked."""
        if self._told_at is None:
            self._told_at = {r: i for i, r in enumerate(self._told_ids.tolist())}
        r = int(self.told_plans[0][self._told_at[req.request_id]])
        plan = Plan.from_prefix(req.num_tokens, r)
        return plan.with_reencode(req.num_tokens - r) if r < req.num_tokens else plan

    def _allocate(self, req: RequestView, spans: np.ndarray, ntok: int | None = None) -> None:
        """Tiers for the request's new tokens: the positions of ``spans`` (rows ``[start, end)``, ascending),
        ``ntok`` of them."""
        cfg, n, opts, HL = self.config, req.num_tokens, self.opts, self.head_weight.size
        if ntok is None:
            ntok = int(np.sum(spans[:, 1] - spans[:, 0]))
        if ntok <= 0:
            return
        budget = cfg.budget * ntok * HL
        fast = accel.kernels(ntok, "rdr")
        if fast is not None:
            # NOTE (speed): one compiled call (pic._accel_numba_rdr.rdr_request) for the numpy path's ~45, with the
            # same float operations in the same order; the prior by distance comes from a table numpy computed
            # (the same expression over the same integers: the same values; ~60 M powers on Mooncake before)
            if self._rprior.size < n:
                d = np.arange(max(n, 2 * self._rprior.size, 4096))
                self._rprior = ((1.0 + d / cfg.recency_tokens) ** -0.5)[::-1].copy()
            used, forced, distortion, wsum, num_prot, per, _ = fast.rdr_request(
                spans, n, self._rprior, req.segment_bounds, req.segment_kinds, self._protect, cfg.protect_sinks,
                cfg.block_tokens, self.head_weight, opts.hull, opts.step_frac, self._eff, opts.frac, opts.eps2,
                len(opts.bits), budget)
        else:
            pos = np.concatenate([np.arange(a, b) for a, b in spans.tolist()])
            prior = (1.0 + (n - 1 - pos) / cfg.recency_tokens) ** -0.5
            # NOTE (speed): the segment of each position by a search over the segment bounds, protection by a
            # table of kind codes, block starts by a mask (no token-length repeat, isin or unique sort)
            seg = np.searchsorted(req.segment_bounds, pos, side="right") - 1
            prot = self._protect[req.segment_kinds[seg]] | (pos < cfg.protect_sinks)
            # blocks: runs of <= block_tokens consecutive new tokens with one protection state
            mark = np.zeros(pos.size, bool)
            mark[::cfg.block_tokens] = True
            mark[1:] |= (np.diff(pos) != 1) | (prot[1:] != prot[:-1])
            starts = np.flatnonzero(mark)
            sizes = np.diff(np.append(starts, pos.size)).astype(np.float64)
            block_w = np.add.reduceat(prior, starts)
            w = (block_w[:, None] * self.head_weight[None, :]).ravel()
            size = np.repeat(sizes, HL)
            alloc = allocate(opts, w, size, np.repeat(prot[starts], HL), budget)
            used, forced, distortion, num_prot = alloc.used, alloc.forced, alloc.distortion, int(prot.sum())
            per = np.bincount(alloc.option, weights=size, minlength=len(opts.bits))
            wsum = float(w.sum())
        unit_bytes = self.ctx.bytes_per_token / HL                 # dense bytes of one unit-token
        ex = self.stats.extra
        ex["rdr_tokens"] += ntok
        ex["rdr_bytes"] += int(round(used * unit_bytes))
        ex["rdr_protected_tokens"] += int(num_prot)
        ex["rdr_over_budget_bytes"] += int(round(max(0.0, forced - budget) * unit_bytes))
        for b, t in zip(self._tier_keys, per.tolist(), strict=True):
            ex[b] += int(round(t))
        self._dist[0] += distortion
        self._dist[1] += wsum


def _recomputed_spans(plan: Plan) -> tuple[np.ndarray, int]:
    """``[[start, end), ...]`` (int64 rows, ascending) of the plan's RECOMPUTE spans: the request's new tokens;
    and their number."""
    spans = [(s.start, s.end) for s in plan.spans if s.action == Action.RECOMPUTE]
    if not spans:
        return np.zeros((0, 2), np.int64), 0
    return np.array(spans, np.int64), sum(e - s for s, e in spans)


def _unit_options(model: Any, tiers: tuple[int, ...]) -> tuple[Options, int, int]:
    """(options, attention layers, KV heads per layer) of ``model``; no model: one 128-dim GQA head."""
    if model is None:
        return gqa_options(128, tiers), 1, 1
    if model.attention == "mla":
        return mla_options(model.kv_lora_rank, model.qk_rope_head_dim, tiers, model.dtype_bytes), \
            model.num_attn_layers, 1
    return gqa_options(model.head_dim, tiers, model.dtype_bytes), model.num_attn_layers, model.num_kv_heads


__all__ = ["RateDistortionRetention", "RdrConfig", "EVICTED"]
