"""MLA extend/prefill (absorbed form): new tokens attend over cached spans (k_r rotated on load) and
themselves (causal), all read from the paged latent cache (new tokens are written there first).

A program owns BLOCK_T new tokens × BLOCK_HH heads of one sequence, flattened into BLOCK_T·BLOCK_HH
query rows that share every cKV/k_r tile. Tiles wholly below the causal diagonal skip the mask.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pic.kernels._mla import INTERPRET, LAUNCHED, check_operands, qk_scale, rotation_tables, tile_config
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
def _extend_tile(acc, m_i, l_i, q_hi, q_lo, q_n, q_r, CACHE, BLOCK_TABLE, BLOCK_DELTA, b_bt, b_bd, n0, kv_len, qpos,
                 partner, sign, ct, st, f_hi, f_lo, qk_scale, k_scale,
                 PAGE: tl.constexpr, D_C: tl.constexpr, D_R: tl.constexpr, BLOCK_N: tl.constexpr,
                 INTERLEAVED: tl.constexpr, ROTATE: tl.constexpr, PRE_ROPE: tl.constexpr,
                 SPLIT_KR: tl.constexpr, Q_SIDE: tl.constexpr, CAUSAL: tl.constexpr):
    ROW: tl.constexpr = D_C + D_R
    offs_c = tl.arange(0, D_C)
    offs_r = tl.arange(0, D_R)
    j = n0 // PAGE
    page = tl.load(BLOCK_TABLE + b_bt + j).to(tl.int64)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    mask_n = offs_n < kv_len
    rows = CACHE + (page * PAGE + (offs_n % PAGE))[:, None] * ROW
    kv = tl.load(rows + offs_c[None, :], mask=mask_n[:, None], other=0.0)
    k = tl.load(rows + D_C + offs_r[None, :], mask=mask_n[:, None], other=0.0)
    s = tl.dot(q_n, tl.trans(kv))
    if ROTATE:
        if Q_SIDE:
            s = tl.dot(q_hi, tl.trans(k), s)
            if SPLIT_KR:
                s = tl.dot(q_lo, tl.trans(k), s)
        else:
            k_sw = tl.load(rows + D_C + partner[None, :], mask=mask_n[:, None], other=0.0).to(tl.float32)
            base = tl.load(BLOCK_DELTA + b_bd + j)
            if PRE_ROPE:
                base = base + n0
            k = rotate_kr_tile(k.to(tl.float32), k_sw, sign, base, ct, st, f_hi, f_lo, k_scale, PRE_ROPE)
            s = dot_rope(s, q_r, k, SPLIT_KR)
    else:
        s = tl.dot(q_r, tl.trans(k), s)
    s = s * qk_scale
    if CAUSAL:
        s = tl.where((offs_n[None, :] <= qpos[:, None]) & mask_n[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(kv.dtype), kv, acc * alpha[:, None])
    return acc, m_new, l_i


@triton.jit
def mla_extend_kernel(
    Q_NOPE, Q_ROPE, CACHE, BLOCK_TABLE, BLOCK_DELTA, RUN_END, SEQ_LENS, CU_Q, F_HI, F_LO, OUT,
    qk_scale, k_scale, num_heads, num_t_blocks,
    stride_qn_t, stride_qn_h, stride_qr_t, stride_qr_h, stride_bt_b, stride_bd_b, stride_re_b, stride_o_t,
    stride_o_h,
    PAGE: tl.constexpr, D_C: tl.constexpr, D_R: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_HH: tl.constexpr, BLOCK_N: tl.constexpr, INTERLEAVED: tl.constexpr,
    ROTATE: tl.constexpr, PRE_ROPE: tl.constexpr, SPLIT_KR: tl.constexpr, Q_SIDE: tl.constexpr,
):
    """One (head block, token block, sequence); token blocks are launched heaviest (latest) first."""
    pid_h = tl.program_id(0)
    pid_t = num_t_blocks - 1 - tl.program_id(1)
    b = tl.program_id(2)
    M: tl.constexpr = BLOCK_T * BLOCK_HH
    q_start = tl.load(CU_Q + b)
    num_new = tl.load(CU_Q + b + 1) - q_start
    t0 = pid_t * BLOCK_T
    if t0 < num_new:
        kv_len = tl.load(SEQ_LENS + b)
        r = tl.arange(0, M)
        t = t0 + r // BLOCK_HH
        h = pid_h * BLOCK_HH + r % BLOCK_HH
        mask_r = (t < num_new) & (h < num_heads)
        qpos = kv_len - num_new + t
        offs_c = tl.arange(0, D_C)
        offs_r = tl.arange(0, D_R)
        pair, partner, sign = rope_columns(D_R, INTERLEAVED)
        tok = (q_start + t).to(tl.int64)
        q_n = tl.load(Q_NOPE + tok[:, None] * stride_qn_t + h[:, None] * stride_qn_h + offs_c[None, :],
                      mask=mask_r[:, None], other=0.0)
        q_r = tl.load(Q_ROPE + tok[:, None] * stride_qr_t + h[:, None] * stride_qr_h + offs_r[None, :],
                      mask=mask_r[:, None], other=0.0)
        q_rf = q_r.to(tl.float32)
        q_sw = tl.load(Q_ROPE + tok[:, None] * stride_qr_t + h[:, None] * stride_qr_h + partner[None, :],
                       mask=mask_r[:, None], other=0.0).to(tl.float32)
        f_hi = tl.load(F_HI + pair)
        f_lo = tl.load(F_LO + pair)
        ct, st = cos_sin(tl.arange(0, BLOCK_N)[:, None], f_hi[None, :], f_lo[None, :])
        m_i = tl.full([M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([M], dtype=tl.float32)
        acc = tl.zeros([M, D_C], dtype=tl.float32)
        b_bt = b * stride_bt_b
        b_bd = b * stride_bd_b
        first_q = kv_len - num_new + t0
        last_q = tl.minimum(first_q + BLOCK_T, kv_len)
        full_end = ((first_q + 1) // BLOCK_N) * BLOCK_N
        n0 = first_q * 0
        while n0 < last_q:
            # one run of pages with equal δ: rotate q once (q-side), then stream the run's tiles
            if ROTATE and Q_SIDE:
                delta = tl.load(BLOCK_DELTA + b_bd + n0 // PAGE)
                run_end = tl.minimum(tl.load(RUN_END + b * stride_re_b + n0 // PAGE) * PAGE, last_q)
                q_rot = rotate_q_tile(q_rf, q_sw, sign, delta, f_hi, f_lo)
                q_hi = q_rot.to(q_r.dtype)
                q_lo = (q_rot - q_hi.to(tl.float32)).to(q_r.dtype)
            else:
                run_end = last_q
                q_hi = q_r
                q_lo = q_r
            for n1 in range(n0, tl.minimum(run_end, full_end), BLOCK_N):
                acc, m_i, l_i = _extend_tile(acc, m_i, l_i, q_hi, q_lo, q_n, q_r, CACHE, BLOCK_TABLE, BLOCK_DELTA,
                                             b_bt, b_bd, n1, kv_len, qpos, partner, sign, ct, st, f_hi, f_lo,
                                             qk_scale, k_scale, PAGE, D_C, D_R, BLOCK_N, INTERLEAVED, ROTATE,
                                             PRE_ROPE, SPLIT_KR, Q_SIDE, False)
            for n1 in range(tl.maximum(n0, full_end), run_end, BLOCK_N):
                acc, m_i, l_i = _extend_tile(acc, m_i, l_i, q_hi, q_lo, q_n, q_r, CACHE, BLOCK_TABLE, BLOCK_DELTA,
                                             b_bt, b_bd, n1, kv_len, qpos, partner, sign, ct, st, f_hi, f_lo,
                                             qk_scale, k_scale, PAGE, D_C, D_R, BLOCK_N, INTERLEAVED, ROTATE,
                                             PRE_ROPE, SPLIT_KR, Q_SIDE, True)
            n0 = run_end
        l_safe = tl.where(l_i > 0, l_i, 1.0)
        o_ptr = OUT + tok[:, None] * stride_o_t + h[:, None] * stride_o_h + offs_c[None, :]
        tl.store(o_ptr, (acc / l_safe[:, None]).to(OUT.dtype.element_ty), mask=mask_r[:, None])


def default_config(num_heads: int) -> dict:
    """Tile sizes and launch options (one config under the interpreter)."""
    if INTERPRET or not torch.cuda.is_available():
        return {"BLOCK_T": 2, "BLOCK_HH": 8, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    return {"BLOCK_T": 2, "BLOCK_HH": 32, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}  # tuned on the H200


def mla_extend(
    q_nope: torch.Tensor, q_rope: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor,
    seq_lens: torch.Tensor, cu_q: torch.Tensor, block_delta: torch.Tensor | None = None, *,
    max_new: int | None = None, rope: RopeConfig | None = None, pre_rope: bool = False,
    sm_scale: float | None = None, split_kr: bool = True, rotate: bool = True, config: dict | None = None,
    out: torch.Tensor | None = None, rot_side: str = "auto", run_end: torch.Tensor | None = None,
) -> torch.Tensor:
    """Absorbed-MLA extend: causal attention of each sequence's new tokens over its whole paged cache.

    q_nope: [total_new, H, D_C], q_rope: [total_new, H, D_R] (varlen; sequence b's new tokens are rows
    cu_q[b]:cu_q[b+1] and sit at the last positions of its seq_lens[b] cached tokens, already written
    to the cache), cache: [P, PAGE, D_C + D_R], block_table / block_delta: [B, max_blocks] int32.
    Returns [total_new, H, D_C]. δ / pre_rope / rot_side semantics as in ``mla_decode``.
    Example: ``mla_extend(qn, qr, cache, bt, lens, torch.tensor([0, 8], dtype=torch.int32))``.
    """
    rope = rope or RopeConfig()
    T, H, D_C = q_nope.shape
    B = seq_lens.shape[0]
    PAGE, D_R = check_operands(q_nope, q_rope, cache, block_table, seq_lens, rope)
    assert cu_q.shape == (B + 1,) and cu_q.dtype == torch.int32
    cfg = tile_config(default_config(H), config, PAGE)
    block_delta, run_end, q_side = rotation_tables(block_table, block_delta, run_end, rot_side, pre_rope)
    max_new = int((cu_q[1:] - cu_q[:-1]).max()) if max_new is None else max_new
    n_tb = triton.cdiv(max_new, cfg["BLOCK_T"])
    out = torch.empty(T, H, D_C, dtype=cache.dtype, device=cache.device) if out is None else out
    f_hi, f_lo = freq_tensors(rope, str(cache.device))
    LAUNCHED["extend"] = mla_extend_kernel[(triton.cdiv(H, cfg["BLOCK_HH"]), n_tb, B)](
        q_nope, q_rope, cache, block_table, block_delta, run_end, seq_lens, cu_q, f_hi, f_lo, out,
        qk_scale(sm_scale), rope.k_scale(), H, n_tb,
        q_nope.stride(0), q_nope.stride(1), q_rope.stride(0), q_rope.stride(1),
        block_table.stride(0), block_delta.stride(0), run_end.stride(0), out.stride(0), out.stride(1),
        PAGE=PAGE, D_C=D_C, D_R=D_R, BLOCK_T=cfg["BLOCK_T"], BLOCK_HH=cfg["BLOCK_HH"], BLOCK_N=cfg["BLOCK_N"],
        INTERLEAVED=rope.layout == "interleaved", ROTATE=rotate, PRE_ROPE=pre_rope, SPLIT_KR=split_kr, Q_SIDE=q_side,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return out
