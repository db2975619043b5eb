"""``Model``: embedding, DeepSeek-V2 decoder layers over a paged latent cache, final norm and LM head."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pic.kernels.model.layers import Batch, attention, copy_rotated, mlp, moe, rms_norm
from pic.kernels.model.spec import ExecSpec


class Model:
    """The executed model: ``forward(batch, cache)`` runs the new tokens of ``batch`` through every layer,
    writing their latent rows into ``cache`` [L, P, page, row] and reading cached rows in place.

    ``tile`` overrides the extend kernel's tile config; ``grouped`` runs the MoE experts as one grouped GEMM
    (``torch._grouped_mm``) instead of a per-expert loop (which synchronises with the host once per layer).
    """

    def __init__(self, spec: ExecSpec, weights: dict, tile: dict | None = None, grouped: bool | None = None) -> None:
        self.spec, self.w = spec, weights
        self.device = weights["embed"].device
        self.tile = tile if tile is not None else default_tile(spec.num_heads, self.device)
        self.dtype = weights["embed"].dtype
        self.grouped = _grouped_ok(self.device, self.dtype) if grouped is None else grouped
        self.touched: list[int] | None = None   # set to [] to record distinct routed experts per MoE layer

    def forward(self, b: Batch, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(final-norm hidden [k, h], logits [k, V] fp32) of the rows ``b.logit_rows``."""
        spec = self.spec
        if b.copies is not None:
            copy_rotated(cache, b.copies, spec)
        h = self.w["embed"].index_select(0, b.token_ids)
        for i, w in enumerate(self.w["layers"]):
            h = h + attention(w, rms_norm(h, w["in_norm"], spec.rms_eps), b, cache[i], spec, self.tile)
            x = rms_norm(h, w["post_norm"], spec.rms_eps)
            h = h + (moe(w, x, spec, self.grouped, self.touched) if spec.is_moe(i) else mlp(x, w["gate_up"], w["down"]))
        hs = rms_norm(h.index_select(0, b.logit_rows), self.w["norm"], spec.rms_eps)
        return hs, F.linear(hs, self.w["lm_head"]).float()

    def alloc_cache(self, num_pages: int, page_size: int) -> torch.Tensor:
        """A NaN-filled latent cache [layers, num_pages, page_size, row] on the model's device."""
        return torch.full((self.spec.num_layers, num_pages, page_size, self.spec.row), float("nan"),
                          dtype=self.dtype, device=self.device)


def default_tile(num_heads: int, device: torch.device) -> dict | None:
    """Extend tile for this head count on CUDA: 4 tokens x 16 heads for <= 16 heads (measured on the H200,
    DeepSeek-V2-Lite shapes, 4K new over 4K cached: 271 TFLOP/s against 140 for the kernel's 2 x 32 tile,
    which leaves half of its 64 query rows empty at 16 heads); None = the kernel's default."""
    if device.type == "cuda" and num_heads <= 16:
        return {"BLOCK_T": 4, "BLOCK_HH": 16, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}
    return None


def _grouped_ok(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``torch._grouped_mm`` runs here for ``dtype`` (a tiny probe; CUDA needs sm90+ and bf16)."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    try:
        a = torch.ones(24, 32, dtype=dtype, device=device)
        b = torch.ones(2, 16, 32, dtype=dtype, device=device).transpose(1, 2)
        out = torch._grouped_mm(a, b, offs=torch.tensor([8, 24], dtype=torch.int32, device=device))
        return bool(torch.allclose(out.float(), torch.full_like(out.float(), 32.0)))
    except (RuntimeError, NotImplementedError, TypeError):
        return False
