"""``fixed-chunk``'s counting filters over its stored chunk keys (:mod:`engine.policies.fixed_chunk`): which
windows of a prompt may be a stored chunk."""

from __future__ import annotations

import numpy as np

from pic import accel
from pic.engine.rolling import BASE, prefix_windows

_FILTER_BITS = 22
_FILTER_SHIFT = 64 - _FILTER_BITS
_FILTER_MASK = (1 << _FILTER_BITS) - 1


class _Filters:
    """Counting filters over the top and the low ``_FILTER_BITS`` bits of the stored full-chunk keys: one
    gather per lookup rejects almost every window, a second one on the survivors nearly all false
    positives; only what passes both is checked against the dict. Filters only prune non-members, so plans
    do not depend on them.

    NOTE (speed): beside each 8 MB counting filter, a 512 KB bitset of its non-zero buckets: the compiled
    scan (:func:`pic._accel_numba_fixed.window_candidates`, one pass) reads the bitsets, which stay in cache
    (Mooncake conversation: ~130 -> ~20 us per lookup of ~7,500 windows); the numpy path reads them too.

    NOTE (speed): the counts are read only to remove keys: a filter whose keys are not removed (``counted`` False:
    an unbounded cache's) keeps its bitsets alone until :meth:`count` is given every key added so far (two random
    writes into the 8 MB counts per key, ~5 us per Mooncake commit, not made)."""

    def __init__(self, counted: bool = True) -> None:
        self.counts = (np.zeros(1 << _FILTER_BITS, np.uint16), np.zeros(1 << _FILTER_BITS, np.uint16))
        self.bits = (np.zeros(1 << (_FILTER_BITS - 3), np.uint8), np.zeros(1 << (_FILTER_BITS - 3), np.uint8))
        self.counted = counted

    def count(self, keys: np.ndarray) -> None:
        """Keep the counts from now on, starting with ``keys``: every key added so far (with its repeats)."""
        if not self.counted:
            for count, idx in zip(self.counts, _buckets(keys), strict=True):
                np.add.at(count, idx, 1)
            self.counted = True

    def add(self, keys: np.ndarray) -> None:
        fast = accel.kernels(0, "fixed")
        if not self.counted:
            if fast is not None:
                fast.bits_add(keys, *self.bits, np.uint64(_FILTER_SHIFT), np.uint64(_FILTER_MASK))
                return
            for bits, idx in zip(self.bits, _buckets(keys), strict=True):
                np.bitwise_or.at(bits, idx >> 3, (1 << (idx & 7)).astype(np.uint8))
            return
        if fast is not None:     # NOTE (speed): one compiled pass (four ufunc.at calls cost ~25 us per commit)
            fast.filter_add(keys, *self.counts, *self.bits, np.uint64(_FILTER_SHIFT), np.uint64(_FILTER_MASK))
            return
        for count, bits, idx in zip(self.counts, self.bits, _buckets(keys), strict=True):
            np.add.at(count, idx, 1)           # buckets of distinct keys may repeat: np.add.at
            np.bitwise_or.at(bits, idx >> 3, (1 << (idx & 7)).astype(np.uint8))

    def remove(self, keys: np.ndarray) -> None:
        if not self.counted:
            raise RuntimeError("fixed-chunk: keys removed from filters not counted (count() first)")
        for count, bits, idx in zip(self.counts, self.bits, _buckets(keys), strict=True):
            np.subtract.at(count, idx, 1)
            empty = idx[count[idx] == 0]
            np.bitwise_and.at(bits, empty >> 3, ~(1 << (empty & 7)).astype(np.uint8))

    def candidates(self, h: np.ndarray, width: int, start: int) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, keys)``: the offsets ``>= start`` (ascending) whose ``width``-token window hash passes
        both filters, and those hashes; ``h``: the prompt's prefix hashes (window ``i``: ``h[i + width] -
        h[i] * B^width``)."""
        fast = accel.kernels(max(h.shape[0] - width - start, 0), "fixed")
        if fast is not None:
            return fast.window_candidates(h, width, np.uint64(pow(BASE, width, 1 << 64)), start, self.bits[0],
                                          self.bits[1], np.uint64(_FILTER_SHIFT), np.uint64(_FILTER_MASK))
        ws = prefix_windows(h, width, start)
        a = (ws >> np.uint64(_FILTER_SHIFT)).astype(np.int64)
        idx = np.flatnonzero((self.bits[0][a >> 3] >> (a & 7).astype(np.uint8)) & 1)
        b = (ws[idx] & np.uint64(_FILTER_MASK)).astype(np.int64)
        idx = idx[((self.bits[1][b >> 3] >> (b & 7).astype(np.uint8)) & 1) > 0]
        return idx + start, ws[idx]


def _buckets(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int64 bucket of each uint64 key in the first (top bits) and the second (low bits) filter."""
    return (keys >> np.uint64(_FILTER_SHIFT)).astype(np.int64), (keys & np.uint64(_FILTER_MASK)).astype(np.int64)


