"""Typed choices for the CLI: every option with a fixed set of values is an Enum (its help shows the choices,
``<round-robin|least-loaded|cache-aware>``, not ``<str>``), and a misspelt value names the closest one.

The choice lists come from the library (routers, GPU presets, input formats, sweep backends, scenarios), so
adding one there adds it here.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Annotated, Any

import typer

from pic.engine.config import ROUTERS
from pic.engine.specs.gpus import GPUS
from pic.traces.suggest import did_you_mean


class _Choice(str, enum.Enum):
    """A CLI choice: ``str(member)`` is its spelling, as with ``enum.StrEnum`` (Python 3.11+). typer before
    0.29 maps a parsed option through ``str(value)`` back to its Enum member; with ``str``'s mixin alone
    that is ``'Router.cache_aware'``, no member matched, and the option arrived as None."""

    def __str__(self) -> str:
        return str(self.value)


def choice_enum(name: str, values: Iterable[str]) -> type[enum.Enum]:
    """A ``str`` Enum whose values are the CLI spellings (``cache-aware``), member names made identifiers."""
    return _Choice(name, {v.replace("-", "_").replace(".", "_"): v for v in values})


def parser(choices: type[enum.Enum]) -> Callable[[Any], enum.Enum]:
    """typer ``parser=``: the member for a value, or ``BadParameter`` listing the choices and the closest."""
    values = [m.value for m in choices]

    def parse(value: Any) -> enum.Enum:
        if isinstance(value, choices):
            return value
        text = str(value).strip()
        for m in choices:
            if m.value == text or m.value.lower() == text.lower():
                return m
        raise typer.BadParameter(f"{text!r} is not one of {', '.join(repr(v) for v in values)}"
                                 f"{did_you_mean(text, values)}")

    return parse


Router = choice_enum("Router", ROUTERS)
Gpu = choice_enum("Gpu", GPUS)


def __getattr__(name: str) -> Any:
    # NOTE (speed): Backend, Scenario and Format are made on first use: their values live in pic.engine.sweep,
    # pic.traces.synth and the ingest readers (pic.traces.formats), which `pic replay` never needs (~0.1 s CPU
    # of imports at each start)
    if name == "Format":
        from pic.traces.formats.detect import FORMATS
        globals()[name] = made = choice_enum("Format", FORMATS)
    elif name == "Backend":
        from pic.engine.sweep import BACKENDS
        globals()[name] = made = choice_enum("Backend", BACKENDS)
    elif name == "Scenario":
        from pic.traces.synth import SCENARIOS
        globals()[name] = made = choice_enum("Scenario", SCENARIOS)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return made


GpuOption = Annotated[Gpu, typer.Option(parser=parser(Gpu), help="GPU preset (see `pic models`).")]
RouterOption = Annotated[Router, typer.Option(
    parser=parser(Router), help="How requests pick a replica: round-robin, least-loaded (fewest outstanding), "
    "cache-aware (most reusable tokens, unless unbalanced).")]
