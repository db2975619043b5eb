"""engine.window_parts / engine.anchors helpers against direct references: the held windows of a partition,
the tokens of item ranges, the k-gram hashes of the anchor filter."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine import anchors, coverage, window_parts
from pic.traces.content import Segments


def _held_reference(h: np.ndarray, g: np.ndarray, wcum: np.ndarray, hi: np.ndarray) -> list[int]:
    """Per window: held when a window of a smaller item has its hash (by a dict, window by window)."""
    item = hi[np.searchsorted(wcum, g, side="right") - 1]
    first: dict[int, int] = {}
    for x, i in sorted(zip(h.tolist(), item.tolist(), strict=True), key=lambda t: t[1]):
        first.setdefault(x, i)
    return sorted(int(gg) for x, gg, i in zip(h.tolist(), g.tolist(), item.tolist(), strict=True) if first[x] < i)


@pytest.mark.parametrize("seed", range(6))
def test_held_windows_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nr = int(rng.integers(1, 40))
    nwin = rng.integers(1, 30, nr)
    wcum = np.r_[0, np.cumsum(nwin)].astype(np.int64)
    hi = np.sort(rng.integers(0, 12, nr)).astype(np.int64)          # ranges in item order
    n = int(wcum[-1])
    g = np.arange(n, dtype=np.int64)
    vals = rng.integers(0, max(2, n // int(rng.integers(1, 5))), n).astype(np.uint64)
    h = vals * np.uint64(0x9E3779B97F4A7C15)                           # (spread over 64 bits)
    if seed % 2:                     # by the hash's top bits, windows in order within each (as a partition holds)
        perm = np.argsort(h >> np.uint64(60), kind="stable")
        h, g = h[perm], g[perm]
    got = np.sort(window_parts._held_windows(h, g, wcum, hi)).tolist()
    assert got == _held_reference(h, g, wcum, hi)


def test_held_windows_none_repeated() -> None:
    h = np.arange(10, dtype=np.uint64)
    assert window_parts._held_windows(h, np.arange(10), np.array([0, 10]), np.array([0])).shape == (0,)


@pytest.mark.parametrize("seed", range(4))
def test_range_tokens_matches_gather(seed: int) -> None:
    """Stored segments only (the one-gather path): the tokens of each range, as the items' tokens hold them."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 40, 9)
    segs = [rng.integers(-5, 1000, int(n)).astype(np.int32) for n in lens]
    store = Segments(np.arange(9, dtype=np.uint64), np.zeros(9, np.uint8), np.r_[0, np.cumsum(lens)],
                     np.concatenate(segs))
    items = [rng.integers(0, 9, int(rng.integers(1, 5))) for _ in range(7)]
    rows = np.concatenate(items).astype(np.int64)
    offs = np.r_[0, np.cumsum([len(x) for x in items])].astype(np.int64)
    r, lo, _, cum = coverage._pieces(store, rows, offs, None, None)
    it, a, b = [], [], []
    for i in range(len(items)):
        N = int(cum[offs[i + 1]] - cum[offs[i]])
        x = int(rng.integers(0, N))
        it.append(i)
        a.append(x)
        b.append(int(rng.integers(x + 1, N + 1)))
    it, a, b = (np.asarray(v, np.int64) for v in (it, a, b))
    toks, starts = window_parts.range_tokens(store, r, lo, offs, cum, it, a, b)
    want = [store.gather(rows[offs[i]:offs[i + 1]])[x:y] for i, x, y in zip(it, a, b, strict=True)]
    assert toks.dtype == np.int32
    assert toks.tolist() == np.concatenate(want).tolist()
    assert starts.tolist() == np.r_[0, np.cumsum(b - a)[:-1]].tolist()


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 8, 13, 16])
def test_kgram_hashes_are_a_function_of_the_substring(k: int) -> None:
    """Equal k-token substrings get equal values, and the values are those of a direct polynomial."""
    rng = np.random.default_rng(k)
    t = rng.integers(-3, 6, 400).astype(np.int32)                      # (a small alphabet: many repeats)
    got = anchors.kgram_hashes(t, k)
    assert got.dtype == np.uint32 and got.shape[0] == t.shape[0] - k + 1
    seen: dict[bytes, int] = {}
    for p in range(t.shape[0] - k + 1):
        assert seen.setdefault(t[p:p + k].tobytes(), int(got[p])) == int(got[p])
    assert len(set(seen.values())) > 0.9 * len(seen)                    # distinct substrings: mostly distinct
    assert anchors.kgram_hashes(t[:k - 1], k).shape == (0,)
