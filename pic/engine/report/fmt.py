"""Number formatting shared by the report (HTML, Markdown) and the terminal's table and headline after a replay.

NOTE (speed): no polars here (engine.report.data and .tables import it): `pic replay` prints its table and
headline with these and imports no polars (~0.1 CPU s per run).
"""

from __future__ import annotations

import math
from typing import Any


def missing(x: Any) -> bool:
    """None or NaN."""
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt_pct(x: float | None) -> str:
    """``41.3%``; ``–`` for missing/NaN."""
    if x is None or math.isnan(x):
        return "–"
    v = 100 * x
    return f"{0.0 if abs(v) < 0.05 else v:.1f}%"  # no "-0.0%"


def signed_pct(x: float | None) -> str:
    """``−82.0%`` / ``+3.1%`` (a real minus sign; never ``−0.0%``); ``–`` for missing."""
    if missing(x):
        return "–"
    v = round(100 * x, 1)
    if v == 0:
        return "±0.0%"
    return f"{_MINUS if v < 0 else '+'}{abs(v):.1f}%"


def fmt_ms(x: float | None) -> str:
    """Seconds shown as ``0.83 ms`` / ``14.9 ms`` / ``1,234 ms``; ``–`` for missing."""
    if missing(x):
        return "–"
    v = x * 1e3
    return f"{v:,.0f} ms" if abs(v) >= 100 else (f"{v:.1f} ms" if abs(v) >= 10 else f"{v:.2f} ms")


def fmt_speedup(x: float | None) -> str:
    """``5.62×``; ``–`` when there is no exact-prefix policy to compare with."""
    return "–" if missing(x) else f"{x:.2f}×"


_MINUS = "\u2212"
