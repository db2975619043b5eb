"""The replay's configuration checked before any work (``engine.replay``): the model, GPU, cost model and every
policy's options resolved, the trace-level oracle's ``min_match``, the baselines that can hold one unit."""

from __future__ import annotations

import dataclasses
from typing import Any

from pic.engine import policies as registry
from pic.engine.config import ReplayConfig, build_config
from pic.engine.cost import CostConfig, CostModel
from pic.engine.oracle import DEFAULT_MIN_MATCH
from pic.engine.policies.base import PolicyContext
from pic.engine.specs import gpu_from_name, model_from_name
from pic.traces.suggest import did_you_mean

#: policy config fields naming the smallest unit a cache stores (capacity must hold one)
_UNIT_FIELDS = ("page_size", "block_size", "chunk_size", "min_chunk")


def cost_config(overrides: dict[str, Any]) -> CostConfig:
    """CostConfig from ``{field: value}`` (strings coerced to the field's type); unknown keys raise."""
    known = {f.name: f for f in dataclasses.fields(CostConfig)}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        hint = did_you_mean(unknown[0], known) if len(unknown) == 1 else ""
        raise ValueError(f"unknown cost option(s): {', '.join(unknown)}{hint}; known: {', '.join(known)}")
    return build_config(CostConfig, overrides, "cost")


def check_config(config: ReplayConfig) -> tuple[Any, Any, CostModel, dict[str, Any]]:
    """Resolve model/GPU/cost/policy configs; every impossible setting raises before any work."""
    model = model_from_name(config.model)
    gpu = gpu_from_name(config.gpu)
    profile = None
    if config.profile:
        from pic.engine.calibration import load_profile
        profile = load_profile(config.profile)
    cost = CostModel(model, gpu, cost_config(config.cost), profile=profile)
    if config.capacity_bytes < model.kv_bytes_per_token:
        raise ValueError(f"capacity: {config.capacity_bytes:.0f} B is below one token of {model.name} KV "
                         f"({model.kv_bytes_per_token} B)")
    resolved = {}
    for name in (*config.policies, *config.baselines):
        registry.get(name)
        resolved[name] = cfg = registry.make_config(name, config.policy_options.get(name))
        need = _unit_bytes(cfg, model)
        if need is not None and config.capacity_bytes < need[1] and name in config.policies:
            unit, _ = need
            raise ValueError(f"capacity: {config.capacity_bytes:.0f} B is below one {name} {unit} "
                             f"({getattr(cfg, unit)} tokens x {model.kv_bytes_per_token} B = {need[1]} B)")
    _min_match(config)
    # a policy may check more when it is built (rdr's `over`, a marker's ids): build each once, here
    ctx = PolicyContext(config.capacity_bytes, model.kv_bytes_per_token, model, config.seed, config.verify)
    for name in config.policies:
        try:
            registry.build(name, ctx, config.policy_options.get(name))
        except (ValueError, TypeError, OverflowError, ZeroDivisionError) as e:
            raise ValueError(str(e) if str(e).startswith(name) else f"{name}: {e}") from None
    return model, gpu, cost, resolved


def _min_match(config: ReplayConfig) -> int:
    """The trace-level oracle's ``min_match`` (the ``oracle`` policy's option; its options checked).
    NOTE (speed): without oracle options the default, the ``oracle`` policy's module (and engine.oracle_lines,
    ~6 ms CPU to import) not imported for it."""
    opts = config.policy_options.get("oracle")
    if not opts and "oracle" not in config.policies and "oracle" not in config.baselines:
        return DEFAULT_MIN_MATCH
    return registry.make_config("oracle", opts).min_match


def _unit_bytes(cfg: Any, model: Any) -> tuple[str, int] | None:
    """(field, bytes) of the smallest unit a policy config stores, if it names one."""
    unit = next((f for f in _UNIT_FIELDS if hasattr(cfg, f)), None)
    return None if unit is None else (unit, getattr(cfg, unit) * model.kv_bytes_per_token)


def usable_baselines(config: ReplayConfig, model: Any) -> list[str]:
    """The exact-prefix baselines that can hold one unit at this capacity (a baseline that cannot store
    anything reuses nothing, so leaving it out changes no maximum); replayed policies always count."""
    out = []
    for b in config.baselines:
        need = _unit_bytes(registry.make_config(b, config.policy_options.get(b)), model)
        if b in config.policies or need is None or config.capacity_bytes >= need[1]:
            out.append(b)
    return out or [config.baselines[0]]
