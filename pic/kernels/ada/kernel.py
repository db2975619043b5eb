"""ADA decode attention (GQA) over the paged ADA cache, and the dense decode of the same structure.

Grid (KV head, KV split, sequence). A program loads its GROUP query heads (padded to BLOCK_G rows),
rotates them once (q_x = q·Π[:D/2]^T, q_y = q·Π[D/2:]^T, the softmax scale folded in), then streams
BLOCK_N-token tiles of its split. Per tile it reads the page header (tier), the radii and the packed
codes, unpacks them in registers — (ρ̂ cos θ̂, ρ̂ sin θ̂) from two small L1-resident tables — and gets
the logits as s = r̃ · (q_x·(ρ̂ cos θ̂)^T + q_y·(ρ̂ sin θ̂)^T): no dense key ever reaches HBM. Pages of
any tier mix in one launch (per-page table row, no branch). Values stay in the cache dtype (bf16) and
feed p·V; an online softmax in base 2 gives each split a normalized partial and its log2-sum-exp,
merged by the MLA combine kernel. ``DENSE=True`` is the same kernel over dense pages (bf16 keys).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from pic.kernels._mla import INTERPRET, LOG2E, num_sms
from pic.kernels.ada.cache import DENSE, HEADER, UNIT, AdaCache, page_layout
from pic.kernels.mla_decode.kernel import mla_decode_combine_kernel, pick_num_splits

HDR = tl.constexpr(HEADER)   # page header bytes, as a kernel constant
LAUNCHED: dict = {}   # last compiled kernel per launcher: registers, spills, shared memory


@triton.jit
def ada_decode_kernel(
    Q, ROT_X, ROT_Y, A_I32, A_F32, A_V, BLOCK_TABLE, SEQ_LENS, TAB, CS_LUT, RHO_LUT, O_PART, LSE_PART, LOGITS,
    qk_scale, tokens_per_split, dense_v_off,
    stride_q_b, stride_q_h, stride_bt_b, stride_bt_h, stride_op_b, stride_op_h, stride_op_s,
    stride_lse_b, stride_lse_h, stride_lg_b, stride_lg_h,
    PAGE: tl.constexpr, D: tl.constexpr, GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
    UNIT_I32: tl.constexpr, UNIT_V: tl.constexpr, ESIZE: tl.constexpr, DENSE: tl.constexpr,
    DOT_F16: tl.constexpr, STORE_LOGITS: tl.constexpr,
):
    """One (KV head, split, sequence): normalized partial output [GROUP, D] and its log2-sum-exp."""
    h = tl.program_id(0)
    pid_s = tl.program_id(1)
    b = tl.program_id(2)
    HALF: tl.constexpr = D // 2
    TAB_W: tl.constexpr = 8
    seq_len = tl.load(SEQ_LENS + b)
    start = pid_s * tokens_per_split
    end = tl.minimum(start + tokens_per_split, seq_len)
    offs_g = tl.arange(0, BLOCK_G)
    mask_g = offs_g < GROUP
    heads = h * GROUP + offs_g
    offs_d = tl.arange(0, D)
    offs_p = tl.arange(0, HALF)
    offs_j = tl.arange(0, BLOCK_N)
    q = tl.load(Q + b * stride_q_b + heads[:, None] * stride_q_h + offs_d[None, :], mask=mask_g[:, None], other=0.0)
    if DENSE:
        q_s = q
    else:
        qf = q.to(tl.float32) * qk_scale
        q_x = tl.dot(qf, tl.load(ROT_X + offs_d[:, None] * HALF + offs_p[None, :]), input_precision="ieee")
        q_y = tl.dot(qf, tl.load(ROT_Y + offs_d[:, None] * HALF + offs_p[None, :]), input_precision="ieee")
        if DOT_F16:
            q_x = q_x.to(tl.float16)
            q_y = q_y.to(tl.float16)

    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, D], dtype=tl.float32)
    bt_row = BLOCK_TABLE + b * stride_bt_b + h * stride_bt_h
    last_j = (tl.maximum(end, 1) - 1) // PAGE
    unit = tl.load(bt_row + start // PAGE).to(tl.int64)
    bits = 0
    if not DENSE:
        bits = tl.load(A_I32 + unit * UNIT_I32)
    for n1 in range(start, end, BLOCK_N):
        # prefetch the next tile's page (and its header) so their latency overlaps this tile
        unit_nx = tl.load(bt_row + tl.minimum((n1 + BLOCK_N) // PAGE, last_j)).to(tl.int64)
        bits_nx = bits
        if not DENSE:
            bits_nx = tl.load(A_I32 + unit_nx * UNIT_I32)
        offs_n = n1 + offs_j
        mask_n = offs_n < end
        rows = n1 % PAGE + offs_j
        if DENSE:
            k = tl.load(A_V + unit * UNIT_V + HDR // ESIZE + rows[:, None] * D + offs_d[None, :],
                        mask=mask_n[:, None], other=0.0)
            s = tl.dot(q_s, tl.trans(k)) * qk_scale
            v_off = dense_v_off
        else:
            base = unit * UNIT_I32                       # bits: the page header (the page's tier)
            n_words = tl.load(TAB + bits * TAB_W)
            pair_bits = tl.load(TAB + bits * TAB_W + 1)
            cpw = tl.load(TAB + bits * TAB_W + 2)
            theta_bits = tl.load(TAB + bits * TAB_W + 3)
            cs_off = tl.load(TAB + bits * TAB_W + 4)
            rho_off = tl.load(TAB + bits * TAB_W + 5)
            v_off = tl.load(TAB + bits * TAB_W + 6) // ESIZE
            r = tl.load(A_F32 + base + HDR // 4 + rows, mask=mask_n, other=0.0)
            word_of = offs_p // cpw
            shift = (offs_p - word_of * cpw) * pair_bits
            p_w = A_I32 + base + HDR // 4 + PAGE + rows[:, None] * n_words + word_of[None, :]
            words = tl.load(p_w, mask=mask_n[:, None], other=0)
            code = (words >> shift[None, :]) & ((1 << pair_bits) - 1)
            cs = tl.load(CS_LUT + cs_off + (code & ((1 << theta_bits) - 1)))
            rho = tl.load(RHO_LUT + rho_off + (code >> theta_bits))
            cth = (cs & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
            sth = ((cs >> 16) & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
            kx = rho * cth
            ky = rho * sth
            if DOT_F16:
                kx = kx.to(tl.float16)
                ky = ky.to(tl.float16)
            s = tl.dot(q_x, tl.trans(kx))
            s = tl.dot(q_y, tl.trans(ky), s) * r[None, :]
        s = tl.where(mask_n[None, :], s, float("-inf"))
        if STORE_LOGITS:
            p_lg = LOGITS + b * stride_lg_b + heads[:, None] * stride_lg_h + offs_n[None, :]
            tl.store(p_lg, s, mask=mask_g[:, None] & mask_n[None, :])
        v = tl.load(A_V + unit * UNIT_V + v_off + rows[:, None] * D + offs_d[None, :], mask=mask_n[:, None], other=0.0)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
        unit = unit_nx
        bits = bits_nx

    l_safe = tl.where(l_i > 0, l_i, 1.0)
    lse = tl.where(l_i > 0, m_i + tl.log2(l_safe), float("-inf"))
    o_ptr = O_PART + b * stride_op_b + heads[:, None] * stride_op_h + pid_s * stride_op_s + offs_d[None, :]
    tl.store(o_ptr, acc / l_safe[:, None], mask=mask_g[:, None])
    tl.store(LSE_PART + b * stride_lse_b + heads * stride_lse_h + pid_s, lse, mask=mask_g)


def default_config(dense: bool, max_len: int | None = None, batch: int | None = None) -> dict:
    """Tile sizes and launch options (one config under the interpreter)."""
    if INTERPRET or not torch.cuda.is_available():
        return {"BLOCK_N": 16, "num_warps": 4, "num_stages": 1, "ctas_per_sm": 1}
    if dense:
        return {"BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "ctas_per_sm": 2}
    return {"BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "ctas_per_sm": 2}


def _decode(q: torch.Tensor, cache: AdaCache, dense: bool, sm_scale: float | None, num_splits: int | None,
            config: dict | None, out: torch.Tensor | None, workspace: tuple | None,
            logits: torch.Tensor | None, max_seq_len: int | None) -> torch.Tensor:
    B, HQ, D = q.shape
    H = cache.block_table.shape[1]
    assert D == cache.head_dim and HQ % H == 0 and q.stride(2) == 1
    assert cache.block_table.dtype == torch.int32 and cache.block_table.stride(2) == 1
    assert q.dtype == cache.dtype, "query and cache dtypes differ"
    group = HQ // H
    any_dense, any_coded = cache.page_kinds()
    if (dense and any_coded) or (not dense and any_dense):
        raise ValueError("dense_decode needs dense pages only, ada_decode coded pages only")
    cfg = {**default_config(dense, max_seq_len, B), **(config or {})}
    if cache.page_size % cfg["BLOCK_N"]:
        cfg["BLOCK_N"] = math.gcd(cfg["BLOCK_N"], cache.page_size)
    max_len = max(cache.host_lens) if max_seq_len is None else max_seq_len
    S = num_splits or pick_num_splits(B, max_len, H, cfg["BLOCK_N"], num_sms(q.device), cfg["ctas_per_sm"])
    per_split = triton.cdiv(triton.cdiv(max_len, S), cfg["BLOCK_N"]) * cfg["BLOCK_N"]
    S = triton.cdiv(max_len, per_split)
    if workspace is None:
        o_part = torch.empty(B, HQ, S, D, dtype=torch.float32, device=q.device)
        lse = torch.empty(B, HQ, S, dtype=torch.float32, device=q.device)
    else:
        o_part, lse = workspace
        assert o_part.shape[2] >= S
    tb = cache.tables()
    i32, f32, val = cache.views()
    esize = cache.esize
    lg = logits if logits is not None else o_part
    scale = (sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)) * LOG2E
    LAUNCHED["dense" if dense else "ada"] = ada_decode_kernel[(H, S, B)](
        q, tb.rot_x, tb.rot_y, i32, f32, val, cache.block_table, cache.seq_lens, tb.tab, tb.cs_lut, tb.rho_lut,
        o_part, lse, lg, scale, per_split, page_layout(DENSE, cache.page_size, D, esize)[0] // esize,
        q.stride(0), q.stride(1), cache.block_table.stride(0), cache.block_table.stride(1),
        o_part.stride(0), o_part.stride(1), o_part.stride(2), lse.stride(0), lse.stride(1),
        lg.stride(0), lg.stride(1),
        PAGE=cache.page_size, D=D, GROUP=group, BLOCK_G=max(16, triton.next_power_of_2(group)),
        BLOCK_N=cfg["BLOCK_N"], UNIT_I32=UNIT // 4, UNIT_V=UNIT // esize, ESIZE=esize, DENSE=dense,
        DOT_F16=q.dtype in (torch.float16, torch.bfloat16), STORE_LOGITS=logits is not None,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    out = torch.empty(B, HQ, D, dtype=q.dtype, device=q.device) if out is None else out
    mla_decode_combine_kernel[(HQ, B)](
        o_part, lse, out, S, o_part.stride(0), o_part.stride(1), o_part.stride(2),
        lse.stride(0), lse.stride(1), out.stride(0), out.stride(1),
        D_C=D, BLOCK_S=max(triton.next_power_of_2(S), 2), num_warps=4)
    return out


def ada_decode(q: torch.Tensor, cache: AdaCache, *, sm_scale: float | None = None, num_splits: int | None = None,
               config: dict | None = None, out: torch.Tensor | None = None, workspace: tuple | None = None,
               logits: torch.Tensor | None = None, max_seq_len: int | None = None) -> torch.Tensor:
    """GQA decode attention of one new token per sequence over a coded (tiers 8/4/3/2, mixed) ADA cache.

    q: [B, HQ, D] (HQ a multiple of the cache's KV heads H; query head j uses KV head j // (HQ/H)), same
    dtype as the cache values. Returns [B, HQ, D]. ``logits``: optional float32 [B, HQ, >= max_len]
    that receives the log2-domain logits s·scale·log2(e) (for error measurements; -inf where masked).
    ``sm_scale`` defaults to 1/√D. Example: ``ada_decode(q, cache)``.
    """
    return _decode(q, cache, False, sm_scale, num_splits, config, out, workspace, logits, max_seq_len)


def dense_decode(q: torch.Tensor, cache: AdaCache, *, sm_scale: float | None = None, num_splits: int | None = None,
                 config: dict | None = None, out: torch.Tensor | None = None, workspace: tuple | None = None,
                 logits: torch.Tensor | None = None, max_seq_len: int | None = None) -> torch.Tensor:
    """The same decode kernel over dense pages (keys stored in the cache dtype): the ADA baseline."""
    return _decode(q, cache, True, sm_scale, num_splits, config, out, workspace, logits, max_seq_len)
