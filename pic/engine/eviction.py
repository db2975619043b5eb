"""Eviction order as a key function: entry -> sortable tuple, smallest evicted first (SGLang style).

Entries expose ``last_access_us``, ``hits`` and ``created_us`` (ints). Policies pick a key by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Evictable(Protocol):
    last_access_us: int
    hits: int
    created_us: int


def lru(e: Evictable) -> tuple[int, ...]:
    return (e.last_access_us, e.created_us)


def lfu(e: Evictable) -> tuple[int, ...]:
    return (e.hits, e.last_access_us, e.created_us)


def fifo(e: Evictable) -> tuple[int, ...]:
    return (e.created_us,)


KEYS: dict[str, Callable[[Any], tuple[int, ...]]] = {"lru": lru, "lfu": lfu, "fifo": fifo}


def key(name: str) -> Callable[[Any], tuple[int, ...]]:
    """Key function by name; raises with the known names."""
    if name not in KEYS:
        raise ValueError(f"unknown eviction order {name!r}; known: {', '.join(KEYS)}")
    return KEYS[name]
