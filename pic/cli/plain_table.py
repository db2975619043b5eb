"""`pic replay`'s summary table as the plain text rich prints to a stream that is not a terminal, without rich.

NOTE (speed): importing rich and rendering the table cost ~22 ms CPU of every `pic replay` whose output goes to a
pipe or a file (~2 % of a ``prefix`` replay of Mooncake conversation). Where stdout is not a terminal
(:func:`pic.cli.errors.plain_stdout`) rich prints no escape codes, and a table whose cells fit on one line each
within the console's width is laid out by a fixed rule, written here: each column as wide as its widest cell
(header included) plus one space of padding either side, the heavy-head box (``box.HEAVY_HEAD``) around it, headers
justified as their column, the title centered over the table's width on a line of its own (padded with spaces to
that width). Anything else (a character outside :data:`_NARROW`, a cell with spaces at its ends or two in a row, a
table wider than the console or a title wider than the table, a stream encoding other than UTF-8) is left to rich
(:func:`plain` answers None).
tests/cli/test_plain_table.py compares this text with rich's on random tables and on replay summaries.
"""

from __future__ import annotations

import sys

#: the non-ASCII characters a cell may hold (one column wide each, as rich measures them)
_NARROW = frozenset("·×±−…–—→")


def plain(title: str, columns: list[tuple[str, str]], rows: list[tuple[str, ...]], width: int) -> str | None:
    """The text rich prints for ``Table(title=title)`` with ``columns`` (header, justify "left"/"right", no wrap)
    and ``rows`` (strings, already :func:`~pic.cli.errors.shown`) on a console ``width`` wide that is not a
    terminal, or None where this rule may differ from rich's."""
    enc = (getattr(sys.stdout, "encoding", None) or "").lower()
    if not enc.startswith("utf") or not columns:
        return None
    cells = [title, *(h for h, _ in columns), *(c for r in rows for c in r)]
    if not all(_narrow(c) and c == c.strip() and "  " not in c for c in cells):
        return None
    widths = [max(len(h), *(len(r[k]) for r in rows)) if rows else len(h) for k, (h, _) in enumerate(columns)]
    total = sum(widths) + 3 * len(widths) + 1
    if total > width or len(title) > total or any(len(r) != len(columns) for r in rows):
        return None
    out = []
    if title:
        left = (total - len(title)) // 2
        out.append(" " * left + title + " " * (total - len(title) - left))
    out.append("┏" + "┳".join("━" * (w + 2) for w in widths) + "┓")
    out.append(_row([h for h, _ in columns], widths, columns, "┃"))
    out.append("┡" + "╇".join("━" * (w + 2) for w in widths) + "┩")
    for r in rows:
        out.append(_row(r, widths, columns, "│"))
    out.append("└" + "┴".join("─" * (w + 2) for w in widths) + "┘")
    return "\n".join(out) + "\n"


def _row(cells, widths: list[int], columns: list[tuple[str, str]], bar: str) -> str:
    parts = [(c.ljust(w) if j == "left" else c.rjust(w)) for c, w, (_, j) in zip(cells, widths, columns, strict=True)]
    return bar + bar.join(f" {p} " for p in parts) + bar


def _narrow(s: str) -> bool:
    """Printable, each character one column wide (ASCII, or one of :data:`_NARROW`)."""
    return s.isprintable() and (s.isascii() or all(ch.isascii() or ch in _NARROW for ch in s))
