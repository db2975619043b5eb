"""MLA extend kernel vs the float64 reference: causal over cached (rotated) spans + the new tokens."""

from __future__ import annotations

import pytest

GPU_EXTRA = "kernel tests need the gpu extra: pip install -e '.[gpu]'"
torch = pytest.importorskip("torch", reason=GPU_EXTRA)
pytest.importorskip("triton", reason=GPU_EXTRA)

from pic.kernels._testing import assert_close, dot_tol, random_delta, random_paged_cache
from pic.kernels.mla_decode import mla_decode
from pic.kernels.mla_extend import mla_extend, mla_extend_reference
from pic.kernels.rope import RopeConfig

DELTAS = (0, 11, -33000, 65000)


def inputs(lens, new, H, dtype, device, seed):
    cache, bt, sl = random_paged_cache(lens, 32, 64, 64, dtype, device, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    cu = torch.tensor([0, *torch.tensor(new).cumsum(0).tolist()], dtype=torch.int32, device=device)
    qn = torch.randn(sum(new), H, 64, generator=g).to(dtype).to(device)
    qr = torch.randn(sum(new), H, 64, generator=g).to(dtype).to(device)
    return qn, qr, cache, bt, sl, cu


CASES = [
    pytest.param([37, 70], [5, 33], 4, RopeConfig(), False, id="B2-T70-N33-H4-rot"),
    pytest.param([64], [64], 3, RopeConfig(layout="neox"), False, id="B1-T64-N64-H3-neox-prefill"),
    pytest.param([90, 20], [17, 1], 5, RopeConfig(factor=40.0, mscale=0.707), True, id="B2-T90-N17-H5-yarn-prerope"),
]


@pytest.mark.parametrize("lens,new,H,rope,pre", CASES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
def test_extend_matches_reference(lens, new, H, rope, pre, dtype, device):
    """Each new token sees cached tokens and earlier new tokens only, with k_r rotated at load."""
    qn, qr, cache, bt, sl, cu = inputs(lens, new, H, dtype, device, seed=sum(lens))
    delta = random_delta(bt, H, DELTAS)
    ref = mla_extend_reference(qn, qr, cache, bt, sl, cu, delta, rope=rope, pre_rope=pre, dtype=torch.float64)
    out = mla_extend(qn, qr, cache, bt, sl, cu, delta, rope=rope, pre_rope=pre)
    assert_close("extend", ref, out, dot_tol(dtype, device))


def test_extend_one_token_equals_decode(device):
    """Extend with one new token per sequence is decode."""
    qn, qr, cache, bt, sl, cu = inputs([45, 80], [1, 1], 4, torch.float32, device, seed=9)
    delta = random_delta(bt, 2, DELTAS)
    ext = mla_extend(qn, qr, cache, bt, sl, cu, delta)
    dec = mla_decode(qn, qr, cache, bt, sl, delta)
    assert_close("extend vs decode", dec, ext, 1e-5 if device == "cpu" else dot_tol(torch.float32, device))


@pytest.mark.parametrize("side", ["q", "k"])
def test_extend_rotation_sides_agree(side, device):
    """Rotating q by −δ per run and rotating each k_r tile by δ give the same attention."""
    qn, qr, cache, bt, sl, cu = inputs([100], [30], 4, torch.float32, device, seed=4)
    delta = random_delta(bt, 5, DELTAS)
    ref = mla_extend_reference(qn, qr, cache, bt, sl, cu, delta, dtype=torch.float64)
    assert_close(f"extend {side}", ref, mla_extend(qn, qr, cache, bt, sl, cu, delta, rot_side=side), dot_tol(torch.float32, device))
