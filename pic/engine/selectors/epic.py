"""EPIC selector: the first tokens of every reused chunk (EPIC, Hu et al. 2024, "AttnLink": a reused
chunk's first tokens carry the attention-sink error of being computed without its new prefix).

The budget ``round(r x reused)`` is spread over the chunks in proportion to their lengths (floor, then the
leftover tokens one each to the earliest chunks), and each chunk recomputes its leading tokens.
"""

from __future__ import annotations

import numpy as np

from pic.engine.selectors.base import Selection, Selector, budget


class Epic(Selector):
    name = "epic"

    def select(self, chunks: np.ndarray, ratio: float, scores: np.ndarray | None = None) -> Selection:
        b = budget(chunks, ratio)
        if b == 0:
            return Selection(0, np.zeros(0, np.int64))
        lens = chunks[:, 1] - chunks[:, 0]
        take = (lens * b) // int(lens.sum())
        left = b - int(take.sum())
        room = np.flatnonzero(take < lens)[:left]       # NOTE: left < number of chunks, each gets one more
        take[room] += 1
        reps = np.repeat(chunks[:, 0], take)
        offs = np.arange(int(take.sum()), dtype=np.int64) - np.repeat(np.cumsum(take) - take, take)
        return Selection(b, reps + offs)
