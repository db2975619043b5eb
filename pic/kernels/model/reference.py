"""Float64 torch reference of a full prefill: non-absorbed MLA (k_nope = c W_UK^T, v = c W_UV^T per head),
dense causal softmax, RoPE from the float64 reference, per-expert MoE loop. Written for clarity."""

from __future__ import annotations

import torch

from pic.kernels.model.spec import ExecSpec
from pic.kernels.rope import rope_reference


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _mlp(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    g, u = (x @ gate_up.T).chunk(2, dim=-1)
    return (torch.nn.functional.silu(g) * u) @ down.T


def prefill_reference(spec: ExecSpec, weights: dict, token_ids: torch.Tensor,
                      dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    """Full prefill of ``token_ids`` [N] at positions 0..N−1. Returns ``kv`` [L, N, row] (the latent rows a
    cache holds: RMSNorm'd cKV | RoPE'd k_pe), ``hidden`` [h] (final norm, last token), ``logits`` [V]."""
    W = {"layers": [{k: v.to(dtype).cpu() for k, v in layer.items()} for layer in weights["layers"]],
         **{k: weights[k].to(dtype).cpu() for k in ("embed", "norm", "lm_head")}}
    ids = token_ids.cpu().long()
    N, H, nope, r, eps = ids.shape[0], spec.num_heads, spec.nope_dim, spec.kv_lora_rank, spec.rms_eps
    pos = torch.arange(N)
    inv = spec.rope.inv_freq()
    ks = spec.rope.k_scale()
    h = W["embed"][ids]
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    kv_rows = []
    for i, w in enumerate(W["layers"]):
        x = _rms(h, w["in_norm"], eps)
        q = (_rms(x @ w["q_a"].T, w["q_a_norm"], eps) @ w["q_b"].T) if spec.q_lora_rank else x @ w["q"].T
        q = q.view(N, H, nope + spec.rope_dim)
        q_nope = q[..., :nope]
        q_pe = rope_reference(q[..., nope:], pos[:, None], inv, spec.rope.layout, ks, dtype)
        kv = x @ w["kv_a"].T
        c = _rms(kv[:, :r], w["kv_a_norm"], eps)
        k_pe = rope_reference(kv[:, r:], pos, inv, spec.rope.layout, ks, dtype)
        kv_rows.append(torch.cat([c, k_pe], dim=1))
        k_nope = torch.einsum("nc,hdc->nhd", c, w["w_uk"])
        v = torch.einsum("nc,hdc->nhd", c, w["w_uv"])
        s = (torch.einsum("thd,nhd->htn", q_nope, k_nope) + torch.einsum("thd,nd->htn", q_pe, k_pe)) * spec.sm_scale
        p = s.masked_fill(~causal, float("-inf")).softmax(-1)
        o = torch.einsum("htn,nhd->thd", p, v).reshape(N, H * spec.v_dim)
        h = h + o @ w["o"].T
        x = _rms(h, w["post_norm"], eps)
        if spec.is_moe(i):
            scores = (x @ w["router"].T).softmax(-1)
            tw, ti = torch.topk(scores, spec.top_k, dim=-1)
            if spec.top_k > 1 and spec.norm_topk_prob:
                tw = tw / tw.sum(-1, keepdim=True)
            tw = tw * spec.routed_scaling_factor
            y = torch.zeros_like(x)
            for t in range(N):
                for j in range(spec.top_k):
                    e = int(ti[t, j])
                    y[t] += tw[t, j] * _mlp(x[t:t + 1], w["e_gate_up"][e], w["e_down"][e])[0]
            if spec.num_shared_experts:
                y = y + _mlp(x, w["s_gate_up"], w["s_down"])
        else:
            y = _mlp(x, w["gate_up"], w["down"])
        h = h + y
    hs = _rms(h[-1], W["norm"], eps)
    return {"kv": torch.stack(kv_rows), "hidden": hs, "logits": hs @ W["lm_head"].T}
