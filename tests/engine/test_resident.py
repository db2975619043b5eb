"""engine.resident: each prompt's longest prefix shared with an earlier one, from the segment structure, equals
the token-level answer (brute force over the tokens) and the radix tree's (the reference)."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine import resident
from pic.engine.resident import resident_prefixes, resident_prefixes_radix
from pic.traces.content import Segments


def _segments(rng: np.random.Generator, same_length: bool) -> Segments:
    """Stored rows of a tiny vocabulary (equal first tokens, long shared prefixes, the same tokens under
    several rows, empty rows) and opaque rows (a few streams; two (key, salt) pairs of one seed). With
    ``same_length`` every non-empty row has 4 tokens (no row is a proper prefix of another)."""
    n_st, n_op = int(rng.integers(6, 20)), int(rng.integers(0, 8))
    toks, lens = [], []
    for _ in range(n_st):
        r = rng.random()
        n = 0 if r < 0.08 else 4 if same_length else int(rng.integers(1, 9))
        if toks and r > 0.8:                                 # a copy (or the start) of an earlier row
            src = toks[int(rng.integers(len(toks)))]
            t = src[:n] if n <= src.shape[0] else np.r_[src, rng.integers(0, 3, n - src.shape[0])]
        else:
            t = rng.integers(0, 3, n)
            t[:1] = 1 if rng.random() < 0.6 else t[:1]
        toks.append(np.asarray(t, np.int32))
        lens.append(n)
    keys = rng.integers(0, 4, n_op).astype(np.uint64)
    salts = rng.integers(0, 2, n_op).astype(np.uint64)
    if n_op > 1:
        keys[1], salts[1] = keys[0] ^ np.uint64(1), salts[0] ^ np.uint64(1)   # another pair of the same seed
    op_lens = [4 if same_length else int(rng.choice([1, 2, 4, 9])) for _ in range(n_op)]
    lens = np.r_[lens, op_lens].astype(np.int64)
    n = n_st + n_op
    offsets = np.r_[0, np.cumsum(lens)]
    tok_off = np.r_[0, np.cumsum(np.r_[lens[:n_st], np.zeros(n_op, np.int64)])]
    return Segments(np.arange(n, dtype=np.uint64), np.zeros(n, np.uint8), offsets,
                    np.concatenate(toks + [np.zeros(0, np.int32)]).astype(np.int32), tok_off,
                    np.r_[np.zeros(n_st, np.uint64), keys], np.r_[np.zeros(n_st, np.uint64), salts])


def _prompts(rng: np.random.Generator, seg: Segments, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` prompts (rows, item offsets): new ones, and continuations / cuts of earlier ones."""
    items: list[list[int]] = []
    for _ in range(n):
        r = rng.random()
        if items and r < 0.6:
            base = items[int(rng.integers(len(items)))]
            cut = int(rng.integers(0, len(base) + 1))
            new = base[:cut] + rng.integers(0, len(seg), int(rng.integers(0, 4))).tolist()
        else:
            new = rng.integers(0, len(seg), int(rng.integers(0, 6))).tolist()
        items.append(new)
    offs = np.r_[0, np.cumsum([len(x) for x in items])].astype(np.int64)
    return np.asarray([r for x in items for r in x], np.int64), offs


def _brute(seg: Segments, rows: np.ndarray, offs: np.ndarray) -> np.ndarray:
    toks = [seg.gather(rows[a:b]) if b > a else np.zeros(0, np.int32) for a, b in zip(offs[:-1], offs[1:], strict=True)]
    out = []
    for i, t in enumerate(toks):
        best = 0
        for u in toks[:i]:
            m = min(t.shape[0], u.shape[0])
            neq = np.flatnonzero(t[:m] != u[:m])
            best = max(best, int(neq[0]) if neq.shape[0] else m)
        out.append(best)
    return np.asarray(out, np.int64)


@pytest.mark.parametrize("same_length", [True, False])
def test_resident_prefixes_equal_the_token_answer(same_length: bool) -> None:
    rng = np.random.default_rng(12 + same_length)
    fast, deep = 0, 0
    for _ in range(60):
        seg = _segments(rng, same_length)
        rows, offs = _prompts(rng, seg, int(rng.integers(1, 40)))
        want = _brute(seg, rows, offs)
        got = resident._from_structure(seg, rows, offs)
        if got is not None:
            fast += 1
            assert got.tolist() == want.tolist()
        assert resident_prefixes(seg, rows, offs).tolist() == want.tolist()
        assert resident_prefixes_radix(seg, rows, offs).tolist() == want.tolist()
        deep += int((want % 4 != 0).sum())                  # prefixes ending inside a segment
    assert deep > 50
    if same_length:
        assert fast == 60                                    # no proper-prefix siblings: never the radix tree
    else:
        assert 5 < fast < 60                                 # both paths taken


