"""Library entry points behind ``pic execute --gpu`` and ``pic calibrate --gpu``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch

from pic.engine.planlog import PlanLog
from pic.engine.specs import ModelSpec
from pic.kernels.executor.device import GpuUnavailable, check_gpu
from pic.kernels.executor.run import ExecConfig, Executor
from pic.kernels.model import Model, exec_spec, load_hf_weights, random_weights

Progress = Callable[[int, int, str], None]

#: CUDA device name fragment -> GpuSpec preset
_GPU_NAMES = {"H200": "h200", "H100": "h100", "A100": "a100"}


def gpu_preset(device: torch.device) -> str:
    """The GpuSpec preset of a CUDA device (ValueError when pic has none for it)."""
    name = torch.cuda.get_device_name(device)
    for frag, preset in _GPU_NAMES.items():
        if frag in name:
            return preset
    raise ValueError(f"GPU {name!r} has no pic GPU preset (known: {', '.join(_GPU_NAMES.values())}); "
                     f"pass --gpu-name to label the profile")


def build_model(model: ModelSpec, *, layers: int | None = None, weights: str | None = None,
                device: torch.device | None = None, seed: int = 0, dtype: torch.dtype = torch.bfloat16,
                tile: dict | None = None) -> Model:
    """The executed model: random weights of the real shapes (drawn on the device) or ``weights`` (a folder
    of DeepSeek-V2-layout safetensors with its config.json); ``layers`` builds the first N only."""
    device = device or check_gpu()
    spec = exec_spec(model, layers=layers, hf_config=weights)
    w = load_hf_weights(weights, spec, device, dtype) if weights else random_weights(spec, device, dtype, seed)
    return Model(spec, w, tile=tile)


def open_meter(energy: bool, device: torch.device) -> Any:
    """An EnergyMeter on ``device`` (EnergyUnavailable when NVML is missing), or None when not wanted."""
    if not energy:
        return None
    from pic.kernels.energy import EnergyMeter

    return EnergyMeter(device.index or 0, sync=lambda: torch.cuda.synchronize(device))


def execute(log: PlanLog, model: Model, indices: list[int], config: ExecConfig, meter: Any = None,
            progress: Progress | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the Plans ``indices`` of ``log`` on ``model``; returns (rows, meta for execute.json)."""
    if meter is not None:
        meter.idle_watts(1.0)
    t0 = time.perf_counter()
    ex = Executor(model, log, config, meter)
    try:
        rows = ex.run(indices, progress)
    finally:
        ex.release()
    spec = model.spec
    dev = model.device
    meta = {"model": spec.name, "layers_built": spec.num_layers, "full_layers": spec.full_layers,
            "depth_scale": spec.depth_scale, "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "torch": torch.__version__, "policy": log.meta.get("policy"), "trace": log.meta.get("trace"),
            "replay": log.meta.get("replay"), "priced_with": (log.meta.get("cost") or {}).get("profile") or "roofline",
            "sample": indices, "fills": ex.num_fills,
            "idle_watts": None if meter is None else meter.idle_w, "exec_config": asdict(config),
            "grouped_moe": model.grouped, "wall_seconds": time.perf_counter() - t0,
            "spec": spec.to_dict()}
    return rows, meta


__all__ = ["GpuUnavailable", "build_model", "check_gpu", "execute", "gpu_preset", "open_meter"]
