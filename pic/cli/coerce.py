"""Plain CLI values converted without pydantic (NOTE (speed)).

typer >= 0.26 converts every parameter's value through a pydantic ``TypeAdapter`` built on the parameter's
first use: pydantic's import and ~27 adapters cost ~0.06 CPU s at each `pic replay` (3 % of a run on Azure
conversation). :func:`install` (from ``get_params`` of pic's commands, pic.cli.app) gives each parameter a
converter that handles the values whose
conversion is plain, exactly as the adapter would: a ``str`` for ``str``; decimal digits for ``int`` /
``float`` within the option's ``min`` / ``max``; a path for ``Path`` (then typer's own path checks); a
``parser=`` option's parser when it succeeds; a list of those. Anything else (a misspelt value, a number
out of range, a choice, a file...) goes to typer's own conversion, so its errors and messages are typer's.
With a typer that lacks these internals :func:`install` does nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

_MISS = object()
_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def install(params: Any) -> None:
    """Give each typer parameter of ``params`` (a command's, its help option's) the plain converter, unless
    typer has converted with it already."""
    try:
        from typer._coercion import RuntimeParam, build_runtime_param
        from typer._param_types import coerce_cli_path
    except ImportError:     # a typer without pydantic coercion: nothing to skip
        return
    cls = _plain_class(RuntimeParam, build_runtime_param, coerce_cli_path)
    for p in params:
        desc = getattr(p, "type_descriptor", None)
        if desc is None or getattr(p, "_runtime_param", _MISS) is not None or desc.file_annotation is not None:
            continue
        p._runtime_param = cls(parameter_info=desc.parameter_info, annotation=desc.annotation, descriptor=desc)


_CLASS: list[type] = []


def _plain_class(base: type, build_runtime_param: Any, coerce_cli_path: Any) -> type:
    if _CLASS:
        return _CLASS[0]

    @dataclass(frozen=True)
    class PlainRuntimeParam(base):
        """typer's ``RuntimeParam`` that converts plain values itself and hands the rest to typer's."""

        descriptor: Any = None

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            got = plain(self.descriptor.annotation, self.descriptor.parameter_info, value, param, ctx,
                        coerce_cli_path)
            if got is not _MISS:
                return got
            return build_runtime_param(self.descriptor)._coerce_value(value, param=param, ctx=ctx)

    _CLASS.append(PlainRuntimeParam)
    return PlainRuntimeParam


def plain(annotation: Any, info: Any, value: Any, param: Any, ctx: Any, coerce_cli_path: Any) -> Any:
    """``value`` converted as typer's adapter for ``annotation`` would, or ``_MISS`` when it is not plain."""
    if get_origin(annotation) is list:
        if info.parser is not None or not isinstance(value, (list, tuple)):
            return _MISS
        (item_type,) = get_args(annotation)
        out = [plain(item_type, info, v, param, ctx, coerce_cli_path) for v in value]
        return _MISS if any(v is _MISS for v in out) else out
    if get_origin(annotation) is not None:
        return _MISS
    if info.parser is not None:
        try:
            return info.parser(value)
        except Exception:   # noqa: BLE001 - typer's own conversion calls it again and words the error
            return _MISS
    if annotation is str:
        return value if type(value) is str else _MISS
    if annotation is int or annotation is float:
        return _number(annotation, info, value)
    if isinstance(annotation, type) and issubclass(annotation, Path):
        path_type = info.path_type or annotation
        if path_type is not Path or type(value) is not str:
            return _MISS
        return coerce_cli_path(Path(value), info, path_type=path_type, param=param, ctx=ctx)
    return _MISS


def _number(kind: type, info: Any, value: Any) -> Any:
    if info.clamp:
        return _MISS
    if type(value) is str:
        if not (_INT if kind is int else _FLOAT).fullmatch(value):
            return _MISS
        value = kind(value)
    elif type(value) is not kind:
        return _MISS
    if (info.min is not None and value < info.min) or (info.max is not None and value > info.max):
        return _MISS
    return value
