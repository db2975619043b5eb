"""Cost model: a Plan (or a continuous-batching step) -> FLOPs, HBM bytes, seconds, joules.

A forward is a sequence of phases, each bound by its own roofline and summed (GEMMs, attention, scans and
rotation run as separate kernels):

    time = sum over phases of max(flops / (bf16_flops * mfu), bytes / (hbm_bytes_per_s * mbu))
           + tier transfers (host link / disk) + step_overhead_s

phases: ``linear`` (weights once per forward, KV rows written, projection/MLP FLOPs), ``attention`` (KV
read, score/value FLOPs), ``recurrent`` (state read+write, scan), ``rotation`` (RoPE correction of reused
keys), ``composition`` (LinearKV state compositions). A CalibrationProfile replaces the linear+attention
phases and the overhead with measured tables. Pure Python; formulas and defaults in docs/cost-model.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pic.engine.cost_fns import one_chunk_terms_fn, prefill_step_fn
from pic.engine.hybrid_cost import HybridShape, prefill_hybrid
from pic.engine.plan import DISK, HOST, RECOMPUTE, REUSE_ROTATED, Plan
from pic.engine.specs import GpuSpec, ModelSpec

if TYPE_CHECKING:
    from pic.engine.calibration import CalibrationProfile


@dataclass(frozen=True, slots=True)
class CostConfig:
    """Efficiency factors of the roofline (ignored where a calibration profile gives measured times)."""

    mfu: float = field(default=0.6, metadata={"help": "fraction of the GPU's measured bf16 FLOP/s a forward reaches"})
    mbu: float = field(default=0.8, metadata={"help": "fraction of measured HBM copy bandwidth kernels reach"})
    step_overhead_s: float = field(default=1e-3, metadata={"help": "fixed seconds per forward (launch, scheduler)"})
    fused_rotation: bool = field(default=True, metadata={
        "help": "MLA: rotate k_r inside the attention load path (no extra HBM pass); GQA is never fused"})
    disk_bytes_per_s: float = field(default=6e9, metadata={"help": "DISK-tier read bandwidth, bytes/s"})

    def __post_init__(self) -> None:
        if not (0 < self.mfu <= 1 and 0 < self.mbu <= 1):
            raise ValueError("cost: mfu and mbu must be in (0, 1]")
        if self.step_overhead_s < 0 or self.disk_bytes_per_s <= 0:
            raise ValueError("cost: step_overhead_s must be >= 0 and disk_bytes_per_s > 0")


@dataclass(frozen=True, slots=True)
class PrefillCost:
    """Cost of prefilling one request alone under its Plan (FLOPs and bytes include rotation/corrections)."""

    flops: float
    hbm_bytes: float
    time_s: float
    joules: float
    cache_read_bytes: float       # KV bytes of the reused spans (read from their tier)
    rotation_flops: float
    rotation_bytes: float         # extra HBM traffic of the RoPE correction (0 when fused MLA)
    transfer_bytes: float = 0.0   # reused KV moved from HOST/DISK tiers
    attn_layer_s: float = 0.0     # part of time_s spent in attention layers (mixer + their MLP/MoE)
    recurrent_layer_s: float = 0.0  # part spent in recurrent layers (+ state I/O, compositions, stores)
    attn_tokens: int = 0          # tokens the attention layers ran
    recurrent_tokens: int = 0     # tokens the recurrent layers ran (0 for attention-only models)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


class CostModel:
    """Turns Plans and batch steps into time/bytes/energy for one (model, GPU) pair."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, config: CostConfig | None = None,
                 profile: CalibrationProfile | None = None, kv_read_bytes: float | None = None) -> None:
        self.model, self.gpu = model, gpu
        self.config = config if config is not None else CostConfig()
        self.profile = profile
        if profile is not None and (profile.gpu != gpu.name or profile.model != model.name):
            raise ValueError(f"{profile.source}: profile is for gpu={profile.gpu!r} model={profile.model!r}, "
                             f"not gpu={gpu.name!r} model={model.name!r}")
        self._peak = gpu.bf16_flops * self.config.mfu
        self._bw = gpu.hbm_bytes_per_s * self.config.mbu
        # NOTE: per-model constants hoisted out of the hot path (replay calls this per event)
        m = model
        self._kvb = float(m.kv_bytes_per_token)
        # bytes attention reads per cached token: dense, or fewer for compressed KV (rdr / ADA codes)
        self._kv_read = self._kvb if kv_read_bytes is None else float(kv_read_bytes)
        self._dec_attn = m.decode_attention_flops_per_context_token()
        self._attn = m.attention_flops_fn()      # ModelSpec.attention_flops, constants bound
        self._lin_per_token = m.linear_flops(1)
        self._lm_flops = 2.0 * m.lm_head_params
        self._state = float(m.state_bytes)
        self._w_one = m.weight_bytes_read(1)
        self._w_dense = (m._trunk_params(0) + m.lm_head_params) * m.dtype_bytes
        self._w_expert = m.num_moe_layers * m._expert_params() * m.dtype_bytes
        self._lm_bytes = float(m.lm_head_params * m.dtype_bytes)
        self._decode_memo: dict[int, tuple[float, float]] = {}
        self._step_nd: dict[int, tuple[float, float]] = {}   # prefill_step's terms per decode batch size
        # NOTE (speed): attention FLOPs of a chunk remembered by (new, cached) tokens: the serving model prices a
        # prompt's chunks, its counterfactual full prefill and its one-chunk terms with the same shapes again
        # (Azure conversation: 86 % of prefill_step's (new, cached) pairs seen before, Mooncake 47 %)
        self._attn_memo: dict[tuple[int, int], float] = {}
        self._w_memo: dict[int, float] = {}                 # _weights of a MoE model per token count
        self._w_all = self._all_experts()                 # (token count from which every expert is touched, w)
        self._comp_f, self._comp_b = m.state_composition_flops(), m.state_composition_bytes()
        self._rot_f = 3.0 * m.rotary_dims_per_token          # per rotated token
        fused = m.attention == "mla" and self.config.fused_rotation
        self._rot_b = 0.0 if fused else 2.0 * m.rope_key_bytes_per_token
        self._hybrid = HybridShape.of(m) if m.is_hybrid else None   # hybrid pricing: engine.hybrid_cost

    # ---- Public API -------------------------------------------------------------------------------
    def prefill(self, plan: Plan) -> PrefillCost:
        """Cost of ``plan`` executed alone: RECOMPUTE spans are prefilled (attending over all tokens before
        them), reused spans cost reading their KV, rotated spans add the RoPE correction, and the Plan's
        Correction adds quality recompute, state compositions and re-encodes. Hybrid models:
        :func:`pic.engine.hybrid_cost.prefill_hybrid`."""
        if self._hybrid is not None:
            return prefill_hybrid(self, plan, PrefillCost)
        m, kvb, corr = self.model, self._kvb, plan.correction
        chunks: list[tuple[int, int]] = []
        num_rot = host_t = disk_t = 0
        for s in plan.spans:   # one pass over the spans
            if s.action == RECOMPUTE:
                chunks.append((s.end - s.start, s.start))
                continue
            if s.action == REUSE_ROTATED:
                num_rot += s.end - s.start
            if s.tier == HOST:
                host_t += s.end - s.start
            elif s.tier == DISK:
                disk_t += s.end - s.start
        num_fresh = sum(n for n, _ in chunks)
        cache_read = (plan.num_tokens - num_fresh) * kvb
        r = corr.recompute_tokens
        if r:   # quality-recomputed tokens scattered over the prompt: on average half of it before them
            chunks.append((r, max(plan.num_tokens - r, 0) // 2))
        if not chunks:   # full hit: the last prompt token still runs through the model for its logits
            chunks = [(1, plan.num_tokens - 1)]
        num_new = sum(n for n, _ in chunks)
        lin_f = self._lin_per_token * num_new + self._lm_flops
        lin_b = self._weights(num_new) + num_new * kvb
        att_f = sum(m.attention_flops(n, c) for n, c in chunks)
        att_b = sum(n + c for n, c in chunks) * kvb
        rec_b = 2.0 * len(chunks) * self._state   # scan FLOPs are in linear_flops
        comp = corr.state_compositions
        comp_f, comp_b = (comp * self._comp_f, comp * self._comp_b) if comp else (0.0, 0.0)
        reenc_b = 2.0 * corr.reencode_tokens * kvb
        rot_f = num_rot * self._rot_f
        rot_b = num_rot * self._rot_b
        host_b, disk_b = host_t * kvb, disk_t * kvb
        transfer_s = host_b / self.gpu.host_link_bytes_per_s + disk_b / self.config.disk_bytes_per_s
        extra_s = (self._phase(0.0, rec_b) + self._phase(rot_f, rot_b) + self._phase(comp_f, comp_b)
                   + self._phase(0.0, reenc_b) + transfer_s)
        t_lin, t_att = self._phase(lin_f, lin_b), self._phase(att_f, att_b)
        roof = t_lin + t_att + self.config.step_overhead_s
        if self.profile is None:
            main_s = roof
        elif self.profile.extend is not None and not r:
            main_s = self.profile.plan_seconds(exec_sequences(plan))
        else:
            main_s = self.profile.prefill_seconds(num_new, _equivalent_cached(chunks))
        time_s = main_s + extra_s
        # attention layers = everything but the LM head's share of the linear phase and the overhead
        lm = (self._lm_flops / lin_f) if lin_f / self._peak >= lin_b / self._bw else (self._lm_bytes / lin_b)
        attn_s = (t_lin * (1.0 - lm) + t_att) * (main_s / roof) + self._phase(rot_f, rot_b)
        return PrefillCost(flops=lin_f + att_f + rot_f + comp_f,
                           hbm_bytes=lin_b + att_b + rec_b + rot_b + comp_b + reenc_b,
                           time_s=time_s, joules=time_s * self._watts(num_new), cache_read_bytes=cache_read,
                           rotation_flops=rot_f, rotation_bytes=rot_b, transfer_bytes=host_b + disk_b,
                           attn_layer_s=attn_s, attn_tokens=num_new)

    def prefill_one_chunk(self, plan: Plan, num_new: int, start: int) -> PrefillCost:
        """:meth:`prefill` of a ``plan`` whose spans are on HBM, none rotated, without a correction, and
        prefill one RECOMPUTE span of ``num_new`` tokens at ``start`` (``num_new == 0``: a full hit), all the
        rest reused in place: the same operations on the same values as :meth:`prefill` (so the same floats;
        the terms it adds for rotation, corrections and tiers are zeros there), without walking the spans.
        Hybrid models and calibration profiles take :meth:`prefill`."""
        if self._hybrid is not None or self.profile is not None:
            return self.prefill(plan)
        flops, hbm_bytes, time_s, cache_read, attn_s, num_new = self._one_chunk_terms(plan.num_tokens, num_new, start)
        return PrefillCost(flops=flops, hbm_bytes=hbm_bytes, time_s=time_s,
                           joules=time_s * self.gpu.busy_watts, cache_read_bytes=cache_read, rotation_flops=0.0,
                           rotation_bytes=0.0, transfer_bytes=0.0, attn_layer_s=attn_s, attn_tokens=num_new)

    @property
    def one_chunk_terms(self) -> Any:
        """``(num_tokens, num_new, start) -> (flops, hbm_bytes, time_s, cache_read_bytes, attn_layer_s,
        attn_tokens)``: the values :meth:`prefill_one_chunk` puts in its PrefillCost (its other fields are
        zeros there), as a tuple; None where it takes :meth:`prefill` (hybrid models, calibration profiles).
        NOTE (speed): for the serving model, which prices one or two such plans per request (a frozen
        dataclass of 12 fields costs ~1.5 us to build)."""
        if self._hybrid is not None or self.profile is not None:
            return None
        return one_chunk_terms_fn(self)     # (_one_chunk_terms as a closure: the same values)

    def prefill_step_fn(self) -> Any:
        """:meth:`prefill_step` as a closure over this model's constants (:mod:`engine.cost_fns`: the same
        values; NOTE (speed): for the serving model's replicas, which price every prefill chunk twice)."""
        return prefill_step_fn(self)

    def _one_chunk_terms(self, num_tokens: int, num_new: int, start: int) -> tuple:
        kvb, peak, bw = self._kvb, self._peak, self._bw
        cache_read = (num_tokens - num_new) * kvb
        if not num_new:   # full hit: the last prompt token still runs through the model for its logits
            num_new, start = 1, num_tokens - 1
        lin_f = self._lin_per_token * num_new + self._lm_flops
        w = self._w_memo.get(num_new)
        lin_b = (self._weights(num_new) if w is None else w) + num_new * kvb
        att_f = self._attn_memo.get((num_new, start))
        if att_f is None:
            att_f = self._attn_remember(num_new, start)
        att_b = (num_new + start) * kvb
        rec_b = 2.0 * 1 * self._state
        extra_s = max(0.0 / peak, rec_b / bw)
        t_lin, t_att = max(lin_f / peak, lin_b / bw), max(att_f / peak, att_b / bw)
        roof = t_lin + t_att + self.config.step_overhead_s
        time_s = roof + extra_s
        lm = (self._lm_flops / lin_f) if lin_f / peak >= lin_b / bw else (self._lm_bytes / lin_b)
        attn_s = (t_lin * (1.0 - lm) + t_att) * (roof / roof)
        return lin_f + att_f, lin_b + att_b + rec_b, time_s, cache_read, attn_s, num_new

    def step_time(self, prefill_chunks: Sequence[tuple[int, int]], num_decode: int,
                  decode_context_tokens: int) -> float:
        """Seconds of one continuous-batching iteration: prefill chunks ``(new_tokens, tokens_before)``
        plus ``num_decode`` sequences generating one token over ``decode_context_tokens`` total context."""
        chunks = [(int(n), int(c)) for n, c in prefill_chunks if n > 0]
        if not chunks:
            fixed, per = self.decode_step_coeffs(num_decode)
            return fixed + per * decode_context_tokens
        kvb = self._kvb
        if self.profile is not None:
            num_new = sum(n for n, _ in chunks)
            fixed, per = self.profile.decode_coeffs(num_decode)
            dec = fixed + per * decode_context_tokens if num_decode > 0 else 0.0
            return self.profile.prefill_seconds(num_new, _equivalent_cached(chunks)) + dec
        num_tokens = sum(n for n, _ in chunks) + num_decode
        lin_f = self._lin_per_token * num_tokens + self._lm_flops * (len(chunks) + num_decode)
        lin_b = self._weights(num_tokens) + num_tokens * kvb
        att_f = sum(self._attn(n, c) for n, c in chunks) + decode_context_tokens * self._dec_attn
        att_b = sum(n + c for n, c in chunks) * kvb + decode_context_tokens * self._kv_read
        rec_b = 2.0 * (len(chunks) + num_decode) * self._state
        return (self._phase(lin_f, lin_b) + self._phase(att_f, att_b) + self._phase(0.0, rec_b)
                + self.config.step_overhead_s)

    def prefill_step(self, num_new: int, num_cached: int, num_decode: int,
                     decode_context_tokens: int) -> tuple[float, float]:
        """``(step_s, share_s)`` of one iteration holding one prefill chunk of ``num_new`` tokens over
        ``num_cached`` and ``num_decode`` decoding sequences: ``step_s == step_time(((num_new, num_cached),),
        num_decode, decode_context_tokens)`` exactly, and ``share_s`` is the prefill chunk's part of it.

        Batch-step pricing (docs/cost-model.md): what the step's tokens share — the weights (and the MoE
        experts touched) streamed once, the per-token matmuls, the fixed overhead — is split by token count;
        the attention phase by each side's own attention cost (the chunk over its context vs the decodes over
        theirs); recurrent-state traffic per sequence. A calibration profile's measured step is split by
        token count."""
        if num_new <= 0 or self.profile is not None:
            step = self.step_time(((num_new, num_cached),), num_decode, decode_context_tokens)
            return (step, 0.0) if num_new <= 0 else (step, step * (num_new / (num_new + num_decode)))
        # NOTE (speed): step_time's terms for one chunk, inlined (the same operations in the same order, so
        # the same floats), each computed once for the step and the share (called per prefill chunk);
        # _phase inlined too, ``max(x, y)`` as ``y if y > x else x`` (what max returns for two floats), and
        # the terms of the decode batch size alone remembered per size (_step_nd)
        kvb, dctx, peak, bw = self._kvb, decode_context_tokens, self._peak, self._bw
        n, c = int(num_new), int(num_cached)
        num_tokens = n + num_decode
        nd_terms = self._step_nd.get(num_decode)
        if nd_terms is None:
            nd_terms = self._step_nd[num_decode] = (self._lm_flops * (1 + num_decode),
                                                    max(0.0 / peak, 2.0 * (1 + num_decode) * self._state / bw))
        lm_f, t_rec = nd_terms
        lin_f = self._lin_per_token * num_tokens + lm_f
        w = self._w_memo.get(num_tokens)
        if w is None:
            w = self._weights(num_tokens)
        lin_b = w + num_tokens * kvb
        pre_f = self._attn_memo.get((n, c))
        if pre_f is None:
            pre_f = self._attn_remember(n, c)
        x, y = lin_f / peak, lin_b / bw
        t_lin = y if y > x else x
        dec_f = dctx * self._dec_attn
        x, y = (pre_f + dec_f) / peak, ((n + c) * kvb + dctx * self._kv_read) / bw
        overhead = self.config.step_overhead_s
        step = t_lin + (y if y > x else x) + t_rec + overhead
        tok = num_new / (num_new + num_decode)
        if not num_decode:
            return step, step * tok
        pre_b = (num_new + num_cached) * kvb
        dec_b = dctx * kvb
        x, y = (pre_f + dec_f) / peak, (pre_b + dec_b) / bw
        t_att = y if y > x else x
        x, y = pre_f / peak, pre_b / bw
        a_pre = y if y > x else x
        x, y = dec_f / peak, dec_b / bw
        a_dec = y if y > x else x
        att_share = a_pre / (a_pre + a_dec) if a_pre + a_dec > 0 else tok
        share = ((t_lin + overhead) * tok + t_att * att_share + t_rec / (1 + num_decode))
        return step, share

    def decode_step_coeffs(self, num_decode: int) -> tuple[float, float]:
        """``(fixed_s, per_context_token_s)``: ``step_time([], num_decode, C) == fixed_s + per * C`` exactly."""
        if num_decode <= 0:
            return 0.0, 0.0
        hit = self._decode_memo.get(num_decode)
        if hit is not None:
            return hit
        if self.profile is not None:
            out = self.profile.decode_coeffs(num_decode)
        else:
            lin_f = (self._lin_per_token + self._lm_flops) * num_decode
            lin_b = self._weights(num_decode) + num_decode * self._kvb
            fixed = (self._phase(lin_f, lin_b) + self._phase(0.0, 2.0 * num_decode * self._state)
                     + self.config.step_overhead_s)
            out = (fixed, max(self._dec_attn / self._peak, self._kv_read / self._bw))
        if len(self._decode_memo) < 65536:
            self._decode_memo[num_decode] = out
        return out

    def with_kv_read_bytes(self, kv_read_bytes: float) -> CostModel:
        """This cost model with attention reading ``kv_read_bytes`` per cached decode-context token
        (compressed KV: the ``rdr`` charge); prefill stays dense (new tokens are encoded after it)."""
        return CostModel(self.model, self.gpu, self.config, self.profile, kv_read_bytes)

    def decode_hbm_bytes(self, num_decode: int, context_tokens: int) -> float:
        """HBM bytes of one decode step of ``num_decode`` sequences over ``context_tokens`` cached tokens:
        weights (MoE experts touched by the batch), the new tokens' KV written, every cached token's
        KV read (``kv_read_bytes`` each) and recurrent state read + written. Per generated token:
        divide by ``num_decode``."""
        if num_decode <= 0:
            return 0.0
        return (self._weights(num_decode) + num_decode * self._kvb + context_tokens * self._kv_read
                + 2.0 * num_decode * self._state)

    @property
    def busy_watts(self) -> float:
        return self.profile.watts_busy if self.profile is not None else self.gpu.busy_watts

    @property
    def idle_watts(self) -> float:
        return self.profile.watts_idle if self.profile is not None else self.gpu.idle_watts

    def energy(self, busy_s: float, idle_s: float) -> float:
        """Joules: busy power x busy seconds + idle power x idle seconds."""
        return self.busy_watts * busy_s + self.idle_watts * idle_s

    def to_dict(self) -> dict[str, Any]:
        """Resolved cost setup for config.json."""
        return {"model": self.model.to_dict(), "gpu": self.gpu.to_dict(), "config": asdict(self.config),
                "kv_read_bytes_per_token": self._kv_read,
                "profile": None if self.profile is None else self.profile.source,
                "busy_watts": self.busy_watts, "idle_watts": self.idle_watts}

    # ---- Internal helpers -------------------------------------------------------------------------
    def _attn_remember(self, num_new: int, num_cached: int) -> float:
        """``self._attn(num_new, num_cached)``, remembered in ``_attn_memo`` (bounded: cleared when full)."""
        memo = self._attn_memo
        if len(memo) >= 1 << 15:        # NOTE (memory): bounded (~170 B an entry)
            memo.clear()
        f = memo[(num_new, num_cached)] = self._attn(num_new, num_cached)
        return f

    def _weights(self, num_tokens: int) -> float:
        """``ModelSpec.weight_bytes_read`` with the per-model parts precomputed (remembered per token count
        in ``_w_memo``, bounded)."""
        if num_tokens <= 1:
            return self._w_one
        m = self.model
        if not m.num_experts:
            return self._w_dense
        if num_tokens >= self._w_all[0]:   # every expert touched: the same float for every larger count
            return self._w_all[1]
        touched = m.num_experts * (1.0 - (1.0 - m.num_experts_active / m.num_experts) ** num_tokens)
        w = self._w_dense + touched * self._w_expert
        if len(self._w_memo) < 65536:
            self._w_memo[num_tokens] = w
        return w

    def _all_experts(self) -> tuple[float, float]:
        """``(n0, w)``: from ``n0`` tokens on, ``1.0 - (1.0 - active / experts) ** n`` rounds to 1.0, so
        :meth:`_weights` is ``w`` for every ``n >= n0`` (a power of a base in (0, 1) only decreases with
        ``n``; tests/engine/test_cost.py checks the values against the formula); ``(inf, 0.0)`` for a
        dense model. Found by doubling then bisection over the same expression."""
        m = self.model
        if not m.num_experts or m.num_experts_active >= m.num_experts:
            return math.inf, 0.0
        base = 1.0 - m.num_experts_active / m.num_experts

        def full(n: int) -> bool:
            return (1.0 - base ** n) == 1.0

        hi = 2
        while not full(hi):
            hi *= 2
            if hi > 1 << 40:
                return math.inf, 0.0
        lo = hi // 2    # full(lo) False (or lo == 1)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if full(mid):
                hi = mid
            else:
                lo = mid
        touched = m.num_experts * (1.0 - base ** hi)
        return hi, self._w_dense + touched * self._w_expert

    def _watts(self, num_new: int) -> float:
        """Board power of a forward of ``num_new`` tokens: the profile's power by size, else busy_watts."""
        return self.profile.watts_for(num_new) if self.profile is not None else self.gpu.busy_watts

    def _phase(self, flops: float, nbytes: float) -> float:
        return max(flops / self._peak, nbytes / self._bw)


def exec_sequences(plan: Plan) -> list[tuple[int, int, int]]:
    """The attention sequences of ``plan`` run as one forward, as the executor lays them out
    (pic/kernels/executor/layout.py): one per run of consecutive RECOMPUTE tokens, as (new tokens, plain keys
    before them, rotated keys before them); recomputed and δ = 0 reused keys are plain, REUSE_ROTATED keys
    rotated. The last prompt token always runs (its logits are the first output token)."""
    last = plan.num_tokens - 1
    seqs: list[tuple[int, int, int]] = []
    rot = run = 0   # rotated tokens before the current run; length of the current run
    for s in plan.spans:
        a, b = s.start, s.end
        if s.action == RECOMPUTE:
            run += b - a
            continue
        if b > last >= a:   # the last token is taken out of a reused span
            b = last
        if b > a:
            if run:
                seqs.append((run, a - run - rot, rot))
                run = 0
            if s.action == REUSE_ROTATED:
                rot += b - a
        if s.end > last >= s.start:
            run += 1
    if run:
        seqs.append((run, plan.num_tokens - run - rot, rot))
    return seqs


def _equivalent_cached(chunks: Sequence[tuple[int, int]]) -> float:
    """Cached length c* such that one forward of sum(n) new tokens over c* has the same attention pairs."""
    num_new = sum(n for n, _ in chunks)
    pairs = sum(n * c + n * (n + 1) / 2 for n, c in chunks)
    return max((pairs - num_new * (num_new + 1) / 2) / num_new, 0.0)
