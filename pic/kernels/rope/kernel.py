"""RoPE in Triton, plus the jit helpers that the MLA kernels use to rotate k_r right after it is loaded.

Angles are computed accurately in fp32 at any position: θ_i is split into hi + lo fp32 parts, the
product p·θ_i is kept as hi + lo (fma), reduced mod 2π with a two-part 2π, and only then fed to cos/sin.
A plain fp32 ``p * θ`` is off by up to ~4e-3 rad at p ≈ 64K, more than one bf16 rounding of k_r.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from pic.kernels.rope.reference import LAYOUTS, rope_inv_freq, yarn_k_scale


@dataclass(frozen=True, slots=True)
class RopeConfig:
    """Rotary embedding of the 64-dim MLA key k_r (DeepSeek defaults: interleaved, YaRN off)."""

    rope_dim: int = field(default=64, metadata={"help": "rotated dims (qk_rope_head_dim)"})
    base: float = field(default=10000.0, metadata={"help": "rope_theta"})
    factor: float = field(default=1.0, metadata={"help": "YaRN scaling factor (1 = no YaRN)"})
    original_max_position: int = field(default=4096, metadata={"help": "YaRN original context"})
    beta_fast: float = field(default=32.0, metadata={"help": "YaRN beta_fast"})
    beta_slow: float = field(default=1.0, metadata={"help": "YaRN beta_slow"})
    mscale: float = field(default=1.0, metadata={"help": "YaRN mscale"})
    mscale_all_dim: float = field(default=1.0, metadata={"help": "YaRN mscale_all_dim"})
    layout: str = field(default="interleaved", metadata={"help": "interleaved (2i,2i+1) or neox (i,i+d/2)"})

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout: expected one of {LAYOUTS}, got {self.layout!r}")
        if self.rope_dim % 2 or self.rope_dim <= 0:
            raise ValueError(f"rope_dim: must be a positive even number, got {self.rope_dim}")

    def inv_freq(self) -> torch.Tensor:
        """float64 [rope_dim // 2] per-pair frequencies."""
        return rope_inv_freq(self.rope_dim, self.base, self.factor, self.original_max_position,
                             self.beta_fast, self.beta_slow)

    def k_scale(self) -> float:
        """Scale carried by a RoPE'd k_r (mscale / mscale_all_dim); δ-rotations must NOT apply it again."""
        return yarn_k_scale(self.factor, self.mscale, self.mscale_all_dim) if self.factor > 1 else 1.0


@functools.lru_cache(maxsize=64)
def freq_tensors(cfg: RopeConfig, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Cached ``split_freq(cfg.inv_freq(), device)`` (no host->device copy inside a CUDA-graph capture)."""
    return split_freq(cfg.inv_freq(), device)


def split_freq(inv_freq: torch.Tensor, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """θ as two fp32 tensors hi + lo (float64-accurate) on ``device``."""
    f64 = inv_freq.to(torch.float64).cpu()
    hi = f64.to(torch.float32)
    lo = (f64 - hi.to(torch.float64)).to(torch.float32)
    return hi.to(device), lo.to(device)


@triton.jit
def cos_sin(pos, f_hi, f_lo):
    """cos/sin of pos·θ for integer ``pos`` (|pos| < 2^24), θ = f_hi + f_lo, to ~1e-6 absolute."""
    p = pos.to(tl.float32)
    a_hi = p * f_hi
    a_lo = tl.fma(p, f_hi, -a_hi) + p * f_lo
    k = tl.floor(a_hi * 0.15915494309189535 + 0.5)
    r = tl.fma(-k, 6.2831854820251465, a_hi)
    r = tl.fma(-k, -1.7484556000744883e-07, r) + a_lo
    return tl.cos(r), tl.sin(r)


@triton.jit
def rotate_pair(x_a, x_b, c, s):
    """(x_a, x_b) rotated by the angle whose cosine/sine are (c, s)."""
    return x_a * c - x_b * s, x_a * s + x_b * c


@triton.jit
def pair_offsets(HALF: tl.constexpr, INTERLEAVED: tl.constexpr):
    """Column offsets of the first and second element of each rotated pair."""
    i = tl.arange(0, HALF)
    if INTERLEAVED:
        return 2 * i, 2 * i + 1
    else:
        return i, i + HALF


@triton.jit
def rope_kernel(X, POS, OUT, F_HI, F_LO, scale, num_rows, stride_x, stride_o,
                HALF: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK_N: tl.constexpr):
    """OUT[n] = scale · R(POS[n]) X[n] for a block of BLOCK_N rows (fp32 math, one rounding on store)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = rows < num_rows
    off_a, off_b = pair_offsets(HALF, INTERLEAVED)
    f_hi = tl.load(F_HI + tl.arange(0, HALF))
    f_lo = tl.load(F_LO + tl.arange(0, HALF))
    pos = tl.load(POS + rows, mask=mask, other=0)
    c, s = cos_sin(pos[:, None], f_hi[None, :], f_lo[None, :])
    xr = X + rows.to(tl.int64)[:, None] * stride_x
    x_a = tl.load(xr + off_a[None, :], mask=mask[:, None], other=0.0).to(tl.float32)
    x_b = tl.load(xr + off_b[None, :], mask=mask[:, None], other=0.0).to(tl.float32)
    y_a, y_b = rotate_pair(x_a, x_b, c, s)
    orow = OUT + rows.to(tl.int64)[:, None] * stride_o
    tl.store(orow + off_a[None, :], (y_a * scale).to(OUT.dtype.element_ty), mask=mask[:, None])
    tl.store(orow + off_b[None, :], (y_b * scale).to(OUT.dtype.element_ty), mask=mask[:, None])


def rope(x: torch.Tensor, positions: torch.Tensor, cfg: RopeConfig | None = None,
         scale: float | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Apply RoPE: ``out[n] = scale · R(positions[n]) x[n]``.

    x: [N, rope_dim] (rows may be strided, last dim contiguous); positions: [N] int32/int64;
    scale defaults to ``cfg.k_scale()``; out (optional) may alias x.
    Example: ``rope(torch.randn(5, 64), torch.arange(5))``.
    """
    cfg = cfg or RopeConfig()
    if x.dim() != 2 or x.shape[1] != cfg.rope_dim or x.stride(1) != 1:
        raise ValueError(f"x: expected [N, {cfg.rope_dim}] with contiguous last dim, got {tuple(x.shape)}")
    if positions.shape != (x.shape[0],):
        raise ValueError(f"positions: expected [{x.shape[0]}], got {tuple(positions.shape)}")
    out = torch.empty_like(x) if out is None else out
    assert out.shape == x.shape and out.stride(1) == 1
    f_hi, f_lo = freq_tensors(cfg, str(x.device))
    n = x.shape[0]
    block = 64
    rope_kernel[(triton.cdiv(n, block),)](
        x, positions.to(torch.int32).contiguous(), out, f_hi, f_lo,
        float(cfg.k_scale() if scale is None else scale), n, x.stride(0), out.stride(0),
        HALF=cfg.rope_dim // 2, INTERLEAVED=cfg.layout == "interleaved", BLOCK_N=block)
    return out


@triton.jit
def rope_columns(D_R: tl.constexpr, INTERLEAVED: tl.constexpr):
    """Per column of a k_r row: its pair index, its partner column and the sign of the sine term."""
    col = tl.arange(0, D_R)
    HALF: tl.constexpr = D_R // 2
    if INTERLEAVED:
        pair = col // 2
        partner = col ^ 1
        first = (col % 2) == 0
    else:
        pair = col % HALF
        partner = (col + HALF) % D_R
        first = col < HALF
    sign = tl.where(first, -1.0, 1.0)
    return pair, partner, sign


@triton.jit
def rotate_kr_tile(k, k_sw, sign, base, ct, st, f_hi, f_lo, k_scale, PRE_ROPE: tl.constexpr):
    """Rotate a loaded k_r tile k [BLOCK_N, D_R] (k_sw: the same rows with each pair swapped) in fp32.

    Column c of pair i: r = k·cos + sign·k_partner·sin, f_hi/f_lo are θ per column. Stored-rotated
    k_r (PRE_ROPE=False): every row by R(base), base = δ, unscaled (the YaRN scale is already in the
    cache). Pre-RoPE k_r: row i by k_scale·R(base + i), using the loop-invariant per-column R(i) table
    (ct, st), so only D_R cos/sin are computed per tile.
    """
    cb, sb = cos_sin(base, f_hi, f_lo)
    if PRE_ROPE:
        c = (cb[None, :] * ct - sb[None, :] * st) * k_scale
        s = (sb[None, :] * ct + cb[None, :] * st) * (sign[None, :] * k_scale)
        r = k * c + k_sw * s
    else:
        r = k * cb[None, :] + k_sw * (sb * sign)[None, :]
    return r


@triton.jit
def dot_rope(acc, q_r, r, SPLIT: tl.constexpr):
    """acc + q_r·r^T for fp32 k_r tile r; SPLIT feeds r as bf16 hi + lo (no second rounding)."""
    hi = r.to(q_r.dtype)
    acc = tl.dot(q_r, tl.trans(hi), acc)
    if SPLIT:
        lo = (r - hi.to(tl.float32)).to(q_r.dtype)
        acc = tl.dot(q_r, tl.trans(lo), acc)
    return acc


@triton.jit
def rotate_q_tile(q, q_sw, sign, delta, f_hi, f_lo):
    """R(−δ)·q_r in fp32 (q_sw: q_r with each pair swapped), so that (R(−δ)q)·k = q·(R(δ)k).

    Used when one δ holds for the whole key tile (stored-rotated k_r, tile inside one page): the
    rotation then touches the BLOCK_H query rows instead of the BLOCK_N key rows, and the k_r tile
    goes from memory to the tensor cores untouched.
    """
    cb, sb = cos_sin(delta, f_hi, f_lo)
    return q * cb[None, :] - q_sw * (sign * sb)[None, :]
