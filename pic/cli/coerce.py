"""Plain CLI values converted without pydantic (NOTE (speed)).

typer >= 0.26 converts every parameter's value through a pydantic ``TypeAdapter`` built on the parameter's
first use: pydantic's import and ~27 adapters cost ~0.06 CPU s at each `pic replay` (3 % of a run on Azure
conversation). :func:`install` (from ``get_params`` of pic's commands, pic.cli.app) gives each parameter a
converter that handles the values whose
conversion is plain, exactly as the adapter would: a ``str`` for ``str``; decimal digits for ``int`` /
``float`` within the option's ``min`` / ``max``; a path for ``Path`` (then typer's own path checks); a
``parser=`` option's parser when it succeeds; a list of those. Anything else (a misspelt value, a number
out of range, a choice, a file...) goes to typer's own conversion, so its errors and messages are typer's.
With a typer whose internals differ in any way (names, fields, signatures) :func:`install` does nothing and a value
the plain path fails on goes to typer's conversion: never a traceback from here.
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
    # NOTE (safety): these are typer's private internals (typer>=0.16 is all pyproject asks): a typer whose
    # internals differ in any way (a name, a field, a signature) keeps its own conversion for every parameter,
    # never a traceback; nothing is set unless every parameter's converter could be made
    try:
        from typer._coercion import RuntimeParam, build_runtime_param
        from typer._param_types import coerce_cli_path
        cls = _plain_class(RuntimeParam, build_runtime_param, coerce_cli_path)
        todo = []
        for p in params:
            desc = getattr(p, "type_descriptor", None)
            if desc is None or getattr(p, "_runtime_param", _MISS) is not None or desc.file_annotation is not None:
                continue
            todo.append((p, cls(parameter_info=desc.parameter_info, annotation=desc.annotation, descriptor=desc)))
    except Exception:       # noqa: BLE001 - a typer without (these) pydantic internals: nothing to skip
        return
    for p, runtime in todo:
        p._runtime_param = runtime


_CLASS: list[type] = []


def _plain_class(base: type, build_runtime_param: Any, coerce_cli_path: Any) -> type:
    if _CLASS:
        return _CLASS[0]

    @dataclass(frozen=True)
    class PlainRuntimeParam(base):
        """typer's ``RuntimeParam`` that converts plain values itself and hands the rest to typer's."""

        descriptor: Any = None

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                got = plain(self.descriptor.annotation, self.descriptor.parameter_info, value, param, ctx,
                            coerce_cli_path)
            except Exception:   # noqa: BLE001 - typer's own conversion below raises its own error, worded by typer
                got = _MISS
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
