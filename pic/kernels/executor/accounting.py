"""HBM bytes of one forward, counted from what each kernel reads and writes (bf16 unless the spec says so).

Two figures per forward:

* ``hbm_bytes`` — every byte that has to cross HBM at least once: weights (every dense matrix once, the MoE
  experts actually routed to once), the latent rows each attention layer reads (the distinct rows of all its
  sequences), new latent rows written, partial-page copies (read + write), embedding rows, LM head, and the
  activations each GEMM/elementwise op reads and writes.
* ``access_bytes`` — the same with the extend kernel's loads counted per program, as issued: every
  (head block, token block, sequence) program streams its whole causal context tile by tile. Repeats are
  mostly L2 hits on the H200, so the DRAM traffic lies between the two (ncu measures it on a sample).
"""

from __future__ import annotations

import numpy as np

from pic.kernels.executor.layout import HostBatch
from pic.kernels.model.spec import ExecSpec


def forward_bytes(spec: ExecSpec, b: HostBatch, experts_touched: list[int] | None = None, elt: int = 2,
                  block_t: int = 2, block_hh: int = 32, block_n: int = 64) -> dict[str, float]:
    """Byte counts of one forward of ``b`` through all ``spec.full_layers`` layers (the full depth: a
    ``--layers`` subset is priced as the whole model). ``experts_touched[l]``: distinct routed experts of
    MoE layer l (measured; default: E·(1 − (1 − k/E)^T) under uniform routing)."""
    T, L, H, h = b.num_new, spec.full_layers, spec.num_heads, spec.hidden_size
    row, r = spec.row, spec.kv_lora_rank
    qk = spec.nope_dim + spec.rope_dim
    attn_w = (h * H * qk if not spec.q_lora_rank else h * spec.q_lora_rank + spec.q_lora_rank * (H * qk + 1)) \
        + h * row + r + H * (spec.nope_dim + spec.v_dim) * r + H * spec.v_dim * h + 2 * h
    dense_w = 3 * h * spec.intermediate_size
    expert_w = 3 * h * spec.moe_intermediate_size
    moe_fixed = spec.num_experts * h + 3 * h * spec.shared_intermediate_size
    n_moe = sum(spec.is_moe(i) for i in range(L))
    if experts_touched is None:
        E, k = spec.num_experts, spec.top_k
        touched = [E * (1.0 - (1.0 - k / E) ** T) if E else 0.0] * n_moe
    else:   # measured on the built layers: their mean stands for the unbuilt ones
        extra = n_moe - len(experts_touched)
        touched = list(experts_touched) + ([float(np.mean(experts_touched))] * extra if extra > 0 else [])
    weights = L * attn_w + (L - n_moe) * dense_w + n_moe * moe_fixed + sum(touched) * expert_w
    weights += h + spec.vocab_size * h                                   # final norm + LM head
    # activations per token per layer: GEMM inputs/outputs, norms, residual adds, rope
    act_attn = 2 * h + h + H * qk + row + H * qk + 2 * H * spec.rope_dim + H * spec.nope_dim + H * r \
        + H * (r + spec.rope_dim) + H * r + H * r + H * spec.v_dim + H * spec.v_dim + h + 3 * h
    act_dense = 2 * h + h + 2 * spec.intermediate_size + 2 * spec.intermediate_size + spec.intermediate_size + h + 3 * h
    k = spec.top_k
    act_moe = 2 * h + h + spec.num_experts + k * (2 * h + 2 * spec.moe_intermediate_size * 2
                                                  + spec.moe_intermediate_size + h + 2 * h) \
        + (h + 4 * spec.shared_intermediate_size + spec.shared_intermediate_size + h) + 3 * h
    acts = T * (L * act_attn + (L - n_moe) * act_dense + n_moe * act_moe) + T * h
    kv_write = T * L * row
    copies = 2 * b.copy_src.shape[0] * L * row
    kv_read_unique = L * int(b.seq_lens.max()) * row
    kv_read_access = L * _extend_loads(b, H, block_t, block_hh, block_n) * row
    base = (weights + acts + kv_write + copies) * elt
    return {"weights": weights * elt, "activations": acts * elt, "kv_write": kv_write * elt,
            "copies": copies * elt, "kv_read": kv_read_unique * elt, "kv_read_access": kv_read_access * elt,
            "hbm_bytes": base + kv_read_unique * elt, "access_bytes": base + kv_read_access * elt}


def _extend_loads(b: HostBatch, H: int, block_t: int, block_hh: int, block_n: int) -> int:
    """Latent rows the extend kernel loads per layer: Σ over programs of the tiles up to its last query."""
    head_blocks = -(-H // block_hh)
    total = 0
    for L, q0, q1 in zip(b.seq_lens.tolist(), b.cu_q[:-1].tolist(), b.cu_q[1:].tolist(), strict=True):
        t = np.arange(0, q1 - q0, block_t)
        last = np.minimum(L - (q1 - q0) + t + block_t, L)
        total += int((-(-last // block_n) * block_n).sum())
    return total * head_blocks
