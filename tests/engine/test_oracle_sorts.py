"""The trace oracle's sorts need no stability where ties cannot change an answer: ranks (``unique_inverse``), a
key's first item (``_Earlier._met``: its least item), interval unions (``_union``), the trie's nodes and their
first items (``resident``); and the content classes' tokens read four at a time (``resident._tokens_at``). Each
against its definition, on inputs full of ties."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine import resident
from pic.engine.intervals import _Earlier, _union
from pic.engine.rolling import unique_inverse
from tests.engine.test_resident import _segments


@pytest.mark.parametrize("seed", range(4))
def test_unique_inverse_is_np_unique(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 50, 3000) * np.int64(1 << 40) + rng.integers(0, 3, 3000)
    u, inv = unique_inverse(x)
    want_u, want_inv = np.unique(x, return_inverse=True)
    assert np.array_equal(u, want_u) and np.array_equal(inv, want_inv)
    _, _, first = unique_inverse(x, first=True)
    assert np.array_equal(first, [int(np.flatnonzero(x == v)[0]) for v in want_u])


@pytest.mark.parametrize("seed", range(4))
def test_met_holds_keys_met_by_an_earlier_item(seed: int) -> None:
    """Chunks of records in item order: a record is held when an earlier chunk or an earlier item of its own
    chunk had its key (keys repeat within items, across items and chunks)."""
    rng = np.random.default_rng(seed)
    ear, seen = _Earlier(), set()
    for _ in range(6):
        n = int(rng.integers(0, 400))
        item = np.sort(rng.integers(0, 60, n))
        key = rng.integers(0, 90, n).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        got = ear._met(key, item)
        first = {}
        for k, i in zip(key.tolist(), item.tolist(), strict=True):
            first.setdefault(k, i)
        want = [r for r, (k, i) in enumerate(zip(key.tolist(), item.tolist(), strict=True))
                if k in seen or first[k] < i]
        assert got.tolist() == want
        seen.update(key.tolist())


@pytest.mark.parametrize("seed", range(4))
def test_union_merges_touching_intervals_per_item(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 2000
    item = np.sort(rng.integers(0, 40, n))
    a = rng.integers(0, 60, n)
    b = a + rng.integers(0, 5, n)
    ga, gb, gi = _union(item, a, b)
    want = []
    for i in np.unique(item).tolist():
        cover = np.zeros(80, bool)
        for x, y in zip(a[item == i].tolist(), b[item == i].tolist(), strict=True):
            cover[x:y + 1] = True
        edges = np.flatnonzero(np.diff(np.r_[0, cover.astype(np.int8), 0]))
        want += [(i, int(s), int(e) - 1) for s, e in zip(edges[::2], edges[1::2], strict=True)]
    assert list(zip(gi.tolist(), ga.tolist(), gb.tolist(), strict=True)) == want


@pytest.mark.parametrize("seed", range(6))
def test_tokens_at_reads_as_segments_do(seed: int) -> None:
    rng = np.random.default_rng(seed)
    seg = _segments(rng, False)
    lens = np.diff(seg.offsets)
    rows = np.flatnonzero(lens > 0)
    rows = rows[rng.integers(0, rows.shape[0], 200)]
    opq = seg.opaque_mask[rows]
    ident = rows.astype(np.uint64)
    ident[opq] = seg.keys[rows[opq]] ^ seg.salts[rows[opq]]
    cols = tuple(rng.integers(0, lens[rows]) for _ in range(3))
    got = resident._tokens_at(seg, rows, opq, ident, cols)
    for pos, x in zip(cols, got, strict=True):
        assert x.dtype == np.int64 and np.array_equal(x, seg.tokens_at(rows, pos))


@pytest.mark.parametrize("seed", range(8))
def test_classes_are_equal_tokens(seed: int) -> None:
    """Two rows share a content class exactly when their tokens are equal (copies of stored rows, opaque rows of
    one seed; rows that agree on their first tokens but not on the middle or last ones)."""
    rng = np.random.default_rng(seed)
    seg = _segments(rng, bool(seed % 2))
    rows = np.flatnonzero(np.diff(seg.offsets) > 0)
    cls, rep, first = resident._classes(seg, rows)
    toks = [seg.segment(int(r)).tobytes() for r in rows]
    for i in range(rows.shape[0]):
        for j in range(rows.shape[0]):
            assert (cls[i] == cls[j]) == (toks[i] == toks[j])
    assert [seg.segment(int(r)).tobytes() for r in rep[cls]] == toks
    assert np.array_equal(first[cls], [int(seg.segment(int(r))[0]) for r in rows])
