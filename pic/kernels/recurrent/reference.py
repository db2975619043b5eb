"""Float references of the recurrent layers LinearKV needs (loops over tokens; clarity over speed).

Layouts follow fla: tokens ``[B, T, H, D]``, gates ``[B, T, H]``, state ``[B, H, K, V]`` (key-major).

* Gated DeltaNet, per value head: ``S_t = a_t (I - b_t k_t k_t^T) S_{t-1} + b_t k_t v_t^T``, ``o_t = S_t^T q_t``
  (``a_t = exp(g_t)``; ``q``/``k`` have ``H`` heads, ``v``/``g``/``b`` ``HV``, each key head shared by
  ``HV / H`` value heads, fla's GVA).
* Mamba-2, per head: ``S_t = exp(dt_t A) S_{t-1} + B_t (dt_t x_t)^T``, ``y_t = S_t^T C_t + D x_t``
  (``B``/``C`` have ``G`` groups of ``H / G`` heads), i.e. simple GLA with ``q = C, k = B, v = dt x``.
* Transition operators over a chunk (``S_end = T S_start + Z``): GDN ``T = prod_t a_t (I - b_t k_t k_t^T)``
  (``K x K`` per value head), Mamba-2 ``T = exp(sum_t dt_t A)`` (a scalar per head).
"""

from __future__ import annotations

import torch


def _expand(t: torch.Tensor, heads: int) -> torch.Tensor:
    """``[B, T, H, D]`` -> ``[B, T, heads, D]`` repeating each head ``heads / H`` times (GVA / groups)."""
    return t if t.shape[2] == heads else t.repeat_interleave(heads // t.shape[2], dim=2)


def gdn_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                  scale: float | None = None, initial_state: torch.Tensor | None = None,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Gated DeltaNet recurrence, token by token. Returns ``(o [B, T, HV, V], S [B, HV, K, V])``."""
    b_, t_, hv, dv = v.shape
    dk = k.shape[-1]
    q, k = _expand(q, hv), _expand(k, hv)
    scale = dk ** -0.5 if scale is None else scale
    s = (torch.zeros(b_, hv, dk, dv, dtype=v.dtype, device=v.device) if initial_state is None
         else initial_state.to(v.dtype).clone())
    o = torch.zeros_like(v)
    for t in range(t_):
        kt, vt = k[:, t], v[:, t]                                   # [B, HV, K], [B, HV, V]
        s = s * g[:, t].exp()[..., None, None]
        u = (vt - torch.einsum("bhk,bhkv->bhv", kt, s)) * beta[:, t][..., None]
        s = s + kt[..., :, None] * u[..., None, :]
        o[:, t] = torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, s)
    return o, s


def gdn_transition_reference(k: torch.Tensor, g: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """``T = prod_t exp(g_t) (I - b_t k_t k_t^T)`` (later tokens on the left): ``[B, HV, K, K]``."""
    b_, t_, hv = g.shape
    k = _expand(k, hv)
    dk = k.shape[-1]
    op = torch.eye(dk, dtype=k.dtype, device=k.device).expand(b_, hv, dk, dk).clone()
    for t in range(t_):
        kt = k[:, t]
        a = torch.eye(dk, dtype=k.dtype, device=k.device) - beta[:, t][..., None, None] * kt[..., :, None] * kt[..., None, :]
        op = g[:, t].exp()[..., None, None] * (a @ op)
    return op


def mamba2_reference(x: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                     d: torch.Tensor | None = None, initial_state: torch.Tensor | None = None,
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Mamba-2 (SSD) recurrence: x ``[B, T, H, P]``, dt ``[B, T, H]`` (after softplus), a ``[H]`` (< 0),
    b/c ``[B, T, G, N]``. Returns ``(y [B, T, H, P], S [B, H, N, P])``."""
    b_, t_, h, p = x.shape
    n = b.shape[-1]
    bb, cc = _expand(b, h), _expand(c, h)
    s = (torch.zeros(b_, h, n, p, dtype=x.dtype, device=x.device) if initial_state is None
         else initial_state.to(x.dtype).clone())
    y = torch.zeros_like(x)
    for t in range(t_):
        s = s * torch.exp(dt[:, t] * a)[..., None, None] + bb[:, t][..., :, None] * (dt[:, t][..., None] * x[:, t])[..., None, :]
        y[:, t] = torch.einsum("bhn,bhnp->bhp", cc[:, t], s)
    if d is not None:
        y = y + x * d[:, None]
    return y, s


def mamba2_transition_reference(dt: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``T = exp(sum_t dt_t A)``: ``[B, H]``."""
    return torch.exp((dt * a).sum(1))
