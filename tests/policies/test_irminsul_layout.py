"""irminsul chunks only what a committed prompt's layout does not give: resumable CDC (``cdc.layout`` anchors,
``cdc.layout_from``) and the policy's reuse of the layout of the prompt sharing the longest prefix."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic.engine import cdc, policies
from pic.engine.cdc import CDCConfig
from pic.engine.policies import PolicyContext, RequestView
from pic.engine.policies import irminsul as irm
from pic.traces.markers import BOUNDARY_MARKER, find_markers

BPT = 2
CFGS = [CDCConfig(), CDCConfig(avg_chunk=180, min_chunk=16, max_chunk=256)]


def _stream(rng: np.random.Generator, n: int, marker: bool) -> np.ndarray:
    """Random text with low-entropy runs (a repeated line, one token repeated: over-long gaps cut inside)
    and, when ``marker``, boundary markers (hard cuts)."""
    parts, size = [], 0
    while size < n:
        r = rng.random()
        if r < 0.15:
            line = rng.integers(0, 50, int(rng.integers(3, 40)), dtype=np.int32)
            p = np.tile(line, int(rng.integers(20, 80)))
        elif r < 0.2:
            p = np.full(int(rng.integers(300, 2500)), int(rng.integers(0, 9)), np.int32)
        elif r < 0.3 and marker:
            p = BOUNDARY_MARKER
        else:
            p = rng.integers(0, 5000, int(rng.integers(20, 900)), dtype=np.int32)
        parts.append(p)
        size += p.shape[0]
    return np.concatenate(parts)[:n]


def _hard(t: np.ndarray, marker: bool) -> np.ndarray:
    if not marker:
        return np.zeros(0, np.int64)
    s = find_markers(t, BOUNDARY_MARKER)
    return cdc.clean_hard(np.concatenate([s, s + BOUNDARY_MARKER.shape[0]]), t.shape[0])


@pytest.mark.parametrize("cfg", CFGS)
@pytest.mark.parametrize("seed", range(4))
def test_layout_resumes_from_every_anchor(cfg: CDCConfig, seed: int) -> None:
    """From any anchor ``c`` of a prompt's layout, ``layout_from`` over its tokens after ``c - 63`` gives the
    layout's bounds (and anchors) from ``c`` on; anchors include every hard cut and exclude cuts inside
    over-long gaps (which exist here)."""
    rng = np.random.default_rng(seed)
    t = _stream(rng, int(rng.integers(3000, 12_000)), marker=seed % 2 == 0)
    n, hard = t.shape[0], _hard(t, seed % 2 == 0)
    b, anc = cdc.layout(t, cfg, hard)
    assert np.array_equal(b, cdc.chunk(t, cfg, hard))
    assert set(hard.tolist()) <= set(b[anc].tolist()) and not anc.all()
    for k in np.flatnonzero(anc[:-1]).tolist():
        c = int(b[k])
        for base in {max(0, c - 63), max(0, c - 63 - int(rng.integers(0, 200)))}:
            tb, ta = cdc.layout_from(t[base:], base, n, c, cfg, hard)
            assert np.array_equal(tb, b[k:]) and np.array_equal(ta, anc[k:]), (c, base)
    with pytest.raises(ValueError):
        cdc.layout_from(t[200:], 200, n, 100, cfg, hard)


@pytest.mark.parametrize("cfg", CFGS)
@pytest.mark.parametrize("seed", range(6))
def test_shared_prefix_layout_plus_tail_equals_whole(cfg: CDCConfig, seed: int) -> None:
    """A prompt sharing its first ``L`` tokens with a chunked one: that one's cuts up to its last anchor
    ``c`` with ``c + min_chunk <= L``, then ``layout_from(c)`` over the new prompt, are the new prompt's
    layout (when the hard cuts before ``c + min_chunk`` agree)."""
    rng = np.random.default_rng(100 + seed)
    mk = seed % 3 == 0
    p = _stream(rng, int(rng.integers(2000, 9000)), mk)
    checked = 0
    for _ in range(12):
        shared = int(rng.integers(1, p.shape[0] + 1))
        r = np.concatenate([p[:shared], _stream(rng, int(rng.integers(0, 3000)), mk)])
        if shared < p.shape[0] and r.shape[0] > shared and r[shared] == p[shared]:
            continue
        pb, pa = cdc.layout(p, cfg, _hard(p, mk))
        m = cfg.min_chunk
        ks = [k for k in range(1, pb.shape[0] - 1) if pa[k] and pb[k] + m <= shared]
        if not ks:
            continue
        k, c = ks[-1], int(pb[ks[-1]])
        hp, hr = _hard(p, mk), _hard(r, mk)
        if not np.array_equal(hp[hp < c + m], hr[hr < c + m]):
            continue
        base = max(0, c - 63)
        tb, ta = cdc.layout_from(r[base:], base, r.shape[0], c, cfg, hr)
        wb, wa = cdc.layout(r, cfg, hr)
        assert np.array_equal(np.concatenate([pb[:k], tb]), wb)
        assert np.array_equal(np.concatenate([pa[:k], ta]), wa)
        checked += 1
    assert checked >= 3


def _conversations(seed: int, n: int = 40) -> list[np.ndarray]:
    """Conversations (each turn extends the last), some with markers, low-entropy runs and shared documents:
    most prompts share a long prefix with a committed one."""
    rng = np.random.default_rng(seed)
    docs = [_stream(rng, 1500, False) for _ in range(3)]
    out, convs = [], [None] * 4
    for _ in range(n):
        j = int(rng.integers(len(convs)))
        new = _stream(rng, int(rng.integers(50, 1500)), rng.random() < 0.3)
        if rng.random() < 0.2:
            new = np.concatenate([docs[int(rng.integers(len(docs)))], new])
        convs[j] = new if convs[j] is None or rng.random() < 0.1 else np.concatenate([convs[j], new])
        out.append(convs[j])
    return out


@pytest.mark.parametrize("seed,capacity,opts", [(0, math.inf, {}), (1, 20_000, {}), (2, math.inf, {"s2": False}),
                                                (3, 30_000, {"min_chunk": 16, "avg_chunk": 100, "max_chunk": 256})])
def test_policy_reuses_committed_layouts_with_identical_results(monkeypatch, seed, capacity, opts) -> None:
    """The layout irminsul builds from a committed prompt's equals CDC over the whole prompt (bounds,
    fingerprints, anchors, hard cuts), it is taken for most prompts, and every plan equals that of a
    policy that always chunks whole prompts."""
    taken, full_layout = [], irm.Irminsul._full_layout
    resume = irm.Irminsul._layout

    def checked(self, req, shared, other, best_len):
        got = resume(self, req, shared, other, best_len)
        if got is not None:
            whole = full_layout(self, req)
            assert (got.bounds, got.fps, got.anchors, got.marked) == (whole.bounds, whole.fps, whole.anchors,
                                                                      whole.marked)
            assert np.array_equal(got.hard, whole.hard) and np.array_equal(got.toks, whole.toks[got.off:])
            taken.append(got.off)
        return got

    cap = math.inf if math.isinf(capacity) else capacity * BPT
    fast = policies.build("irminsul", PolicyContext(cap, BPT, verify=True), opts)
    slow = policies.build("irminsul", PolicyContext(cap, BPT, verify=True), opts)
    prompts = _conversations(seed)
    for i, toks in enumerate(prompts):
        plans = []
        for pol, how in ((fast, checked), (slow, lambda *a: None)):
            monkeypatch.setattr(irm.Irminsul, "_layout", how)
            req = RequestView.from_tokens(i, toks)
            plan = pol.lookup(req, 10 * i)
            assert pol.admit(req, plan, 10 * i)
            pol.commit(req, 10 * i + 1)
            pol.release(req, 10 * i + 2)
            plans.append(plan)
        assert plans[0] == plans[1], f"request {i}"
    assert fast.stats.collisions == 0 and fast.stats.extra == slow.stats.extra
    assert len(taken) >= len(prompts) // 2 and sum(taken) > 0


def test_marker_completed_after_the_shared_prefix_is_not_taken_from_the_other_layout(monkeypatch) -> None:
    """The committed prompt ends inside a boundary marker that the new prompt completes: the marker's hard
    cut lies within ``min_chunk`` after the other prompt's last usable anchor ``c`` and suppresses the
    content cut at ``c`` in the new prompt. The other layout must not be used up to ``c`` there."""
    cfg, m, mk = CDCConfig(), 64, BOUNDARY_MARKER
    for seed in range(200):
        x = np.random.default_rng(seed).integers(0, 5000, 3000, dtype=np.int32)
        p = np.concatenate([x, mk[:40]])
        pb, pa = cdc.layout(p, cfg)
        shared = p.shape[0]
        cs = [int(b) for b, a in zip(pb[1:-1], pa[1:-1], strict=True) if a and b + m <= shared]
        if cs and x.shape[0] - m < cs[-1] < x.shape[0]:
            break
    else:
        pytest.fail("no prompt with a cut just before the marker")
    r = np.concatenate([p, mk[40:], np.random.default_rng(1).integers(0, 5000, 500, dtype=np.int32)])
    wb = cdc.chunk(r, cfg, _hard(r, True))
    assert cs[-1] not in wb.tolist()              # the marker suppresses it in the new prompt
    resume, seen = irm.Irminsul._layout, []

    def checked(self, req, shared, other, best_len):
        got = resume(self, req, shared, other, best_len)
        seen.append(got is not None)
        assert got is None or got.bounds == wb.tolist()
        return got

    monkeypatch.setattr(irm.Irminsul, "_layout", checked)
    pol = policies.build("irminsul", PolicyContext(math.inf, BPT), {})
    for i, t in enumerate((p, r)):
        req = RequestView.from_tokens(i, t)
        plan = pol.lookup(req, 10 * i)
        assert pol.admit(req, plan, 10 * i)
        pol.commit(req, 10 * i + 1)
        pol.release(req, 10 * i + 2)
    assert seen == [False]           # the first prompt had no committed one; the second fell back
    assert pol._store.entries.keys() >= set(cdc.fingerprints(r, wb).tolist())


def test_marker_search_is_skipped_only_where_no_prompt_can_hold_a_marker() -> None:
    """A store with no marker segment and no token equal to the marker's first (opaque blocks only, the default
    marker above their vocabulary) skips the marker search; a stored marker occurrence, a marker segment, or a
    marker whose first token an opaque block may derive keep it, and find what the search finds."""
    from pic.engine.policies.irminsul_layout import _may_mark, marker_cuts
    from pic.traces.content import Segments
    from pic.traces.schema import KIND_CODE

    def store(tokens, kinds, opaque):
        n = len(kinds)
        offs = np.arange(n + 1, dtype=np.int64) * 100
        tok_offs = np.zeros(n + 1, np.int64) if opaque else None
        keys = np.arange(n, dtype=np.uint64) if opaque else None
        return Segments(np.arange(n, dtype=np.uint64), np.array(kinds, np.uint8), offs, tokens, tok_offs, keys,
                        None if keys is None else keys * 0)

    doc, mk = KIND_CODE["document"], KIND_CODE["marker"]
    opaque = store(np.zeros(0, np.int32), [doc] * 3, True)
    assert not _may_mark(opaque, BOUNDARY_MARKER)
    assert _may_mark(opaque, np.arange(5, 69, dtype=np.int32))            # a marker opaque blocks may derive
    toks = np.concatenate([np.arange(36, dtype=np.int32), BOUNDARY_MARKER, np.zeros(200, np.int32)])
    stored = store(toks, [doc] * 3, False)
    assert _may_mark(stored, BOUNDARY_MARKER)
    assert not _may_mark(store(np.ones(300, np.int32), [doc] * 3, False), BOUNDARY_MARKER)
    assert _may_mark(store(np.ones(300, np.int32), [doc, mk, doc], False), BOUNDARY_MARKER)
    # asked again, the stores and markers in turn, each twice in a row (the last answer is kept): the same answers
    low = np.arange(5, 69, dtype=np.int32)
    for _ in range(2):
        for st, mark, want in ((opaque, BOUNDARY_MARKER, False), (opaque, low, True), (stored, BOUNDARY_MARKER, True),
                               (opaque, BOUNDARY_MARKER, False)):
            assert _may_mark(st, mark) is want and _may_mark(st, mark) is want
    rows = np.arange(3)
    view = RequestView(0, "s", None, np.array([0, 100, 200, 300], np.int64), stored.ids, stored.kinds, rows, stored)
    got, marked = marker_cuts(view, view.tokens, 0, BOUNDARY_MARKER)
    assert marked and sorted(got.tolist()) == [36, 100]
    view = RequestView(0, "s", None, np.array([0, 100, 200, 300], np.int64), opaque.ids, opaque.kinds, rows, opaque)
    got, marked = marker_cuts(view, view.tokens, 0, BOUNDARY_MARKER)
    assert not marked and got.shape[0] == 0 and find_markers(view.tokens).shape[0] == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_span_of_a_chunk_of_several_pieces_is_its_pieces_uses(seed: int) -> None:
    """``_span`` away from position 0 (its one-pass path) gives the uses and read extents that the store's
    ``pieces`` of the range give (the piece by piece path), for chunks of 1 to 4 pieces and every range."""
    from pic.engine.policies.irminsul_records import Extent, new_chunk
    from pic.engine.seq import Seq

    rng = np.random.default_rng(seed)
    pol = policies.build("irminsul", PolicyContext(math.inf, 2))
    src = Seq.of_array(np.arange(4000, dtype=np.int32))
    checked = 0
    for _ in range(30):
        sizes = rng.integers(1, 40, int(rng.integers(1, 5))).tolist()
        xs = [Extent(src, int(rng.integers(0, 3000)), n + int(rng.integers(0, 5)), 2 * n, 0) for n in sizes]
        pieces = tuple((x, int(rng.integers(0, x.size - n + 1)), n) for x, n in zip(xs, sizes, strict=True))
        c = new_chunk(7, src, 0, sum(sizes), pieces, 0, [])
        for off in range(c.size):
            for ln in (1, c.size - off, int(rng.integers(1, c.size - off + 1))):
                a = int(rng.integers(1, 500))
                pol._used_x, uses = [], []
                pol._span(uses, c, a, a + ln, off)
                want = [(a + cpos - off, a + cpos - off + hi - lo, x, lo)
                        for x, lo, hi, cpos in pol._store.pieces(c, off, off + ln)]
                assert uses == want and pol._used_x == xs
                assert sum(e - s for s, e, _, _ in uses) == ln
                checked += 1
    assert checked > 500
