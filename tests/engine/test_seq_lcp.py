"""engine.seq.lcp on prompts of stored and opaque segments equals the common prefix of their tokens."""

from __future__ import annotations

import numpy as np

from pic.engine.seq import Seq, lcp
from pic.traces.content import Segments


def _segments(rng: np.random.Generator) -> Segments:
    """Stored segments that start alike (same first token; some equal for a while) and opaque segments of
    a few keys and lengths (same key: one a prefix of the other)."""
    n_st, n_op = 12, 12
    lens = np.r_[rng.integers(1, 60, n_st), rng.integers(1, 300, n_op)]
    head = rng.integers(0, 5, 40, dtype=np.int32)
    toks = []
    for n in lens[:n_st]:
        t = rng.integers(0, 5, n, dtype=np.int32)
        k = int(rng.integers(0, n + 1))
        t[:k] = head[:k] if k <= 40 else np.r_[head, t[40:k]][:k]
        t[0] = 7                                         # every stored segment starts with the same token
        toks.append(t)
    offsets = np.r_[0, np.cumsum(lens)]
    tok_off = np.r_[0, np.cumsum(np.r_[lens[:n_st], np.zeros(n_op, np.int64)])]
    keys = np.r_[np.zeros(n_st, np.uint64), rng.integers(0, 3, n_op).astype(np.uint64)]
    salts = np.zeros(n_st + n_op, np.uint64)
    n = n_st + n_op
    return Segments(np.arange(n, dtype=np.uint64), np.zeros(n, np.uint8), offsets, np.concatenate(toks),
                    tok_off, keys, salts)


def test_lcp_equals_the_token_common_prefix() -> None:
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(30):
        segs = _segments(rng)
        seqs = []
        for _ in range(6):
            rows = rng.integers(0, len(segs), int(rng.integers(1, 6)))
            bounds = np.r_[0, np.cumsum(segs.lengths[rows])]
            seqs.append((Seq.of_segments(segs, rows, bounds), segs.gather(rows)))
        for _ in range(200):
            (A, ta), (B, tb) = seqs[rng.integers(0, 6)], seqs[rng.integers(0, 6)]
            a, b = int(rng.integers(0, ta.size)), int(rng.integers(0, tb.size))
            m = int(rng.integers(0, min(ta.size - a, tb.size - b) + 1))
            neq = np.flatnonzero(ta[a:a + m] != tb[b:b + m])
            want = int(neq[0]) if neq.size else m
            assert lcp(A, a, B, b, m) == want, (a, b, m)
            checked += want > 1
    assert checked > 25        # long common stretches were compared, not only first-token mismatches


def test_lcp_of_prompts_sharing_leading_segments() -> None:
    """Prompts in the same coordinates (a == b: a radix tree's edges and queries) that share a leading run of
    segments, then diverge (another segment, one of the same first tokens, or the same segment shifted): the
    run found by slice comparison, then the pieces after it compared token by token."""
    rng = np.random.default_rng(3)
    checked = {"full": 0, "part": 0}
    for _ in range(20):
        segs = _segments(rng)
        base = rng.integers(0, len(segs), 40)
        seqs = []
        for _ in range(8):
            k = int(rng.integers(0, 41))
            tail = rng.integers(0, len(segs), int(rng.integers(0, 8)))
            rows = np.r_[base[:k], tail].astype(np.int64)
            if not rows.size:
                rows = base[:1]
            bounds = np.r_[0, np.cumsum(segs.lengths[rows])]
            seqs.append((Seq.of_segments(segs, rows, bounds), segs.gather(rows)))
        for _ in range(150):
            (A, ta), (B, tb) = seqs[rng.integers(0, 8)], seqs[rng.integers(0, 8)]
            top = min(ta.size, tb.size)
            a = int(rng.integers(0, top))
            if rng.random() < 0.5:       # from a piece boundary of A
                ba = np.asarray(A.bounds)
                a = int(ba[(ba < top)][rng.integers(0, int((ba < top).sum()))])
            m = int(rng.integers(0, top - a + 1)) if rng.random() < 0.3 else top - a
            neq = np.flatnonzero(ta[a:a + m] != tb[a:a + m])
            want = int(neq[0]) if neq.size else m
            assert lcp(A, a, B, a, m) == want, (a, m)
            checked["full" if want == m else "part"] += want > 0
    assert checked["full"] > 100 and checked["part"] > 100


def test_lcp_rev_equals_the_reversed_tokens_common_prefix() -> None:
    """lcp_rev: the common prefix of two runs read backwards from their ends, on prompts of stored and opaque
    segments sharing leading rows (aligned ends ``a == b``: the slice check; and anywhere) and private arrays."""
    from pic.engine.seq import lcp_rev
    rng = np.random.default_rng(5)
    checked = {"aligned": 0, "long": 0}
    for _ in range(30):
        segs = _segments(rng)
        seqs = []
        base = rng.integers(0, len(segs), 4)
        for _ in range(6):
            rows = np.r_[base[:int(rng.integers(0, 5))], rng.integers(0, len(segs), int(rng.integers(1, 4)))]
            bounds = np.r_[0, np.cumsum(segs.lengths[rows])]
            toks = segs.gather(rows)
            seqs.append((Seq.of_segments(segs, rows, bounds), toks))
            seqs.append((Seq.of_array(toks.copy()), toks))
        for _ in range(300):
            (A, ta), (B, tb) = seqs[rng.integers(0, len(seqs))], seqs[rng.integers(0, len(seqs))]
            a = int(rng.integers(1, ta.size + 1))
            b = a if rng.random() < 0.5 and a <= tb.size else int(rng.integers(1, tb.size + 1))
            m = int(rng.integers(0, min(a, b) + 1))
            neq = np.flatnonzero(ta[a - m:a][::-1] != tb[b - m:b][::-1])
            want = int(neq[0]) if neq.size else m
            assert lcp_rev(A, a, B, b, m) == want, (a, b, m)
            checked["aligned"] += a == b and want == m > 20 and A.arr is None and B.arr is None and A is not B
            checked["long"] += want > 1
    assert checked["aligned"] > 20 and checked["long"] > 100
