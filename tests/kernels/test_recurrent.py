"""Recurrent layers for LinearKV: exact composition of chunk states equals the sequential recurrence
(float64, CPU), per-chunk states/operators in one varlen pass, and fla-core against a float64 recurrence
on the GPU (skipped without CUDA or without fla-core)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pic.kernels._testing import assert_close
from pic.kernels.recurrent import (
    compose_states,
    gdn_chunk,
    gdn_chunk_operators,
    gdn_chunk_states,
    gdn_reference,
    gdn_transition_reference,
    have_fla,
    mamba2_chunk,
    mamba2_chunk_states,
    mamba2_reference,
    mamba2_transition_reference,
)

BOUNDS = [0, 13, 40, 41, 77, 100]   # ragged chunks, one of a single token
GPU = torch.cuda.is_available()
needs_fla = pytest.mark.skipif(not (GPU and have_fla()), reason="needs CUDA and fla-core")


def _gdn_inputs(t=100, h=2, hv=4, dk=8, dv=6, dtype=torch.float64, device="cpu", seed=0):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    def r(*s):
        return torch.randn(*s, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
    q, k, v = r(1, t, h, dk), F.normalize(r(1, t, h, dk), dim=-1), r(1, t, hv, dv)
    g = F.logsigmoid(r(1, t, hv) + 2.0)               # decays in (0, 1), mostly near 1
    beta = torch.sigmoid(r(1, t, hv))
    return q, k, v, g, beta


def _mamba_inputs(t=100, h=4, p=6, n=5, groups=2, dtype=torch.float64, device="cpu", seed=1):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    def r(*s):
        return torch.randn(*s, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
    x, dt = r(1, t, h, p), F.softplus(r(1, t, h) - 1.0)
    a = -torch.exp(r(h) * 0.5)
    return x, dt, a, r(1, t, groups, n), r(1, t, groups, n)


def test_gdn_exact_composition_equals_sequential_updates():
    """Folding each chunk's (T, Z) from a random start state gives the token-by-token GDN state."""
    q, k, v, g, beta = _gdn_inputs()
    s0 = torch.randn(1, 4, 8, 6, dtype=torch.float64)
    _, want = gdn_reference(q, k, v, g, beta, initial_state=s0)
    zs, ops = [], []
    for a, b in zip(BOUNDS[:-1], BOUNDS[1:], strict=True):
        zs.append(gdn_reference(q[:, a:b], k[:, a:b], v[:, a:b], g[:, a:b], beta[:, a:b])[1])
        ops.append(gdn_transition_reference(k[:, a:b], g[:, a:b], beta[:, a:b]))
    got = compose_states(torch.stack(ops), torch.stack(zs), s0)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert (got - zs[-1]).abs().max() > 1e-3   # single-block (last chunk only) is not the exact state


def test_mamba2_exact_composition_equals_sequential_updates():
    """Folding Mamba-2 chunks with their scalar decays gives the token-by-token SSD state."""
    x, dt, a, b, c = _mamba_inputs()
    s0 = torch.randn(1, 4, 5, 6, dtype=torch.float64)
    _, want = mamba2_reference(x, dt, a, b, c, initial_state=s0)
    zs, ops = [], []
    for lo, hi in zip(BOUNDS[:-1], BOUNDS[1:], strict=True):
        zs.append(mamba2_reference(x[:, lo:hi], dt[:, lo:hi], a, b[:, lo:hi], c[:, lo:hi])[1])
        ops.append(mamba2_transition_reference(dt[:, lo:hi], a))
    got = compose_states(torch.stack(ops), torch.stack(zs), s0)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)


