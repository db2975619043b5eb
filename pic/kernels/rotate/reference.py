"""Float32 torch reference for the standalone paged δ-rotation of k_r."""

from __future__ import annotations

import torch

from pic.kernels.paged_cache import rotation_positions, token_rows
from pic.kernels.rope.kernel import RopeConfig
from pic.kernels.rope.reference import rope_reference


def rotate_reference(cache: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor,
                     block_delta: torch.Tensor, *, d_c: int = 512, rope: RopeConfig | None = None) -> torch.Tensor:
    """A copy of ``cache`` whose k_r rows of pages with δ ≠ 0 are R(δ)·k_r (fp32 math, one rounding)."""
    rope = rope or RopeConfig()
    out = cache.cpu().clone()
    flat = out.view(-1, out.shape[2])
    bt = block_table.cpu()
    for b in range(seq_lens.shape[0]):
        L = int(seq_lens[b])
        pos = rotation_positions(block_delta, b, L, out.shape[1], pre_rope=False)
        n = torch.nonzero(pos != 0).flatten()
        rows = token_rows(bt, b, n, out.shape[1])
        flat[rows, d_c:] = rope_reference(flat[rows, d_c:], pos[n], rope.inv_freq(), rope.layout,
                                          dtype=torch.float32).to(out.dtype)
    return out
