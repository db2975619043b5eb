"""fixed-chunk's two counting filters (bucket counts of the stored full chunks' keys, and their bitsets): exact
after commits and evictions; an unbounded cache keeps the bitsets alone until it first evicts."""

from __future__ import annotations

import numpy as np
import pytest

from pic import accel
from pic.engine import policies
from pic.engine.policies.fixed_chunk import _FILTER_BITS, _FILTER_MASK, _FILTER_SHIFT
from tests.policies.conftest import BYTES_PER_TOKEN, make_ctx, request_stream, serve


def _buckets(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two filters' bucket counts of ``keys`` (uint64): by the top and by the low bits."""
    return (np.bincount((keys >> np.uint64(_FILTER_SHIFT)).astype(np.int64), minlength=1 << _FILTER_BITS),
            np.bincount((keys & np.uint64(_FILTER_MASK)).astype(np.int64), minlength=1 << _FILTER_BITS))


def test_filters_count_exactly_the_stored_keys() -> None:
    """After commits and evictions, both counting filters equal the bucket counts of the stored keys
    (no false negatives can hide a stored chunk from lookup)."""
    p = policies.build("fixed-chunk", make_ctx(3000), {"chunk_size": "32"})
    for t, req in enumerate(request_stream(seed=6, num_requests=80)):
        plan = p.lookup(req, t)
        if p.admit(req, plan, t):
            p.commit(req, t)
            p.release(req, t)
    keys = np.array(list(p._store), np.uint64)
    top, low = _buckets(keys)
    assert p.stats.evictions > 20 and keys.shape[0] > 0
    assert np.array_equal(p._filters.counts[0], top) and np.array_equal(p._filters.counts[1], low)
    for count, bits in zip(p._filters.counts, p._filters.bits, strict=True):     # bit set = bucket non-empty
        assert np.array_equal(np.unpackbits(bits, bitorder="little").astype(bool), count > 0)


@pytest.mark.parametrize("mode", ["0", "1"])
def test_an_unbounded_cache_counts_its_filters_only_once_it_evicts(mode: str) -> None:
    """An unbounded cache keeps the bitsets alone (nothing is removed): bit set = some stored full chunk's bucket,
    counts all zero; an explicit eviction counts every stored key first, then removes the evicted ones: the counts
    are the stored keys' bucket counts again, bits set where they are non-empty (numpy and compiled adds)."""
    if mode == "1" and not accel.available():
        pytest.skip("numba not installed")

    def buckets(p):
        return _buckets(np.array([k for k, ch in p._store.items() if ch.size == p._c], np.uint64))

    accel.set_mode(mode)
    try:
        p = policies.build("fixed-chunk", make_ctx(float("inf")), {"chunk_size": "32", "save_unfull_chunk": "true"})
        for t, req in enumerate(request_stream(seed=6, num_requests=80)):
            serve(p, req, t)
        assert not p._filters.counted and not any(c.any() for c in p._filters.counts)
        for want, bits in zip(buckets(p), p._filters.bits, strict=True):
            assert np.array_equal(np.unpackbits(bits, bitorder="little").astype(bool), want > 0)
        assert p.evict(500 * BYTES_PER_TOKEN, 100) > 0 and p._filters.counted and p._tails
        for want, count, bits in zip(buckets(p), p._filters.counts, p._filters.bits, strict=True):
            assert np.array_equal(count, want)
            assert np.array_equal(np.unpackbits(bits, bitorder="little").astype(bool), want > 0)
    finally:
        accel.set_mode(None)
