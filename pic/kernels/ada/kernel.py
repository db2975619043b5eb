"""ADA decode attention (GQA) over the paged ADA cache, and the dense decode of the same structure.

The queries are rotated once per step outside the attention kernel (``ada_rotate_q_kernel``, or by the
caller: Π can be folded into W_q): Πq = (q_x | q_y), q_x = q·Π[:D/2]^T, q_y = q·Π[D/2:]^T, in fp32.
Holding Π's two [D, D/2] fp32 halves in the attention kernel's prologue made ptxas spill ~1.5-2 KB per
thread (in the prologue, not the tile loop; benchmarks/ada_regs_offline.py). One-tier pages of tiers
8 / 4 / 3 / 2 load the next tile's codes into registers one tile ahead. Grid (KV head, KV split, sequence). A
program loads its GROUP rotated query heads (padded to BLOCK_G rows), folds in the softmax scale, then
streams BLOCK_N-token tiles of its split. Per tile it reads the page header (tier), the radii and the packed
codes, unpacks them in registers — (ρ̂ cos θ̂, ρ̂ sin θ̂) from a small table (a shared-memory gather with
``lut_smem``) — and gets
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

from pic.engine.angle_codes import tier
from pic.kernels._mla import INTERPRET, LOG2E, num_sms
from pic.kernels.ada.cache import DENSE, HEADER, UNIT, AdaCache, _tables_cpu
from pic.kernels.mla_decode.kernel import mla_decode_combine_kernel, pick_num_splits

HDR = tl.constexpr(HEADER)   # page header bytes, as a kernel constant
LAUNCHED: dict = {}   # last compiled kernel per launcher: registers, spills, shared memory


@triton.jit
def _page_row(TAB, bits, TAB_W: tl.constexpr, ESIZE: tl.constexpr):
    """The tier table row of a page (runtime-tier path): words, pair bits, codes/word, θ bits, LUT offsets, V."""
    row = TAB + bits * TAB_W
    return (tl.load(row), tl.load(row + 1), tl.load(row + 2), tl.load(row + 3), tl.load(row + 4),
            tl.load(row + 5), tl.load(row + 6) // ESIZE, tl.load(row + 7))


@triton.jit
def _half2(xy):
    """int32 holding two float16 -> (low, high) as float16."""
    return ((xy & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True),
            ((xy >> 16) & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True))


@triton.jit
def _load_codes(A_U8, A_I16, A_I32, unit, rows, mask_n, UNIT_I32: tl.constexpr, PAGE: tl.constexpr,
                HALF: tl.constexpr, T_PB: tl.constexpr, T_W: tl.constexpr, T_CPW: tl.constexpr):
    """The raw code tile of BLOCK_N token rows of a one-tier page: int16 per pair (tier 8), uint8 per pair
    (tier 4), uint8 per two pairs (tier 2), one contiguous load per row; tier 3 (5 codes per int32 word):
    the word of each pair (5 lanes share one)."""
    codes_b = unit * (4 * UNIT_I32) + HDR + 4 * PAGE           # byte offset of the page's codes
    if T_PB == 16:
        raw = tl.load(A_I16 + codes_b // 2 + rows[:, None] * (2 * T_W) + tl.arange(0, HALF)[None, :],
                      mask=mask_n[:, None], other=0)
    elif T_PB == 8:
        raw = tl.load(A_U8 + codes_b + rows[:, None] * (4 * T_W) + tl.arange(0, HALF)[None, :],
                      mask=mask_n[:, None], other=0)
    elif T_PB == 4:
        raw = tl.load(A_U8 + codes_b + rows[:, None] * (4 * T_W) + tl.arange(0, HALF // 2)[None, :],
                      mask=mask_n[:, None], other=0)
    else:
        tl.static_assert(T_PB == 6, "pair bits 16 / 8 / 6 / 4")
        raw = tl.load(A_I32 + codes_b // 4 + rows[:, None] * T_W + (tl.arange(0, HALF) // T_CPW)[None, :],
                      mask=mask_n[:, None], other=0)
    return raw


@triton.jit
def ada_rotate_q_kernel(Q, ROT, QR, n_rows, HQ, stride_q_b, stride_q_h,
                        D: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Rows [pid0·BLOCK_R, +BLOCK_R) of q [B, HQ, D] -> columns [pid1·BLOCK_C, +BLOCK_C) of Πq = q·Π^T
    (fp32 FMA dot), written to QR [B·HQ, D] float32."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_d = tl.arange(0, D)
    mask = rows < n_rows
    b = rows // HQ
    h = rows - b * HQ
    q = tl.load(Q + b[:, None] * stride_q_b + h[:, None] * stride_q_h + offs_d[None, :], mask=mask[:, None],
                other=0.0).to(tl.float32)
    qr = tl.dot(q, tl.load(ROT + offs_d[:, None] * D + cols[None, :]), input_precision="ieee")
    tl.store(QR + rows[:, None] * D + cols[None, :], qr, mask=mask[:, None])


@triton.jit
def ada_decode_kernel(
    Q, A_I32, A_F32, A_V, A_U8, A_I16, BLOCK_TABLE, SEQ_LENS, TAB, CS_LUT, RHO_LUT, XY_LUT,
    O_PART, LSE_PART, LOGITS,
    qk_scale, tokens_per_split, t_cs_off, t_rho_off, t_xy_off, split_base,
    stride_q_b, stride_q_h, stride_bt_b, stride_bt_h, stride_sl_b, stride_sl_h, stride_op_b, stride_op_h, stride_op_s,
    stride_lse_b, stride_lse_h, stride_lg_b, stride_lg_h,
    PAGE: tl.constexpr, D: tl.constexpr, GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
    UNIT_I32: tl.constexpr, UNIT_V: tl.constexpr, ESIZE: tl.constexpr, DENSE: tl.constexpr,
    DOT_F16: tl.constexpr, STORE_LOGITS: tl.constexpr,
    TIER: tl.constexpr, T_W: tl.constexpr, T_CPW: tl.constexpr, T_PB: tl.constexpr, T_TB: tl.constexpr,
    T_VOFF: tl.constexpr, SPLIT_LUT: tl.constexpr, PREFETCH: tl.constexpr, LUT_SMEM: tl.constexpr = False,
):
    """One (KV head, split, sequence): normalized partial output [GROUP, D] and its log2-sum-exp.

    PREFETCH (config ``code_prefetch``, default on; one-tier path): each tile loads the next tile's codes
    into registers, so the table lookups never wait on a code load from HBM; off, a tile loads its own.
    (Triton's pipeliner then issues the lookups for tile i+1 from codes already held.)
    SPLIT_LUT (config ``split_lut``, a diagnostic for tiers 4 and 2): look θ and ρ up in their own small
    tables (128 B and <= 32 B: one L1 line per warp access) instead of the joint table (up to 1 KB,
    8 lines); the product ρ̂·fp16(cos θ̂) differs from the joint fp16(ρ̂ cos θ̂) by fp16 rounding.

    LUT_SMEM (config ``lut_smem``, tiers 4 / 3 / 2): the joint table is loaded once into registers and each
    tile gathers from it with ``tl.gather`` (through shared memory: a 32-bank gather instead of an L1 gather
    over the table's 128-byte lines; ncu shows the L1 data pipe as the busiest unit of the tile loop).

    TIER > 0: every page has that tier (compile-time layout: contiguous code loads, one joint table
    lookup per pair for <= 8-bit codes, all addresses from the prefetched page). TIER == 0: pages of
    any tier, the table row of the next page prefetched with its index."""
    h = tl.program_id(0)
    pid_s = tl.program_id(1)
    b = tl.program_id(2)
    HALF: tl.constexpr = D // 2
    TAB_W: tl.constexpr = 8
    seq_len = tl.load(SEQ_LENS + b * stride_sl_b + h * stride_sl_h)
    start = pid_s * tokens_per_split
    end = tl.minimum(start + tokens_per_split, seq_len)
    offs_g = tl.arange(0, BLOCK_G)
    mask_g = offs_g < GROUP
    heads = h * GROUP + offs_g
    offs_d = tl.arange(0, D)
    offs_p = tl.arange(0, HALF)
    offs_j = tl.arange(0, BLOCK_N)
    if DENSE:
        q_s = tl.load(Q + b * stride_q_b + heads[:, None] * stride_q_h + offs_d[None, :], mask=mask_g[:, None],
                      other=0.0)
    else:   # Q holds Πq = (q_x | q_y), rotated outside this kernel
        q_row = Q + b * stride_q_b + heads[:, None] * stride_q_h + offs_p[None, :]
        q_x = tl.load(q_row, mask=mask_g[:, None], other=0.0).to(tl.float32) * qk_scale
        q_y = tl.load(q_row + HALF, mask=mask_g[:, None], other=0.0).to(tl.float32) * qk_scale
        if DOT_F16:
            q_x = q_x.to(tl.float16)
            q_y = q_y.to(tl.float16)

    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, D], dtype=tl.float32)
    bt_row = BLOCK_TABLE + b * stride_bt_b + h * stride_bt_h
    last_j = (tl.maximum(end, 1) - 1) // PAGE
    unit = tl.load(bt_row + start // PAGE).to(tl.int64)
    if not DENSE and TIER > 0 and LUT_SMEM:
        lut = tl.load(XY_LUT + t_xy_off + tl.arange(0, 1 << T_PB))
    if not DENSE and TIER > 0 and PREFETCH:   # the first tile's codes; each tile then loads the next one's
        raw_nx = _load_codes(A_U8, A_I16, A_I32, unit, start % PAGE + offs_j, start + offs_j < end,
                             UNIT_I32, PAGE, HALF, T_PB, T_W, T_CPW)
    # runtime-tier path: the page's table row, carried to the next tile like the page index
    n_words, pair_bits, cpw, theta_bits, cs_off, rho_off, v_off, xy_off = 0, 0, 0, 0, 0, 0, 0, 0
    if not DENSE and TIER == 0:
        n_words, pair_bits, cpw, theta_bits, cs_off, rho_off, v_off, xy_off = _page_row(
            TAB, tl.load(A_I32 + unit * UNIT_I32), TAB_W, ESIZE)
    for n1 in range(start, end, BLOCK_N):
        # prefetch the next tile's page (and its tier's table row) so their latency overlaps this tile
        unit_nx = tl.load(bt_row + tl.minimum((n1 + BLOCK_N) // PAGE, last_j)).to(tl.int64)
        offs_n = n1 + offs_j
        mask_n = offs_n < end
        rows = n1 % PAGE + offs_j
        if DENSE:
            k = tl.load(A_V + unit * UNIT_V + HDR // ESIZE + rows[:, None] * D + offs_d[None, :],
                        mask=mask_n[:, None], other=0.0)
            s = tl.dot(q_s, tl.trans(k)) * qk_scale
            p_v = A_V + unit * UNIT_V + T_VOFF // ESIZE   # compile-time: 16-byte aligned, vectorized V loads
        else:
            r = tl.load(A_F32 + unit * UNIT_I32 + HDR // 4 + rows, mask=mask_n, other=0.0)
            codes_b = unit * (4 * UNIT_I32) + HDR + 4 * PAGE           # byte offset of the page's codes
            if TIER == 0:
                word_of = offs_p // cpw
                shift = (offs_p - word_of * cpw) * pair_bits
                p_w = A_I32 + codes_b // 4 + rows[:, None] * n_words + word_of[None, :]
                code = (tl.load(p_w, mask=mask_n[:, None], other=0) >> shift[None, :]) & ((1 << pair_bits) - 1)
                small = pair_bits <= 8                    # joint table (<= 8-bit codes) or θ and ρ tables
                xy = tl.load(XY_LUT + tl.where(small, xy_off + code, 0))
                cs = tl.load(CS_LUT + tl.where(small, 0, cs_off + (code & ((1 << theta_bits) - 1))))
                rho = tl.load(RHO_LUT + tl.where(small, 0, rho_off + (code >> theta_bits)))
                jx, jy = _half2(xy)
                cth, sth = _half2(cs)
                kx = tl.where(small, jx.to(tl.float32), rho * cth.to(tl.float32))
                ky = tl.where(small, jy.to(tl.float32), rho * sth.to(tl.float32))
                p_v = A_V + unit * UNIT_V + v_off
            else:
                # this tile's codes were loaded by the previous tile; issue the next tile's now, so the
                # HBM latency of the code -> table lookup chain overlaps a whole tile
                if PREFETCH:
                    raw = raw_nx
                    n2 = n1 + BLOCK_N
                    raw_nx = _load_codes(A_U8, A_I16, A_I32, unit_nx, n2 % PAGE + offs_j, n2 + offs_j < end,
                                         UNIT_I32, PAGE, HALF, T_PB, T_W, T_CPW)
                else:
                    raw = _load_codes(A_U8, A_I16, A_I32, unit, rows, mask_n, UNIT_I32, PAGE, HALF, T_PB, T_W,
                                      T_CPW)
                if T_PB == 16:
                    code = raw.to(tl.int32) & 0xFFFF
                elif T_PB == 8:
                    code = raw.to(tl.int32)
                elif T_PB == 4:   # one byte per two pairs; nibbles interleaved back in registers
                    byte = raw.to(tl.int32)
                    code = tl.reshape(tl.join(byte & 15, byte >> 4), [BLOCK_N, HALF])
                else:   # tier 3: each pair's field of its word
                    code = (raw >> ((offs_p % T_CPW) * T_PB)[None, :]) & ((1 << T_PB) - 1)
                if T_PB <= 8 and LUT_SMEM:
                    kx, ky = _half2(tl.reshape(tl.gather(lut, tl.reshape(code, [BLOCK_N * HALF]), 0), [BLOCK_N, HALF]))
                elif T_PB <= 8 and not (SPLIT_LUT and T_CPW != 5):
                    kx, ky = _half2(tl.load(XY_LUT + t_xy_off + code))
                else:   # separate θ (cos, sin) and ρ lookups: tier 8, or the SPLIT_LUT diagnostic
                    cth, sth = _half2(tl.load(CS_LUT + t_cs_off + (code & ((1 << T_TB) - 1))))
                    rho = tl.load(RHO_LUT + t_rho_off + (code >> T_TB))
                    kx = rho * cth.to(tl.float32)
                    ky = rho * sth.to(tl.float32)
                p_v = A_V + unit * UNIT_V + T_VOFF // ESIZE
            if DOT_F16:
                kx = kx.to(tl.float16)
                ky = ky.to(tl.float16)
            else:
                kx = kx.to(tl.float32)
                ky = ky.to(tl.float32)
            s = tl.dot(q_x, tl.trans(kx))
            s = tl.dot(q_y, tl.trans(ky), s)
            s = s * r[None, :]
        s = tl.where(mask_n[None, :], s, float("-inf"))
        if STORE_LOGITS:
            p_lg = LOGITS + b * stride_lg_b + heads[:, None] * stride_lg_h + offs_n[None, :]
            tl.store(p_lg, s, mask=mask_g[:, None] & mask_n[None, :])
        v = tl.load(p_v + rows[:, None] * D + offs_d[None, :], mask=mask_n[:, None], other=0.0)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
        if not DENSE and TIER == 0:
            n_words, pair_bits, cpw, theta_bits, cs_off, rho_off, v_off, xy_off = _page_row(
                TAB, tl.load(A_I32 + unit_nx * UNIT_I32), TAB_W, ESIZE)
        unit = unit_nx

    l_safe = tl.where(l_i > 0, l_i, 1.0)
    lse = tl.where(l_i > 0, m_i + tl.log2(l_safe), float("-inf"))
    slot = split_base + pid_s
    o_ptr = O_PART + b * stride_op_b + heads[:, None] * stride_op_h + slot * stride_op_s + offs_d[None, :]
    tl.store(o_ptr, acc / l_safe[:, None], mask=mask_g[:, None])
    tl.store(LSE_PART + b * stride_lse_b + heads * stride_lse_h + slot, lse, mask=mask_g)


# Tile configs per kernel: the fastest of gpu_ada --sweep sets 1 and 2 at batch 8 / 32K on the H200
# (docs/bench-ada.md §3, fourth kernel). ``ctas_per_sm`` is the residency the compiled kernel reaches
# (registers, shared memory: benchmarks/ada_regs_offline.py); the split count is chosen so that the
# (KV head, split, sequence) programs fill that many slots on every SM. ``maxnreg`` caps registers (no
# spills at these caps); ``lut_smem`` gathers the joint table through shared memory.
TUNED = {
    DENSE: {"BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "ctas_per_sm": 3},
    8: {"BLOCK_N": 32, "num_warps": 4, "num_stages": 3, "ctas_per_sm": 3},
    4: {"BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "ctas_per_sm": 4, "maxnreg": 128, "lut_smem": True},
    3: {"BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "ctas_per_sm": 3, "maxnreg": 168, "lut_smem": True},
    2: {"BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "ctas_per_sm": 4, "maxnreg": 128, "lut_smem": True},
    "runtime": {"BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "ctas_per_sm": 2},   # header-driven mixed path
}


def resident_ctas(regs: int, shared: int, warps: int) -> int:
    """Programs of a compiled kernel that fit on one H100/H200 SM at once: 64 K registers (allocated per
    warp in 256-register units, i.e. per-thread counts rounded up to 8), 228 KB of shared memory (1 KB
    reserved per program), 64 warps, 32 programs."""
    by_regs = 65536 // (-(-regs // 8) * 8 * 32 * warps)
    by_smem = (228 * 1024) // (shared + 1024)
    return max(0, min(by_regs, by_smem, 64 // warps, 32))


def default_config(dense: bool, max_len: int | None = None, batch: int | None = None, bits: int = 4) -> dict:
    """Tile sizes and launch options of the dense kernel or of the kernel specialized to tier ``bits``
    (0: the header-driven runtime-tier path); one config under the interpreter. Keys: BLOCK_N, num_warps,
    num_stages, ctas_per_sm (sets the split count), optional maxnreg (register cap), lut_smem, split_lut,
    code_prefetch."""
    if INTERPRET or not torch.cuda.is_available():
        return {"BLOCK_N": 16, "num_warps": 4, "num_stages": 1, "ctas_per_sm": 1}
    return dict(TUNED[DENSE if dense else (bits or "runtime")])


def rotate_queries(q: torch.Tensor, cache: AdaCache, out: torch.Tensor | None = None) -> torch.Tensor:
    """Πq for the ADA decode: q [B, HQ, D] (any float dtype, last dim contiguous) -> float32 [B, HQ, D]
    holding (q·Π[:D/2]^T | q·Π[D/2:]^T), one small launch (fp32 dot). ``ada_decode`` calls it unless
    given ``prerotated=True`` (a model can instead fold Π into W_q). Example: ``rotate_queries(q, cache)``."""
    B, HQ, D = q.shape
    assert D == cache.head_dim and q.stride(2) == 1
    out = torch.empty(B, HQ, D, dtype=torch.float32, device=q.device) if out is None else out
    assert out.dtype == torch.float32 and out.is_contiguous() and out.shape == q.shape
    block_c = min(32, D)
    ada_rotate_q_kernel[(triton.cdiv(B * HQ, 16), D // block_c)](
        q, cache.tables().rot, out, B * HQ, HQ, q.stride(0), q.stride(1), D=D, BLOCK_R=16, BLOCK_C=block_c,
        num_warps=4)
    return out


def _decode(q: torch.Tensor, cache: AdaCache, dense: bool, sm_scale: float | None, num_splits: int | None,
            config: dict | None, out: torch.Tensor | None, workspace: tuple | None,
            logits: torch.Tensor | None, max_seq_len: int | None, specialize: bool = True,
            prerotated: bool = False) -> torch.Tensor:
    B, HQ, D = q.shape
    H = cache.block_table.shape[1]
    assert D == cache.head_dim and HQ % H == 0 and q.stride(2) == 1
    assert cache.block_table.dtype == torch.int32 and cache.block_table.stride(2) == 1
    assert q.dtype == cache.dtype or (prerotated and q.is_floating_point()), "query and cache dtypes differ"
    group = HQ // H
    any_dense, any_coded = cache.page_kinds()
    if (dense and any_coded) or (not dense and any_dense):
        raise ValueError("dense_decode needs dense pages only, ada_decode coded pages only")
    one = cache.single_tier() if specialize and not dense else None
    if not dense and specialize and one is None and logits is None:
        groups = cache.tier_groups()                 # mixed: one tier-specialized launch per tier
    else:
        max_len = max(cache.host_lens) if max_seq_len is None else max_seq_len
        groups = [(one or 0, cache.block_table, cache.seq_lens, 0, max_len)]
    plan = []
    for bits, bt, lens, lens_stride_h, max_len in groups:
        cfg = {**default_config(dense, max_len, B, bits), **(config or {})}
        if cache.page_size % cfg["BLOCK_N"]:
            cfg["BLOCK_N"] = math.gcd(cfg["BLOCK_N"], cache.page_size)
        S = num_splits or pick_num_splits(B, max_len, H, cfg["BLOCK_N"], num_sms(q.device), cfg["ctas_per_sm"])
        per_split = triton.cdiv(triton.cdiv(max(max_len, 1), S), cfg["BLOCK_N"]) * cfg["BLOCK_N"]
        plan.append((bits, bt, lens, lens_stride_h, triton.cdiv(max(max_len, 1), per_split), per_split, cfg))
    S_all = sum(p[4] for p in plan)
    if workspace is None:
        o_part = torch.empty(B, HQ, S_all, D, dtype=torch.float32, device=q.device)
        lse = torch.empty(B, HQ, S_all, dtype=torch.float32, device=q.device)
    else:
        o_part, lse = workspace
        assert o_part.shape[2] >= S_all, f"workspace holds {o_part.shape[2]} splits, {S_all} needed"
    tb = cache.tables()
    q_in = q if dense or prerotated else rotate_queries(q, cache)
    i32, f32, val = cache.views()
    esize = cache.esize
    lg = logits if logits is not None else o_part
    scale = (sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)) * LOG2E
    base = 0
    for bits, bt, lens, lens_stride_h, S, per_split, cfg in plan:
        t = tier(bits) if bits else None
        row = _tables_cpu(D, cache.page_size, esize)[0][bits]
        LAUNCHED["dense" if dense else "ada"] = ada_decode_kernel[(H, S, B)](
            q_in, i32, f32, val, cache.arena, cache.arena.view(torch.int16), bt,
            lens, tb.tab, tb.cs_lut, tb.rho_lut, tb.xy_lut,
            o_part, lse, lg, scale, per_split,
            int(row[4]), int(row[5]), int(row[7]), base,
            q_in.stride(0), q_in.stride(1), bt.stride(0), bt.stride(1), lens.stride(0), lens_stride_h,
            o_part.stride(0), o_part.stride(1), o_part.stride(2), lse.stride(0), lse.stride(1),
            lg.stride(0), lg.stride(1),
            PAGE=cache.page_size, D=D, GROUP=group, BLOCK_G=max(16, triton.next_power_of_2(group)),
            BLOCK_N=cfg["BLOCK_N"], UNIT_I32=UNIT // 4, UNIT_V=UNIT // esize, ESIZE=esize, DENSE=dense,
            DOT_F16=cache.dtype in (torch.float16, torch.bfloat16), STORE_LOGITS=logits is not None,
            TIER=bits if not dense else 0, T_W=t.words(D) if t else 0, T_CPW=t.codes_per_word if t else 0,
            T_PB=t.pair_bits if t else 0, T_TB=t.theta_bits if t else 0, T_VOFF=int(row[6]),
            SPLIT_LUT=bool(cfg.get("split_lut")), LUT_SMEM=bool(cfg.get("lut_smem")) and bool(t) and t.pair_bits <= 8,
            PREFETCH=bool(cfg.get("code_prefetch", True)) and bool(t),
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
            **({"maxnreg": cfg["maxnreg"]} if cfg.get("maxnreg") and not INTERPRET else {}))
        base += S
    S = S_all
    out = torch.empty(B, HQ, D, dtype=cache.dtype, device=q.device) if out is None else out
    mla_decode_combine_kernel[(HQ, B)](
        o_part, lse, out, S, o_part.stride(0), o_part.stride(1), o_part.stride(2),
        lse.stride(0), lse.stride(1), out.stride(0), out.stride(1),
        D_C=D, BLOCK_S=max(triton.next_power_of_2(S), 2), num_warps=4)
    return out


def ada_decode(q: torch.Tensor, cache: AdaCache, *, sm_scale: float | None = None, num_splits: int | None = None,
               config: dict | None = None, out: torch.Tensor | None = None, workspace: tuple | None = None,
               logits: torch.Tensor | None = None, max_seq_len: int | None = None,
               specialize: bool = True, prerotated: bool = False) -> torch.Tensor:
    """GQA decode attention of one new token per sequence over a coded (tiers 8/4/3/2, mixed) ADA cache.

    q: [B, HQ, D] (HQ a multiple of the cache's KV heads H; query head j uses KV head j // (HQ/H)), same
    dtype as the cache values. Returns [B, HQ, D]. ``logits``: optional float32 [B, HQ, >= max_len]
    that receives the log2-domain logits s·scale·log2(e) (for error measurements; -inf where masked).
    ``sm_scale`` defaults to 1/√D. A cache whose pages all share one tier runs the kernel specialized
    to it; a mixed cache runs one specialized launch per tier over that tier's pages (attention does
    not depend on token order), all merged by one split combine. ``specialize=False`` (and ``logits``
    on a mixed cache) takes the runtime-tier path instead: one launch reading each page's tier from
    its header (measured slow, docs/bench-ada.md). The queries are rotated first (``rotate_queries``, one
    small launch); ``prerotated=True`` takes q as Πq already (any float dtype; e.g. Π folded into W_q).
    Example: ``ada_decode(q, cache)``.
    """
    return _decode(q, cache, False, sm_scale, num_splits, config, out, workspace, logits, max_seq_len, specialize,
                   prerotated)


def dense_decode(q: torch.Tensor, cache: AdaCache, *, sm_scale: float | None = None, num_splits: int | None = None,
                 config: dict | None = None, out: torch.Tensor | None = None, workspace: tuple | None = None,
                 logits: torch.Tensor | None = None, max_seq_len: int | None = None) -> torch.Tensor:
    """The same decode kernel over dense pages (keys stored in the cache dtype): the ADA baseline."""
    return _decode(q, cache, True, sm_scale, num_splits, config, out, workspace, logits, max_seq_len)
