"""engine.rolling: prefix hashes computed in bounded pieces equal the polynomial hash by definition,
across piece boundaries, and the kept power tables stay bounded."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine import rolling


def _reference(tokens: np.ndarray) -> list[int]:
    """H[i] = sum_{j<i} mix(t_j) * B^(i-1-j) mod 2^64, by Horner's rule in Python integers."""
    x = [int(v) for v in rolling.mix(tokens)]
    out, h = [0], 0
    for v in x:
        h = (h * rolling.BASE + v) % (1 << 64)
        out.append(h)
    return out


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 31, 100])
def test_prefix_hashes_in_pieces_equal_the_definition(monkeypatch, n):
    monkeypatch.setattr(rolling, "_CACHE_MAX", 8)              # pieces of 7 tokens, tables of <= 8
    monkeypatch.setattr(rolling, "_pow", np.ones(1, np.uint64))
    monkeypatch.setattr(rolling, "_ipow", np.ones(1, np.uint64))
    t = np.random.default_rng(n).integers(0, 2**31 - 1, n).astype(np.int32)
    got = rolling.prefix_hashes(t)
    assert got.tolist() == _reference(t)
    if n >= 5:
        w = rolling.window_hashes(t, 5)
        for i in range(0, n - 5 + 1, 3):
            assert int(w[i]) == _reference(t[i:i + 5])[-1]
    assert rolling._pow.shape[0] <= 8 and rolling._ipow.shape[0] <= 8
    pw, ipw = rolling._powers(50)                              # longer: made for the call, not kept
    assert pw.shape[0] == 51 and int(pw[50]) == pow(rolling.BASE, 50, 1 << 64)
    assert int(ipw[50]) * int(pw[50]) % (1 << 64) == 1
    assert rolling._pow.shape[0] <= 8
