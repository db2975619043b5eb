"""``ModelSpec``: the shapes of one LLM and what they imply for KV bytes, weights and FLOPs.

All counts are per token or per sequence over the whole model (every layer), in bytes or FLOPs
(one multiply-add = 2 FLOPs). Attention layers are MLA (DeepSeek latent cache: ``kv_lora_rank`` cKV +
``qk_rope_head_dim`` k_r per token per layer) or GQA (K and V of ``num_kv_heads`` heads; MHA is GQA
with ``num_kv_heads == num_heads``). Hybrid models interleave recurrent layers (``mamba2``, ``gdn``)
whose per-sequence state does not grow with context. Formulas: docs/cost-model.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from pic.engine.specs import hybrid

LAYER_KINDS = ("attn", "mamba2", "gdn")
ATTENTIONS = ("mla", "gqa")


def _h(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Shapes of one model (Hugging Face config names in the help). Raises ValueError when inconsistent."""

    name: str = field(metadata=_h("preset / CLI name, lower-case"))
    num_layers: int = field(metadata=_h("decoder layers (num_hidden_layers)"))
    hidden_size: int = field(metadata=_h("model width"))
    num_heads: int = field(metadata=_h("query heads (num_attention_heads)"))
    attention: str = field(metadata=_h("'mla' (latent KV) or 'gqa' (MHA = gqa with num_kv_heads == num_heads)"))
    head_dim: int = field(metadata=_h("per-head q/k dim (MLA: qk_nope_head_dim + qk_rope_head_dim)"))
    num_kv_heads: int = field(metadata=_h("KV heads (num_key_value_heads); MLA: = num_heads"))
    kv_lora_rank: int = field(default=0, metadata=_h("MLA latent cKV width (512 in DeepSeek)"))
    qk_rope_head_dim: int = field(default=0, metadata=_h("MLA decoupled RoPE key k_r width (64)"))
    qk_nope_head_dim: int = field(default=0, metadata=_h("MLA per-head non-RoPE q/k dim"))
    v_head_dim: int = field(default=0, metadata=_h("MLA per-head value dim"))
    q_lora_rank: int = field(default=0, metadata=_h("MLA query low-rank width; 0 = full q projection"))
    layer_kinds: tuple[str, ...] = field(default=(), metadata=_h("per layer 'attn'|'mamba2'|'gdn'; () = all attn"))
    intermediate_size: int = field(default=0, metadata=_h("dense MLP width (SwiGLU: 3 matrices)"))
    moe_intermediate_size: int = field(default=0, metadata=_h("routed expert MLP width"))
    num_experts: int = field(default=0, metadata=_h("routed experts per MoE layer; 0 = dense model"))
    num_experts_active: int = field(default=0, metadata=_h("routed experts per token (num_experts_per_tok)"))
    num_shared_experts: int = field(default=0, metadata=_h("always-on shared experts per MoE layer"))
    first_dense_layers: int = field(default=0, metadata=_h("leading layers with a dense MLP (first_k_dense_replace)"))
    vocab_size: int = field(default=0, metadata=_h("vocabulary (LM head rows)"))
    shared_expert_intermediate_size: int = field(default=0, metadata=_h("shared expert width; 0 = moe_intermediate_size"))
    rotary_fraction: float = field(default=1.0, metadata=_h("GQA: fraction of head_dim rotated (partial_rotary_factor); 0 = NoPE"))
    mamba_num_heads: int = field(default=0, metadata=_h("Mamba-2 heads"))
    mamba_head_dim: int = field(default=0, metadata=_h("Mamba-2 head dim (d_inner = heads * head_dim)"))
    mamba_state_dim: int = field(default=0, metadata=_h("Mamba-2 SSM state size d_state"))
    mamba_num_groups: int = field(default=1, metadata=_h("Mamba-2 B/C groups"))
    mamba_chunk_size: int = field(default=256, metadata=_h("Mamba-2 SSD chunk length of the prefill kernel"))
    gdn_num_key_heads: int = field(default=0, metadata=_h("Gated DeltaNet key heads"))
    gdn_num_value_heads: int = field(default=0, metadata=_h("Gated DeltaNet value heads"))
    gdn_key_head_dim: int = field(default=0, metadata=_h("Gated DeltaNet key head dim"))
    gdn_value_head_dim: int = field(default=0, metadata=_h("Gated DeltaNet value head dim"))
    conv_kernel: int = field(default=4, metadata=_h("short causal conv width of recurrent layers"))
    dtype_bytes: int = field(default=2, metadata=_h("bytes per weight / KV element (bf16 = 2)"))
    state_dtype_bytes: int = field(default=2, metadata=_h("bytes per recurrent-state element"))

    def __post_init__(self) -> None:
        def bad(msg: str) -> ValueError:
            return ValueError(f"model {self.name!r}: {msg}")

        for f in ("num_layers", "hidden_size", "num_heads", "head_dim", "num_kv_heads"):
            if getattr(self, f) <= 0:
                raise bad(f"{f} must be > 0 (got {getattr(self, f)})")
        for f in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "q_lora_rank",
                  "intermediate_size", "moe_intermediate_size", "num_experts", "num_experts_active",
                  "num_shared_experts", "first_dense_layers", "vocab_size", "shared_expert_intermediate_size"):
            if getattr(self, f) < 0:
                raise bad(f"{f} must be >= 0")
        if self.attention not in ATTENTIONS:
            raise bad(f"attention must be one of {ATTENTIONS} (got {self.attention!r})")
        if self.attention == "mla":
            if min(self.kv_lora_rank, self.qk_rope_head_dim, self.qk_nope_head_dim, self.v_head_dim) <= 0:
                raise bad("mla needs kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim > 0")
            if self.head_dim != self.qk_nope_head_dim + self.qk_rope_head_dim:
                raise bad("mla head_dim must equal qk_nope_head_dim + qk_rope_head_dim")
        elif self.num_heads % self.num_kv_heads:
            raise bad(f"num_heads {self.num_heads} not a multiple of num_kv_heads {self.num_kv_heads}")
        if not 0.0 <= self.rotary_fraction <= 1.0:
            raise bad("rotary_fraction must be in [0, 1]")
        if self.layer_kinds:
            if len(self.layer_kinds) != self.num_layers:
                raise bad(f"layer_kinds has {len(self.layer_kinds)} entries for {self.num_layers} layers")
            unknown = sorted(set(self.layer_kinds) - set(LAYER_KINDS))
            if unknown:
                raise bad(f"unknown layer kinds {unknown} (expected {LAYER_KINDS})")
            if "attn" not in self.layer_kinds:
                raise bad("at least one attention layer is required")
        if "mamba2" in self.layer_kinds and min(self.mamba_num_heads, self.mamba_head_dim, self.mamba_state_dim,
                                                self.mamba_num_groups) <= 0:
            raise bad("mamba2 layers need mamba_num_heads, mamba_head_dim, mamba_state_dim, mamba_num_groups > 0")
        if "mamba2" in self.layer_kinds and (self.mamba_chunk_size <= 0 or self.mamba_num_heads % self.mamba_num_groups):
            raise bad("mamba2 layers need mamba_chunk_size > 0 and mamba_num_heads a multiple of mamba_num_groups")
        if "gdn" in self.layer_kinds and min(self.gdn_num_key_heads, self.gdn_num_value_heads,
                                             self.gdn_key_head_dim, self.gdn_value_head_dim) <= 0:
            raise bad("gdn layers need gdn_num_key_heads/value_heads/key_head_dim/value_head_dim > 0")
        if self.num_experts:
            if not 0 < self.num_experts_active <= self.num_experts:
                raise bad("num_experts_active must be in [1, num_experts]")
            if self.moe_intermediate_size <= 0:
                raise bad("MoE model needs moe_intermediate_size > 0")
        if self.first_dense_layers > self.num_layers:
            raise bad("first_dense_layers exceeds num_layers")
        if self.dtype_bytes not in (1, 2, 4) or self.state_dtype_bytes not in (1, 2, 4):
            raise bad("dtype_bytes / state_dtype_bytes must be 1, 2 or 4")

    # ---- Layer census ----------------------------------------------------------------------------
    def count(self, kind: str) -> int:
        """Number of layers of ``kind`` ('attn', 'mamba2', 'gdn')."""
        if not self.layer_kinds:
            return self.num_layers if kind == "attn" else 0
        return self.layer_kinds.count(kind)

    @property
    def num_attn_layers(self) -> int:
        return self.count("attn")

    @property
    def num_recurrent_layers(self) -> int:
        return self.num_layers - self.num_attn_layers

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.num_experts else 0

    @property
    def is_hybrid(self) -> bool:
        return self.num_recurrent_layers > 0

    # ---- KV / state bytes ------------------------------------------------------------------------
    @property
    def kv_row_elems(self) -> int:
        """Cached elements per token per attention layer (MLA: cKV + k_r; GQA: K + V)."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> int:
        """Resident KV bytes per token over all attention layers (DeepSeek-V2-Lite: 27*(512+64)*2 = 31,104)."""
        return self.num_attn_layers * self.kv_row_elems * self.dtype_bytes

    @property
    def rope_key_bytes_per_token(self) -> int:
        """Bytes a RoPE re-rotation must touch per token over all attention layers: MLA the 64-dim k_r,
        GQA every K head (K rows are stored whole; partial rotary still rewrites them); NoPE: 0."""
        if self.attention == "mla":
            return self.num_attn_layers * self.qk_rope_head_dim * self.dtype_bytes
        if self.rotary_fraction == 0.0:
            return 0
        return self.num_attn_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def rotary_dims_per_token(self) -> int:
        """Key dims actually rotated per token over all attention layers (rotation FLOPs = 3 per dim)."""
        if self.attention == "mla":
            return self.num_attn_layers * self.qk_rope_head_dim
        return int(self.num_attn_layers * self.num_kv_heads * self.head_dim * self.rotary_fraction)

    def _mamba_inner(self) -> int:
        return self.mamba_num_heads * self.mamba_head_dim

    def _layer_state_bytes(self, kind: str) -> int:
        if kind == "mamba2":
            ssm = self._mamba_inner() * self.mamba_state_dim * self.state_dtype_bytes
            conv_ch = self._mamba_inner() + 2 * self.mamba_num_groups * self.mamba_state_dim
        elif kind == "gdn":
            ssm = self.gdn_num_value_heads * self.gdn_key_head_dim * self.gdn_value_head_dim * self.state_dtype_bytes
            conv_ch = 2 * self.gdn_num_key_heads * self.gdn_key_head_dim + self.gdn_num_value_heads * self.gdn_value_head_dim
        else:
            return 0
        return ssm + (self.conv_kernel - 1) * conv_ch * self.dtype_bytes

    @property
    def state_bytes(self) -> int:
        """Recurrent state (SSM/delta-rule matrix + conv window) per sequence over recurrent layers."""
        return sum(self.count(k) * self._layer_state_bytes(k) for k in ("mamba2", "gdn"))

    # ---- Parameters ------------------------------------------------------------------------------
    def _attn_params(self) -> int:
        h, H = self.hidden_size, self.num_heads
        if self.attention == "mla":
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = h * self.q_lora_rank + self.q_lora_rank * H * qk if self.q_lora_rank else h * H * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * H * (
                self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + H * self.v_head_dim * h
        return h * self.head_dim * (2 * H + 2 * self.num_kv_heads)

    def _recurrent_params(self, kind: str) -> int:
        h = self.hidden_size
        if kind == "mamba2":
            di, gs = self._mamba_inner(), self.mamba_num_groups * self.mamba_state_dim
            return h * (2 * di + 2 * gs + self.mamba_num_heads) + (di + 2 * gs) * self.conv_kernel + di * h
        nk, nv = self.gdn_num_key_heads * self.gdn_key_head_dim, self.gdn_num_value_heads * self.gdn_value_head_dim
        return h * (2 * nk + 2 * nv + 2 * self.gdn_num_value_heads) + (2 * nk + nv) * self.conv_kernel + nv * h

    def _expert_params(self) -> int:
        return 3 * self.hidden_size * self.moe_intermediate_size

    def _moe_fixed_params(self) -> int:
        """Router + shared experts of one MoE layer."""
        shared = self.shared_expert_intermediate_size or self.moe_intermediate_size
        return self.hidden_size * self.num_experts + self.num_shared_experts * 3 * self.hidden_size * shared

    def _trunk_params(self, experts_per_moe_layer: float) -> float:
        p = float(self.num_attn_layers * self._attn_params())
        p += sum(self.count(k) * self._recurrent_params(k) for k in ("mamba2", "gdn"))
        p += (self.num_layers - self.num_moe_layers) * 3 * self.hidden_size * self.intermediate_size
        p += self.num_moe_layers * (self._moe_fixed_params() + experts_per_moe_layer * self._expert_params())
        return p

    @property
    def layer_params_active(self) -> int:
        """Weights one token multiplies through in the decoder layers (active experts only)."""
        return int(self._trunk_params(self.num_experts_active))

    @property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def active_params(self) -> int:
        """Weights read by a one-token forward: decoder layers (active experts) + LM head."""
        return self.layer_params_active + self.lm_head_params

    @property
    def total_params(self) -> int:
        """All weights including every expert and the input embedding (assumed untied)."""
        return int(self._trunk_params(self.num_experts)) + 2 * self.lm_head_params

    @property
    def active_param_bytes(self) -> int:
        return self.active_params * self.dtype_bytes

    def weight_bytes_read(self, num_tokens: int) -> float:
        """Weight bytes one forward over ``num_tokens`` tokens reads: every expert touched once, with
        E[distinct experts] = E * (1 - (1 - k/E)^T) under uniform routing. T=1 -> active_param_bytes."""
        if num_tokens <= 0:
            return 0.0
        experts = float(self.num_experts_active)
        if self.num_experts:
            experts = self.num_experts * (1.0 - (1.0 - self.num_experts_active / self.num_experts) ** num_tokens)
        return (self._trunk_params(experts) + self.lm_head_params) * self.dtype_bytes

    # ---- FLOPs -----------------------------------------------------------------------------------
    def _recurrent_flops_per_token(self) -> float:
        """Chunked scan work beyond the projections (engine.specs.hybrid.scan_flops_per_token)."""
        return hybrid.scan_flops_per_token(self) if self.is_hybrid else 0.0

    def linear_flops(self, num_tokens: int) -> float:
        """Projection/MLP/scan FLOPs of ``num_tokens`` tokens through the decoder layers (no LM head)."""
        return num_tokens * (2.0 * self.layer_params_active + self._recurrent_flops_per_token())

    def attention_flops(self, num_new: int, num_cached: int) -> float:
        """Score + value FLOPs of ``num_new`` tokens over ``num_cached`` earlier ones + causal self.
        MLA over cached context takes the cheaper of absorbed attention and up-projecting cKV."""
        if num_new <= 0:
            return 0.0
        n, c, H = float(num_new), float(num_cached), self.num_heads
        self_pairs = n * (n + 1) / 2
        if self.attention == "gqa":
            per_pair = 4.0 * H * self.head_dim
            return self.num_attn_layers * per_pair * (n * c + self_pairs)
        per_pair = 2.0 * H * (self.head_dim + self.v_head_dim)
        absorbed = n * c * self._mla_absorbed_pair_flops()
        expand = 2.0 * c * self.kv_lora_rank * H * (self.qk_nope_head_dim + self.v_head_dim) + n * c * per_pair
        return self.num_attn_layers * (per_pair * self_pairs + min(absorbed, expand))

    def attention_flops_fn(self) -> Callable[[int, int], float]:
        """:meth:`attention_flops` with this model's constants bound: the same operations in the same order
        (so the same floats). NOTE (speed): for callers pricing every batch step (CostModel): the layer
        census and the per-pair terms are not recomputed per call."""
        L, H = self.num_attn_layers, self.num_heads
        if self.attention == "gqa":
            per_gqa = 4.0 * H * self.head_dim

            def gqa(num_new: int, num_cached: int) -> float:
                if num_new <= 0:
                    return 0.0
                n, c = float(num_new), float(num_cached)
                return L * per_gqa * (n * c + n * (n + 1) / 2)
            return gqa
        per_pair = 2.0 * H * (self.head_dim + self.v_head_dim)
        pair_abs = self._mla_absorbed_pair_flops()
        r, q = self.kv_lora_rank, self.qk_nope_head_dim + self.v_head_dim

        def mla(num_new: int, num_cached: int) -> float:
            if num_new <= 0:
                return 0.0
            n, c = float(num_new), float(num_cached)
            x, y = n * c * pair_abs, 2.0 * c * r * H * q + n * c * per_pair
            return L * (per_pair * (n * (n + 1) / 2) + (y if y < x else x))     # (min(x, y): the same value)
        return mla

    def _mla_absorbed_pair_flops(self) -> float:
        return 2.0 * self.num_heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim)

    def decode_attention_flops_per_context_token(self) -> float:
        """Attention FLOPs per (sequence, context token) pair in one decode step, all layers."""
        if self.attention == "gqa":
            return self.num_attn_layers * 4.0 * self.num_heads * self.head_dim
        return self.num_attn_layers * self._mla_absorbed_pair_flops()

    def prefill_flops(self, num_new: int, num_cached: int) -> float:
        """FLOPs of prefilling ``num_new`` tokens after ``num_cached`` cached ones (logits for the last)."""
        if num_new <= 0:
            return 0.0
        return self.linear_flops(num_new) + self.attention_flops(num_new, num_cached) + 2.0 * self.lm_head_params

    def decode_flops(self, num_seqs: int, context_tokens: int) -> float:
        """One decode step: ``num_seqs`` new tokens over ``context_tokens`` (sum over sequences)."""
        if num_seqs <= 0:
            return 0.0
        return (self.linear_flops(num_seqs) + 2.0 * self.lm_head_params * num_seqs
                + context_tokens * self.decode_attention_flops_per_context_token())

    def decode_bytes(self, num_seqs: int, context_tokens: int) -> float:
        """HBM bytes of one decode step: weights once, all context KV, new KV rows, state read+write."""
        if num_seqs <= 0:
            return 0.0
        return (self.weight_bytes_read(num_seqs) + (context_tokens + num_seqs) * self.kv_bytes_per_token
                + 2.0 * num_seqs * self.state_bytes)

    # ---- Recurrent-state composition (LinearKV exact mode) ---------------------------------------
    def state_composition_flops(self) -> float:
        """FLOPs of one composition ``S <- T_c S + Z_c`` over all recurrent layers (GDN: dense dk x dk
        operator times the dk x dv state per value head; Mamba-2: a scalar decay per head)."""
        return hybrid.composition_flops(self)

    def state_composition_bytes(self) -> float:
        """HBM bytes of one composition: the chunk's transition operator and zero-start state."""
        return hybrid.composition_bytes(self)

    @property
    def operator_bytes(self) -> int:
        """One chunk's transition operators over all recurrent layers (GDN dk x dk per value head,
        Mamba-2 one scalar per head): what exact composition stores beside each chunk's state."""
        return hybrid.operator_bytes(self)

    # ---- Export ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Fields plus derived sizes (for config.json and ``pic models --json``)."""
        d = asdict(self)
        d["layer_kinds"] = list(self.layer_kinds)
        d.update(num_attn_layers=self.num_attn_layers, num_recurrent_layers=self.num_recurrent_layers,
                 kv_bytes_per_token=self.kv_bytes_per_token, rope_key_bytes_per_token=self.rope_key_bytes_per_token,
                 state_bytes=self.state_bytes, operator_bytes=self.operator_bytes, active_params=self.active_params, total_params=self.total_params,
                 active_param_bytes=self.active_param_bytes)
        return d
