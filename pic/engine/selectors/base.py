"""Selector protocol and result (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np


@dataclass(frozen=True, slots=True)
class Selection:
    """``num_tokens`` reused tokens to recompute; ``positions`` (int64, sorted, target positions) when the
    selector knows them, else None (needs a model pass); ``probe_tokens`` run by that selection pass."""

    num_tokens: int
    positions: np.ndarray | None
    probe_tokens: int = 0


class Selector:
    """Base of the recompute selectors. ``chunks``: int64 [k, 2] target ``[start, end)`` of the reused
    chunks in context order; ``ratio`` in [0, 1]; ``scores`` (optional, one per reused token in the order of
    ``chunks``): a measured importance, e.g. CacheBlend's KV deviation."""

    name: ClassVar[str] = ""

    def select(self, chunks: np.ndarray, ratio: float, scores: np.ndarray | None = None) -> Selection:
        raise NotImplementedError


def budget(chunks: np.ndarray, ratio: float) -> int:
    """``round(ratio x reused tokens)``: the size of U."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"recompute ratio must be in [0, 1], got {ratio}")
    total = int((chunks[:, 1] - chunks[:, 0]).sum()) if len(chunks) else 0
    return int(round(ratio * total))


def positions_of(chunks: np.ndarray) -> np.ndarray:
    """int64: every target position of the reused chunks, in order."""
    if not len(chunks):
        return np.zeros(0, np.int64)
    lens = chunks[:, 1] - chunks[:, 0]
    starts = np.repeat(chunks[:, 0] - np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
    return starts + np.arange(int(lens.sum()), dtype=np.int64)
