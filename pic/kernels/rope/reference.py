"""Float64/float32 torch reference for rotary position embedding (RoPE) as DeepSeek MLA uses it.

Pairs: ``interleaved`` rotates dims (2i, 2i+1) (DeepSeek-V2/V3); ``neox`` rotates (i, i + d/2).
YaRN only changes each pair's frequency and multiplies cos/sin by an mscale, so angles stay linear
in position and R(p + δ) = R(δ) R(p) exactly.
"""

from __future__ import annotations

import math

import torch

LAYOUTS = ("interleaved", "neox")


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """DeepSeek's ``yarn_get_mscale``: 0.1 * mscale * ln(scale) + 1 (1.0 when scale <= 1)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_inv_freq(
    rope_dim: int = 64,
    base: float = 10000.0,
    factor: float = 1.0,
    original_max_position: int = 4096,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
) -> torch.Tensor:
    """Per-pair angular frequency θ_i (float64, shape [rope_dim // 2]); YaRN when factor > 1."""
    if rope_dim % 2:
        raise ValueError(f"rope_dim: must be even, got {rope_dim}")
    half = rope_dim // 2
    freq = base ** (-torch.arange(0, rope_dim, 2, dtype=torch.float64) / rope_dim)
    if factor <= 1.0:
        return freq

    def corr_dim(rot: float) -> float:
        return rope_dim * math.log(original_max_position / (rot * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(corr_dim(beta_fast)), 0)
    high = min(math.ceil(corr_dim(beta_slow)), rope_dim - 1)
    ramp = (torch.arange(half, dtype=torch.float64) - low) / max(high - low, 1e-3)
    keep = 1.0 - ramp.clamp(0.0, 1.0)  # 1 -> extrapolate (keep θ), 0 -> interpolate (θ / factor)
    return freq / factor * (1 - keep) + freq * keep


def yarn_k_scale(factor: float, mscale: float, mscale_all_dim: float) -> float:
    """Scale YaRN folds into cos/sin (and so into cached k_r): mscale(f, m) / mscale(f, m_all)."""
    return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)


def pair_index(rope_dim: int, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices (first, second) of the rotated pairs for ``layout``."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    i = torch.arange(rope_dim // 2)
    return (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + rope_dim // 2)


def rope_reference(
    x: torch.Tensor,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    layout: str = "interleaved",
    scale: float = 1.0,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """scale * R(position) x for x [..., d] and integer positions broadcastable to x[..., 0]; computed in ``dtype``."""
    a, b = pair_index(x.shape[-1], layout)
    ang = positions.to(torch.float64)[..., None] * inv_freq.to(torch.float64)
    c, s = torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)
    xf = x.to(dtype)
    out = torch.empty_like(xf)
    out[..., a] = (xf[..., a] * c - xf[..., b] * s) * scale
    out[..., b] = (xf[..., a] * s + xf[..., b] * c) * scale
    return out
