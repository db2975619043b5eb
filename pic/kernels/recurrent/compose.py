"""Exact composition of cached chunk states (LinearKV ``compose=exact``).

A recurrent layer over chunk c maps ``S_end = T_c S_start + Z_c`` (``Z_c``: the chunk's end state from a zero
start; ``T_c``: its transition operator, a ``K x K`` matrix per head for Gated DeltaNet, a scalar per head for
Mamba-2). Folding K chunks in context order, ``S <- T_c S + Z_c``, gives exactly the state a recurrence over
their concatenation reaches: K dense compositions, batched over every head of every layer at once.
"""

from __future__ import annotations

import torch


def compose_states(ops: torch.Tensor, zs: torch.Tensor, s0: torch.Tensor | None = None) -> torch.Tensor:
    """Fold ``S <- T_c S + Z_c`` over chunks ``c = 0..C-1``.

    ``zs``: ``[C, ..., K, V]`` zero-start end states; ``ops``: ``[C, ..., K, K]`` (dense operators) or
    ``[C, ...]`` (scalar per head); ``s0``: ``[..., K, V]`` state before the first chunk (default zero).
    Returns ``[..., K, V]`` in ``zs``'s dtype (each step accumulates in float32 on tensor cores for bf16).
    """
    if zs.shape[0] == 0:
        raise ValueError("compose_states: no chunk to compose")
    dense = ops.dim() == zs.dim()
    s = zs[0].clone() if s0 is None else _step(ops[0], zs[0], s0, dense)
    for c in range(1, zs.shape[0]):   # NOTE: one batched matmul per chunk, over all heads and layers
        s = _step(ops[c], zs[c], s, dense)
    return s


def _step(op: torch.Tensor, z: torch.Tensor, s: torch.Tensor, dense: bool) -> torch.Tensor:
    if dense:
        lead = z.shape[:-2]
        k, v = z.shape[-2:]
        out = torch.baddbmm(z.reshape(-1, k, v), op.reshape(-1, k, k), s.reshape(-1, k, v))
        return out.reshape(*lead, k, v)
    return z + op[..., None, None] * s
