"""Shared CLI helpers: safe terminal output (no markup, control characters escaped), one-line errors
and the exit codes, --set and comma-list parsing; the replay options `pic replay` and `pic sweep` both take.

Every string pic prints may hold user input (file names, policy and model names, messages quoting
them), so the consoles here never parse rich markup or emoji codes, and :func:`shown` escapes control
characters (ANSI escape sequences, newlines, bidi overrides, undecodable bytes) before the terminal sees
them. Styled text is built with :func:`styled` instead of markup.
"""

from __future__ import annotations

import os
import signal
import sys
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pic.traces.outputs import os_error_message

if TYPE_CHECKING:
    from rich.text import Text

#: characters escaped wherever pic prints user-supplied text (besides the Cc/Cs/Zl/Zp categories):
#: bidi embeddings, overrides, isolates and marks, which reorder what a terminal shows
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
DEBUG_HINT = "re-run with `--debug` for the traceback"


def shown(text: Any) -> str:
    """``text`` safe for a terminal: control characters, line breaks, bidi controls and undecodable
    bytes (surrogates) become visible escapes (``\\x1b``, ``\\n``, ``\\u202e``, ``\\udcff``)."""
    s = str(text)
    if s.isprintable():
        return s
    out = []
    for ch in s:
        if ch in _NAMED:
            out.append(_NAMED[ch])
        elif ch in _BIDI or unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp"):
            o = ord(ch)
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")
        else:
            out.append(ch)
    return "".join(out)


def _rich() -> dict[str, Any]:
    """Make :class:`SafeConsole` and the two consoles (``console``, ``err_console``) on first use, as module
    attributes. NOTE (speed): importing rich and making them cost ~22 ms CPU, which a command whose output
    goes to files and pipes does not need (``pic replay --json``: :func:`print_line`)."""
    g = globals()
    if "SafeConsole" not in g:
        from rich.console import Console

        class SafeConsole(Console):
            """A rich Console for text that may hold user input: no markup, no emoji codes, no highlighting,
            and every plain string (table cells and titles included) passed through :func:`shown`."""

            def __init__(self, **kwargs: Any) -> None:
                super().__init__(markup=False, emoji=False, highlight=False, **kwargs)

            def render_str(self, text: str, **kwargs: Any) -> Text:
                kwargs["markup"] = False
                kwargs["emoji"] = False
                return super().render_str(shown(text), **kwargs)

        SafeConsole.__qualname__ = "SafeConsole"
        g.update(SafeConsole=SafeConsole, console=SafeConsole(), err_console=SafeConsole(stderr=True))
    return g


def __getattr__(name: str) -> Any:
    if name in ("SafeConsole", "console", "err_console"):
        return _rich()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def styled(*parts: str | tuple[str, str]) -> Text:
    """``styled(("error:", "bold red"), " ", message)``: a Text of plain parts (each :func:`shown`)."""
    from rich.text import Text

    return Text.assemble(*[(shown(p[0]), p[1]) if isinstance(p, tuple) else shown(p) for p in parts])


#: environment variables under which rich may treat a stream that is not a terminal as one (or, in Jupyter,
#: not write to it): rich then decides how a line is printed
_RICH_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES")


def plain_stderr(stream: Any = None) -> bool:
    """stderr (or ``stream``) is not a terminal and nothing makes rich treat it as one: rich would print a line
    of styled parts there as their plain text (no escape codes, never wrapped)."""
    stream = sys.stderr if stream is None else stream
    if stream is None or "ipykernel" in sys.modules or any(v in os.environ for v in _RICH_ENV):
        return False
    try:
        return not stream.isatty()
    except (AttributeError, ValueError):
        return False


def print_line(*parts: str | tuple[str, str]) -> None:
    """One line of :func:`styled` parts on stderr (escaped, never wrapped). NOTE (speed): where stderr is
    not a terminal (:func:`plain_stderr`), written as the plain text rich would print, without rich."""
    if plain_stderr():
        sys.stderr.write("".join(shown(p[0]) if isinstance(p, tuple) else shown(p) for p in parts) + "\n")
        sys.stderr.flush()
    else:
        _rich()["err_console"].print(styled(*parts), soft_wrap=True)


