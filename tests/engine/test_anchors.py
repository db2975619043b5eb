"""engine.anchors: the filter keeps every hashed window whose tokens another item's hashed window has, and
the coverage with it equals the coverage without it (and the token-level oracle)."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine import anchors, coverage
from pic.engine.oracle import trace_oracle
from pic.traces.content import Segments
from pic.traces.schema import SegmentTable, Trace, requests_frame
from tests.engine.test_coverage import _tricky_trace


def _blocks_trace(seed: int, n: int = 80) -> Trace:
    """Mooncake-like prompts: opaque blocks, each stream at one length (names of one interval), continued
    from earlier prompts or new; a few stored segments among them."""
    rng = np.random.default_rng(seed)
    table = SegmentTable()
    blocks = [table.add_opaque(k, 1, 20 + 7 * k, "block") for k in range(25)]
    stored = [table.add(rng.integers(0, 30, int(rng.integers(5, 90)), dtype=np.int32), "user") for _ in range(6)]
    rows = {c: [] for c in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    prompts: list[list[int]] = []
    for i in range(n):
        if prompts and rng.random() < 0.6:
            base = prompts[int(rng.integers(len(prompts)))]
            sids = base[:int(rng.integers(0, len(base) + 1))]
        else:
            sids = []
        for _ in range(int(rng.integers(1, 5))):
            pool = blocks if rng.random() < 0.8 else stored
            sids.append(pool[int(rng.integers(len(pool)))])
        prompts.append(sids)
        for c, v in zip(rows, (i, f"s{i}", "a", i, 1, sids), strict=True):
            rows[c].append(v)
    return Trace(table.build(), requests_frame(rows), source="<blocks>")


@pytest.mark.parametrize("w", [1, 2, 3, 7, 16, 49, 64])
def test_sliding_min(w: int) -> None:
    rng = np.random.default_rng(w)
    for n in (0, 1, w - 1, w, w + 1, 300):
        x = rng.integers(0, 50, max(n, 0)).astype(np.uint64)
        want = [int(x[p:p + w].min()) for p in range(n - w + 1)]
        assert anchors.sliding_min(x, w).tolist() == want


def _chunk(rng: np.random.Generator, W: int):
    """One chunk: a few stored segments (some pasted into others at random offsets: equal windows under
    other names), items of 1-4 of them; every item one range of all its windows."""
    base = [rng.integers(0, 1000, int(rng.integers(W, 6 * W))).astype(np.int32) for _ in range(6)]
    segs = list(base)
    for _ in range(6):                               # a piece of one segment inside a fresh one
        src = base[int(rng.integers(len(base)))]
        a = int(rng.integers(0, src.shape[0] - W + 1))
        b = int(rng.integers(a + W, src.shape[0] + 1))
        segs.append(np.r_[rng.integers(0, 1000, int(rng.integers(0, W))), src[a:b],
                          rng.integers(0, 1000, int(rng.integers(0, W)))].astype(np.int32))
    lens = np.asarray([s.shape[0] for s in segs], np.int64)
    store = Segments(np.arange(lens.shape[0], dtype=np.uint64), np.zeros(lens.shape[0], np.uint8),
                     np.r_[0, np.cumsum(lens)], np.concatenate(segs))
    items = [rng.integers(0, len(segs), int(rng.integers(1, 4))) for _ in range(12)]
    rows = np.concatenate(items).astype(np.int64)
    offs = np.r_[0, np.cumsum([len(x) for x in items])].astype(np.int64)
    r, lo, _, cum = coverage._pieces(store, rows, offs, None, None)
    N = cum[offs[1:]] - cum[offs[:-1]]
    ha = np.zeros(len(items), np.int64)
    return store, r, lo, offs, cum, ha, N - W, np.arange(len(items), dtype=np.int64)


@pytest.mark.parametrize("W", [8, 16, 64])
def test_kept_windows_hold_every_repeat(W: int) -> None:
    """Every window whose tokens a window of another item has is kept; most unique ones are not."""
    rng = np.random.default_rng(W)
    dropped = unique = 0
    for _ in range(8):
        store, rows, lo, offs, cum, ha, hb, hi = _chunk(rng, W)
        toks = [store.gather(rows[offs[i]:offs[i + 1]]) for i in range(hi.shape[0])]
        owners: dict[bytes, set[int]] = {}
        for i, t in enumerate(toks):
            for p in range(t.shape[0] - W + 1):
                owners.setdefault(t[p:p + W].tobytes(), set()).add(i)
        fp, ln = anchors.runs(store, rows, lo, offs, cum, ha, hb, hi, W)
        assert int(ln.sum()) == int((hb - ha + 1).sum() + (W - 1) * (hi.shape[0] - 1))   # runs tile the positions
        ka, kb, ki = anchors.keep(fp, ln, ha, hb, hi, W, anchors.repeated([fp]))
        kept = {(int(i), p) for a, b, i in zip(ka, kb, ki, strict=True) for p in range(int(a), int(b) + 1)}
        for i, t in enumerate(toks):
            for p in range(t.shape[0] - W + 1):
                if len(owners[t[p:p + W].tobytes()]) > 1:
                    assert (i, p) in kept
                else:
                    unique += 1
                    dropped += (i, p) not in kept
        assert len(kept) == sum(int(b - a + 1) for a, b in zip(ka, kb, strict=True))   # disjoint ranges
    assert dropped > unique / 3


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("m", [8, 16, 64])
@pytest.mark.parametrize("make", [_tricky_trace, _blocks_trace])
def test_filtered_coverage_equals_unfiltered(make, seed: int, m: int) -> None:
    """Chunks of ~40 pieces (names met again in later chunks); opaque streams met at several lengths
    (``_tricky_trace``) or at one each (``_blocks_trace``)."""
    t = make(seed, n=80)
    offs, idx = t._csr
    pfx = np.zeros(t.num_requests, np.int64)

    def chunks():
        for i0, i1 in coverage._chunks(offs, 40):
            piece = slice(int(offs[i0]), int(offs[i1]))
            yield idx[piece], offs[i0:i1 + 1] - offs[i0], pfx[i0:i1], pfx[i0:i1], None, None

    plain = coverage.covered_counts_chunked(t.segments, chunks(), m)
    for again in (None, chunks):                      # with the anchor filter, and names of one interval
        for whole in (False, True):
            got = coverage.covered_counts_chunked(t.segments, chunks(), m, again=again, whole=whole)
            assert got.tolist() == plain.tolist(), (again, whole)
    want = trace_oracle((t.prompt(i) for i in range(t.num_requests)), m)
    assert coverage.prompt_oracle(t, np.arange(t.num_requests), m).tolist() == want.tolist()
    assert plain.sum() > 0
