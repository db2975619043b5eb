"""``engine.seq.token_at`` with its per-store seed cache against the uncached derivation (numpy arrays of the
segment), on a store mixing stored and opaque segments, at random rows and offsets."""

from __future__ import annotations

import numpy as np

from pic.engine import seq
from pic.traces.content import Segments, opaque_bases, opaque_run


def test_token_at_cached_equals_derived():
    rng = np.random.default_rng(3)
    n = 300
    lens = rng.integers(1, 700, n)
    opaque = rng.random(n) < 0.6
    stored = [rng.integers(0, 50_000, int(k), dtype=np.int32) for k in lens]
    offsets = np.r_[0, np.cumsum(lens)].astype(np.int64)
    tlens = np.where(opaque, 0, lens)
    token_offsets = np.r_[0, np.cumsum(tlens)].astype(np.int64)
    tokens = np.concatenate([t for t, o in zip(stored, opaque, strict=True) if not o])
    keys = rng.integers(0, 2**63, n, dtype=np.uint64)
    salts = rng.integers(0, 2**63, n, dtype=np.uint64)
    store = Segments(keys, np.zeros(n, np.uint8), offsets, tokens, token_offsets, keys, salts)
    seq._BASES.clear()
    for _ in range(2000):
        r = int(rng.integers(n))
        j = int(rng.integers(lens[r]))
        want = int(opaque_run(opaque_bases(keys[r:r + 1], salts[r:r + 1]), np.array([j]), np.array([1]))[0]) \
            if opaque[r] else int(stored[r][j])
        assert seq.token_at(store, r, j) == want
        assert int(store.segment(r, j, j + 1)[0]) == want
    assert id(store) in seq._BASES

