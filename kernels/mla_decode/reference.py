"""Float32/float64 torch reference for absorbed-MLA decode over the paged latent cache (loops allowed)."""

from __future__ import annotations

import math

import torch

from kernels.paged_cache import gather_tokens, rotation_positions
from kernels.rope.kernel import RopeConfig
from kernels.rope.reference import rope_reference


def fed_k_rope(kr: torch.Tensor, pos: torch.Tensor, rope: RopeConfig, pre_rope: bool,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The k_r that should meet q_r: R(pos)·k (× k_scale if pre-RoPE; δ-rotations are unscaled)."""
    scale = rope.k_scale() if pre_rope else 1.0
    return rope_reference(kr, pos, rope.inv_freq(), rope.layout, scale, dtype=dtype)


def mla_decode_reference(
    q_nope: torch.Tensor, q_rope: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor,
    seq_lens: torch.Tensor, block_delta: torch.Tensor | None = None, *, rope: RopeConfig | None = None,
    pre_rope: bool = False, sm_scale: float | None = None, dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """softmax(scale·(q_nope·cKV^T + q_r·k_r_fed^T))·cKV per sequence and head, in ``dtype`` on the CPU."""
    rope = rope or RopeConfig()
    B, H, D_C = q_nope.shape
    page = cache.shape[1]
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(192)
    cache_c, bt_c = cache.cpu(), block_table.cpu()
    out = torch.empty(B, H, D_C, dtype=dtype)
    for b in range(B):
        L = int(seq_lens[b])
        rows = gather_tokens(cache_c, bt_c, b, L).to(dtype)
        ckv, kr = rows[:, :D_C], rows[:, D_C:]
        pos = rotation_positions(block_delta, b, L, page, pre_rope)
        kr = fed_k_rope(kr, pos, rope, pre_rope, dtype)
        s = (q_nope[b].cpu().to(dtype) @ ckv.T + q_rope[b].cpu().to(dtype) @ kr.T) * scale
        out[b] = torch.softmax(s, dim=-1) @ ckv
    return out
