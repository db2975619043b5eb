"""MLA decode (absorbed form) over the paged latent cache, with k_r rotated right after it is loaded.

Each program owns BLOCK_H heads of one sequence and one KV split: it streams tiles of BLOCK_N rows
(512 cKV | 64 k_r), rotates the k_r tile in registers (δ table or pre-RoPE position), computes
s = q_nope·cKV^T + q_r·k_r^T, and accumulates p·cKV with an online softmax; a second kernel merges the
splits with their log-sum-exp. cKV is loaded once per tile and used as both K and V.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from pic.kernels._mla import (
    INTERPRET,
    LAUNCHED,
    check_operands,
    num_sms,
    qk_scale,
    rotation_tables,
    tile_config,
)
from pic.kernels.rope.kernel import (
    RopeConfig,
    cos_sin,
    dot_rope,
    freq_tensors,
    rope_columns,
    rotate_kr_tile,
    rotate_q_tile,
)


@triton.jit
def mla_decode_kernel(
    Q_NOPE, Q_ROPE, CACHE, BLOCK_TABLE, BLOCK_DELTA, RUN_END, SEQ_LENS, F_HI, F_LO, O_PART, LSE_PART,
    qk_scale, k_scale, num_heads, tokens_per_split,
    stride_qn_b, stride_qn_h, stride_qr_b, stride_qr_h, stride_bt_b, stride_bd_b, stride_re_b,
    stride_op_b, stride_op_h, stride_op_s, stride_lse_b, stride_lse_h,
    PAGE: tl.constexpr, D_C: tl.constexpr, D_R: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, INTERLEAVED: tl.constexpr,
    ROTATE: tl.constexpr, PRE_ROPE: tl.constexpr, SPLIT_KR: tl.constexpr, Q_SIDE: tl.constexpr,
):
    """One (head block, KV split, sequence): partial output (normalized) and its log2-sum-exp."""
    pid_h = tl.program_id(0)
    pid_s = tl.program_id(1)
    b = tl.program_id(2)
    ROW: tl.constexpr = D_C + D_R
    seq_len = tl.load(SEQ_LENS + b)
    start = pid_s * tokens_per_split
    end = tl.minimum(start + tokens_per_split, seq_len)

    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < num_heads
    offs_c = tl.arange(0, D_C)
    offs_r = tl.arange(0, D_R)
    offs_j = tl.arange(0, BLOCK_N)
    pair, partner, sign = rope_columns(D_R, INTERLEAVED)
    q_n = tl.load(Q_NOPE + b * stride_qn_b + offs_h[:, None] * stride_qn_h + offs_c[None, :],
                  mask=mask_h[:, None], other=0.0)
    q_r = tl.load(Q_ROPE + b * stride_qr_b + offs_h[:, None] * stride_qr_h + offs_r[None, :],
                  mask=mask_h[:, None], other=0.0)
    q_rf = q_r.to(tl.float32)
    q_sw = tl.load(Q_ROPE + b * stride_qr_b + offs_h[:, None] * stride_qr_h + partner[None, :],
                   mask=mask_h[:, None], other=0.0).to(tl.float32)
    f_hi = tl.load(F_HI + pair)
    f_lo = tl.load(F_LO + pair)
    ct, st = cos_sin(offs_j[:, None], f_hi[None, :], f_lo[None, :])

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, D_C], dtype=tl.float32)
    n0 = start
    while n0 < end:
        # one run of pages with equal δ: rotate q once (q-side), then stream the run's tiles
        if ROTATE and Q_SIDE:
            j0 = n0 // PAGE
            delta = tl.load(BLOCK_DELTA + b * stride_bd_b + j0)
            run_end = tl.minimum(tl.load(RUN_END + b * stride_re_b + j0) * PAGE, end)
            q_rot = rotate_q_tile(q_rf, q_sw, sign, delta, f_hi, f_lo)
            q_hi = q_rot.to(q_r.dtype)
            q_lo = (q_rot - q_hi.to(tl.float32)).to(q_r.dtype)
        else:
            run_end = end
            q_hi = q_r
            q_lo = q_r
        last_j = (run_end - 1) // PAGE
        page = tl.load(BLOCK_TABLE + b * stride_bt_b + n0 // PAGE).to(tl.int64)
        for n1 in range(n0, run_end, BLOCK_N):
            # prefetch the next tile's page so its latency overlaps this tile
            page_nx = tl.load(BLOCK_TABLE + b * stride_bt_b + tl.minimum((n1 + BLOCK_N) // PAGE, last_j)).to(tl.int64)
            offs_n = n1 + offs_j
            mask_n = offs_n < run_end
            rows = CACHE + (page * PAGE + (offs_n % PAGE))[:, None] * ROW
            kv = tl.load(rows + offs_c[None, :], mask=mask_n[:, None], other=0.0)
            k = tl.load(rows + D_C + offs_r[None, :], mask=mask_n[:, None], other=0.0)
            s = tl.dot(q_n, tl.trans(kv))
            if ROTATE and Q_SIDE:
                s = tl.dot(q_hi, tl.trans(k), s)
                if SPLIT_KR:
                    s = tl.dot(q_lo, tl.trans(k), s)
            elif ROTATE:
                k_sw = tl.load(rows + D_C + partner[None, :], mask=mask_n[:, None], other=0.0).to(tl.float32)
                base = tl.load(BLOCK_DELTA + b * stride_bd_b + n1 // PAGE)
                if PRE_ROPE:
                    base = base + n1
                k = rotate_kr_tile(k.to(tl.float32), k_sw, sign, base, ct, st, f_hi, f_lo, k_scale, PRE_ROPE)
                s = dot_rope(s, q_r, k, SPLIT_KR)
            else:
                s = tl.dot(q_r, tl.trans(k), s)
            s = tl.where(mask_n[None, :], s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = tl.dot(p.to(kv.dtype), kv, acc * alpha[:, None])
            m_i = m_new
            page = page_nx
        n0 = run_end

    l_safe = tl.where(l_i > 0, l_i, 1.0)
    lse = tl.where(l_i > 0, m_i + tl.log2(l_safe), float("-inf"))
    o_ptr = O_PART + b * stride_op_b + offs_h[:, None] * stride_op_h + pid_s * stride_op_s + offs_c[None, :]
    tl.store(o_ptr, acc / l_safe[:, None], mask=mask_h[:, None])
    tl.store(LSE_PART + b * stride_lse_b + offs_h * stride_lse_h + pid_s, lse, mask=mask_h)


@triton.jit
def mla_decode_combine_kernel(O_PART, LSE_PART, OUT, num_splits,
                              stride_op_b, stride_op_h, stride_op_s, stride_lse_b, stride_lse_h,
                              stride_o_b, stride_o_h,
                              D_C: tl.constexpr, BLOCK_S: tl.constexpr):
    """out[b, h] = Σ_s softmax(lse)_s · o_part[b, h, s] (log2 domain)."""
    h = tl.program_id(0)
    b = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    mask_s = offs_s < num_splits
    lse = tl.load(LSE_PART + b * stride_lse_b + h * stride_lse_h + offs_s, mask=mask_s, other=float("-inf"))
    w = tl.exp2(lse - tl.max(lse, 0))
    w = w / tl.sum(w, 0)
    offs_c = tl.arange(0, D_C)
    o = tl.load(O_PART + b * stride_op_b + h * stride_op_h + offs_s[:, None] * stride_op_s + offs_c[None, :],
                mask=mask_s[:, None], other=0.0)
    out = tl.sum(o * w[:, None], 0)
    tl.store(OUT + b * stride_o_b + h * stride_o_h + offs_c, out.to(OUT.dtype.element_ty))


def default_config(num_heads: int, max_len: int | None = None, batch: int | None = None) -> dict:
    """Tile sizes and launch options (one config under the interpreter); tuned on the H200.

    16-head tiles (mma.sync, ~96 KB shared memory) fit two programs per SM; 64-head tiles (wgmma,
    ~224 KB) one. ``ctas_per_sm`` feeds the split heuristic.
    """
    if INTERPRET or not torch.cuda.is_available():
        return {"BLOCK_H": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1, "ctas_per_sm": 1}
    if num_heads <= 16 and max_len is not None and max_len <= 8192 and (batch or 0) <= 32:
        return {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3, "ctas_per_sm": 2}
    if num_heads <= 16:
        return {"BLOCK_H": 16, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "ctas_per_sm": 2}
    return {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "ctas_per_sm": 1}


def pick_num_splits(batch: int, max_len: int, num_head_blocks: int, block_n: int, num_sms: int = 132,
                    ctas_per_sm: int = 1) -> int:
    """Splits for one full wave: (head block, split, sequence) programs ≈ SMs × programs per SM.

    Measured on the H200 (benchmarks/probe_decode.py): a second, partial wave or a wave with half the
    SMs' slots empty costs 10-40%; each split keeps at least 4 tiles.
    """
    want = max(1, round(num_sms * ctas_per_sm / (batch * num_head_blocks)))
    return max(1, min(want, math.ceil(max_len / (4 * block_n)), 64))


def mla_decode(
    q_nope: torch.Tensor, q_rope: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor,
    seq_lens: torch.Tensor, block_delta: torch.Tensor | None = None, *, rope: RopeConfig | None = None,
    pre_rope: bool = False, sm_scale: float | None = None, num_splits: int | None = None,
    max_seq_len: int | None = None, split_kr: bool = True, rotate: bool = True,
    config: dict | None = None, out: torch.Tensor | None = None, workspace: tuple | None = None,
    rot_side: str = "auto", run_end: torch.Tensor | None = None,
) -> torch.Tensor:
    """Absorbed-MLA decode attention of one new token per sequence over the paged latent cache.

    q_nope: [B, H, D_C] (q_nope already multiplied by W_UK), q_rope: [B, H, D_R] (RoPE'd at the query
    position, same pair layout as the cache), cache: [P, PAGE, D_C + D_R], block_table / block_delta:
    [B, max_blocks] int32, seq_lens: [B] int32. Returns [B, H, D_C] (multiply by W_UV outside).
    ``pre_rope``: cache holds k_r before RoPE, rotated to n + δ at load; else cache k_r is RoPE'd and
    rotated by δ. ``rot_side``: "q" rotates q_r by −δ per tile (default for stored-rotated k_r), "k"
    rotates the k_r tile (the only choice for pre-RoPE). ``rotate=False`` compiles the rotation out.
    ``run_end``: ``paged_cache.delta_runs(block_delta)``, computed here when not given.
    Example: ``mla_decode(qn, qr, cache, bt, lens, delta)``.
    """
    rope = rope or RopeConfig()
    B, H, D_C = q_nope.shape
    PAGE, D_R = check_operands(q_nope, q_rope, cache, block_table, seq_lens, rope)
    max_len = int(seq_lens.max()) if max_seq_len is None else max_seq_len
    cfg = tile_config(default_config(H, max_len, B), config, PAGE)
    block_delta, run_end, q_side = rotation_tables(block_table, block_delta, run_end, rot_side, pre_rope)
    n_hb = triton.cdiv(H, cfg["BLOCK_H"])
    S = num_splits or pick_num_splits(B, max_len, n_hb, cfg["BLOCK_N"], num_sms(cache.device),
                                      cfg.get("ctas_per_sm", 1))
    per_split = triton.cdiv(triton.cdiv(max_len, S), cfg["BLOCK_N"]) * cfg["BLOCK_N"]
    S = triton.cdiv(max_len, per_split)
    if workspace is None:
        o_part = torch.empty(B, H, S, D_C, dtype=torch.float32, device=cache.device)
        lse = torch.empty(B, H, S, dtype=torch.float32, device=cache.device)
    else:
        o_part, lse = workspace
        assert o_part.shape[2] >= S
    f_hi, f_lo = freq_tensors(rope, str(cache.device))
    LAUNCHED["decode"] = mla_decode_kernel[(n_hb, S, B)](
        q_nope, q_rope, cache, block_table, block_delta, run_end, seq_lens, f_hi, f_lo, o_part, lse,
        qk_scale(sm_scale), rope.k_scale(), H, per_split,
        q_nope.stride(0), q_nope.stride(1), q_rope.stride(0), q_rope.stride(1),
        block_table.stride(0), block_delta.stride(0), run_end.stride(0),
        o_part.stride(0), o_part.stride(1), o_part.stride(2), lse.stride(0), lse.stride(1),
        PAGE=PAGE, D_C=D_C, D_R=D_R, BLOCK_H=cfg["BLOCK_H"], BLOCK_N=cfg["BLOCK_N"],
        INTERLEAVED=rope.layout == "interleaved", ROTATE=rotate, PRE_ROPE=pre_rope, SPLIT_KR=split_kr, Q_SIDE=q_side,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    out = torch.empty(B, H, D_C, dtype=cache.dtype, device=cache.device) if out is None else out
    mla_decode_combine_kernel[(H, B)](
        o_part, lse, out, S, o_part.stride(0), o_part.stride(1), o_part.stride(2),
        lse.stride(0), lse.stride(1), out.stride(0), out.stride(1),
        D_C=D_C, BLOCK_S=max(triton.next_power_of_2(S), 2), num_warps=4)
    return out