def print_error(message: str, label: str | None = "error:") -> None:
    """One line on stderr: ``error: <message>`` (escaped, never wrapped)."""
    if label:
        print_line((label, "bold red"), " ", message)
    else:
        print_line(message)


def fail(exc: BaseException) -> None:
    """Print ``exc`` as one line (see :func:`describe`) and exit with its code."""
    message, code = describe(exc)
    print_error(message, "error:" if code == 1 else None)
    raise typer.Exit(code=code) from None


def print_warning(message: str) -> None:
    """One line on stderr: ``warning: <message>``."""
    print_line(("warning:", "yellow"), " ", message)


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: unwinds like Ctrl-C, so every temp file is removed on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise Terminated(signum)


@contextmanager
def termination_signals() -> Iterator[None]:
    """Within the block SIGTERM (timeout, docker stop, Slurm, CI) and SIGHUP (terminal closed) raise
    :class:`Terminated`, as Ctrl-C raises KeyboardInterrupt (main thread only; restored after)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = [s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None]
    old = {s: signal.signal(s, _raise_terminated) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def describe(exc: BaseException) -> tuple[str, int]:
    """``(one-line message, exit code)`` for an exception that reached the top of a command."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted; no half-written file was left behind", 130
    if isinstance(exc, Terminated):
        name = signal.Signals(exc.signum).name
        return f"stopped by {name}; no half-written file was left behind", 128 + exc.signum
    if isinstance(exc, ValueError):
        return str(exc), 1
    if isinstance(exc, OSError):
        return os_error_message(exc), 1
    if isinstance(exc, RecursionError):
        return "input nested too deeply to read", 1
    if isinstance(exc, MemoryError):
        return "out of memory: the input or an option is too large for this machine", 1
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"internal error: {type(exc).__name__}{': ' + text if text else ''} ({DEBUG_HINT})", 1


def debug_enabled() -> bool:
    """True under ``pic --debug`` (or PIC_DEBUG=1): unexpected errors show their traceback."""
    return os.environ.get("PIC_DEBUG", "") not in ("", "0")


@contextmanager
def user_errors() -> Iterator[None]:
    """Print ``ValueError``/``OSError`` (and Ctrl-C, SIGTERM) as one line on stderr and exit non-zero.

    Anything else propagates to the top-level guard in :mod:`pic.cli.app`.
    """
    try:
        yield
    except BrokenPipeError:
        raise
    except (ValueError, OSError, KeyboardInterrupt, Terminated) as e:
        fail(e)


# replay settings shared by `pic replay` and `pic sweep` (same flag, same help); --gpu and --router are
# typed choices in pic.cli.choices
ReplicasOption = Annotated[int, typer.Option(help="Serving replicas, each with its own cache.")]
TokenBudgetOption = Annotated[int, typer.Option(help="Tokens per scheduler step (prefill chunk + decodes).")]
ClosedLoopOption = Annotated[bool, typer.Option(
    "--closed-loop", help="A session's next turn waits for the previous one (plus the original gap).")]
SeedOption = Annotated[int, typer.Option(help="Seed handed to every policy.")]
LimitOption = Annotated[int | None, typer.Option(help="Replay only the first N requests (by arrival).")]


def parse_sets(values: list[str] | None) -> dict[str, dict[str, str]]:
    """``["irminsul.s1=true", "prefix.page_size=16"]`` -> ``{"irminsul": {"s1": "true"}, ...}``."""
    out: dict[str, dict[str, str]] = {}
    for item in values or []:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise ValueError(f"--set {item!r}: expected POLICY.KEY=VALUE")
        key, value = item.split("=", 1)
        scope, name = key.split(".", 1)
        out.setdefault(scope.strip(), {})[name.strip().replace("-", "_")] = value.strip()
    return out


def split_list(text: str) -> tuple[str, ...]:
    """``"a, b,,c"`` -> ``("a", "b", "c")``."""
    return tuple(p.strip() for p in text.split(",") if p.strip())
