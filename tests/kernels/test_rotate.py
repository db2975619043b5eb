"""Standalone δ-rotation: in place vs reference, untouched δ = 0 pages, and the fed-k_r probe."""

from __future__ import annotations

import pytest

GPU_EXTRA = "kernel tests need the gpu extra: pip install -e '.[gpu]'"
torch = pytest.importorskip("torch", reason=GPU_EXTRA)
pytest.importorskip("triton", reason=GPU_EXTRA)

from pic.kernels._testing import assert_close, random_delta, random_paged_cache
from pic.kernels.paged_cache import gather_tokens, rotation_positions
from pic.kernels.rope import RopeConfig, rope_reference
from pic.kernels.rotate import rotate, rotate_reference


def test_rotate_in_place_matches_reference(device):
    """Pages with δ ≠ 0 are rotated (one rounding); pages with δ = 0 are bit-identical."""
    cache, bt, sl = random_paged_cache([70, 33], 32, 64, 64, torch.float16, device, seed=2)
    delta = random_delta(bt, 3, (0, 9, -40000, 90000))
    ref = rotate_reference(cache, bt, sl, delta, d_c=64)
    out = rotate(cache.clone(), bt, sl, delta, d_c=64).cpu()
    assert_close("rotate", torch.nan_to_num(ref.float()), torch.nan_to_num(out.float()), 1e-3)
    assert torch.equal(out[..., :64].nan_to_num(), cache.cpu()[..., :64].nan_to_num())  # cKV untouched
    for b in range(2):
        keep = rotation_positions(delta, b, int(sl[b]), 32, False) == 0
        before = gather_tokens(cache.cpu(), bt.cpu(), b, int(sl[b]))[keep]
        after = gather_tokens(out, bt.cpu(), b, int(sl[b]))[keep]
        assert torch.equal(before, after)


def test_feed_probe_modes(device):
    """fp32 feed = R(δ)k exactly; split feed ≈ fp32; bf16-style feed carries one more rounding."""
    cfg = RopeConfig()
    cache, bt, sl = random_paged_cache([64], 32, 64, 64, torch.float16, device, seed=4)
    delta = random_delta(bt, 5, (7, -50000))
    kr = gather_tokens(cache.cpu(), bt.cpu(), 0, 64)[:, 64:]
    truth = rope_reference(kr, rotation_positions(delta, 0, 64, 32, False), cfg.inv_freq())
    fp32 = rotate(cache, bt, sl, delta, d_c=64, feed="fp32")[0]
    split = rotate(cache, bt, sl, delta, d_c=64, feed="split")[0]
    half = rotate(cache, bt, sl, delta, d_c=64, feed="bf16")[0]
    assert_close("feed fp32", truth, fp32, 1e-6)
    assert_close("feed split", truth, split, 1e-6)
    err_half = assert_close("feed fp16", truth, half, 1e-3)
    assert err_half > 1e-5  # the rounded feed really is rounded
