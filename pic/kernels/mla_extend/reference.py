"""Float32/float64 torch reference for absorbed-MLA extend (causal over the paged latent cache)."""

from __future__ import annotations

import torch

from pic.kernels._mla import softmax_scale
from pic.kernels.mla_decode.reference import fed_latents
from pic.kernels.rope.kernel import RopeConfig


def mla_extend_reference(
    q_nope: torch.Tensor, q_rope: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor,
    seq_lens: torch.Tensor, cu_q: torch.Tensor, block_delta: torch.Tensor | None = None, *,
    rope: RopeConfig | None = None, pre_rope: bool = False, sm_scale: float | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Per sequence: new token t (at position L − T + t) attends to cached tokens 0..L − T + t."""
    rope = rope or RopeConfig()
    T, H, D_C = q_nope.shape
    scale = softmax_scale(sm_scale)
    cache_c, bt_c = cache.cpu(), block_table.cpu()
    out = torch.empty(T, H, D_C, dtype=dtype)
    for b in range(seq_lens.shape[0]):
        L, q0, q1 = int(seq_lens[b]), int(cu_q[b]), int(cu_q[b + 1])
        n_new = q1 - q0
        ckv, kr = fed_latents(cache_c, bt_c, block_delta, b, L, D_C, rope, pre_rope, dtype)
        qn, qr = q_nope[q0:q1].cpu().to(dtype), q_rope[q0:q1].cpu().to(dtype)
        s = (torch.einsum("thc,nc->thn", qn, ckv) + torch.einsum("thr,nr->thn", qr, kr)) * scale
        qpos = torch.arange(L - n_new, L)
        s = s.masked_fill(torch.arange(L)[None, None, :] > qpos[:, None, None], float("-inf"))
        out[q0:q1] = torch.einsum("thn,nc->thc", torch.softmax(s, dim=-1), ckv)
    return out
