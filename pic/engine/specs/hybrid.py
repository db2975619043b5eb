"""Hybrid-model arithmetic: what attention and recurrent (Gated DeltaNet / Mamba-2) layers cost separately.

Functions of a :class:`~pic.engine.specs.models.ModelSpec`; formulas and sources in docs/models.md
("Hybrid models"). Units: parameters, FLOPs (one multiply-add = 2), bytes; "per token" means one token
through every layer of the kind.

Recurrent layer ``l`` keeps ``S_l`` and, over a chunk ``c`` of tokens, ``S_end = T_c S_start + Z_c``:

* Gated DeltaNet (per value head): ``S_t = a_t (I - b_t k_t k_t^T) S_{t-1} + b_t k_t v_t^T``, ``S`` is
  ``dk x dv``; the chunk's transition operator ``T_c`` is a dense ``dk x dk`` matrix;
* Mamba-2 (per head): ``S_t = exp(dt_t A) S_{t-1} + dt_t B_t x_t^T``, ``S`` is ``d_state x head_dim``;
  ``T_c`` is one scalar per head.

``Z_c`` (the chunk's end state from a zero start) and ``T_c`` are what LinearKV caches per chunk; folding
K cached chunks ``S <- T_c S + Z_c`` gives the exact state after them (K "compositions").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pic.engine.specs.models import ModelSpec

#: token sub-chunk of the chunked Gated DeltaNet kernel (fla ``chunk_gated_delta_rule``: 64)
GDN_CHUNK = 64
RECURRENT = ("mamba2", "gdn")


def _mlp_params(m: ModelSpec, layer: int, experts: float) -> float:
    """Dense SwiGLU MLP (leading dense layers, or every layer of a dense model) or one MoE block."""
    if m.num_experts and layer >= m.first_dense_layers:
        return m._moe_fixed_params() + experts * m._expert_params()
    return 3.0 * m.hidden_size * m.intermediate_size


def kind_params(m: ModelSpec, kind: str, experts: float | None = None) -> float:
    """Parameters of the layers of ``kind`` ('attn' or 'recurrent'): token mixer + that layer's MLP/MoE,
    with ``experts`` routed experts per MoE layer (default: the active ones)."""
    experts = float(m.num_experts_active) if experts is None else experts
    kinds = m.layer_kinds or ("attn",) * m.num_layers
    total = 0.0
    for i, k in enumerate(kinds):
        if (k == "attn") != (kind == "attn"):
            continue
        mixer = m._attn_params() if k == "attn" else m._recurrent_params(k)
        total += mixer + _mlp_params(m, i, experts)
    return total


def scan_flops_per_token(m: ModelSpec) -> float:
    """Recurrence FLOPs per token over all recurrent layers, chunked prefill kernels.

    GDN (fla chunk form, sub-chunk C=64, per value head): ``6 dk dv`` (state read-out, WY correction, state
    update) ``+ 2C(3dk + 2dv)`` (intra-chunk K K^T, W, U, Q K^T, attention x V) ``+ 2C^2/3`` (triangular
    solve). Mamba-2 SSD (chunk C = mamba_chunk_size, per head): ``4 N P`` (chunk states, state read-out)
    ``+ 2 C P`` (intra-chunk (L o C B^T) X) ``+ 2 C N / heads_per_group`` (C B^T shared by a group).
    """
    g = 0.0
    if m.count("gdn"):
        dk, dv, c = m.gdn_key_head_dim, m.gdn_value_head_dim, GDN_CHUNK
        g = m.count("gdn") * m.gdn_num_value_heads * (6.0 * dk * dv + 2.0 * c * (3 * dk + 2 * dv) + 2.0 * c * c / 3)
    s = 0.0
    if m.count("mamba2"):
        n, p, c = m.mamba_state_dim, m.mamba_head_dim, m.mamba_chunk_size
        per_group = m.mamba_num_heads / m.mamba_num_groups
        s = m.count("mamba2") * m.mamba_num_heads * (4.0 * n * p + 2.0 * c * p + 2.0 * c * n / per_group)
    return g + s


def ssm_state_elems(m: ModelSpec) -> int:
    """SSM / delta-rule state elements over all recurrent layers (the part compositions act on; no conv)."""
    g = m.count("gdn") * m.gdn_num_value_heads * m.gdn_key_head_dim * m.gdn_value_head_dim
    s = m.count("mamba2") * m.mamba_num_heads * m.mamba_head_dim * m.mamba_state_dim
    return g + s


def conv_state_bytes(m: ModelSpec) -> int:
    """Short-conv windows (last ``conv_kernel - 1`` inputs) over all recurrent layers."""
    return m.state_bytes - ssm_state_elems(m) * m.state_dtype_bytes


def operator_elems(m: ModelSpec) -> int:
    """Transition-operator elements of one chunk over all recurrent layers (GDN: dk x dk per value head;
    Mamba-2: one scalar per head)."""
    g = m.count("gdn") * m.gdn_num_value_heads * m.gdn_key_head_dim ** 2
    return g + m.count("mamba2") * m.mamba_num_heads


def operator_bytes(m: ModelSpec) -> int:
    """Bytes of one chunk's transition operators (stored beside its end state for exact composition)."""
    return operator_elems(m) * m.state_dtype_bytes


def composition_flops(m: ModelSpec) -> float:
    """One composition ``S <- T_c S + Z_c`` over all recurrent layers: GDN ``2 dk^2 dv + dk dv`` per value
    head (dense operator times state, plus the zero-start state); Mamba-2 ``2 N P`` per head."""
    dk, dv = m.gdn_key_head_dim, m.gdn_value_head_dim
    g = m.count("gdn") * m.gdn_num_value_heads * (2.0 * dk * dk * dv + dk * dv)
    s = m.count("mamba2") * m.mamba_num_heads * 2.0 * m.mamba_head_dim * m.mamba_state_dim
    return g + s


def composition_bytes(m: ModelSpec) -> float:
    """HBM bytes one composition reads: the chunk's operator and zero-start state (the running state
    stays on chip while a program folds every chunk of one head)."""
    return float((operator_elems(m) + ssm_state_elems(m)) * m.state_dtype_bytes)


def first_attn_layer(m: ModelSpec) -> int:
    """Index of the first attention layer (0 for attention-only models)."""
    kinds = m.layer_kinds or ("attn",)
    return kinds.index("attn")


def _probe_params(m: ModelSpec) -> float:
    j = first_attn_layer(m)
    kinds = m.layer_kinds or ("attn",) * m.num_layers
    p = sum(m._recurrent_params(kinds[i]) + _mlp_params(m, i, m.num_experts_active) for i in range(j))
    kv_out = m.kv_lora_rank + m.qk_rope_head_dim if m.attention == "mla" else 2 * m.num_kv_heads * m.head_dim
    return p + m.hidden_size * kv_out


def probe_flops_per_token(m: ModelSpec) -> float:
    """A CacheBlend selection pass per token: every layer below the first attention layer (recurrent
    layers need their inputs) plus that layer's K/V projection, whose output is compared with the cache."""
    scan = scan_flops_per_token(m) * first_attn_layer(m) / max(m.num_recurrent_layers, 1)
    return 2.0 * _probe_params(m) + scan


def probe_param_bytes(m: ModelSpec) -> float:
    """Weights the selection pass reads once (leading layers with active experts + the K/V projection)."""
    return _probe_params(m) * m.dtype_bytes
