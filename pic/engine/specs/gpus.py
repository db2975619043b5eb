"""``GpuSpec`` presets. H200 figures were measured on the lent H200 (DESIGN.md §6); H100/A100 apply the
same measured/spec ratios (bf16 0.80, HBM copy 0.875) to their datasheets (docs/models.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pic.traces.suggest import did_you_mean


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator: achievable dense bf16 FLOP/s, device-copy HBM bytes/s, board power, HBM size."""

    name: str = field(metadata={"help": "preset / CLI name"})
    bf16_flops: float = field(metadata={"help": "dense bf16 matmul FLOP/s actually reached (not the datasheet)"})
    hbm_bytes_per_s: float = field(metadata={"help": "HBM bandwidth of a device-to-device copy, bytes/s"})
    busy_watts: float = field(metadata={"help": "board power under sustained load, W"})
    idle_watts: float = field(metadata={"help": "board power when idle, W"})
    hbm_capacity_bytes: int = field(metadata={"help": "HBM capacity, bytes"})
    host_link_bytes_per_s: float = field(default=50e9, metadata={"help": "host<->GPU link (PCIe/NVLink-C2C), bytes/s"})

    def __post_init__(self) -> None:
        for f in ("bf16_flops", "hbm_bytes_per_s", "busy_watts", "hbm_capacity_bytes", "host_link_bytes_per_s"):
            if not getattr(self, f) > 0:
                raise ValueError(f"gpu {self.name!r}: {f} must be > 0")
        if not 0 <= self.idle_watts <= self.busy_watts:
            raise ValueError(f"gpu {self.name!r}: idle_watts must be in [0, busy_watts]")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: CLI name -> GpuSpec
GPUS: dict[str, GpuSpec] = {g.name: g for g in (
    # power: NVML on the lent H200 running DeepSeek-V2-Lite (docs/bench-execute.md): 673 W median over 36
    # full prefills (1.3K-9.6K tokens, 27 layers), 121-125 W idle seconds after load (85 W cold)
    GpuSpec("h200", bf16_flops=790e12, hbm_bytes_per_s=4.2e12, busy_watts=670.0, idle_watts=120.0,
            hbm_capacity_bytes=141_000_000_000, host_link_bytes_per_s=55e9),
    GpuSpec("h100", bf16_flops=791e12, hbm_bytes_per_s=2.93e12, busy_watts=600.0, idle_watts=75.0,
            hbm_capacity_bytes=80_000_000_000, host_link_bytes_per_s=55e9),
    GpuSpec("a100", bf16_flops=250e12, hbm_bytes_per_s=1.78e12, busy_watts=380.0, idle_watts=55.0,
            hbm_capacity_bytes=80_000_000_000, host_link_bytes_per_s=25e9),
)}


def gpu_from_name(name: str) -> GpuSpec:
    """Preset by CLI name (case-insensitive); unknown -> ValueError listing the names."""
    key = name.strip().lower()
    if key not in GPUS:
        raise ValueError(f"unknown gpu {name!r}{did_you_mean(name, GPUS)}; known: {', '.join(GPUS)}")
    return GPUS[key]
