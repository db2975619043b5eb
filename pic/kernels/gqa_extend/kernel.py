"""GQA attention of new tokens at arbitrary positions over a dense per-layer KV cache (FlashAttention-2
style online softmax; plain pointer arithmetic so it runs on Triton 3.6 and 3.9).

Queries are the recomputed tokens of a plan (RECOMPUTE spans + the quality-recompute set U), sorted by
position; each attends to every cached or fresh key at a position ``<= its own``. A program owns BLOCK_M
queries of one query head and walks the key blocks up to the largest position among them; the full-prefill
baseline is the same kernel with ``qpos = arange(N)``, so the two are timed alike.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def gqa_extend_kernel(Q, K, V, O, QPOS, qk_scale, M, N,
                      s_qm, s_qh, s_km, s_kh, s_vm, s_vh, s_om, s_oh,
                      GROUP: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    i_m = tl.program_id(0)
    i_h = tl.program_id(1)
    i_kh = i_h // GROUP
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_m = o_m < M
    o_d = tl.arange(0, D)
    qpos = tl.load(QPOS + o_m, mask=m_m, other=0)
    b_q = tl.load(Q + o_m[:, None] * s_qm + i_h * s_qh + o_d[None, :], mask=m_m[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    hi = tl.minimum(tl.max(qpos, 0) + 1, N)
    for start in range(0, hi, BLOCK_N):
        o_n = start + tl.arange(0, BLOCK_N)
        m_n = o_n < N
        b_k = tl.load(K + o_n[:, None] * s_km + i_kh * s_kh + o_d[None, :], mask=m_n[:, None], other=0.0)
        b_v = tl.load(V + o_n[:, None] * s_vm + i_kh * s_vh + o_d[None, :], mask=m_n[:, None], other=0.0)
        s = tl.dot(b_q, tl.trans(b_k)) * qk_scale
        s = tl.where((o_n[None, :] <= qpos[:, None]) & m_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(b_v.dtype), b_v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(O + o_m[:, None] * s_om + i_h * s_oh + o_d[None, :], out.to(O.dtype.element_ty), mask=m_m[:, None])


def gqa_extend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qpos: torch.Tensor,
               sm_scale: float | None = None, *, block_m: int = 64, block_n: int = 32, num_warps: int = 4,
               num_stages: int = 2) -> torch.Tensor:
    """Attention of ``q [M, HQ, D]`` (positions ``qpos [M]``, int32/int64, non-decreasing) over
    ``k, v [N, HKV, D]`` at positions ``<= qpos``; returns ``[M, HQ, D]`` in ``q``'s dtype.

    Example (full causal prefill): ``o = gqa_extend(q, k, v, torch.arange(n, device=q.device))``.
    """
    m, hq, d = q.shape
    n, hkv, dk = k.shape
    if dk != d or v.shape != k.shape or hq % hkv:
        raise ValueError(f"gqa_extend: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not fit")
    if d & (d - 1) or qpos.shape != (m,) or q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("gqa_extend: head dim must be a power of two, qpos [M], last dims contiguous")
    o = torch.empty_like(q)
    if m == 0:
        return o
    scale = (1.0 / math.sqrt(d) if sm_scale is None else sm_scale) * LOG2E
    grid = (triton.cdiv(m, block_m), hq)
    gqa_extend_kernel[grid](
        q, k, v, o, qpos, scale, m, n,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), o.stride(0), o.stride(1),
        GROUP=hq // hkv, D=d, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages)
    return o
