"""Build a ``ModelSpec`` from a Hugging Face ``config.json``.

Understood families: DeepSeek-V2/V3 and Kimi/Moonlight (MLA, ``kv_lora_rank``), Llama/Qwen2/Mistral/Mixtral
(GQA), Qwen3-Next (``layer_types`` linear_attention -> Gated DeltaNet), Granite-4.0-H (``layer_types`` mamba ->
Mamba-2), OLMo-Hybrid (``olmo_hybrid``: Gated DeltaNet, 3:1 by default). Multimodal configs with a ``text_config`` are read from it. Errors name the file and the field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pic.engine.specs.models import ModelSpec

_KIND_MAP = {"attention": "attn", "full_attention": "attn", "sliding_attention": "attn", "attn": "attn",
             "linear_attention": "gdn", "gdn": "gdn", "mamba": "mamba2", "mamba2": "mamba2"}
_DTYPES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "float8_e4m3fn": 1}
#: largest value any shape field may take (layers, widths, heads, experts, vocabulary): far above every
#: published model, small enough that sizes derived from it stay exact
MAX_DIM = 1 << 24


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"{path}: cannot read config: {(e.strerror or str(e)).lower()}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: config is not UTF-8 text (byte {e.start})") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    except RecursionError:
        raise ValueError(f"{path}: invalid JSON: nested too deeply to read") from None
    except ValueError as e:   # e.g. an integer of more than 4300 digits
        raise ValueError(f"{path}: invalid JSON: {str(e)[:80]}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: top level must be a JSON object")
    inner = cfg.get("text_config")
    if isinstance(inner, dict) and "num_hidden_layers" not in cfg:
        cfg = {**inner, "_outer_model_type": cfg.get("model_type")}
    return cfg


class _Fields:
    """Typed access to config keys with ``file: field: problem`` errors."""

    def __init__(self, path: Path, cfg: dict[str, Any]) -> None:
        self.path, self.cfg = path, cfg

    def int(self, *keys: str, default: int | None = None, minimum: int = 0) -> int:
        for k in keys:
            v = self.cfg.get(k)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or (
                    isinstance(v, float) and not (math.isfinite(v) and v.is_integer())):
                raise ValueError(f"{self.path}: {k}: expected a non-negative integer, got {_show(v)}")
            if not minimum <= v <= MAX_DIM:
                raise ValueError(f"{self.path}: {k}: {_show(v)} is out of range ({minimum} to {MAX_DIM:,})")
            return int(v)
        if default is None:
            raise ValueError(f"{self.path}: {keys[0]}: missing (required)")
        return default

    def float(self, key: str, default: float, lo: float, hi: float) -> float:
        v = self.cfg.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
            raise ValueError(f"{self.path}: {key}: expected a number from {lo:g} to {hi:g}, got {_show(v)}")
        return float(v)


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _layer_kinds(path: Path, cfg: dict[str, Any], num_layers: int) -> tuple[str, ...]:
    types = cfg.get("layer_types") or cfg.get("layers_block_type")
    if types is None and cfg.get("model_type") in ("qwen3_next", "olmo_hybrid"):
        interval = _Fields(path, cfg).int("full_attention_interval", default=4, minimum=1)   # OLMo-Hybrid: i % 4 == 3
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(num_layers)]
    if types is None:
        return ()
    if not isinstance(types, list) or len(types) != num_layers:
        raise ValueError(f"{path}: layer_types: expected a list of {num_layers} layer names")
    kinds = []
    for i, t in enumerate(types):
        if not isinstance(t, str) or t not in _KIND_MAP:
            raise ValueError(f"{path}: layer_types[{i}]: unknown layer type {_show(t)} (known: {sorted(_KIND_MAP)})")
        kinds.append(_KIND_MAP[t])
    return () if all(k == "attn" for k in kinds) else tuple(kinds)


def _gdn_shapes(cfg: dict[str, Any], f: _Fields, hidden: int, heads: int) -> dict[str, int]:
    """Gated DeltaNet shapes; OLMo-Hybrid configs may leave them to its defaults (heads = attention heads,
    dk = 0.75 hidden / heads, dv = 2 dk: transformers ``OlmoHybridConfig``)."""
    olmo = cfg.get("model_type") == "olmo_hybrid"
    nk = f.int("linear_num_key_heads", default=heads if olmo else None)
    nv = f.int("linear_num_value_heads", default=heads if olmo else None)
    dk = f.int("linear_key_head_dim", default=int(0.75 * hidden / max(nk, 1)) if olmo else None)
    dv = f.int("linear_value_head_dim", default=2 * dk if olmo else None)
    return {"gdn_num_key_heads": nk, "gdn_num_value_heads": nv, "gdn_key_head_dim": dk, "gdn_value_head_dim": dv,
            "conv_kernel": f.int("linear_conv_kernel_dim", default=4)}


def _name_for(path: Path) -> str:
    return (path.parent.name if path.name == "config.json" and path.parent.name else path.stem).lower()


def model_from_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Read a Hugging Face ``config.json`` (or a directory holding one) into a ModelSpec.

    Raises ValueError naming the file and field when a key is missing, mistyped or inconsistent.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    cfg = _read(path)
    f = _Fields(path, cfg)
    num_layers = f.int("num_hidden_layers", "num_layers", "n_layer")
    hidden = f.int("hidden_size", "d_model", "n_embd")
    heads = f.int("num_attention_heads", "n_head")
    mla = cfg.get("kv_lora_rank") not in (None, 0)
    kv: dict[str, Any] = {}
    if mla:
        nope, rope = f.int("qk_nope_head_dim"), f.int("qk_rope_head_dim")
        kv = {"attention": "mla", "head_dim": nope + rope, "num_kv_heads": heads, "kv_lora_rank": f.int("kv_lora_rank"),
                  "qk_rope_head_dim": rope, "qk_nope_head_dim": nope, "v_head_dim": f.int("v_head_dim"),
                  "q_lora_rank": f.int("q_lora_rank", default=0)}
    else:
        if heads == 0:
            raise ValueError(f"{path}: num_attention_heads: must be > 0")
        nope_pos = cfg.get("position_embedding_type") == "nope" or cfg.get("use_rope") is False
        rotary = 0.0 if nope_pos else (f.float("partial_rotary_factor", 1.0, 0.0, 1.0) or 1.0)
        kv = {"attention": "gqa", "head_dim": f.int("head_dim", default=hidden // heads),
                  "num_kv_heads": f.int("num_key_value_heads", default=heads), "rotary_fraction": rotary}
    num_experts = f.int("n_routed_experts", "num_experts", "num_local_experts", default=0)
    inter = f.int("intermediate_size", default=0)
    shared_inter = f.int("shared_expert_intermediate_size", "shared_intermediate_size", default=0)
    moe = {"num_experts": num_experts, "intermediate_size": inter}
    if num_experts:
        moe_inter = f.int("moe_intermediate_size", default=0) or inter
        num_shared = f.int("n_shared_experts", default=1 if shared_inter else 0)
        moe.update(moe_intermediate_size=moe_inter, num_experts_active=f.int("num_experts_per_tok", "top_k"),
                   num_shared_experts=num_shared, shared_expert_intermediate_size=shared_inter,
                   first_dense_layers=f.int("first_k_dense_replace", default=0))
    elif shared_inter and not inter:
        moe["intermediate_size"] = shared_inter
    elif shared_inter and cfg.get("model_type") == "granitemoehybrid":
        moe["intermediate_size"] = shared_inter  # Granite dense variants run the "shared" MLP only
    kinds = _layer_kinds(path, cfg, num_layers)
    rec: dict[str, Any] = {}
    if "mamba2" in kinds:
        rec.update(mamba_num_heads=f.int("mamba_n_heads"), mamba_head_dim=f.int("mamba_d_head"),
                   mamba_state_dim=f.int("mamba_d_state"), mamba_num_groups=f.int("mamba_n_groups", default=1),
                   conv_kernel=f.int("mamba_d_conv", default=4), mamba_chunk_size=f.int("mamba_chunk_size", default=256))
    if "gdn" in kinds:
        rec.update(_gdn_shapes(cfg, f, hidden, heads))
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    ssm_dtype = cfg.get("mamba_ssm_dtype")
    if kinds and isinstance(ssm_dtype, str) and ssm_dtype in _DTYPES:
        rec["state_dtype_bytes"] = _DTYPES[ssm_dtype]
    try:
        return ModelSpec(name=name or _name_for(path), num_layers=num_layers, hidden_size=hidden, num_heads=heads,
                         layer_kinds=kinds, vocab_size=f.int("vocab_size", default=0),
                         dtype_bytes=_DTYPES.get(dtype, 2), **kv, **moe, **rec)
    except (ValueError, ZeroDivisionError, OverflowError) as e:
        raise ValueError(f"{path}: {e}") from None
