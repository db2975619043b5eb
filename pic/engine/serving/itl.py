"""A replica's inter-token-latency segments, compact: one flat float64 ``array.array`` (32 B per segment).

Each segment is ``[d0, step, n, w]`` (:mod:`engine.serving.replica`): ``n`` values ``d0 + step·j``, each
``w`` times. Only the newest segment changes (a prefill step merges into it; a cut shortens or removes the
running decode phase's segment, the last one appended), so the log is four float64 slots per segment,
appended and edited in place (chat 10^6 has ~2.7 M segments per simulation).

NOTE (speed): a segment is four floats written into the array (no list per segment, no boxed numbers, no
block moves: the lists' conversion to float64 blocks cost ~3 % of a prefix simulation); ``n`` and ``w``
are integers below 2**53, exact as float64, so the values are those the lists held.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

import numpy as np


class ItlLog:
    """ITL segments in order; ``log[-k]`` is the k-th newest (a copy: edit through the methods)."""

    __slots__ = ("_a",)

    def __init__(self) -> None:
        self._a = array("d")

    def append(self, d0: float, step: float, n: int, w: int) -> int:
        """Append segment ``[d0, step, n, w]``; returns its position (for :meth:`set_count`)."""
        a = self._a
        pos = len(a)
        a.fromlist([d0, step, n, w])
        return pos

    def add_step(self, d: float, w: int) -> None:
        """One step of ``d`` seconds seen by ``w`` decoders: merged into the newest segment when that is
        a run of equal steps ``[d, 0.0, n, w]`` (its ``n`` grows), else appended as ``[d, 0.0, 1, w]``."""
        a = self._a
        if a and a[-3] == 0.0 and a[-4] == d and a[-1] == w:
            a[-2] += 1
            return
        a.fromlist([d, 0.0, 1, w])

    def set_count(self, pos: int, n: int) -> None:
        """Segment at ``pos`` (from :meth:`append`) holds ``n`` values; ``n == 0`` drops it (it must be the
        newest then: the positions after it would move)."""
        a = self._a
        if n:
            a[pos + 2] = n
        elif pos + 4 == len(a):
            del a[pos:]
        else:
            raise ValueError("ItlLog.set_count: only the newest segment can be dropped")

    def __getitem__(self, i: int) -> list[float]:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        k = 4 * (i % n)
        return self._a[k:k + 4].tolist()

    def __len__(self) -> int:
        return len(self._a) >> 2

    def __bool__(self) -> bool:
        return len(self._a) > 0

    def __iter__(self) -> Iterator[list[float]]:
        a = self._a.tolist()
        for k in range(0, len(a), 4):
            yield a[k:k + 4]

    def array(self) -> np.ndarray:
        """float64 [len, 4]: every segment, in order (a copy)."""
        return np.frombuffer(self._a, np.float64).reshape(-1, 4).copy() if self._a else np.zeros((0, 4))
