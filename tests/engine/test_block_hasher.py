"""BlockHasher's one-segment fast path gives the general path's values."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.test_coverage import _tricky_trace


@pytest.mark.parametrize("seed", [1, 4])
def test_one_segment_prompts_equal_the_general_path(seed: int) -> None:
    """Each segment alone (stored or opaque) hashes to the general path's values for the same blocks: the
    blocks of a two-segment prompt that lie in its first segment, and prefix_hashes for stored content."""
    from pic.engine.policies.base import RequestView
    from pic.engine.rolling import BlockHasher, prefix_hashes

    t = _tricky_trace(seed, n=40)
    segs = t.segments
    lens = segs.lengths
    opq = segs.opaque_mask
    assert opq.any() and (~opq).any()
    checked = 0
    for bs in (1, 16, 64):
        hasher = BlockHasher(bs)
        for r in range(len(segs)):
            other = (r + 1) % len(segs)
            rows1, rows2 = np.array([r]), np.array([r, other])
            one = RequestView(0, "s", None, np.r_[0, lens[r]], segs.ids[rows1], segs.kinds[rows1], rows1, segs)
            two = RequestView(1, "s", None, np.r_[0, np.cumsum(lens[rows2])], segs.ids[rows2], segs.kinds[rows2],
                              rows2, segs)
            h1 = hasher.hashes(one)                # a stored row met first here: not pooled yet (general path)
            h2 = hasher.hashes(two)
            h3 = hasher.hashes(one)                # pooled at phase 0 now: the fast path
            k = int(lens[r]) // bs
            assert h1.shape[0] == h3.shape[0] == k
            assert np.array_equal(h1, h2[:k]) and np.array_equal(h3, h2[:k])
            if not opq[r]:
                assert np.array_equal(h3, prefix_hashes(one.tokens)[bs::bs])
            checked += k > 0
    assert checked > 50


@pytest.mark.parametrize("bs", [1, 16, 64])
def test_opaque_pool_equals_a_per_row_reference(bs: int) -> None:
    """The opaque segments' pooled block values (made for all rows at once, in place and in pieces) equal a
    plain per-row loop of the documented formula: value k of a row is the running sum of splitmix64(base +
    j * C), j = 1..k, and its full-length value adds a tail term when the length is not a whole number of
    blocks (rows shorter than a block pool nothing)."""
    from pic.engine.rolling import BlockHasher

    m64 = (1 << 64) - 1

    def mix(z: int) -> int:
        z ^= z >> 30
        z = (z * 0xBF58476D1CE4E5B9) & m64
        z ^= z >> 27
        z = (z * 0x94D049BB133111EB) & m64
        return z ^ (z >> 31)

    segs = _tricky_trace(7, n=60).segments
    h = BlockHasher(bs)
    h._reset(segs)
    lens = segs.lengths
    rows = np.flatnonzero(segs.opaque_mask)
    assert rows.shape[0] > 5 and (lens[rows] < 64).any() and (lens[rows] % 64 != 0).any()
    for r in rows.tolist():
        base = mix(int(segs.keys[r]) ^ ((int(segs.salts[r]) * 0x9E3779B97F4A7C15) & m64))
        acc, want = 0, []
        for j in range(1, int(lens[r]) // bs + 1):
            acc = (acc + mix((base + j * 0xD1B54A32D192ED03) & m64)) & m64
            want.append(acc)
        st = int(h._kstart[r])
        assert h._kphase[r] == 0 and h._pool[st:st + len(want)].tolist() == want
        tail = mix(((base ^ int(lens[r])) * 0xA24BAED4963EE407) & m64) if lens[r] % bs else 0
        assert int(h._kfull[r]) == (acc + tail) & m64
