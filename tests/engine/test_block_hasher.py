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
