"""Standalone δ-rotation of the k_r columns of a paged latent cache (the un-fused comparison).

In place: every logical page whose δ ≠ 0 has its k_r rows read, rotated by R(δ) in fp32 and written
back rounded to the cache dtype (the second rounding the fused path avoids); pages with δ = 0 are
not touched. With ``feed=...`` it instead writes, in fp32, exactly the k_r the fused attention kernels
feed to the q·k_r dot (same helpers: rotate_kr_tile + the bf16 hi/lo split) — the precision probe.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pic.kernels.rope.kernel import RopeConfig, cos_sin, freq_tensors, rope_columns, rotate_kr_tile


@triton.jit
def rotate_kernel(CACHE, BLOCK_TABLE, BLOCK_DELTA, SEQ_LENS, F_HI, F_LO, FEED, k_scale,
                  stride_bt_b, stride_bd_b, stride_f_b, stride_f_n,
                  PAGE: tl.constexpr, D_C: tl.constexpr, D_R: tl.constexpr, BLOCK_N: tl.constexpr,
                  INTERLEAVED: tl.constexpr, PRE_ROPE: tl.constexpr, FEED_MODE: tl.constexpr):
    """One BLOCK_N-row tile of logical page j of sequence b. FEED_MODE: 0 in place, 1 bf16, 2 split, 3 fp32 feed."""
    pid = tl.program_id(0)
    b = tl.program_id(1)
    ROW: tl.constexpr = D_C + D_R
    n0 = pid * BLOCK_N
    seq_len = tl.load(SEQ_LENS + b)
    j = n0 // PAGE
    delta = tl.load(BLOCK_DELTA + b * stride_bd_b + j, mask=n0 < seq_len, other=0)
    active = n0 < seq_len
    if FEED_MODE == 0:
        active = active & (delta != 0)
    if active:
        page = tl.load(BLOCK_TABLE + b * stride_bt_b + j).to(tl.int64)
        offs_j = tl.arange(0, BLOCK_N)
        offs_r = tl.arange(0, D_R)
        offs_n = n0 + offs_j
        mask_n = (offs_n < seq_len)[:, None]
        pair, partner, sign = rope_columns(D_R, INTERLEAVED)
        f_hi = tl.load(F_HI + pair)
        f_lo = tl.load(F_LO + pair)
        ct, st = cos_sin(offs_j[:, None], f_hi[None, :], f_lo[None, :])
        rows = CACHE + (page * PAGE + (offs_n % PAGE))[:, None] * ROW + D_C
        k = tl.load(rows + offs_r[None, :], mask=mask_n, other=0.0)
        k_sw = tl.load(rows + partner[None, :], mask=mask_n, other=0.0)
        base = delta
        if PRE_ROPE:
            base = base + n0
        r = rotate_kr_tile(k.to(tl.float32), k_sw.to(tl.float32), sign, base, ct, st, f_hi, f_lo, k_scale, PRE_ROPE)
        hi = r.to(k.dtype)
        if FEED_MODE == 0:
            tl.debug_barrier()  # every lane has read its partner column before any lane overwrites it
            tl.store(rows + offs_r[None, :], hi, mask=mask_n)
        else:
            fed = hi.to(tl.float32)
            if FEED_MODE == 2:
                fed += (r - fed).to(k.dtype).to(tl.float32)
            if FEED_MODE == 3:
                fed = r
            tl.store(FEED + b * stride_f_b + offs_n[:, None] * stride_f_n + offs_r[None, :], fed, mask=mask_n)


def rotate(cache: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor, block_delta: torch.Tensor,
           *, d_c: int = 512, rope: RopeConfig | None = None, pre_rope: bool = False,
           feed: str | None = None, max_seq_len: int | None = None) -> torch.Tensor:
    """δ-rotate the k_r of a paged cache [P, PAGE, d_c + d_r] per logical page (block_delta [B, max_blocks]).

    feed=None: in place (stored-rotated k_r only; returns ``cache``). feed="bf16" / "split" / "fp32":
    return the fp32 [B, max_seq_len, d_r] k_r that the fused kernels effectively feed to the q·k_r dot:
    k-side rotation rounded to bf16, k-side with the hi + lo split, or the unrounded R(δ)·k_stored that
    the q-side rotation is equivalent to (q rotated by −δ in fp32, fed as hi + lo). Example: ``rotate(cache, bt, lens, delta)``.
    """
    rope = rope or RopeConfig()
    P, PAGE, ROW = cache.shape
    D_R = ROW - d_c
    assert D_R == rope.rope_dim and cache.is_contiguous()
    assert block_table.dtype == block_delta.dtype == seq_lens.dtype == torch.int32
    assert block_delta.shape == block_table.shape and block_table.stride(1) == 1 and block_delta.stride(1) == 1
    if feed is None and pre_rope:
        raise ValueError("rotate: in-place rotation of a pre-RoPE cache makes no sense (it is position-free)")
    mode = {None: 0, "bf16": 1, "split": 2, "fp32": 3}[feed]
    B = seq_lens.shape[0]
    max_len = int(seq_lens.max()) if max_seq_len is None else max_seq_len
    block_n = min(PAGE, 64)
    fed = torch.empty(B, max_len if mode else 1, D_R, dtype=torch.float32, device=cache.device)
    f_hi, f_lo = freq_tensors(rope, str(cache.device))
    rotate_kernel[(triton.cdiv(max_len, block_n), B)](
        cache, block_table, block_delta, seq_lens, f_hi, f_lo, fed, rope.k_scale(),
        block_table.stride(0), block_delta.stride(0), fed.stride(0), fed.stride(1),
        PAGE=PAGE, D_C=d_c, D_R=D_R, BLOCK_N=block_n, INTERLEAVED=rope.layout == "interleaved",
        PRE_ROPE=pre_rope, FEED_MODE=mode, num_warps=4)
    return fed if mode else cache
