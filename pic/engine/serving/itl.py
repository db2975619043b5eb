"""A replica's inter-token-latency segments, compact: the newest as lists, older ones in float64 blocks.

Each segment is ``[d0, step, n, w]`` (:mod:`engine.serving.replica`): ``n`` values ``d0 + step·j``, each
``w`` times. Only the newest segments change (a prefill step merges into the last one; a cut shortens or
removes the running decode phase's segment, the last one appended), so all but the newest ``_KEEP`` are
moved, ``_BLOCK`` at a time, into float64 arrays (32 B per segment instead of a list and its boxed
numbers, ~150 B: chat 10^6 has ~2.7 M segments per simulation).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

_BLOCK = 4096
_KEEP = 64


class ItlLog:
    """ITL segments in order; ``log[-k]`` (k <= ``_KEEP``) is the k-th newest, mutable."""

    __slots__ = ("_blocks", "_tail", "_n")

    def __init__(self) -> None:
        self._blocks: list[np.ndarray] = []
        self._tail: list[list[float]] = []
        self._n = 0

    def append(self, seg: list[float]) -> None:
        tail = self._tail
        tail.append(seg)
        if len(tail) >= _BLOCK + _KEEP:
            self._blocks.append(np.array(tail[:_BLOCK], np.float64))
            del tail[:_BLOCK]
            self._n += _BLOCK

    def add_step(self, d: float, w: int) -> None:
        """One step of ``d`` seconds seen by ``w`` decoders: merged into the newest segment when that is
        a run of equal steps ``[d, 0.0, n, w]`` (its ``n`` grows), else appended as ``[d, 0.0, 1, w]``
        (the newest segment is always in the tail: a block move keeps the newest ``_KEEP``)."""
        tail = self._tail
        if tail:
            last = tail[-1]
            if last[1] == 0.0 and last[0] == d and last[3] == w:
                last[2] += 1
                return
        self.append([d, 0.0, 1, w])

    def remove(self, seg: list[float]) -> None:
        """Drop segment ``seg`` (one of the newest, by identity)."""
        for k in range(len(self._tail) - 1, -1, -1):
            if self._tail[k] is seg:
                del self._tail[k]
                return
        raise ValueError("ItlLog.remove: the segment is not among the newest")

    def __getitem__(self, i: int) -> list[float]:
        if not -len(self._tail) <= i < 0:
            raise IndexError("ItlLog: only the newest segments are indexed (negative indices)")
        return self._tail[i]

    def __len__(self) -> int:
        return self._n + len(self._tail)

    def __bool__(self) -> bool:
        return bool(self._tail) or self._n > 0

    def __iter__(self) -> Iterator[list[float]]:
        for b in self._blocks:
            yield from b.tolist()
        yield from self._tail

    def array(self) -> np.ndarray:
        """float64 [len, 4]: every segment, in order."""
        return np.concatenate([*self._blocks, np.asarray(self._tail, np.float64).reshape(-1, 4)])
