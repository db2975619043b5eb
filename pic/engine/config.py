"""ReplayConfig: everything `pic replay` needs besides the trace (frozen, slotted, fields with help)."""

from __future__ import annotations

import math
import typing
from dataclasses import asdict, dataclass, field
from typing import Any

ROUTERS = ("round-robin", "least-loaded", "cache-aware")


def coerce_option(value: Any, typ: Any, key: str) -> Any:
    """``value`` (a ``--set`` string) as type ``typ``; non-strings pass through. Raises ``ValueError``
    naming ``key``."""
    if not isinstance(value, str):
        return value
    origin = typing.get_origin(typ)
    if typ is bool:
        low = value.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{key}: expected a boolean, got {value!r}")
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if value.lower() in ("none", "null"):
            return None
        return coerce_option(value, args[0], key)
    try:
        if typ is int:
            return int(float(value)) if value.replace(".", "", 1).replace("e", "", 1).isdigit() else int(value)
        if typ is float:
            return float(value)
    except ValueError:
        raise ValueError(f"{key}: expected {typ.__name__}, got {value!r}") from None
    return value


def coerce_overrides(cfg_cls: type, overrides: dict[str, Any], scope: str) -> dict[str, Any]:
    """``{field: value}`` with each value coerced to ``cfg_cls``'s field type (keys must be fields)."""
    hints = typing.get_type_hints(cfg_cls)
    return {k: coerce_option(v, hints[k], f"{scope}.{k}") for k, v in overrides.items()}


def _h(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """Resolved replay settings. Each policy runs its own independent simulation over the same trace."""

    policies: tuple[str, ...] = field(default=("prefix",), metadata=_h("cache policies to compare, by name"))
    policy_options: dict[str, dict[str, Any]] = field(
        default_factory=dict, metadata=_h("{policy: {option: value}} overrides (from --set policy.key=value)"))
    model: str = field(default="deepseek-v2-lite", metadata=_h("model preset name or HF config.json path"))
    gpu: str = field(default="h200", metadata=_h("GPU preset name"))
    capacity_bytes: float = field(default=math.inf, metadata=_h("cache capacity per replica in bytes (inf ok)"))
    replicas: int = field(default=1, metadata=_h("number of serving replicas, each with its own cache"))
    router: str = field(default="round-robin", metadata=_h(f"request router: {', '.join(ROUTERS)}"))
    token_budget: int = field(default=8192, metadata=_h("tokens per scheduler step (prefill chunk + decodes)"))
    closed_loop: bool = field(default=False, metadata=_h(
        "sessions: next turn arrives at max(previous finish, previous arrival + original gap)"))
    seed: int = field(default=0, metadata=_h("seed handed to every policy"))
    verify: bool = field(default=False, metadata=_h("compare tokens on every hit; count collisions"))
    check_invariants: bool = field(default=False, metadata=_h("check every cache's usage() after every event"))
    max_requests: int | None = field(default=None, metadata=_h("replay only the first N requests (by arrival)"))
    shadow_policy: str = field(default="prefix", metadata=_h("baseline cache run in lockstep beside each policy"))
    cost: dict[str, Any] = field(default_factory=dict, metadata=_h("CostConfig field overrides"))

    def __post_init__(self) -> None:
        if not self.policies:
            raise ValueError("policies: at least one policy is needed")
        if len(set(self.policies)) != len(self.policies):
            raise ValueError(f"policies: duplicate name in {', '.join(self.policies)}")
        if not self.capacity_bytes > 0:
            raise ValueError(f"capacity_bytes: must be > 0, got {self.capacity_bytes}")
        if self.replicas < 1:
            raise ValueError(f"replicas: must be >= 1, got {self.replicas}")
        if self.router not in ROUTERS:
            raise ValueError(f"router: unknown {self.router!r}; known: {', '.join(ROUTERS)}")
        if self.token_budget < 1:
            raise ValueError(f"token_budget: must be >= 1, got {self.token_budget}")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError(f"max_requests: must be >= 1, got {self.max_requests}")
        extra = sorted(set(self.policy_options) - set(self.policies) - {self.shadow_policy})
        if extra:
            raise ValueError(f"policy_options: options given for policy not replayed: {', '.join(extra)}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (infinite capacity -> None)."""
        d = asdict(self)
        d["policies"] = list(self.policies)
        d["capacity_bytes"] = None if math.isinf(self.capacity_bytes) else self.capacity_bytes
        return d


def parse_size(text: str) -> float:
    """``"40GiB"`` -> 42949672960.0; K/M/G/T (powers of 1000), KiB/MiB/GiB/TiB, plain bytes, ``inf``."""
    s = str(text).strip()
    if s.lower() in ("inf", "infinite", "unbounded"):
        return math.inf
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
             "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "b": 1}
    low = s.lower()
    for suffix in sorted(units, key=len, reverse=True):
        if low.endswith(suffix):
            num, mult = low[: -len(suffix)].strip(), units[suffix]
            break
    else:
        num, mult = low, 1
    try:
        value = float(num) * mult
    except ValueError:
        raise ValueError(f"size {text!r}: expected a number with K/M/G/KiB/MiB/GiB or 'inf'") from None
    if not value > 0 or math.isnan(value):
        raise ValueError(f"size {text!r}: must be > 0")
    return float(value)
