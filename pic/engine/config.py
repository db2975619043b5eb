"""ReplayConfig: everything `pic replay` needs besides the trace (frozen, slotted, fields with help)."""

from __future__ import annotations

import math
import typing
from dataclasses import asdict, dataclass, field
from typing import Any

from pic.traces.options import build_config, coerce_fields, coerce_value, default_range  # noqa: F401 - build_config re-exported

ROUTERS = ("round-robin", "least-loaded", "cache-aware")
#: metrics a goodput SLO may bound (vLLM --goodput keys)
SLO_KEYS = ("ttft", "tpot", "e2el")
#: the exact-prefix policies: SGLang's radix cache and vLLM's prefix caching (the baselines a run may compare
#: with; the report's candidates for "the best prefix cache")
EXACT_PREFIX = ("prefix", "block-hash")
#: bounds of what is physically meaningful (each replica is simulated; a step's token budget is a batch)
MAX_REPLICAS = 4096
MAX_TOKEN_BUDGET = 1 << 24
#: largest finite cache capacity (1 EiB per replica); beyond it, say ``inf``
MAX_CAPACITY_BYTES = float(1 << 60)
MAX_SEED = (1 << 63) - 1



def coerce_option(value: Any, typ: Any, key: str) -> Any:
    """``value`` (a ``--set`` string) as type ``typ``, range-checked by ``traces.options`` defaults;
    non-strings pass through the same checks. Raises ``ValueError`` naming ``key``."""
    base = next((a for a in typing.get_args(typ) if a is not type(None)), typ)
    return coerce_value(value, typ, key, default_range(key.rsplit(".", 1)[-1], base))


def coerce_overrides(cfg_cls: type, overrides: dict[str, Any], scope: str) -> dict[str, Any]:
    """``{field: value}`` with each value coerced to ``cfg_cls``'s field type and range (keys must be
    fields; a field's ``metadata={"range": (lo, hi)}`` overrides the default range)."""
    return coerce_fields(cfg_cls, overrides, scope)


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
    baselines: tuple[str, ...] = field(default=EXACT_PREFIX, metadata=_h(
        "exact-prefix caches replayed beside the policies (same trace, capacity and serving); every policy's "
        "recovery is measured against whichever reuses more"))
    cost: dict[str, Any] = field(default_factory=dict, metadata=_h("CostConfig field overrides"))
    time_scale: float = field(default=1.0, metadata=_h(
        "multiply every arrival time by this (0.5 = the same traffic twice as fast; Vidur time_scale_factor)"))
    rate: float | None = field(default=None, metadata=_h(
        "re-time arrivals to this mean rate, requests/s, keeping their pattern; inf = all at t=0 "
        "(vLLM --request-rate inf); None = as recorded"))
    percentiles: tuple[float, ...] = field(default=(50.0, 90.0, 99.0), metadata=_h(
        "percentiles reported for TTFT / TPOT / ITL / E2EL (vLLM --metric-percentiles)"))
    slo: dict[str, float] = field(default_factory=dict, metadata=_h(
        "goodput SLO in seconds: {ttft, tpot, e2el} -> bound (vLLM --goodput); {} = no goodput"))
    profile: str | None = field(default=None, metadata=_h(
        "calibration profile (`pic calibrate` JSON path or a bundled name) replacing the roofline factors"))

    def __post_init__(self) -> None:
        if not self.policies:
            raise ValueError("policies: at least one policy is needed")
        if len(set(self.policies)) != len(self.policies):
            raise ValueError(f"policies: duplicate name in {', '.join(self.policies)}")
        if not self.capacity_bytes > 0:
            raise ValueError(f"capacity: must be > 0, got {self.capacity_bytes}")
        if not math.isinf(self.capacity_bytes) and self.capacity_bytes > MAX_CAPACITY_BYTES:
            raise ValueError(f"capacity: {self.capacity_bytes:g} B is over 1 EiB per replica; use inf for an "
                             "unbounded cache")
        if not 1 <= self.replicas <= MAX_REPLICAS:
            raise ValueError(f"replicas: must be 1 to {MAX_REPLICAS} (each replica is simulated), got {self.replicas}")
        if self.router not in ROUTERS:
            raise ValueError(f"router: unknown {self.router!r}; known: {', '.join(ROUTERS)}")
        if not 1 <= self.token_budget <= MAX_TOKEN_BUDGET:
            raise ValueError(f"token_budget: must be 1 to {MAX_TOKEN_BUDGET:,} tokens per step, got {self.token_budget}")
        if not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"seed: must be 0 to 2**63-1, got {self.seed}")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError(f"max_requests: must be >= 1, got {self.max_requests}")
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ValueError(f"time_scale: must be a finite number > 0, got {self.time_scale}")
        if self.rate is not None:
            if not self.rate > 0 or math.isnan(self.rate):
                raise ValueError(f"rate: must be > 0 requests/s (or inf), got {self.rate}")
            if self.time_scale != 1.0:
                raise ValueError("rate and time_scale: give one of them (both re-time the arrivals)")
        if not self.percentiles or any(not 0 < q < 100 for q in self.percentiles):
            raise ValueError(f"percentiles: each must be in (0, 100), got {', '.join(map(str, self.percentiles))}")
        for k, v in self.slo.items():
            if k not in SLO_KEYS:
                raise ValueError(f"slo: unknown metric {k!r}; known: {', '.join(SLO_KEYS)}")
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ValueError(f"slo.{k}: must be a finite duration > 0 seconds, got {v!r}")
        if not self.baselines or len(set(self.baselines)) != len(self.baselines):
            raise ValueError(f"baseline: one or more distinct policy names needed, got {list(self.baselines)}")
        odd = [b for b in self.baselines if b not in EXACT_PREFIX]
        if odd:
            raise ValueError(f"baseline: {', '.join(odd)} is not an exact-prefix cache; baselines are "
                             f"{' and '.join(EXACT_PREFIX)}")
        extra = sorted(set(self.policy_options) - set(self.policies) - set(self.baselines) - {"oracle"})
        if extra:
            raise ValueError(f"policy_options: options given for policy not replayed: {', '.join(extra)}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (infinite capacity -> None)."""
        d = asdict(self)
        d["policies"] = list(self.policies)
        d["baselines"] = list(self.baselines)
        d["capacity_bytes"] = None if math.isinf(self.capacity_bytes) else self.capacity_bytes
        d["percentiles"] = list(self.percentiles)
        if self.rate is not None and math.isinf(self.rate):
            d["rate"] = "inf"
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
    if math.isnan(value) or not value > 0:
        raise ValueError(f"size {text!r}: must be > 0")
    if value > MAX_CAPACITY_BYTES:
        raise ValueError(f"size {text!r}: over 1 EiB; write inf for an unbounded cache")
    return float(value)


_DURATION_UNITS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}


