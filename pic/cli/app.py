"""`pic` command-line entry point: a Typer app with one thin command per module, behind one guard.

The guard (:class:`GuardedGroup`) makes sure nothing reaches the user as a traceback: library errors
(``ValueError``, ``OSError``) and usage errors print one line; Ctrl-C, SIGTERM and SIGHUP unwind (every
temp file is removed) and exit 130 / 143 / 129; anything unexpected prints one line with
"re-run with `--debug` for the traceback". ``pic --debug CMD ...`` (or ``PIC_DEBUG=1``) shows it.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from pic.cli import coerce, errors

# typer >= 0.22 vendors click (typer._click); older ones use click itself: find the classes either way
_MRO = {c.__name__: c for c in typer.BadParameter.__mro__}
ClickException, UsageError = _MRO["ClickException"], _MRO["UsageError"]


class PlainParams:
    """Mixin: the command's parameters convert plain values without pydantic (NOTE (speed): pic.cli.coerce)."""

    def get_params(self, ctx: Any) -> Any:
        params = super().get_params(ctx)
        coerce.install(params)
        return params


class Command(PlainParams, TyperCommand):
    """Each command of ``pic``."""


class GuardedGroup(PlainParams, TyperGroup):
    """The root command group: every exception becomes one line on stderr and an exit code."""

    def main(self, args: Any = None, prog_name: Any = None, complete_var: Any = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        _DEBUG[0] = errors.debug_enabled()
        with errors.termination_signals():
            try:
                rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                                  standalone_mode=False, **extra)
            except typer.Abort:
                errors.print_error("aborted", None)
                rv = 1
            except ClickException as e:
                if e.format_message().strip():   # (empty after `pic` alone printed its help)
                    errors.print_error(_usage_line(e))
                rv = e.exit_code
            except (KeyboardInterrupt, errors.Terminated) as e:
                message, rv = errors.describe(e)
                errors.print_error(message, None)
            except BrokenPipeError:
                _quiet_stdout()
                rv = 1
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (ClickException, typer.Exit, typer.Abort, BrokenPipeError,
                KeyboardInterrupt, errors.Terminated):
            raise
        except Exception as e:  # noqa: BLE001 - the one place every other error is turned into a line
            if _DEBUG[0]:
                raise
            errors.fail(e)


_DEBUG = [False]


def _usage_line(e: Any) -> str:
    message = " ".join(e.format_message().split())
    if isinstance(e, UsageError) and getattr(e, "ctx", None) is not None:
        return f"{message} (see `{e.ctx.command_path} --help`)"
    return message


def _quiet_stdout() -> None:
    """stdout was closed under us (``pic ... | head``): drop what is left unwritten."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


_app = typer.Typer(
    name="pic",
    cls=GuardedGroup,
    help="How much prefill position-independent KV caching saves on your traffic, and what it costs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from pic import __version__

        typer.echo(f"pic {__version__}")
        raise typer.Exit()


@_app.callback()
def _root(
    show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show the traceback of an unexpected error."),
) -> None:
    """How much prefill position-independent KV caching saves on your traffic, and what it costs.

    Typical flow: pic synth / pic ingest -> pic inspect -> pic replay -> pic report.
    """
    if debug:
        _DEBUG[0] = True


#: command name -> module in pic.cli that defines ``command``
COMMANDS = {
    "ingest": "ingest",
    "synth": "synth",
    "inspect": "inspect",
    "replay": "replay",
    "report": "report",
    "sweep": "sweep",
    "models": "models",
    "execute": "execute",
    "calibrate": "calibrate",
}

_REGISTERED: set[str] = set()


def _register(names) -> typer.Typer:
    """Add the commands ``names`` to the app (each module imported once, in COMMANDS order)."""
    for name in COMMANDS:
        if name in names and name not in _REGISTERED:
            _app.command(name=name, cls=Command)(importlib.import_module(f"pic.cli.{COMMANDS[name]}").command)
            _REGISTERED.add(name)
    return _app


def __getattr__(name: str) -> Any:
    # NOTE (speed): ``app`` with every command is built on first use; ``main`` registers only the command
    # it runs (importing every command's module costs ~0.2 s CPU at each start)
    if name == "app":
        return _register(COMMANDS)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _invoked(argv: list[str]) -> str | None:
    """The command ``argv`` runs (its first word that is not an option of the root), if it is one of ours."""
    for a in argv:
        if not a.startswith("-"):
            return a if a in COMMANDS else None
        if a in ("-h", "--help", "--version"):
            return None
    return None


def main() -> None:
    from pic.cli import invocation
    from pic.cli.startup import imports_without_gc

    # NOTE (speed): numpy's OpenBLAS starts a thread per core at import (pic multiplies no matrices):
    # 0.05 CPU s of every command on a 2-core VM; a value the user set is kept
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    invocation.ARGV = sys.argv[1:]   # what config.json records as the command
    cmd = _invoked(sys.argv[1:])
    with imports_without_gc():
        app = _register(COMMANDS if cmd is None else (cmd,))
    app()


def run() -> None:
    """The ``pic`` console script and ``python -m pic``: :func:`main`, then the process ends at once
    (:func:`_exit`). In-process callers (profilers, wrappers) use :func:`main`, which ends in SystemExit."""
    try:
        main()
    except SystemExit as e:
        _exit(e.code)
    _exit(0)


#: modules whose presence makes the process exit the normal way (native exit hooks: Ray, CUDA, profilers)
_NORMAL_EXIT_IF_LOADED = frozenset({"ray", "torch", "triton"})


def _exit(code: Any) -> None:
    """End the process with ``code`` (SystemExit's meaning) once the command is done.

    NOTE (speed): the interpreter's own teardown frees every object one by one (0.1-0.4 CPU s after a
    replay, mostly the trace and policy state, all already written out). When no other Python thread runs
    and neither Ray nor the GPU stack is loaded (their native exit hooks, e.g. a profiler's, must run), exit
    handlers run, the streams are flushed and the process ends without it; otherwise it exits the normal way."""
    import atexit
    import threading

    if threading.active_count() > 1 or not _NORMAL_EXIT_IF_LOADED.isdisjoint(sys.modules):
        sys.exit(code)
    if code is None:
        rc = 0
    elif isinstance(code, int):
        rc = code
    else:   # SystemExit("message"): printed, status 1
        print(code, file=sys.stderr)
        rc = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe / stream: nothing more to write
            rc = rc or 1
    os._exit(rc & 0xFF)
