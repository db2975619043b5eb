"""Prefill pricing of hybrid models (attention layers interleaved with Gated DeltaNet / Mamba-2 layers).

Called by :meth:`pic.engine.cost.CostModel.prefill` when the model has recurrent layers. What each layer
kind runs:

* attention layers run the recomputed tokens: RECOMPUTE spans + ``correction.recompute_tokens``, each
  span attending over everything before it (reused KV is read, as for attention-only models);
* recurrent layers: a layer's state after position p depends on every token before p, so without a
  policy-provided start state they run every token from the first point where the plan stops being an
  exact in-place prefix to the end of the prompt (``N - leading_reuse``): reused KV there helps the
  attention layers only. With ``correction.state_loads > 0`` (LinearKV) they start from S_init and run
  just the recomputed tokens, and pay the loads, ``state_compositions`` and the stores of new chunk states.

This is the layer-by-layer reading of the rule (attention layers keep their KV reuse). It is a lower bound
on what an engine without hybrid-aware state initialisation pays: the recurrent layers' inputs for those
tokens come from the layers below them, so a real engine recomputes the whole stack there
(docs/cost-model.md, "Hybrid models").

The linear phase (weights + projections/MLP + scans + LM head) is one roofline phase, as for attention-only
models; its time is split between the layer kinds by their share of its FLOPs (compute-bound) or bytes
(memory-bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pic.engine.plan import DISK, HOST, RECOMPUTE, REUSE_ROTATED, Plan
from pic.engine.specs import hybrid as hy

if TYPE_CHECKING:
    from pic.engine.cost import CostModel, PrefillCost


@dataclass(frozen=True, slots=True)
class HybridShape:
    """Per-model constants (per token unless named otherwise)."""

    attn_flops: float          # attention-layer projections + MLP/MoE
    rec_flops: float           # recurrent-layer projections + MLP/MoE + chunked scans
    attn_dense_bytes: float    # attention layers' weights without routed experts
    rec_dense_bytes: float
    attn_expert_bytes: float   # one routed expert in every MoE layer of the kind
    rec_expert_bytes: float
    lm_bytes: float
    scan_flops: float
    comp_bytes: float          # one composition: operator + zero-start state read
    conv_bytes: float
    probe_flops: float
    probe_bytes: float

    @staticmethod
    def of(m) -> HybridShape:
        e0 = hy.kind_params(m, "attn", 0.0), hy.kind_params(m, "recurrent", 0.0)
        e1 = hy.kind_params(m, "attn", 1.0), hy.kind_params(m, "recurrent", 1.0)
        b = m.dtype_bytes
        return HybridShape(attn_flops=2.0 * hy.kind_params(m, "attn"),
                           rec_flops=2.0 * hy.kind_params(m, "recurrent") + hy.scan_flops_per_token(m),
                           attn_dense_bytes=e0[0] * b, rec_dense_bytes=e0[1] * b,
                           attn_expert_bytes=(e1[0] - e0[0]) * b, rec_expert_bytes=(e1[1] - e0[1]) * b,
                           lm_bytes=m.lm_head_params * b, scan_flops=hy.scan_flops_per_token(m),
                           comp_bytes=hy.composition_bytes(m), conv_bytes=float(hy.conv_state_bytes(m)),
                           probe_flops=hy.probe_flops_per_token(m), probe_bytes=hy.probe_param_bytes(m))


def _experts(m, num_tokens: int) -> float:
    """Routed experts touched per MoE layer by a forward over ``num_tokens`` tokens (uniform routing)."""
    if not m.num_experts or num_tokens <= 0:
        return 0.0 if num_tokens <= 0 else float(m.num_experts_active)
    return m.num_experts * (1.0 - (1.0 - m.num_experts_active / m.num_experts) ** num_tokens)


def prefill_hybrid(cm: CostModel, plan: Plan, result: type[PrefillCost]) -> PrefillCost:
    """``CostModel.prefill`` for a hybrid model (see the module docstring)."""
    m, kvb, corr, hs = cm.model, cm._kvb, plan.correction, cm._hybrid
    n = plan.num_tokens
    chunks: list[tuple[int, int]] = []
    num_rot = host_t = disk_t = 0
    for s in plan.spans:
        if s.action == RECOMPUTE:
            chunks.append((s.end - s.start, s.start))
            continue
        if s.action == REUSE_ROTATED:
            num_rot += s.end - s.start
        if s.tier == HOST:
            host_t += s.end - s.start
        elif s.tier == DISK:
            disk_t += s.end - s.start
    num_fresh = sum(c for c, _ in chunks)
    cache_read = (n - num_fresh) * kvb
    if corr.recompute_tokens:   # scattered over the prompt: on average half of it before them
        chunks.append((corr.recompute_tokens, max(n - corr.recompute_tokens, 0) // 2))
    if not chunks:               # full hit: the last prompt token still runs for its logits
        chunks = [(1, n - 1)]
    t_attn = sum(c for c, _ in chunks)
    if corr.state_loads > 0:
        t_rec, rec_runs = t_attn, len(chunks)
    else:
        t_rec, rec_runs = max(n - plan.leading_reuse, t_attn), 1
    # linear phase: both kinds' weights once, their projections/MLPs/scans, LM head for the last token
    f_attn, f_rec = hs.attn_flops * t_attn, hs.rec_flops * t_rec
    b_attn = hs.attn_dense_bytes + _experts(m, t_attn) * hs.attn_expert_bytes + t_attn * kvb
    b_rec = hs.rec_dense_bytes + _experts(m, t_rec) * hs.rec_expert_bytes
    lin_f, lin_b = f_attn + f_rec + cm._lm_flops, b_attn + b_rec + hs.lm_bytes
    att_f = sum(m.attention_flops(c, p) for c, p in chunks)
    att_b = sum(c + p for c, p in chunks) * kvb
    rec_b = 2.0 * rec_runs * cm._state
    comp = corr.state_compositions
    if corr.state_loads and not comp:
        rec_b += corr.state_loads * cm._state
    comp_f = comp * cm._comp_f
    comp_b = comp * hs.comp_bytes + (hs.conv_bytes if comp else 0.0)
    store_f = corr.state_store_tokens * hs.scan_flops
    probe_f = corr.probe_tokens * hs.probe_flops
    probe_b = hs.probe_bytes if corr.probe_tokens else 0.0
    rot_f, rot_b = num_rot * cm._rot_f, num_rot * cm._rot_b
    reenc_b = 2.0 * corr.reencode_tokens * kvb
    host_b, disk_b = host_t * kvb, disk_t * kvb
    transfer_s = host_b / cm.gpu.host_link_bytes_per_s + disk_b / cm.config.disk_bytes_per_s
    ph = cm._phase
    t_lin, t_att, t_recst = ph(lin_f, lin_b), ph(att_f, att_b), ph(0.0, rec_b)
    t_comp, t_store, t_rot = ph(comp_f, comp_b), ph(store_f, 0.0), ph(rot_f, rot_b)
    extra_s = t_recst + t_comp + t_store + t_rot + ph(probe_f, probe_b) + ph(0.0, reenc_b) + transfer_s
    if cm.profile is not None:   # measured whole-model step for the attention tokens + roofline for the rest
        from pic.engine.cost import _equivalent_cached
        more = max(0.0, ph(f_rec, b_rec) - ph(hs.rec_flops * t_attn, b_rec))
        main_s = cm.profile.prefill_seconds(t_attn, _equivalent_cached(chunks)) + more
    else:
        main_s = t_lin + t_att + cm.config.step_overhead_s
    time_s = main_s + extra_s
    # split: the linear phase by FLOP or byte share (whichever bound it), the rest by kind; a measured
    # (profile) main step is split in the roofline's proportions
    by_flops = lin_f / cm._peak >= lin_b / cm._bw
    share_attn = (f_attn / lin_f) if by_flops else (b_attn / lin_b)
    share_rec = (f_rec / lin_f) if by_flops else (b_rec / lin_b)
    roof = t_lin + t_att + cm.config.step_overhead_s
    scale = main_s / roof if cm.profile is not None else 1.0
    attn_s = (t_lin * share_attn + t_att) * scale + t_rot
    rec_s = t_lin * share_rec * scale + t_recst + t_comp + t_store
    return result(flops=lin_f + att_f + rot_f + comp_f + store_f + probe_f,
                  hbm_bytes=lin_b + att_b + rec_b + rot_b + comp_b + reenc_b + probe_b,
                  time_s=time_s, joules=time_s * cm.busy_watts, cache_read_bytes=cache_read,
                  rotation_flops=rot_f, rotation_bytes=rot_b, transfer_bytes=host_b + disk_b,
                  attn_layer_s=attn_s, recurrent_layer_s=rec_s, attn_tokens=t_attn, recurrent_tokens=t_rec)