def parse_duration(text: str, default_unit: str = "ms") -> float:
    """``"500ms"`` -> 0.5, ``"2s"`` -> 2.0, ``"250"`` -> 0.25 (``default_unit``, ms as in vLLM's --goodput);
    units us/µs, ms, s, min. Raises ``ValueError`` unless finite and > 0."""
    s = str(text).strip().lower()
    for unit in sorted(_DURATION_UNITS, key=len, reverse=True):
        if s.endswith(unit):
            num, mult = s[: -len(unit)].strip(), _DURATION_UNITS[unit]
            break
    else:
        num, mult = s, _DURATION_UNITS[default_unit]
    try:
        value = float(num) * mult
    except ValueError:
        raise ValueError(f"duration {text!r}: expected a number with us/ms/s/min (plain numbers are {default_unit})") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"duration {text!r}: must be finite and > 0")
    return value


def parse_slo(text: str | dict[str, Any] | None) -> dict[str, float]:
    """``"ttft=500ms,tpot=50ms"`` (or ``ttft:500``, vLLM style; plain numbers are ms) -> seconds by metric.
    A dict (from a config file) maps metric -> seconds (a number) or a duration string."""
    if text is None or text == "":
        return {}
    items = list(text.items()) if isinstance(text, dict) else [
        tuple(p.replace(":", "=", 1).split("=", 1)) if ("=" in p or ":" in p) else (p, "")
        for p in str(text).replace(" ", ",").split(",") if p.strip()]
    out: dict[str, float] = {}
    for item in items:
        key, value = str(item[0]).strip().lower(), item[1] if len(item) > 1 else ""
        if key not in SLO_KEYS:
            raise ValueError(f"slo {key!r}: expected METRIC=DURATION with METRIC one of {', '.join(SLO_KEYS)}")
        if value == "":
            raise ValueError(f"slo {key}: missing duration (e.g. {key}=500ms)")
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = float(value)   # a number in a config file is seconds (what config.json records)
        else:
            out[key] = parse_duration(str(value))
    return out


def parse_percentiles(text: str | list | tuple) -> tuple[float, ...]:
    """``"50,90,99.9"`` -> (50.0, 90.0, 99.9); each in (0, 100), duplicates dropped, sorted."""
    parts = text if isinstance(text, list | tuple) else str(text).replace(" ", ",").split(",")
    out = []
    for p in parts:
        if str(p).strip() == "":
            continue
        try:
            q = float(str(p).strip().rstrip("%").lstrip("pP"))
        except ValueError:
            raise ValueError(f"percentiles: {p!r} is not a number") from None
        if not 0 < q < 100:
            raise ValueError(f"percentiles: {q:g} is outside (0, 100)")
        out.append(q)
    if not out:
        raise ValueError("percentiles: at least one is needed")
    return tuple(sorted(set(out)))


def parse_rate(text: str | float | None) -> float | None:
    """``"4"`` -> 4.0 requests/s; ``"inf"`` -> inf (all arrivals at t=0); None/"" -> None (as recorded)."""
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"rate {text!r}: expected requests/s (a number > 0) or inf") from None
    if not value > 0 or math.isnan(value):
        raise ValueError(f"rate {text!r}: must be > 0 requests/s (or inf)")
    return value
