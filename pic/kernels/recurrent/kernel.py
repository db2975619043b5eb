"""Recurrent layers for LinearKV through fla-core's maintained Triton kernels (``fla.ops``), with the float
references (:mod:`.reference`) as the fallback where fla-core or CUDA is missing.

* Gated DeltaNet: ``fla.ops.gated_delta_rule.chunk_gated_delta_rule`` (GVA when ``HV > H``);
* Mamba-2 (SSD): ``fla.ops.simple_gla.chunk_simple_gla`` with ``q = C, k = B, v = dt x, g = dt A``
  (the SSD recurrence is simple GLA with a scalar decay per head);
* per-chunk states for the cache, one launch for all chunks (fla varlen, ``cu_seqlens`` = chunk bounds):
  zero-start end states ``Z_c`` (no initial state) and GDN transition operators ``T_c`` (initial state =
  identity, values = 0, so the final state is ``T_c I``).

Shapes as fla: tokens ``[B, T, H, D]``, gates ``[B, T, H]``, states ``[N, H, K, V]``.
"""

from __future__ import annotations

import functools

import torch

from pic.kernels.recurrent import reference as ref


@functools.cache
def have_fla() -> bool:
    """fla-core importable (its kernels need CUDA)."""
    try:
        import fla.ops.gated_delta_rule  # noqa: F401
        import fla.ops.simple_gla  # noqa: F401
    except Exception:   # ImportError, or a Triton backend that cannot initialise
        return False
    return True


def _use_fla(t: torch.Tensor) -> bool:
    return t.is_cuda and have_fla()


def gdn_chunk(q, k, v, g, beta, *, scale: float | None = None, initial_state: torch.Tensor | None = None,
              output_final_state: bool = False, cu_seqlens: torch.Tensor | None = None):
    """Gated DeltaNet over ``[B, T, ...]`` (or varlen with ``B = 1`` and ``cu_seqlens``): ``(o, final_state)``.

    Example: ``o, s = gdn_chunk(q, k, v, g, beta, initial_state=s0, output_final_state=True)``.
    """
    if _use_fla(q):
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        return chunk_gated_delta_rule(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                                      output_final_state=output_final_state, cu_seqlens=cu_seqlens)
    return _varlen(lambda sl, s0: ref.gdn_reference(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl], scale, s0),
                   q.shape[1], initial_state, cu_seqlens, output_final_state)


def mamba2_chunk(x, dt, a, b, c, *, initial_state: torch.Tensor | None = None, output_final_state: bool = False,
                 cu_seqlens: torch.Tensor | None = None):
    """Mamba-2 SSD (no D skip) over ``[B, T, H, P]``: ``(y, final_state [N, H, N_state, P])``."""
    if _use_fla(x):
        from fla.ops.simple_gla import chunk_simple_gla
        h = x.shape[2]
        q, k = ref._expand(c, h), ref._expand(b, h)
        return chunk_simple_gla(q, k, x * dt[..., None], g=dt * a, scale=1.0, initial_state=initial_state,
                                output_final_state=output_final_state, cu_seqlens=cu_seqlens)
    return _varlen(lambda sl, s0: ref.mamba2_reference(x[:, sl], dt[:, sl], a, b[:, sl], c[:, sl], None, s0),
                   x.shape[1], initial_state, cu_seqlens, output_final_state)


def gdn_chunk_states(k, v, g, beta, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Zero-start end state of every chunk ``[cu[i], cu[i+1])`` of one sequence: ``[C, HV, K, V]``."""
    _, s = gdn_chunk(k, k, v, g, beta, output_final_state=True, cu_seqlens=cu_seqlens)
    return s


def gdn_chunk_operators(k, g, beta, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Transition operator of every chunk: ``[C, HV, K, K]`` (identity start, zero values)."""
    hv, dk = g.shape[2], k.shape[-1]
    n = cu_seqlens.shape[0] - 1
    eye = torch.eye(dk, dtype=torch.float32, device=k.device).expand(n, hv, dk, dk).contiguous()
    zeros = k.new_zeros(*k.shape[:2], hv, dk)
    _, t = gdn_chunk(k, k, zeros, g, beta, initial_state=eye, output_final_state=True, cu_seqlens=cu_seqlens)
    return t


def mamba2_chunk_states(x, dt, a, b, c, cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Z [C, H, N, P], T [C, H])`` of every chunk: zero-start end states and scalar decays."""
    _, z = mamba2_chunk(x, dt, a, b, c, output_final_state=True, cu_seqlens=cu_seqlens)
    ld = (dt * a).to(torch.promote_types(dt.dtype, torch.float32))
    cs = torch.nn.functional.pad(torch.cumsum(ld, 1), (0, 0, 1, 0))[0]   # [T+1, H]
    cu = cu_seqlens.long()
    return z, torch.exp(cs[cu[1:]] - cs[cu[:-1]])


def _varlen(run, num_tokens: int, s0, cu_seqlens, want_state: bool):
    """Apply a reference ``run(slice, s0) -> (o, s)`` per sequence of a varlen batch."""
    if cu_seqlens is None:
        o, s = run(slice(0, num_tokens), s0)
        return o, (s if want_state else None)
    cu = cu_seqlens.tolist()
    outs, states = [], []
    for i in range(len(cu) - 1):
        o, s = run(slice(cu[i], cu[i + 1]), None if s0 is None else s0[i:i + 1])
        outs.append(o)
        states.append(s)
    return torch.cat(outs, 1), (torch.cat(states, 0) if want_state else None)