def test_varlen_chunk_states_and_operators_match_per_chunk_references():
    """One varlen pass gives every chunk's zero-start state and (identity-start, zero-value) operator."""
    q, k, v, g, beta = _gdn_inputs()
    cu = torch.tensor(BOUNDS)
    z, t = gdn_chunk_states(k, v, g, beta, cu), gdn_chunk_operators(k, g, beta, cu)
    for i, (a, b) in enumerate(zip(BOUNDS[:-1], BOUNDS[1:], strict=True)):
        assert torch.allclose(z[i], gdn_reference(q[:, a:b], k[:, a:b], v[:, a:b], g[:, a:b], beta[:, a:b])[1][0])
        assert torch.allclose(t[i], gdn_transition_reference(k[:, a:b], g[:, a:b], beta[:, a:b])[0])
    x, dt, a_, b_, c_ = _mamba_inputs()
    zm, tm = mamba2_chunk_states(x, dt, a_, b_, c_, cu)
    for i, (lo, hi) in enumerate(zip(BOUNDS[:-1], BOUNDS[1:], strict=True)):
        assert torch.allclose(zm[i], mamba2_reference(x[:, lo:hi], dt[:, lo:hi], a_, b_[:, lo:hi], c_[:, lo:hi])[1][0])
        assert torch.allclose(tm[i], mamba2_transition_reference(dt[:, lo:hi], a_)[0])


def test_compose_refuses_nothing_to_compose():
    """An empty chunk list is an error, not a zero state."""
    with pytest.raises(ValueError):
        compose_states(torch.zeros(0, 2, 3, 3), torch.zeros(0, 2, 3, 4))


@needs_fla
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fla_gdn_matches_float64_recurrence(dtype):
    """fla's chunked GDN (GVA 2 -> 4 heads, initial state, final state) vs the float64 recurrence."""
    q, k, v, g, beta = _gdn_inputs(t=300, h=2, hv=4, dk=64, dv=64, dtype=torch.float64, seed=3)
    s0 = torch.randn(1, 4, 64, 64, dtype=torch.float64) * 0.1
    want_o, want_s = gdn_reference(q, k, v, g, beta, initial_state=s0)
    dev = [x.to("cuda", dtype) for x in (q, k, v, g, beta)]
    o, s = gdn_chunk(*dev, initial_state=s0.to("cuda", torch.float32), output_final_state=True)
    tol = 2e-2 if dtype == torch.bfloat16 else 5e-3
    assert_close("fla gdn o", want_o, o, tol)
    assert_close("fla gdn state", want_s, s, tol)


@needs_fla
def test_fla_chunk_states_compose_to_the_full_state():
    """On the GPU: fla's per-chunk Z and T (varlen), folded, equal fla's state over the whole sequence."""
    q, k, v, g, beta = (x.to("cuda", torch.float32) for x in _gdn_inputs(t=600, dk=64, dv=64, seed=5))
    cu = torch.tensor([0, 64, 100, 256, 257, 600], device="cuda")
    z, t = gdn_chunk_states(k, v, g, beta, cu), gdn_chunk_operators(k, g, beta, cu)
    _, want = gdn_reference(*(x.double().cpu() for x in (q, k, v, g, beta)))
    assert_close("composed", want[0], compose_states(t, z), 5e-3)   # one sequence: [H, dk, dv]


@needs_fla
def test_fla_mamba2_matches_float64_recurrence():
    """fla's chunked simple GLA as Mamba-2 SSD (groups expanded) vs the float64 recurrence."""
    x, dt, a, b, c = _mamba_inputs(t=300, h=4, p=64, n=64, groups=2, seed=7)
    s0 = torch.randn(1, 4, 64, 64, dtype=torch.float64) * 0.1
    want_y, want_s = mamba2_reference(x, dt, a, b, c, initial_state=s0)
    y, s = mamba2_chunk(*(t.to("cuda", torch.float32) for t in (x, dt, a, b, c)),
                        initial_state=s0.to("cuda", torch.float32), output_final_state=True)
    assert_close("fla ssd y", want_y, y, 5e-3)
    assert_close("fla ssd state", want_s, s, 5e-3)
