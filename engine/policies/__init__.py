"""Policy registry: one name -> policy class. Duplicate names raise; unknown names raise with the list.

Adding a policy = one module in this folder with ``@register`` on its class + one import line below.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from engine.policies.base import CachePolicy, PolicyContext, PolicyStats, RequestView, Usage

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


def _coerce(value: Any, typ: Any, key: str) -> Any:
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
        return _coerce(value, args[0], key)
    try:
        if typ is int:
            return int(float(value)) if value.replace(".", "", 1).replace("e", "", 1).isdigit() else int(value)
        if typ is float:
            return float(value)
    except ValueError:
        raise ValueError(f"{key}: expected {typ.__name__}, got {value!r}") from None
    return value


def make_config(name: str, overrides: dict[str, Any] | None = None) -> Any:
    """Build policy ``name``'s Config from ``{field: value}`` (strings are coerced). Unknown keys raise."""
    cls = get(name)
    cfg_cls = cls.Config
    overrides = dict(overrides or {})
    if not dataclasses.is_dataclass(cfg_cls):
        if overrides:
            raise ValueError(f"policy {name!r} takes no options")
        return None
    hints = typing.get_type_hints(cfg_cls)
    fields = {f.name for f in dataclasses.fields(cfg_cls)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"unknown option(s) for policy {name!r}: {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(fields)) or '(none)'}")
    return cfg_cls(**{k: _coerce(v, hints[k], f"{name}.{k}") for k, v in overrides.items()})


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
from engine.policies import block_hash, fixed_chunk, irminsul, none, prefix  # noqa: E402,F401,I001
