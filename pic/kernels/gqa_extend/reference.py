"""Float reference of GQA attention for queries at arbitrary (sorted) positions over a dense KV cache."""

from __future__ import annotations

import math

import torch


def gqa_extend_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qpos: torch.Tensor,
                         sm_scale: float | None = None) -> torch.Tensor:
    """``q [M, HQ, D]`` at positions ``qpos [M]`` attends over ``k/v [N, HKV, D]`` positions ``<= qpos``
    (query head ``h`` reads KV head ``h // (HQ / HKV)``). float32 math; returns ``[M, HQ, D]``."""
    m, hq, d = q.shape
    hkv = k.shape[1]
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    kk = k.float().repeat_interleave(hq // hkv, dim=1)               # [N, HQ, D]
    vv = v.float().repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("mhd,nhd->hmn", q.float(), kk) * scale          # [HQ, M, N]
    mask = torch.arange(k.shape[0], device=q.device)[None, :] <= qpos[:, None]
    s = s.masked_fill(~mask[None], float("-inf"))
    return torch.einsum("hmn,nhd->mhd", torch.softmax(s, -1), vv).to(q.dtype)
