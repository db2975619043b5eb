"""ADA encode: keys -> (radius, packed angle codes) written into their pages, values copied beside them.

One program encodes BLOCK_T token rows of one tier (the tier is a compile-time constant: the launcher
groups rows by their page's tier): x = k·Π[:D/2]^T, y = k·Π[D/2:]^T (fp32), θ = atan2(y, x) → uniform
code, ρ = ‖(x, y)‖/‖k‖ → Lloyd–Max code (binary search over the thresholds), r̃ = least-squares scale
of the decoded direction, codes packed ``32 // pair_bits`` per int32 word.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pic.engine.angle_codes import tier
from pic.kernels.ada.cache import DENSE, HEADER, UNIT, AdaCache, page_layout

HDR = tl.constexpr(HEADER)   # page header bytes, as a kernel constant


@triton.jit
def _atan2(y, x):
    """atan2 in fp32 from basic ops (|error| < 1e-7 rad): octant reduction + odd series on |z| <= tan(π/8)."""
    ax = tl.abs(x)
    ay = tl.abs(y)
    mx = tl.maximum(ax, ay)
    mn = tl.minimum(ax, ay)
    t = mn / tl.where(mx > 0, mx, 1.0)
    big = t > 0.41421356237309503
    z = tl.where(big, (t - 1.0) / (t + 1.0), t)
    z2 = z * z
    p = -1.0 / 15.0
    p = p * z2 + 1.0 / 13.0
    p = p * z2 - 1.0 / 11.0
    p = p * z2 + 1.0 / 9.0
    p = p * z2 - 1.0 / 7.0
    p = p * z2 + 1.0 / 5.0
    p = p * z2 - 1.0 / 3.0
    a = z + z * z2 * p
    a = tl.where(big, a + 0.7853981633974483, a)
    a = tl.where(ay > ax, 1.5707963267948966 - a, a)
    a = tl.where(x < 0, 3.141592653589793 - a, a)
    return tl.where(y < 0, -a, a)


@triton.jit
def ada_encode_kernel(
    K, V, SRC, DST_UNIT, DST_ROW, ROT_X, ROT_Y, CS_LUT, RHO_LUT, RHO_THR, XY_LUT, A_I32, A_F32, A_V,
    num_rows, stride_k, stride_v, cs_off, rho_off, thr_off, xy_off, v_off_elems,
    D: tl.constexpr, PAGE: tl.constexpr, BLOCK_T: tl.constexpr, W: tl.constexpr, CPW: tl.constexpr,
    PAIR_BITS: tl.constexpr, TB: tl.constexpr, RB: tl.constexpr, UNIT_I32: tl.constexpr, UNIT_V: tl.constexpr,
):
    """Rows [pid·BLOCK_T, +BLOCK_T) of the (SRC -> DST_UNIT, DST_ROW) list, all of one tier."""
    HALF: tl.constexpr = D // 2
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    mask_t = offs_t < num_rows
    src = tl.load(SRC + offs_t, mask=mask_t, other=0).to(tl.int64)
    unit = tl.load(DST_UNIT + offs_t, mask=mask_t, other=0).to(tl.int64)
    row = tl.load(DST_ROW + offs_t, mask=mask_t, other=0).to(tl.int64)
    offs_d = tl.arange(0, D)
    offs_p = tl.arange(0, HALF)
    k = tl.load(K + src[:, None] * stride_k + offs_d[None, :], mask=mask_t[:, None], other=0.0).to(tl.float32)
    v = tl.load(V + src[:, None] * stride_v + offs_d[None, :], mask=mask_t[:, None], other=0.0)
    rx = tl.load(ROT_X + offs_d[:, None] * HALF + offs_p[None, :])
    ry = tl.load(ROT_Y + offs_d[:, None] * HALF + offs_p[None, :])
    x = tl.dot(k, rx, input_precision="ieee")                          # [BT, D/2]
    y = tl.dot(k, ry, input_precision="ieee")
    pr = tl.sqrt(x * x + y * y)
    nrm = tl.sqrt(tl.sum(pr * pr, 1))
    rho = pr / tl.where(nrm > 0, nrm, 1.0)[:, None]
    th = _atan2(y, x)
    th = tl.where(th < 0, th + 6.283185307179586, th)
    tc = tl.minimum(tl.floor(th * ((1 << TB) / 6.283185307179586)), (1 << TB) - 1).to(tl.int32)
    rc = tl.zeros([BLOCK_T, HALF], dtype=tl.int32)
    for lvl in tl.static_range(RB):   # binary search: rc = #thresholds < ρ
        cand = rc + (1 << (RB - 1 - lvl))
        thr = tl.load(RHO_THR + thr_off + cand - 1)
        rc = tl.where(thr < rho, cand, rc)
    code = tc | (rc << TB)
    if PAIR_BITS <= 8:   # joint (ρ̂ cos θ̂, ρ̂ sin θ̂) table, as the decode kernel reads it
        xy = tl.load(XY_LUT + xy_off + code)
        ux = (xy & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        uy = ((xy >> 16) & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    else:
        cs = tl.load(CS_LUT + cs_off + tc)
        rq = tl.load(RHO_LUT + rho_off + rc)
        ux = rq * (cs & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        uy = rq * ((cs >> 16) & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    uu = tl.sum(ux * ux + uy * uy, 1)
    r = tl.sum(x * ux + y * uy, 1) / tl.where(uu > 0, uu, 1.0)
    base = unit * UNIT_I32
    tl.store(A_F32 + base + HDR // 4 + row, r, mask=mask_t)
    shifted = code << ((offs_p % CPW) * PAIR_BITS)[None, :]
    word_of = offs_p // CPW
    p_codes = A_I32 + base + HDR // 4 + PAGE + row * W
    for w in tl.static_range(W):
        word = tl.sum(tl.where(word_of[None, :] == w, shifted, 0), 1)
        tl.store(p_codes + w, word, mask=mask_t)
    p_v = A_V + unit[:, None] * UNIT_V + v_off_elems + row[:, None] * D + offs_d[None, :]
    tl.store(p_v, v, mask=mask_t[:, None])


def ada_encode(cache: AdaCache, k: torch.Tensor, v: torch.Tensor, src: torch.Tensor, dst_unit: torch.Tensor,
               dst_row: torch.Tensor, bits: int, block_t: int = 16) -> None:
    """Encode rows ``k[src]`` (keys, [N, D]) into pages of tier ``bits`` at (dst_unit, dst_row); copy
    ``v[src]`` beside them. ``src``/``dst_*``: int32 [M] on the cache's device. Example:
    ``ada_encode(cache, k2d, v2d, idx, units, rows, 4)``."""
    t = tier(bits)
    D = cache.head_dim
    assert k.shape[-1] == D and v.shape[-1] == D and k.stride(-1) == 1 and v.stride(-1) == 1
    assert v.dtype == cache.dtype and src.dtype == dst_unit.dtype == dst_row.dtype == torch.int32
    M = src.numel()
    if M == 0:
        return
    tb = cache.tables()
    i32, f32, val = cache.views()
    esize = cache.esize
    v_off = page_layout(bits, cache.page_size, D, esize)[0]
    ada_encode_kernel[(triton.cdiv(M, block_t),)](
        k, v, src, dst_unit, dst_row, tb.rot_x, tb.rot_y, tb.cs_lut, tb.rho_lut, tb.rho_thr, tb.xy_lut, i32, f32, val,
        M, k.stride(0), v.stride(0), int(tb.tab[bits, 4]), int(tb.tab[bits, 5]), tb.thr_off[bits],
        int(tb.tab[bits, 7]), v_off // esize,
        D=D, PAGE=cache.page_size, BLOCK_T=block_t, W=t.words(D), CPW=t.codes_per_word,
        PAIR_BITS=t.pair_bits, TB=t.theta_bits, RB=t.rho_bits, UNIT_I32=UNIT // 4, UNIT_V=UNIT // esize,
        num_warps=4)


def store(cache: AdaCache, k: torch.Tensor, v: torch.Tensor) -> AdaCache:
    """Write keys/values [B, T, H, D] (T >= every seq_len) into the cache's pages: coded pages through
    ``ada_encode`` (one launch per tier present), dense pages as plain copies. Returns ``cache``."""
    B, T, H, D = k.shape
    assert v.shape == k.shape and D == cache.head_dim and cache.block_table.shape[:2] == (B, H)
    dev = cache.arena.device
    lens = list(cache.host_lens)
    bt = cache.block_table.cpu().long()
    # every (b, h, n) token: flat source row in k.reshape(-1, D), page unit and row
    b_i, n_i, h_i = [], [], []
    for b, n in enumerate(lens):
        nn, hh = torch.meshgrid(torch.arange(n), torch.arange(H), indexing="ij")
        b_i.append(torch.full((n * H,), b))
        n_i.append(nn.flatten())
        h_i.append(hh.flatten())
    b_i, n_i, h_i = torch.cat(b_i), torch.cat(n_i), torch.cat(h_i)
    src = (b_i * T + n_i) * H + h_i
    j = n_i // cache.page_size
    units, rows = bt[b_i, h_i, j], n_i % cache.page_size
    bits = cache.page_bits[b_i, h_i, j]
    k2, v2 = k.reshape(-1, D).contiguous(), v.reshape(-1, D).contiguous()
    for b in torch.unique(bits).tolist():
        sel = bits == b
        if b == DENSE:
            val, esize = cache.views()[2], cache.esize
            v_off = page_layout(DENSE, cache.page_size, D, esize)[0] // esize
            d = torch.arange(D, device=dev)
            base_all = (units[sel] * (UNIT // esize) + rows[sel] * D).to(dev)
            src_all = src[sel].to(dev)
            for c0 in range(0, base_all.numel(), 1 << 20):   # bounded index tensors
                base = base_all[c0:c0 + (1 << 20), None] + d[None, :]
                rows_src = src_all[c0:c0 + (1 << 20)]
                val[base + HEADER // esize] = k2[rows_src].to(cache.dtype)
                val[base + v_off] = v2[rows_src]
        else:
            ada_encode(cache, k2, v2, *(x.to(torch.int32).to(dev) for x in (src[sel], units[sel], rows[sel])), b)
    return cache
