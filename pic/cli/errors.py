"""Shared CLI helpers: turn library errors into one clear line and a non-zero exit; parse --set and
comma lists; the replay options `pic replay` and `pic sweep` both take."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console

console = Console()
err_console = Console(stderr=True)

# replay settings shared by `pic replay` and `pic sweep` (same flag, same help)
GpuOption = Annotated[str, typer.Option(help="GPU preset (see `pic models`).")]
ReplicasOption = Annotated[int, typer.Option(help="Serving replicas, each with its own cache.")]
RouterOption = Annotated[str, typer.Option(help="round-robin | least-loaded | cache-aware.")]
TokenBudgetOption = Annotated[int, typer.Option(help="Tokens per scheduler step (prefill chunk + decodes).")]
ClosedLoopOption = Annotated[bool, typer.Option(
    "--closed-loop", help="A session's next turn waits for the previous one (plus the original gap).")]
SeedOption = Annotated[int, typer.Option(help="Seed handed to every policy.")]
LimitOption = Annotated[int | None, typer.Option(help="Replay only the first N requests (by arrival).")]


@contextmanager
def user_errors() -> Iterator[None]:
    """Print ``ValueError``/``OSError`` as ``error: <message>`` on stderr and exit 1 (or 2 for usage)."""
    try:
        yield
    except (ValueError, OSError) as e:
        from rich.text import Text

        # the message is plain text: never parse it as markup ("pic[dist]" must survive)
        err_console.print(Text.assemble(("error:", "bold red"), " ", str(e)), highlight=False, soft_wrap=True)
        raise typer.Exit(code=1) from None
    except KeyboardInterrupt:
        err_console.print("interrupted; no half-written file was left behind")
        sys.exit(130)


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
