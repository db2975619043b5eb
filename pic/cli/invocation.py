"""The command line that asked for a run, recorded in its config.json: the real ``argv`` when pic runs as
a program, else (a test's ``CliRunner``, another program calling the app) the options the user gave,
rebuilt from the parsed parameters — defaults left out, so it reads like what was typed."""

from __future__ import annotations

import shlex
from typing import Any

import typer

#: set by ``pic.cli.app.main`` before the app runs: the arguments after the program name
ARGV: list[str] | None = None


def typed(ctx: typer.Context, name: str) -> bool:
    """True when the user gave option ``name`` (command line or environment), not its default. Compared by
    the source's name: typer >= 0.22 vendors click (``typer._click``), older ones use click itself."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def command_line(ctx: typer.Context) -> str:
    """``pic <command> <args>`` as typed (``shlex`` quoting)."""
    names = []
    c = ctx
    while c is not None and c.parent is not None:
        names.append(c.info_name)
        c = c.parent
    if ARGV is not None and ARGV[: len(names)] == names[::-1]:
        return shlex.join(["pic", *ARGV])
    return shlex.join(["pic", *names[::-1], *_given(ctx)])


def _given(ctx: typer.Context) -> list[str]:
    out: list[str] = []
    for p in ctx.command.params:
        if p.name not in ctx.params or not typed(ctx, p.name):
            continue
        value = ctx.params[p.name]
        if getattr(p, "param_type_name", "") == "argument":
            out += [_text(v) for v in (value if isinstance(value, list | tuple) else [value])]
            continue
        flag = max(p.opts, key=len)
        if getattr(p, "is_flag", False) and isinstance(value, bool):
            if value:
                out.append(flag)
            elif p.secondary_opts:
                out.append(max(p.secondary_opts, key=len))
            continue
        for v in value if isinstance(value, list | tuple) else [value]:
            out += [flag, _text(v)]
    return out


def _text(v: Any) -> str:
    return str(getattr(v, "value", v))
