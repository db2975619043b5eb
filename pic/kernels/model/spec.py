"""``ExecSpec``: what the executor needs to build DeepSeek-V2-style decoder layers from a ``ModelSpec``.

A ModelSpec carries the shapes the cost model prices; running the layers also needs RoPE (YaRN), the
softmax scale, norm epsilon and MoE routing details, which come from the model's Hugging Face config when
there is one (``rope_scaling``, ``rms_norm_eps``, ``routed_scaling_factor``, ``norm_topk_prob``) and from the
published DeepSeek-V2-Lite config otherwise.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pic.engine.specs import ModelSpec
from pic.kernels.rope.kernel import RopeConfig
from pic.kernels.rope.reference import yarn_mscale

#: DeepSeek-V2(-Lite) / V3 rope_scaling (config.json): YaRN factor 40 over a 4K original context
DEEPSEEK_YARN = {"factor": 40.0, "original_max_position": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                 "mscale": 0.707, "mscale_all_dim": 0.707}


@dataclass(frozen=True, slots=True)
class ExecSpec:
    """Shapes and numerics of the executed layers (MLA attention, dense MLP / MoE). Raises ValueError when
    the model cannot run here (not MLA, hybrid layers)."""

    name: str
    num_layers: int = field(metadata={"help": "layers actually built (a --layers subset)"})
    full_layers: int = field(metadata={"help": "layers of the real model (times are scaled to this depth)"})
    hidden_size: int
    num_heads: int
    kv_lora_rank: int
    rope_dim: int
    nope_dim: int
    v_dim: int
    q_lora_rank: int
    intermediate_size: int
    moe_intermediate_size: int
    num_experts: int
    top_k: int
    num_shared_experts: int
    shared_intermediate_size: int
    first_dense_layers: int
    vocab_size: int
    rope: RopeConfig
    rms_eps: float = 1e-6
    routed_scaling_factor: float = 1.0
    norm_topk_prob: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.num_layers <= self.full_layers:
            raise ValueError(f"layers: must be in [1, {self.full_layers}] for {self.name}, got {self.num_layers}")
        if self.vocab_size <= 0:
            raise ValueError(f"model {self.name!r}: vocab_size must be > 0 to run it")

    @property
    def row(self) -> int:
        """Latent cache values per token per layer (cKV + k_r)."""
        return self.kv_lora_rank + self.rope_dim

    @property
    def sm_scale(self) -> float:
        """Softmax scale: 1/√(nope + rope), times YaRN's mscale(factor, mscale_all_dim)² (DeepSeek-V2)."""
        s = 1.0 / math.sqrt(self.nope_dim + self.rope_dim)
        if self.rope.factor > 1:
            m = yarn_mscale(self.rope.factor, self.rope.mscale_all_dim)
            s *= m * m
        return s

    @property
    def depth_scale(self) -> float:
        """Factor from the built layers to the full depth (1.0 when all layers are built)."""
        return self.full_layers / self.num_layers

    def is_moe(self, layer: int) -> bool:
        return self.num_experts > 0 and layer >= self.first_dense_layers

    def with_layers(self, num_layers: int | None) -> ExecSpec:
        return self if num_layers is None else replace(self, num_layers=num_layers)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict
        d = asdict(self)
        d["rope"] = asdict(self.rope)
        return d


def exec_spec(model: ModelSpec, layers: int | None = None, hf_config: str | Path | None = None) -> ExecSpec:
    """ExecSpec of ``model``; ``layers`` builds only the first N; ``hf_config`` (a config.json or its folder)
    supplies RoPE/YaRN, norm epsilon and routing details (DeepSeek-V2-Lite's published values otherwise)."""
    if model.attention != "mla" or model.is_hybrid:
        raise ValueError(f"model {model.name!r}: the executor runs MLA decoder layers (DeepSeek-V2 style); "
                         f"this model is {model.attention}{' hybrid' if model.is_hybrid else ''}")
    cfg: dict[str, Any] = {}
    if hf_config is not None:
        p = Path(hf_config)
        p = p / "config.json" if p.is_dir() else p
        try:
            cfg = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{p}: cannot read config: {e}") from None
    rope = _rope_from(cfg, model)
    shared = model.shared_expert_intermediate_size or model.moe_intermediate_size
    return ExecSpec(
        name=model.name, num_layers=layers or model.num_layers, full_layers=model.num_layers,
        hidden_size=model.hidden_size, num_heads=model.num_heads, kv_lora_rank=model.kv_lora_rank,
        rope_dim=model.qk_rope_head_dim, nope_dim=model.qk_nope_head_dim, v_dim=model.v_head_dim,
        q_lora_rank=model.q_lora_rank, intermediate_size=model.intermediate_size,
        moe_intermediate_size=model.moe_intermediate_size, num_experts=model.num_experts,
        top_k=model.num_experts_active, num_shared_experts=model.num_shared_experts,
        shared_intermediate_size=shared * model.num_shared_experts,
        first_dense_layers=model.first_dense_layers if model.num_experts else model.num_layers,
        vocab_size=model.vocab_size, rope=rope, rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        routed_scaling_factor=float(cfg.get("routed_scaling_factor", 1.0)),
        norm_topk_prob=bool(cfg.get("norm_topk_prob", False)))


def _rope_from(cfg: dict[str, Any], model: ModelSpec) -> RopeConfig:
    base = float(cfg.get("rope_theta", 10000.0))
    if cfg:
        rs = cfg.get("rope_scaling") or {}
    else:   # no config: the DeepSeek presets use YaRN x40 (V2-Lite's values)
        rs = {**DEEPSEEK_YARN, "type": "yarn"} if model.name.startswith("deepseek") else {}
    if rs and rs.get("type", rs.get("rope_type")) == "yarn":
        return RopeConfig(rope_dim=model.qk_rope_head_dim, base=base, factor=float(rs.get("factor", 1.0)),
                          original_max_position=int(rs.get("original_max_position_embeddings",
                                                           rs.get("original_max_position", 4096))),
                          beta_fast=float(rs.get("beta_fast", 32.0)), beta_slow=float(rs.get("beta_slow", 1.0)),
                          mscale=float(rs.get("mscale", 1.0)), mscale_all_dim=float(rs.get("mscale_all_dim", 1.0)))
    return RopeConfig(rope_dim=model.qk_rope_head_dim, base=base)


def tiny_model_spec(num_layers: int = 2, num_experts: int = 4, name: str = "tiny-mla") -> ModelSpec:
    """A small DeepSeek-V2-shaped ModelSpec for tests and CPU runs under the Triton interpreter."""
    return ModelSpec(name=name, num_layers=num_layers, hidden_size=64, num_heads=2, num_kv_heads=2,
                     attention="mla", head_dim=48, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=32,
                     v_head_dim=32, q_lora_rank=0, intermediate_size=96, moe_intermediate_size=32,
                     num_experts=num_experts, num_experts_active=2 if num_experts else 0,
                     num_shared_experts=1 if num_experts else 0, first_dense_layers=1 if num_experts else 0,
                     vocab_size=512)
