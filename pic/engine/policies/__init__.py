"""Policy registry: one name -> policy class. Duplicate names raise; unknown names raise with the list.

Adding a policy = one module in this folder with ``@register`` on its class + one import line below.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pic.engine.config import coerce_overrides
from pic.engine.policies.base import CachePolicy, PolicyContext, PolicyStats, RequestView, Usage

_REGISTRY: dict[str, type[CachePolicy]] = {}


def register(cls: type[CachePolicy]) -> type[CachePolicy]:
    """Class decorator: register ``cls`` under ``cls.name`` (raises on duplicates)."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    if cls.name in _REGISTRY:
        raise ValueError(f"policy {cls.name!r} is already registered by {_REGISTRY[cls.name].__qualname__}")
    _REGISTRY[cls.name] = cls
    return cls


def names() -> list[str]:
    """Registered policy names, sorted."""
    return sorted(_REGISTRY)


def get(name: str) -> type[CachePolicy]:
    if name not in _REGISTRY:
        raise ValueError(f"unknown policy {name!r}; registered: {', '.join(names())}")
    return _REGISTRY[name]


def make_config(name: str, overrides: dict[str, Any] | None = None) -> Any:
    """Build policy ``name``'s Config from ``{field: value}`` (strings are coerced). Unknown keys raise."""
    cls = get(name)
    cfg_cls = cls.Config
    overrides = dict(overrides or {})
    if not dataclasses.is_dataclass(cfg_cls):
        if overrides:
            raise ValueError(f"policy {name!r} takes no options")
        return None
    fields = {f.name for f in dataclasses.fields(cfg_cls)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"unknown option(s) for policy {name!r}: {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(fields)) or '(none)'}")
    return cfg_cls(**coerce_overrides(cfg_cls, overrides, name))


def build(name: str, ctx: PolicyContext, overrides: dict[str, Any] | None = None) -> CachePolicy:
    """Construct policy ``name`` on the CPU from ``ctx`` and option overrides."""
    return get(name)(ctx, make_config(name, overrides))


def option_help(name: str) -> dict[str, str]:
    """``{field: help}`` of a policy's Config (for --help and ``pic replay --list-policies``)."""
    cfg_cls = get(name).Config
    if not dataclasses.is_dataclass(cfg_cls):
        return {}
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cfg_cls)}


__all__ = ["CachePolicy", "PolicyContext", "PolicyStats", "RequestView", "Usage",
           "register", "names", "get", "build", "make_config", "option_help"]

# ---- registrations (one line per policy module; each registers its class with @register) ---------
from pic.engine.policies import block_hash, fixed_chunk, irminsul, linearkv, none, oracle, prefix  # noqa: E402,F401,I001
