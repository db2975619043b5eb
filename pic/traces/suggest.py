"""``did you mean``: the closest known name to a misspelt one (policies, models, GPUs, scenarios, options)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(value: object, choices: Iterable[str]) -> str | None:
    """The known name most like ``value`` (case-insensitive, difflib ratio >= 0.6), or None."""
    names = list(choices)
    low = {n.lower(): n for n in names}
    hit = difflib.get_close_matches(str(value).strip().lower(), list(low), n=1, cutoff=0.6)
    return low[hit[0]] if hit else None


def did_you_mean(value: object, choices: Iterable[str]) -> str:
    """``" (did you mean 'irminsul'?)"`` when a known name is close to ``value``, else ``""``."""
    hit = closest(value, choices)
    return f" (did you mean {hit!r}?)" if hit is not None else ""
