"""RoPE kernel and reference: layouts, YaRN, large/negative positions, R(p + δ) = R(δ)R(p)."""

from __future__ import annotations

import math

import pytest

GPU_EXTRA = "kernel tests need the gpu extra: pip install -e '.[gpu]'"
torch = pytest.importorskip("torch", reason=GPU_EXTRA)
pytest.importorskip("triton", reason=GPU_EXTRA)

from pic.kernels._testing import assert_close
from pic.kernels.rope import RopeConfig, rope, rope_inv_freq, rope_reference, yarn_mscale
from pic.kernels.rope.reference import pair_index

YARN = {"factor": 40.0, "original_max_position": 4096, "mscale": 0.707, "mscale_all_dim": 1.0}


@pytest.mark.parametrize("layout", ["interleaved", "neox"])
@pytest.mark.parametrize("yarn", [False, True], ids=["plain", "yarn"])
@pytest.mark.parametrize("n,pmax", [(7, 10), (130, 40000), (65, 200000)], ids=["N7-P10", "N130-P40K", "N65-P200K"])
def test_rope_kernel_matches_float64(layout, yarn, n, pmax, device):
    """fp32 kernel = float64 reference (scaled by mscale ratio) even at positions far past 32K."""
    g = torch.Generator().manual_seed(n)
    cfg = RopeConfig(layout=layout, **(YARN if yarn else {}))
    x = torch.randn(n, 64, generator=g)
    pos = torch.randint(-pmax, pmax, (n,), generator=g)
    ref = rope_reference(x, pos, cfg.inv_freq(), layout, cfg.k_scale())
    out = rope(x.to(device), pos.to(device), cfg)
    assert_close(f"rope {layout}", ref, out, 2e-6)


def test_rope_fp16_rounds_once(device):
    """fp16 in/out: error is one fp16 rounding, not more."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 64, generator=g).half()
    pos = torch.randint(0, 70000, (256,), generator=g)
    cfg = RopeConfig()
    ref = rope_reference(x, pos, cfg.inv_freq())
    assert_close("rope fp16", ref, rope(x.to(device), pos.to(device), cfg), 1e-3)


@pytest.mark.parametrize("layout", ["interleaved", "neox"])
def test_rotation_composes(layout):
    """R(δ)R(p)x = R(p + δ)x for YaRN frequencies (angles stay linear in position)."""
    cfg = RopeConfig(layout=layout, **YARN)
    x = torch.randn(32, 64, dtype=torch.float64)
    p = torch.randint(0, 50000, (32,))
    d = torch.randint(-40000, 40000, (32,))
    two = rope_reference(rope_reference(x, p, cfg.inv_freq(), layout), d, cfg.inv_freq(), layout)
    one = rope_reference(x, p + d, cfg.inv_freq(), layout)
    assert torch.allclose(two, one, atol=1e-9)


def test_yarn_frequencies_and_scale():
    """YaRN keeps fast pairs, divides slow pairs by the factor, and mscale ratio follows DeepSeek."""
    plain, yarn = rope_inv_freq(64), rope_inv_freq(64, factor=40.0)
    assert torch.allclose(yarn[:4], plain[:4]) and torch.allclose(yarn[-4:], plain[-4:] / 40.0)
    assert math.isclose(yarn_mscale(40.0, 1.0), 0.1 * math.log(40.0) + 1)
    assert RopeConfig(**YARN).k_scale() == pytest.approx(yarn_mscale(40, 0.707) / yarn_mscale(40, 1.0))
    assert RopeConfig(factor=40.0, mscale=1.0, mscale_all_dim=1.0).k_scale() == 1.0


def test_pair_layouts():
    """Interleaved pairs (2i, 2i+1); NeoX pairs (i, i + d/2); unknown layouts are refused."""
    a, b = pair_index(8, "interleaved")
    assert a.tolist() == [0, 2, 4, 6] and b.tolist() == [1, 3, 5, 7]
    a, b = pair_index(8, "neox")
    assert a.tolist() == [0, 1, 2, 3] and b.tolist() == [4, 5, 6, 7]
    with pytest.raises(ValueError, match="layout"):
        RopeConfig(layout="gptj")
