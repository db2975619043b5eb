"""Recompute selectors of the ``linearkv`` policy: which reused tokens are recomputed anyway (the set U).

A selector gets the reused chunks' target ranges and a budget ratio ``r`` and returns a
:class:`Selection`: how many tokens (``round(r x reused)``), where (target positions, sorted) when it can
know without a model pass, and how many tokens a selection pass must run first (priced by the cost model as
``Correction.probe_tokens``). One small module per selector, registered here by name.
"""

from __future__ import annotations

from pic.engine.selectors.base import Selection, Selector, budget
from pic.engine.selectors.cacheblend import CacheBlend
from pic.engine.selectors.epic import Epic

SELECTORS: dict[str, type[Selector]] = {s.name: s for s in (Epic, CacheBlend)}


def get(name: str) -> Selector:
    """The selector registered as ``name``; unknown names raise ValueError listing the known ones."""
    if name not in SELECTORS:
        raise ValueError(f"unknown selector {name!r}; known: {', '.join(sorted(SELECTORS))}")
    return SELECTORS[name]()


__all__ = ["SELECTORS", "Selection", "Selector", "budget", "get"]
