"""HBM bytes of one forward, counted from what each kernel reads and writes (bf16 unless the spec says so).

Two figures per forward:

* ``hbm_bytes`` (``forward_bytes``) — every byte that has to cross HBM at least once: weights (every dense matrix once, the MoE
  experts actually routed to once), the latent rows each attention layer reads (the distinct rows of all its
  sequences), new latent rows written, partial-page copies (read + write), embedding rows, LM head, and the
  activations each GEMM/elementwise op reads and writes.
* ``access_bytes`` (``issued_bytes``) — every byte each op reads and writes as issued: the forward runs on
  the ``meta`` device under a dispatch mode that adds up the operands of every torch op (fp32 temporaries
  included), and the Triton kernels are counted from their access pattern (every extend program streams
  its whole causal context tile by tile). Repeats hit L2 when they fit, so the DRAM traffic lies between
  the two; ncu on a sample: docs/bench-execute.md.
"""

from __future__ import annotations

from typing import Any

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
            "hbm_bytes": base + kv_read_unique * elt}


def _extend_loads(b: HostBatch, H: int, block_t: int, block_hh: int, block_n: int) -> int:
    """Latent rows the extend kernel loads per layer: Σ over programs of the tiles up to its last query."""
    head_blocks = -(-H // block_hh)
    total = 0
    for L, q0, q1 in zip(b.seq_lens.tolist(), b.cu_q[:-1].tolist(), b.cu_q[1:].tolist(), strict=True):
        t = np.arange(0, q1 - q0, block_t)
        last = np.minimum(L - (q1 - q0) + t + block_t, L)
        total += int((-(-last // block_n) * block_n).sum())
    return total * head_blocks


# ---- bytes as issued, op by op ----------------------------------------------------------------------
_FREE = {"aten.empty.memory_format", "aten.empty_like.default", "aten.empty_strided.default",
         "aten.lift_fresh.default", "aten._local_scalar_dense.default"}


def issued_bytes(spec: ExecSpec, b: HostBatch, dtype: Any = None, tile: dict | None = None,
                 decode_max_new: int = 32) -> float:
    """Bytes every op of one forward reads and writes, as issued (no cache reuse assumed), over the full
    depth: the forward runs on the ``meta`` device under a dispatch mode that adds up each torch op's
    operands (row gathers/scatters count the rows they touch, views nothing), and the Triton kernels (RoPE,
    extend, decode) are counted from their access pattern. An upper bound of the DRAM traffic."""
    import dataclasses

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    from pic.kernels.executor.device import to_device
    from pic.kernels.model import layers as L
    from pic.kernels.model.model import Model
    from pic.kernels.model.weights import _shapes

    # NOTE: counted in bf16 (the meta grouped GEMM takes bf16 only), then scaled for other dtypes
    scale = torch.empty(0, dtype=dtype or torch.bfloat16).element_size() / 2
    dtype = torch.bfloat16
    elt = 2
    full = dataclasses.replace(spec, num_layers=spec.full_layers)
    meta = torch.device("meta")
    w = {"layers": [{k: torch.empty(s, dtype=dtype, device=meta) for k, s in _shapes(full, i).items()}
                    for i in range(full.num_layers)],
         **{k: torch.empty(s, dtype=dtype, device=meta) for k, s in
            (("embed", (full.vocab_size, full.hidden_size)), ("norm", (full.hidden_size,)),
             ("lm_head", (full.vocab_size, full.hidden_size)))}}
    tile = tile or {}
    bt, bhh, bn = tile.get("BLOCK_T", 2), tile.get("BLOCK_HH", 32), tile.get("BLOCK_N", 64)
    H, row = full.num_heads, full.row
    hb = b
    if hb.num_new <= decode_max_new:
        from pic.kernels.executor.layout import as_decode
        hb = as_decode(hb)
    total = [0.0]

    def fake_rope(x, positions, cfg=None, scale=None, out=None):
        total[0] += 2 * x.numel() * x.element_size() + positions.numel() * 4
        return torch.empty(x.shape, dtype=x.dtype, device=meta)

    def fake_extend(q_nope, q_rope, cache, *a, **k):
        kv = _extend_loads(hb, H, bt, bhh, bn) * row * elt
        total[0] += kv + 2 * q_nope.numel() * elt + q_rope.numel() * elt
        return torch.empty(q_nope.shape, dtype=q_nope.dtype, device=meta)

    def fake_decode(q_nope, q_rope, cache, *a, **k):
        head_blocks = 1 if H <= 16 else -(-H // 64)       # decode tiles: 16 heads, or 64-head blocks
        kv = int(hb.seq_lens.sum()) * row * elt * head_blocks
        total[0] += kv + 2 * q_nope.numel() * elt + q_rope.numel() * elt
        return torch.empty(q_nope.shape, dtype=q_nope.dtype, device=meta)

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = str(func)
            if func.is_view or name in _FREE:
                return out
            if name.startswith("aten.index_select"):
                n = 2 * _nbytes(out) + _nbytes(args[2])
            elif name.startswith(("aten.index_copy", "aten.index_add")):
                n = (2 if "copy" in name else 3) * _nbytes(args[3]) + _nbytes(args[2])
            else:
                n = sum(_nbytes(x) for x in tree_leaves((args, kwargs, out)) if isinstance(x, torch.Tensor))
            total[0] += n
            return out

    saved = (L.rope, L.mla_extend, L.mla_decode)
    L.rope, L.mla_extend, L.mla_decode = fake_rope, fake_extend, fake_decode
    try:
        model = Model(full, w, tile=tile, grouped=True)
        batch = to_device(b, full, meta, decode_max_new)
        cache = torch.empty(full.num_layers, 1, 64, row, dtype=dtype, device=meta)   # meta: never indexed
        with Count():
            model.forward(batch, cache)
    finally:
        L.rope, L.mla_extend, L.mla_decode = saved
    return total[0] * scale


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size()
