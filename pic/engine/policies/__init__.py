"""Policy registry: one name -> policy class. Duplicate names raise; unknown names raise with the list.

Adding a policy = one module in this folder with ``@register`` on its class + one entry in :data:`MODULES`.
A policy's module is imported when its name is first looked up (``get``, ``build``, ``make_config``), so a
run imports the policies it replays, not every one (tests/policies/test_registry.py checks ``MODULES``).

Composition: a policy class with ``is_wrapper = True`` (``rdr``) wraps a reuse policy named in its
Config's ``over`` field; ``"BASE+WRAPPER"`` (e.g. ``irminsul+rdr``) is that wrapper over BASE, and its
options are the union of both Configs' fields (the wrapper's own first).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from pic.engine.config import build_config, coerce_overrides
from pic.engine.policies.base import CachePolicy, Footprint, PolicyContext, PolicyStats, RequestView, Usage
from pic.traces.suggest import did_you_mean

_REGISTRY: dict[str, type[CachePolicy]] = {}

#: policy name -> the module in this folder whose ``@register`` defines it (imported on first lookup)
#: NOTE (speed): importing every policy module at start cost ~0.04-0.07 CPU s per `pic replay`
MODULES = {
    "block-hash": "block_hash",
    "fixed-chunk": "fixed_chunk",
    "irminsul": "irminsul",
    "linearkv": "linearkv",
    "none": "none",
    "oracle": "oracle",
    "prefix": "prefix",
    "rdr": "rdr",
}


def register(cls: type[CachePolicy]) -> type[CachePolicy]:
    """Class decorator: register ``cls`` under ``cls.name`` (raises on duplicates)."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    if cls.name in _REGISTRY:
        raise ValueError(f"policy {cls.name!r} is already registered by {_REGISTRY[cls.name].__qualname__}")
    _REGISTRY[cls.name] = cls
    return cls


def names() -> list[str]:
    """Registered policy names (every one of :data:`MODULES`, imported or not), sorted."""
    return sorted(_REGISTRY.keys() | MODULES.keys())


def get(name: str) -> type[CachePolicy]:
    """The class of policy ``name``; for ``BASE+WRAPPER`` the wrapper's class (both checked)."""
    base, wrapper = split_name(name)
    cls = _get_one(base)
    if wrapper is None:
        return cls
    if _is_wrapper(cls):
        raise ValueError(f"policy {name!r}: {base!r} is a wrapper; it goes after '+' (e.g. prefix+{base})")
    wcls = _get_one(wrapper)
    if not _is_wrapper(wcls):
        wrappers = [n for n in names() if _is_wrapper(_get_one(n))]
        raise ValueError(f"policy {name!r}: {wrapper!r} does not compose over another policy; "
                         f"composable: {', '.join(wrappers) or '(none)'}")
    return wcls


def split_name(name: str) -> tuple[str, str | None]:
    """``"irminsul+rdr"`` -> ``("irminsul", "rdr")``; ``"prefix"`` -> ``("prefix", None)``."""
    parts = [p.strip() for p in str(name).split("+")]
    if len(parts) > 2 or not all(parts):
        raise ValueError(f"policy {name!r}: expected NAME or NAME+WRAPPER (one wrapper)")
    return parts[0], (parts[1] if len(parts) == 2 else None)


def make_config(name: str, overrides: dict[str, Any] | None = None) -> Any:
    """Build policy ``name``'s Config from ``{field: value}`` (strings are coerced). Unknown keys raise.

    ``BASE+WRAPPER``: keys that are fields of the wrapper's Config configure it, the rest configure
    BASE (the wrapper's Config gets ``over=BASE`` and ``over_config`` = BASE's resolved Config)."""
    base, wrapper = split_name(name)
    overrides = dict(overrides or {})
    cls = get(name)
    if wrapper is not None:
        own = {f.name for f in dataclasses.fields(cls.Config)} - {"over", "over_config"}
        theirs = set(option_help(base))
        unknown = sorted(set(overrides) - own - theirs)
        if unknown:
            raise ValueError(f"unknown option(s) for policy {name!r}: {', '.join(unknown)}; known: "
                             f"{', '.join(sorted(own))} ({wrapper}), {', '.join(sorted(theirs)) or '(none)'} ({base})")
        mine = {k: v for k, v in overrides.items() if k in own}
        base_cfg = make_config(base, {k: v for k, v in overrides.items() if k not in own})
        return cls.Config(**coerce_overrides(cls.Config, mine, name), over=base, over_config=base_cfg)
    cfg_cls = cls.Config
    if _is_wrapper(cls) and "over_config" in overrides:
        raise ValueError(f"policy {name!r}: over_config is set by the registry, not an option")
    if not dataclasses.is_dataclass(cfg_cls):
        if overrides:
            raise ValueError(f"policy {name!r} takes no options")
        return None
    fields = {f.name for f in dataclasses.fields(cfg_cls)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"unknown option(s) for policy {name!r}: {', '.join(unknown)}"
                         f"{did_you_mean(unknown[0], fields) if len(unknown) == 1 else ''}; "
                         f"known: {', '.join(sorted(fields)) or '(none)'}")
    return build_config(cfg_cls, overrides, name)


def build(name: str, ctx: PolicyContext, overrides: dict[str, Any] | None = None) -> CachePolicy:
    """Construct policy ``name`` on the CPU from ``ctx`` and option overrides."""
    return get(name)(ctx, make_config(name, overrides))


def option_help(name: str) -> dict[str, str]:
    """``{field: help}`` of a policy's Config (for --help and ``pic replay --list-policies``); for
    ``BASE+WRAPPER`` the wrapper's options then BASE's."""
    base, wrapper = split_name(name)
    cfg_cls = get(name).Config
    if not dataclasses.is_dataclass(cfg_cls):
        return {}
    out = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cfg_cls) if f.name != "over_config"}
    if wrapper is not None:
        out.pop("over", None)
        out.update({k: v for k, v in option_help(base).items() if k not in out})
    return out


def _get_one(name: str) -> type[CachePolicy]:
    if name not in _REGISTRY and name in MODULES:
        importlib.import_module(f"{__name__}.{MODULES[name]}")
    if name not in _REGISTRY:
        raise ValueError(f"unknown policy {name!r}{did_you_mean(name, names())}; registered: {', '.join(names())}")
    return _REGISTRY[name]


def _is_wrapper(cls: type) -> bool:
    return bool(getattr(cls, "is_wrapper", False))


__all__ = ["CachePolicy", "Footprint", "PolicyContext", "PolicyStats", "RequestView", "Usage", "MODULES",
           "register", "names", "get", "split_name", "build", "make_config", "option_help"]
