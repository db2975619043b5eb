"""S2 boundary markers: a fixed 64-token sequence wrapped around shared regions by a cooperating prompt
assembler, so content-defined chunking cuts exactly at region edges.

Marker tokens use ids from a reserved range (``MARKER_BASE + i``) that the built-in tokenizer never
emits. In a canonical trace each marker is its own segment of kind ``"marker"``; policies may find markers
either by segment kind or by searching ``BOUNDARY_MARKER`` in the token stream (``find_markers``).
"""

from __future__ import annotations

import numpy as np

MARKER_LEN = 64
MARKER_BASE = 2_000_000_000  # reserved id range; built-in tokenizer ids stay below 2**31 - 2**27
BOUNDARY_MARKER = (MARKER_BASE + np.arange(MARKER_LEN)).astype(np.int32)


def find_markers(tokens: np.ndarray, marker: np.ndarray = BOUNDARY_MARKER) -> np.ndarray:
    """int64 [m]: start offsets of every non-overlapping occurrence of ``marker`` in ``tokens``.

    Vectorized: candidates are positions equal to ``marker[0]``; each is checked with one gather.
    """
    toks = np.asarray(tokens)
    k = int(marker.size)
    if toks.size < k:
        return np.zeros(0, np.int64)
    cand = np.nonzero(toks[: toks.size - k + 1] == marker[0])[0]
    if cand.size == 0:
        return cand.astype(np.int64)
    window = toks[cand[:, None] + np.arange(k)[None, :]]
    hits = cand[(window == marker[None, :]).all(axis=1)].astype(np.int64)
    if hits.size <= 1:
        return hits
    keep = [hits[0]]
    for h in hits[1:]:  # loop over marker hits only (a few per prompt), never per token
        if h >= keep[-1] + k:
            keep.append(h)
    return np.asarray(keep, np.int64)
