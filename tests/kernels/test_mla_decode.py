"""MLA decode kernel vs the float64 reference: ragged shapes, δ tables (incl. negative, > 32K), both
cache designs, both rotation sides, both pair layouts (fp16/fp32 on the CPU interpreter)."""

from __future__ import annotations

import pytest

GPU_EXTRA = "kernel tests need the gpu extra: pip install -e '.[gpu]'"
torch = pytest.importorskip("torch", reason=GPU_EXTRA)
pytest.importorskip("triton", reason=GPU_EXTRA)

from pic.kernels._testing import assert_close, dot_tol, random_delta, random_paged_cache, rel_rms
from pic.kernels.mla_decode import mla_decode, mla_decode_reference
from pic.kernels.paged_cache import span_block_delta
from pic.kernels.rope import RopeConfig

DELTAS = (0, 3, -7000, 40000, 100000)
YARN = RopeConfig(layout="neox", factor=40.0, mscale=0.707, mscale_all_dim=1.0)


def inputs(lens, H, dtype, device, seed, d_c=64, page=32):
    cache, bt, sl = random_paged_cache(lens, page, d_c, 64, dtype, device, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    qn = torch.randn(len(lens), H, d_c, generator=g).to(dtype).to(device)
    qr = torch.randn(len(lens), H, 64, generator=g).to(dtype).to(device)
    return qn, qr, cache, bt, sl


CASES = [
    pytest.param([1, 63], 4, RopeConfig(), False, "q", id="B2-T63-H4-rot-q"),
    pytest.param([40, 97, 5], 5, RopeConfig(layout="neox"), False, "k", id="B3-T97-H5-neox-rot-k"),
    pytest.param([130], 3, YARN, True, "k", id="B1-T130-H3-yarn-prerope"),
    pytest.param([33, 64], 16, RopeConfig(), True, "auto", id="B2-T64-H16-prerope"),
]


@pytest.mark.parametrize("lens,H,rope,pre,side", CASES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
def test_decode_matches_reference(lens, H, rope, pre, side, dtype, device):
    """Output matches the float64 reference with the δ table applied at load."""
    qn, qr, cache, bt, sl = inputs(lens, H, dtype, device, seed=len(lens) * 10 + H)
    delta = random_delta(bt, H, DELTAS)
    ref = mla_decode_reference(qn, qr, cache, bt, sl, delta, rope=rope, pre_rope=pre, dtype=torch.float64)
    out = mla_decode(qn, qr, cache, bt, sl, delta, rope=rope, pre_rope=pre, rot_side=side, num_splits=2)
    assert_close("decode", ref, out, dot_tol(dtype, device))


def test_decode_delta_is_applied(device):
    """Ignoring the δ table would be far off: the kernel really rotates (mixed same/rotated/fresh spans)."""
    qn, qr, cache, bt, sl = inputs([96, 70], 4, torch.float32, device, seed=3)
    delta = span_block_delta([[(0, 64, 40000), (64, 32, 0)], [(32, 38, -5)]], bt.shape[1], 32).to(device)
    out = mla_decode(qn, qr, cache, bt, sl, delta)
    assert_close("decode spans", mla_decode_reference(qn, qr, cache, bt, sl, delta, dtype=torch.float64), out, dot_tol(torch.float32, device))
    assert rel_rms(mla_decode_reference(qn, qr, cache, bt, sl, None, dtype=torch.float64), out) > 1e-2


@pytest.mark.parametrize("splits", [1, 3, 8], ids=["S1", "S3", "S8"])
def test_decode_split_count_invariant(splits, device):
    """Any split count (including more splits than tiles) gives the same answer after the LSE combine."""
    qn, qr, cache, bt, sl = inputs([17, 90], 4, torch.float32, device, seed=5)
    delta = random_delta(bt, 6, DELTAS)
    ref = mla_decode_reference(qn, qr, cache, bt, sl, delta, dtype=torch.float64)
    assert_close(f"decode S{splits}", ref, mla_decode(qn, qr, cache, bt, sl, delta, num_splits=splits), dot_tol(torch.float32, device))


def test_decode_rotation_compiled_out_equals_zero_delta(device):
    """rotate=False is the δ = 0 kernel."""
    qn, qr, cache, bt, sl = inputs([50], 4, torch.float32, device, seed=7)
    ref = mla_decode_reference(qn, qr, cache, bt, sl, None, dtype=torch.float64)
    assert_close("decode norot", ref, mla_decode(qn, qr, cache, bt, sl, None, rotate=False), dot_tol(torch.float32, device))


def test_decode_rejects_q_side_for_pre_rope(device):
    """Pre-RoPE k_r needs a per-token rotation: asking for the q side is refused."""
    qn, qr, cache, bt, sl = inputs([8], 4, torch.float32, device, seed=8)
    with pytest.raises(ValueError, match="rot_side"):
        mla_decode(qn, qr, cache, bt, sl, pre_rope=True, rot_side="q")



def test_split_heuristic_fills_one_wave():
    """Splits make (head block, split, sequence) programs ≈ one wave of SM slots, each split >= 4 tiles."""
    from pic.kernels.mla_decode.kernel import pick_num_splits
    assert pick_num_splits(32, 8192, 1, 32, num_sms=132, ctas_per_sm=2) == 8  # 256 programs, 264 slots
    assert pick_num_splits(64, 8192, 1, 64, num_sms=132, ctas_per_sm=2) == 4
    assert pick_num_splits(64, 32768, 2, 64, num_sms=132, ctas_per_sm=1) == 1  # 128 heads: 128 programs
    assert pick_num_splits(32, 100, 1, 16, num_sms=132, ctas_per_sm=2) == 2  # short: 64-token splits
    assert pick_num_splits(1, 10**6, 1, 64, num_sms=132, ctas_per_sm=2) == 64  # capped
