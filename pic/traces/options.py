"""Option values given as text (``--set POLICY.KEY=VALUE``, ``cost.KEY=VALUE``, synth knobs): one parser,
one set of bounds, checked at the boundary before any work.

A value must have its field's type exactly: an integer field takes ``200``, ``2e3`` or ``200.0`` but
never ``200.7`` (no silent truncation); a float field takes a finite number (no ``inf``/``nan``); a
boolean takes true/false/1/0/yes/no/on/off. Then it must lie in its field's range: the field's
``metadata={"range": (lo, hi)}`` when the config class declares one, else the default for its kind:

- integers (token counts, sizes, windows): ``0 <= v <= 2**31 - 1``; a name holding ``seed``:
  ``0 <= v <= 2**63 - 1``;
- efficiency factors (``mfu``, ``mbu``, ``*_efficiency``): ``1e-3 <= v <= 1``;
- fractions (``*_ratio``, ``*_fraction``, ``*_prob``): ``0 <= v <= 1``;
- seconds (a name ending in ``_s``, not a rate such as ``_per_s``/``tok_s``): ``0 <= v <= 86400``;
- bandwidths (``*bytes_per_s``): ``1 <= v <= 1e15``; other rates (``*_per_s``, ``*tok_s``, ``rate``):
  ``1e-6 <= v <= 1e15``;
- other floats: ``0 <= v <= 1e12``.

Errors are ``ValueError`` naming the option: ``irminsul.avg_chunk: expected an integer, got '200.7'``.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

INT_MAX = (1 << 31) - 1
SEED_MAX = (1 << 63) - 1
SECONDS_MAX = 86_400.0
RATE_RANGE = (1e-6, 1e15)
FLOAT_MAX = 1e12
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def default_range(name: str, typ: Any) -> tuple[float, float] | None:
    """The range a field of this name and type gets when its class declares none (None: unbounded)."""
    if typ is bool or typ is str:
        return None
    if typ is int:
        return (0, SEED_MAX) if "seed" in name else (0, INT_MAX)
    if typ is float:
        if name in ("mfu", "mbu") or name.endswith("_efficiency"):
            return (1e-3, 1.0)
        if name.endswith(("_ratio", "_fraction", "_prob")):
            return (0.0, 1.0)
        if name.endswith("bytes_per_s"):
            return (1.0, RATE_RANGE[1])
        if name.endswith(("_per_s", "tok_s")) or name == "rate":
            return RATE_RANGE
        if name.endswith("_s"):
            return (0.0, SECONDS_MAX)
        return (0.0, FLOAT_MAX)
    return None


def coerce_value(value: Any, typ: Any, key: str, value_range: tuple[float, float] | None = None) -> Any:
    """``value`` (text, or already typed) as type ``typ``, checked against ``value_range``.

    ``typ`` may be ``X | None`` (``none``/``null`` give None). Raises ``ValueError`` naming ``key``.
    """
    args = [a for a in typing.get_args(typ) if a is not type(None)]
    if typing.get_origin(typ) in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null")):
            return None
        return coerce_value(value, args[0], key, value_range)
    if typ is bool:
        return _bool(value, key)
    if typ is int:
        v = _int(value, key)
    elif typ is float:
        v = _float(value, key)
    elif typ is str:
        if not isinstance(value, str):
            raise ValueError(f"{key}: expected text, got {type(value).__name__}")
        return value
    else:
        return value
    if value_range is not None:
        lo, hi = value_range
        if v < lo or v > hi:
            raise ValueError(f"{key}: {v:g} is out of range (allowed: {lo:g} to {hi:g})" if typ is float else
                             f"{key}: {v} is out of range (allowed: {lo:,} to {hi:,})")
    return v


def coerce_fields(cls: type, values: dict[str, Any], scope: str) -> dict[str, Any]:
    """``{field: value}`` of dataclass ``cls`` coerced and range-checked (keys must be fields of ``cls``);
    ``scope`` prefixes option names in errors (``irminsul`` -> ``irminsul.avg_chunk``)."""
    hints = typing.get_type_hints(cls)
    meta = {f.name: f.metadata for f in dataclasses.fields(cls)}
    out = {}
    for k, v in values.items():
        typ = hints[k]
        base = next((a for a in typing.get_args(typ) if a is not type(None)), typ)
        rng = meta[k].get("range", default_range(k, base))
        out[k] = coerce_value(v, typ, f"{scope}.{k}" if scope else k, rng)
    return out


def build_config(cls: type, values: dict[str, Any], scope: str) -> Any:
    """``cls(**coerce_fields(...))``; the class's own validation errors are prefixed with the options
    given (``irminsul.min_chunk=900, irminsul.max_chunk=100: min_chunk ... must be <= max_chunk``)."""
    kwargs = coerce_fields(cls, values, scope)
    try:
        return cls(**kwargs)
    except (ValueError, TypeError, OverflowError) as e:
        given = ", ".join(f"{scope}.{k}={v}" if scope else f"{k}={v}" for k, v in values.items())
        raise ValueError(f"{given or scope}: {e}") from None


# ---- Internal helpers -----------------------------------------------------------------------------

def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    low = str(value).strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"{key}: expected true or false, got {_show(value)}")


def _int(value: Any, key: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{key}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        f = value
    else:
        text = str(value).strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            f = float(text)
        except ValueError:
            raise ValueError(f"{key}: expected an integer, got {_show(value)}") from None
    if not math.isfinite(f) or not f.is_integer():
        raise ValueError(f"{key}: expected an integer, got {_show(value)}")
    return int(f)


def _float(value: Any, key: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{key}: expected a number, got {value!r}")
    try:
        f = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{key}: expected a number, got {_show(value)}") from None
    if not math.isfinite(f):
        raise ValueError(f"{key}: must be a finite number, got {_show(value)}")
    return f


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
