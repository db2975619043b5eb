"""DeepSeek-V2 decoder-layer pieces in torch, with attention through the project's absorbed-MLA kernels.

Attention (absorbed form, per new token t at absolute position p_t):

    q = x W_q  -> q_nope [H, nope], q_pe [H, rope] (RoPE at p_t);   [c | k_pe] = x W_kv_a,  c = RMSNorm(c),
    k_pe = RoPE(k_pe, p_t);  the row [c | k_pe] is written to the paged latent cache,
    q̃_h = q_nope,h W_UK,h  (latent space, r dims);  o_lat = mla_extend(q̃, q_pe, cache, ...)  (k_r rotated
    by each page's δ on load),  o_h = o_lat,h W_UV,h^T,  out = [o_1 … o_H] W_o.

MoE: softmax router, top-k experts (greedy), experts run as a grouped GEMM over tokens sorted by expert
(``torch._grouped_mm``; a per-expert loop where that is unavailable), plus the always-on shared experts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pic.kernels.mla_decode import mla_decode
from pic.kernels.mla_extend import mla_extend
from pic.kernels.model.spec import ExecSpec
from pic.kernels.rope import rope


@dataclass
class Batch:
    """One forward over the new tokens of B varlen sequences (all tensors on the model's device).

    ``token_ids`` [T] int64, ``positions`` [T] int32 absolute positions, ``dst_rows`` [T] int64 flat cache
    row of each new token (``cache[l].view(-1, row)``), ``block_table``/``block_delta``/``run_end``
    [B, nb] int32, ``seq_lens`` [B] and ``cu_q`` [B+1] int32 (sequence b's new tokens are the last
    ``cu_q[b+1] − cu_q[b]`` of its ``seq_lens[b]`` rows), ``max_new`` its longest new run, ``logit_rows``
    [k] int64 rows whose logits are returned, ``copies`` optional (src_rows, dst_rows, cos, sin) of cache
    rows copied across all layers with k_r rotated by their δ (cos/sin [n, rope/2] fp32) before layer 0.
    """

    token_ids: torch.Tensor
    positions: torch.Tensor
    dst_rows: torch.Tensor
    block_table: torch.Tensor
    block_delta: torch.Tensor
    run_end: torch.Tensor
    seq_lens: torch.Tensor
    cu_q: torch.Tensor
    max_new: int
    logit_rows: torch.Tensor
    copies: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    decode: bool = False          # one new token per sequence: split-KV decode kernel instead of extend
    max_seq_len: int = 0          # longest seq_lens entry (decode split sizing without a host sync)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm in fp32, result in x's dtype times the weight (Hugging Face DeepSeek-V2 order)."""
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def attention(w: dict, x: torch.Tensor, b: Batch, cache: torch.Tensor, spec: ExecSpec,
              tile: dict | None = None) -> torch.Tensor:
    """MLA attention of the new tokens ``x`` [T, h]; writes their latent rows into ``cache`` [P, page, row]."""
    T, H, nope, r = x.shape[0], spec.num_heads, spec.nope_dim, spec.kv_lora_rank
    qk = nope + spec.rope_dim
    if spec.q_lora_rank:
        q = F.linear(rms_norm(F.linear(x, w["q_a"]), w["q_a_norm"], spec.rms_eps), w["q_b"])
    else:
        q = F.linear(x, w["q"])                                              # [T, H*qk]
    kv = F.linear(x, w["kv_a"])                                              # [T, r + rope]
    c = rms_norm(kv[:, :r], w["kv_a_norm"], spec.rms_eps)
    k_pe = rope(kv[:, r:], b.positions, spec.rope)
    cache.view(-1, spec.row).index_copy_(0, b.dst_rows, torch.cat([c, k_pe], dim=1))
    q2 = q.view(T * H, qk)
    q_pe = rope(q2[:, nope:], b.positions.repeat_interleave(H), spec.rope).view(T, H, spec.rope_dim)
    q_abs = torch.bmm(q.view(T, H, qk)[:, :, :nope].transpose(0, 1), w["w_uk"]).transpose(0, 1)   # [T, H, r]
    if b.decode:
        o_lat = mla_decode(q_abs, q_pe, cache, b.block_table, b.seq_lens, b.block_delta, rope=spec.rope,
                           sm_scale=spec.sm_scale, max_seq_len=b.max_seq_len, run_end=b.run_end)
    else:
        o_lat = mla_extend(q_abs, q_pe, cache, b.block_table, b.seq_lens, b.cu_q, b.block_delta, max_new=b.max_new,
                           rope=spec.rope, sm_scale=spec.sm_scale, run_end=b.run_end, config=tile)  # [T, H, r]
    o = torch.bmm(o_lat.transpose(0, 1), w["w_uv"].transpose(1, 2))         # [H, T, v]
    return F.linear(o.transpose(0, 1).reshape(T, H * spec.v_dim), w["o"])


def mlp(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """SwiGLU MLP: down(silu(gate x) * up x) with gate/up fused as [2I, h]."""
    g, u = F.linear(x, gate_up).chunk(2, dim=-1)
    return F.linear(F.silu(g) * u, down)


def route(x: torch.Tensor, router: torch.Tensor, spec: ExecSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights [T, k] fp32, expert ids [T, k]) of the greedy softmax top-k router."""
    scores = F.linear(x.float(), router.float()).softmax(dim=-1)
    w, idx = torch.topk(scores, spec.top_k, dim=-1, sorted=False)
    if spec.top_k > 1 and spec.norm_topk_prob:
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return w * spec.routed_scaling_factor, idx


def moe(w: dict, x: torch.Tensor, spec: ExecSpec, grouped: bool = True, touched: list | None = None) -> torch.Tensor:
    """Shared experts + routed top-k experts of ``x`` [T, h] (routed outputs summed in fp32); appends the
    number of distinct experts routed to onto ``touched`` when given (a host sync)."""
    T, E = x.shape[0], spec.num_experts
    weight, idx = route(x, w["router"], spec)
    flat = idx.flatten()
    order = torch.argsort(flat, stable=True)
    tok = order // spec.top_k                                   # token of each sorted assignment
    xs = x.index_select(0, tok)
    # NOTE: searchsorted, not bincount: no host sync, so the forward can be captured in a CUDA graph
    ends = torch.searchsorted(flat.index_select(0, order), torch.arange(E, device=x.device), right=True)
    if touched is not None:
        touched.append(int((torch.diff(ends, prepend=ends[:1] * 0) > 0).sum()))
    if grouped:
        offs = ends.to(torch.int32)
        gu = torch._grouped_mm(xs, w["e_gate_up"].transpose(1, 2), offs=offs)
        g, u = gu.chunk(2, dim=-1)
        y = torch._grouped_mm(F.silu(g) * u, w["e_down"].transpose(1, 2), offs=offs)
    else:
        y = torch.empty_like(xs)
        start = 0
        for e, end in enumerate(ends.tolist()):
            if end > start:
                y[start:end] = mlp(xs[start:end], w["e_gate_up"][e], w["e_down"][e])
            start = end
    out = torch.zeros(T, x.shape[1], dtype=torch.float32, device=x.device)
    out.index_add_(0, tok, y.float() * weight.flatten().index_select(0, order)[:, None])
    if spec.num_shared_experts:
        out += mlp(x, w["s_gate_up"], w["s_down"]).float()
    return out.to(x.dtype)


def copy_rotated(cache: torch.Tensor, copies: tuple, spec: ExecSpec) -> None:
    """Copy cache rows ``src → dst`` in every layer of ``cache`` [L, P, page, row], rotating k_r by δ
    (precomputed cos/sin, fp32 math, one rounding to the cache dtype)."""
    src, dst, cos, sin = copies
    flat = cache.view(cache.shape[0], -1, spec.row)
    rows = flat.index_select(1, src)                            # [L, n, row]
    r = spec.kv_lora_rank
    k = rows[..., r:].float()
    if spec.rope.layout == "interleaved":
        a, bb = k[..., 0::2], k[..., 1::2]
    else:
        a, bb = k.chunk(2, dim=-1)
    ra, rb = a * cos - bb * sin, a * sin + bb * cos
    k_rot = torch.stack([ra, rb], dim=-1).flatten(-2) if spec.rope.layout == "interleaved" else torch.cat([ra, rb], -1)
    flat.index_copy_(1, dst, torch.cat([rows[..., :r], k_rot.to(rows.dtype)], dim=-1))
