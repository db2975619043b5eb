"""gqa_extend: scattered-position GQA attention vs the float32 reference (interpreter on CPU, GPU when present)."""

from __future__ import annotations

import pytest
import torch

from pic.kernels._testing import assert_close, dot_tol
from pic.kernels.gqa_extend import gqa_extend, gqa_extend_reference

CASES = [  # (N keys, M queries, HQ, HKV, D)
    (70, 70, 4, 2, 16),      # full causal prefill, ragged blocks
    (200, 37, 4, 1, 32),     # scattered queries (LinearKV's recompute set), MQA
    (129, 1, 2, 2, 16),      # one query (last token) over everything
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("n,m,hq,hkv,d", CASES, ids=[f"N{c[0]}-M{c[1]}-H{c[2]}x{c[3]}-D{c[4]}" for c in CASES])
def test_gqa_extend_matches_reference(device, dtype, n, m, hq, hkv, d):
    """Each query sees exactly the keys at positions <= its own; sorted scattered positions, GQA groups."""
    gen = torch.Generator(device="cpu").manual_seed(n * 7 + m)
    k = torch.randn(n, hkv, d, generator=gen).to(device, dtype)
    v = torch.randn(n, hkv, d, generator=gen).to(device, dtype)
    q = torch.randn(m, hq, d, generator=gen).to(device, dtype)
    qpos = (torch.arange(n) if m == n else torch.sort(torch.randperm(n, generator=gen)[:m]).values).to(device)
    if m == 1:
        qpos = torch.tensor([n - 1], device=device)
    out = gqa_extend(q, k, v, qpos, block_m=16, block_n=16)
    assert_close("gqa_extend", gqa_extend_reference(q, k, v, qpos), out, dot_tol(dtype, device))


def test_gqa_extend_rejects_bad_shapes(device):
    """Mismatched heads or a non power-of-two head dim fail before launching."""
    q, k = torch.zeros(4, 3, 16, device=device), torch.zeros(8, 2, 16, device=device)
    with pytest.raises(ValueError):
        gqa_extend(q, k, k, torch.arange(4, device=device))
    q, k = torch.zeros(4, 2, 12, device=device), torch.zeros(8, 2, 12, device=device)
    with pytest.raises(ValueError):
        gqa_extend(q, k, k, torch.arange(4, device=device))
