"""CacheBlend selector: the reused tokens whose KV deviates most from a fresh computation (CacheBlend, Yao
et al., EuroSys 2025: "high-KV-deviation" tokens, chosen on an early layer and recomputed in all layers).

Choosing needs a selection pass: the reused tokens run through the layers up to the first attention
layer's K/V projection (on a hybrid model the recurrent layers below it too), priced as
``Correction.probe_tokens``. The simulator has no activations, so without ``scores`` the selection is a
count; given per-token ``scores`` (the GPU benchmark passes measured deviations) it returns the top ones.
"""

from __future__ import annotations

import numpy as np

from pic.engine.selectors.base import Selection, Selector, budget, positions_of


class CacheBlend(Selector):
    name = "cacheblend"

    def select(self, chunks: np.ndarray, ratio: float, scores: np.ndarray | None = None) -> Selection:
        b = budget(chunks, ratio)
        reused = int((chunks[:, 1] - chunks[:, 0]).sum()) if len(chunks) else 0
        probe = reused if b else 0
        if scores is None:
            return Selection(b, None, probe)
        pos = positions_of(chunks)
        if scores.shape != pos.shape:
            raise ValueError(f"cacheblend: {scores.shape[0]} scores for {pos.shape[0]} reused tokens")
        top = np.argsort(-np.asarray(scores, np.float64), kind="stable")[:b]
        return Selection(b, np.sort(pos[top]), probe)