def test_long_shared_heads_read_whole_segments() -> None:
    """Siblings that agree on more than the first ``_HEAD`` tokens (the whole segments are read)."""
    rng = np.random.default_rng(3)
    head = rng.integers(0, 5, 50).astype(np.int32)
    rows_t = [np.r_[head[:k], rng.integers(0, 5, 60 - k)].astype(np.int32) for k in (0, 33, 40, 50, 50, 45)]
    rows_t.append(rows_t[3].copy())                          # the same tokens under another row
    lens = np.asarray([t.shape[0] for t in rows_t], np.int64)
    offsets = np.r_[0, np.cumsum(lens)]
    seg = Segments(np.arange(lens.shape[0], dtype=np.uint64), np.zeros(lens.shape[0], np.uint8), offsets,
                   np.concatenate(rows_t))
    order = [6, 1, 2, 3, 4, 5, 0, 3, 6, 4]
    rows = np.asarray(order, np.int64)
    offs = np.arange(rows.shape[0] + 1, dtype=np.int64)
    want = _brute(seg, rows, offs)
    assert resident._from_structure(seg, rows, offs).tolist() == want.tolist()
    assert want.max() == 60 and sorted(set(want.tolist())) != [0, 60]


def test_proper_prefix_sibling_falls_back() -> None:
    """One sibling a proper prefix of another: the structure declines, the radix tree answers."""
    t = np.asarray([1, 2, 3, 4, 5, 6], np.int32)
    seg = Segments(np.arange(3, dtype=np.uint64), np.zeros(3, np.uint8), np.asarray([0, 3, 6, 9]),
                   np.r_[t, t[:3]].astype(np.int32))
    # rows: 0 = [1 2 3], 1 = [4 5 6], 2 = [1 2 3]; prompts [0 1] then [2 ...] is equal content: no relation
    rows = np.asarray([0, 1, 2, 1], np.int64)
    offs = np.asarray([0, 2, 4], np.int64)
    assert resident._from_structure(seg, rows, offs).tolist() == [0, 6]
    long = Segments(np.arange(2, dtype=np.uint64), np.zeros(2, np.uint8), np.asarray([0, 6, 9]),
                    np.r_[t, t[:3]].astype(np.int32))
    rows = np.asarray([0, 1, 1], np.int64)                   # [1..6] then [1 2 3][1 2 3]
    offs = np.asarray([0, 1, 3], np.int64)
    assert resident._from_structure(long, rows, offs) is None
    assert resident_prefixes(long, rows, offs).tolist() == [0, 3] == _brute(long, rows, offs).tolist()


@pytest.mark.parametrize("seed", range(3))
def test_repeated_rows_and_by_ident(seed):
    """resident._repeated_rows: exactly the rows another one agrees with on (n, t0, t1), packed or (negative tokens,
    tokens past 17 bits, long rows) mixed; resident._by_ident: np.lexsort((n, ident)), with and without ties."""
    from pic.engine.resident import _by_ident, _repeated_rows

    rng = np.random.default_rng(seed)
    k = 3000
    n = rng.choice([1, 2, 512, 700], k)
    t0, t1 = rng.integers(0, 40, k), rng.integers(0, 40, k)
    for shift in (0, -1, 1 << 17):
        for nn in (n, n + (1 << 29) * (shift == 0)):
            a, b = t0 + shift * (rng.random(k) < 0.01), t1
            rows = list(zip(nn.tolist(), a.tolist(), b.tolist(), strict=True))
            seen: dict = {}
            for r in rows:
                seen[r] = seen.get(r, 0) + 1
            want = [i for i, r in enumerate(rows) if seen[r] > 1]
            assert _repeated_rows(nn, a, b).tolist() == want and 0 < len(want) < k
    ident = rng.permutation(k).astype(np.uint64) * np.uint64(3)
    assert _by_ident(ident, n).tolist() == np.lexsort((n, ident)).tolist()
    ident[::7] = ident[0]
    assert _by_ident(ident, n).tolist() == np.lexsort((n, ident)).tolist()
