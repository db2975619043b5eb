"""Float32/float64 torch reference for absorbed-MLA decode over the paged latent cache (loops allowed)."""

from __future__ import annotations

import torch

from pic.kernels._mla import softmax_scale
from pic.kernels.paged_cache import gather_tokens, rotation_positions
from pic.kernels.rope.kernel import RopeConfig
from pic.kernels.rope.reference import rope_reference


def fed_latents(cache: torch.Tensor, block_table: torch.Tensor, block_delta: torch.Tensor | None, b: int,
                seq_len: int, d_c: int, rope: RopeConfig, pre_rope: bool,
                dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence ``b``'s cKV [seq_len, d_c] and the k_r that should meet q_r: R(pos)·k (× k_scale if
    pre-RoPE; δ-rotations are unscaled), in ``dtype``."""
    rows = gather_tokens(cache, block_table, b, seq_len).to(dtype)
    pos = rotation_positions(block_delta, b, seq_len, cache.shape[1], pre_rope)
    scale = rope.k_scale() if pre_rope else 1.0
    return rows[:, :d_c], rope_reference(rows[:, d_c:], pos, rope.inv_freq(), rope.layout, scale, dtype=dtype)


def mla_decode_reference(
    q_nope: torch.Tensor, q_rope: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor,
    seq_lens: torch.Tensor, block_delta: torch.Tensor | None = None, *, rope: RopeConfig | None = None,
    pre_rope: bool = False, sm_scale: float | None = None, dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """softmax(scale·(q_nope·cKV^T + q_r·k_r_fed^T))·cKV per sequence and head, in ``dtype`` on the CPU."""
    rope = rope or RopeConfig()
    B, H, D_C = q_nope.shape
    scale = softmax_scale(sm_scale)
    cache_c, bt_c = cache.cpu(), block_table.cpu()
    out = torch.empty(B, H, D_C, dtype=dtype)
    for b in range(B):
        ckv, kr = fed_latents(cache_c, bt_c, block_delta, b, int(seq_lens[b]), D_C, rope, pre_rope, dtype)
        s = (q_nope[b].cpu().to(dtype) @ ckv.T + q_rope[b].cpu().to(dtype) @ kr.T) * scale
        out[b] = torch.softmax(s, dim=-1) @ ckv
    return out
