"""Model and GPU specs: presets with published shapes, Hugging Face config loading, derived sizes.

``ModelSpec`` (engine.specs.models) gives KV bytes/token, recurrent state bytes, active weight bytes and
prefill/decode FLOPs; ``GpuSpec`` (engine.specs.gpus) the roofline numbers. ``model_from_name`` accepts a
preset name or a path to a ``config.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pic.engine.specs.gpus import GPUS, GpuSpec, gpu_from_name
from pic.engine.specs.hf import model_from_hf_config
from pic.engine.specs.models import LAYER_KINDS, ModelSpec
from pic.engine.specs.presets import ALIASES, MODELS
from pic.traces.suggest import did_you_mean

__all__ = ["GPUS", "LAYER_KINDS", "MODELS", "GpuSpec", "ModelSpec", "catalog", "gpu_from_name",
           "model_from_hf_config", "model_from_name"]


def model_from_name(name: str) -> ModelSpec:
    """Preset by CLI name (case-insensitive, a few aliases) or a path to a HF ``config.json`` / its folder.

    Unknown names raise ValueError listing the presets.
    """
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key in MODELS:
        return MODELS[key]
    p = Path(name).expanduser()
    if p.suffix == ".json" or p.exists() or "/" in name:
        return model_from_hf_config(p)
    raise ValueError(f"unknown model {name!r}{did_you_mean(name, [*MODELS, *ALIASES])}; known: {', '.join(MODELS)} "
                     "(or a path to a config.json)")


def catalog(extra_models: list[ModelSpec] | None = None) -> dict[str, Any]:
    """Everything ``pic models`` shows: every model preset (+ ``extra_models``) and GPU preset as dicts."""
    models = list(MODELS.values()) + list(extra_models or [])
    return {"models": [m.to_dict() for m in models], "gpus": [g.to_dict() for g in GPUS.values()]}
