"""Seq: prompts by reference, runs cut from them forward (``sub``) and reversed (``rev``), and ``lcp``
between any two of them, against plain token arrays."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine.seq import Seq, lcp
from pic.traces.content import Segments


def _store(rng: np.random.Generator, n: int = 12) -> Segments:
    """``n`` segments of 1..40 tokens over a small alphabet (runs repeat), every third one opaque."""
    lens = rng.integers(1, 41, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    opaque = np.arange(n) % 3 == 2
    stored = np.where(opaque, 0, lens)
    tok_off = np.zeros(n + 1, np.int64)
    np.cumsum(stored, out=tok_off[1:])
    tokens = rng.integers(0, 3, int(tok_off[-1])).astype(np.int32)
    keys = rng.integers(0, 2**63, n).astype(np.uint64)
    return Segments(np.arange(n, dtype=np.uint64), np.zeros(n, np.uint8), offsets, tokens, tok_off, keys,
                    np.zeros(n, np.uint64))


def _prompt(rng: np.random.Generator, segs: Segments) -> tuple[Seq, np.ndarray]:
    rows = rng.integers(0, len(segs), int(rng.integers(1, 7)))
    lens = segs.offsets[rows + 1] - segs.offsets[rows]
    bounds = np.zeros(rows.shape[0] + 1, np.int64)
    np.cumsum(lens, out=bounds[1:])
    return Seq.of_segments(segs, rows, bounds), segs.gather(rows)


def _brute_lcp(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.shape[0], b.shape[0])
    neq = np.flatnonzero(a[:n] != b[:n])
    return int(neq[0]) if neq.shape[0] else n


@pytest.mark.parametrize("seed", range(6))
def test_sub_reads_the_same_tokens(seed: int) -> None:
    rng = np.random.default_rng(seed)
    segs = _store(rng)
    for _ in range(30):
        q, toks = _prompt(rng, segs)
        n = toks.shape[0]
        lo = int(rng.integers(0, n))
        hi = int(rng.integers(lo + 1, n + 1))
        for s, want in ((q.sub(lo, hi), toks[lo:hi]), (Seq.of_array(toks).sub(lo, hi), toks[lo:hi])):
            assert s.end == hi - lo
            assert np.array_equal(s.tokens(0, s.end), want)
            assert [s.token(p) for p in range(s.end)] == want.tolist()
            a = int(rng.integers(0, s.end))
            b = int(rng.integers(a + 1, s.end + 1))
            assert np.array_equal(s.sub(a, b).tokens(0, b - a), want[a:b])
        assert q.sub(lo, hi).arr is None     # by reference: no token array


@pytest.mark.parametrize("seed", range(6))
def test_lcp_of_runs_by_reference_equals_token_comparison(seed: int) -> None:
    """Forward and reversed runs of prompts over shared segments (the same segment at the same offset is
    taken as equal without reading it) agree with comparing their tokens, against each other and against
    private arrays of the same tokens."""
    rng = np.random.default_rng(100 + seed)
    segs = _store(rng, 6)                       # few segments: prompts share many
    runs: list[tuple[Seq, np.ndarray]] = []
    for _ in range(25):
        q, toks = _prompt(rng, segs)
        n = toks.shape[0]
        lo = int(rng.integers(0, n))
        hi = int(rng.integers(lo + 1, n + 1))
        runs += [(q, toks), (q.sub(lo, hi), toks[lo:hi]), (Seq.of_array(toks[lo:hi][::-1].copy()), toks[lo:hi][::-1])]
    for _ in range(3000):
        (A, ta), (B, tb) = runs[int(rng.integers(len(runs)))], runs[int(rng.integers(len(runs)))]
        a = int(rng.integers(0, A.end))
        b = int(rng.integers(0, B.end))
        m = int(rng.integers(0, min(A.end - a, B.end - b) + 1))
        assert lcp(A, a, B, b, m) == _brute_lcp(ta[a:a + m], tb[b:b + m])
