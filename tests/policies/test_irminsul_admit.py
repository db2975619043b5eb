"""irminsul's admission shortcuts give what the plain steps give: records made without the class call
(``new_extent``, ``Run.new``) set every slot as the class does; the pieces of a chunk whose recomputed run ends it
(``tail_pieces``) are ``pieces``'; a run's ``short`` flag (told from its tail keys first) is the plain
length test; ``KeyTable.update`` of a list counts as of any iterable; admit on prompts repeating a chunk (its
duplicate check) keeps each fingerprint's first chunk, as the exact store does."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right

import numpy as np
import pytest

from pic.engine import policies
from pic.engine.policies import PolicyContext, RequestView
from pic.engine.policies.irminsul_layout import gaps as layout_gaps
from pic.engine.policies.irminsul_layout import pieces as layout_pieces
from pic.engine.policies.irminsul_layout import tail_pieces as _tail_pieces
from pic.engine.policies.irminsul_records import (
    LEAN,
    SMALL,
    Chunk,
    Extent,
    LeanExtent,
    Run,
    end_run,
    new_chunk,
    new_extent,
    shared_ints,
)
from pic.engine.policies.irminsul_runs import run_edges
from pic.engine.seq import Seq
from pic.traces.schema import KIND_CODE

BPT = 2


def _slots(obj, cls) -> dict:
    return {s: getattr(obj, s) for k in cls.__mro__ for s in getattr(k, "__slots__", ())}


@pytest.mark.parametrize("users", [LEAN, None, 7])
def test_new_extent_is_the_class_call(users) -> None:
    """An exact store's extent (a set of users) has every slot of the class call's; a lean store's (``LEAN``) is a
    :class:`LeanExtent` with the class call's slots but the eviction state, which it reads as its defaults."""
    src = Seq.of_array(np.arange(100, dtype=np.int32))
    a = Extent(src, 10, 50, 50 * BPT, 7, 1, users, 3)
    b = new_extent(src, 10, 50, 7, 1, a.users if users is LEAN else set(a.users), 3)
    if users is LEAN:
        assert type(b) is LeanExtent and _slots(a, LeanExtent) == _slots(b, LeanExtent)
        assert (b.users, b.last_access_us, b.hits, b.created_us) == (LEAN, 0, 0, 0)
        assert not hasattr(b, "__dict__")     # (slots only)
    else:
        assert type(b) is Extent and _slots(a, Extent) == _slots(b, Extent)
    assert (b.users is LEAN) == (users is LEAN) and a.alive and b.alive


def test_chunk_keeps_its_pieces_flat() -> None:
    """A chunk of several pieces keeps them as one flat tuple and reads them back as ``(extent, offset, length)``
    triples (set through the class, ``new_chunk`` or the ``pieces`` setter alike); one piece stays a 1-tuple."""
    src = Seq.of_array(np.arange(100, dtype=np.int32))
    x, y = (new_extent(src, a, 20, 7, 1, LEAN, 3) for a in (0, 50))
    two = ((x, 5, 10), [y, 0, 20])
    for c in (new_chunk(9, src, 0, 30, two, 3, []), Chunk(9, src, 0, 30, list(two), 3, [])):
        assert c._p == (x, 5, 10, y, 0, 20) and c.pieces == ((x, 5, 10), (y, 0, 20))
        c.pieces = [[y, 2, 4]]
        assert c._p == ((y, 2, 4),) and c.pieces == ((y, 2, 4),)
        c.pieces = [[x, 0, 1], [y, 1, 2], [x, 3, 4]]
        assert c.pieces == ((x, 0, 1), (y, 1, 2), (x, 3, 4)) and len(c._p) == 9
    one = ((x, 0, 20),)
    assert new_chunk(9, src, 0, 20, one, 3, [])._p is one
    for at in (300, SMALL, 3 * SMALL):           # (offsets and lengths below SMALL: the shared objects)
        a, b = (new_chunk(9, src, 0, 30, ((x, int(str(at)), int(str(at + 1))), [y, 0, 20]), 3, []) for _ in range(2))
        assert a.pieces == b.pieces == ((x, at, at + 1), (y, 0, 20))
        assert (a._p[1] is b._p[1]) == (a._p[2] is b._p[2]) == (at + 1 < SMALL)


def test_extent_alive_is_neither_split_nor_freed() -> None:
    """``alive`` (no slot): False once split (``parts``) or freed (``refs`` -1), as the store's own tests of it."""
    src = Seq.of_array(np.arange(100, dtype=np.int32))
    x = new_extent(src, 0, 20, 7, 0, LEAN, 3)
    assert x.alive
    x.refs = -1
    assert not x.alive
    x.refs, x.parts = 0, (x, x, 3)
    assert not x.alive


@pytest.mark.parametrize("at", [300, SMALL - 1, SMALL, 3 * SMALL])
def test_records_share_their_position_and_size_ints(at) -> None:
    """Positions and sizes below SMALL are kept as one int object per value (not one per record); the
    values are the ones given, at and above SMALL too."""
    src = Seq.of_array(np.arange(4 * SMALL, dtype=np.int32))
    xs = [new_extent(src, int(str(at)), int(str(at + 1)) - 1, 7, 1, LEAN, 3) for _ in range(2)]
    cs = [new_chunk(5, src, int(str(at)), int(str(at)), (), 3, []) for _ in range(2)]
    for a, b in (xs, cs):
        assert (a.base_pos if type(a) is LeanExtent else a.pos) == at and a.size == at
        small = at < SMALL
        assert ((a.base_pos is b.base_pos) if type(a) is LeanExtent else (a.pos is b.pos)) == small
        assert (a.size is b.size) == small
    for x in xs:
        assert end_run(x, int(str(at + 2)) - 1) == at + 1 and x.size == at + 1
    assert (xs[0].size is xs[1].size) == (at + 1 < SMALL)
    vals = [0, 5, at, at + 7, 2 * at]
    a, b = shared_ints([int(str(v)) for v in vals]), shared_ints(np.array(vals, np.int64).tolist())
    assert a == b == vals and all((x is y) == (v < SMALL) for x, y, v in zip(a, b, vals, strict=True))


@pytest.mark.parametrize("short", [False, True])
def test_run_new_is_the_class_call(short) -> None:
    src = Seq.of_array(np.arange(100, dtype=np.int32))
    x = Extent(src, 0, 100, 100 * BPT, 7, 1, LEAN, 3)
    bounds, fps = [0, 40, 90, 100], [11, 12, 13]
    args = (x, src, bounds, fps, 0, 3, [1, 2, None if short else 3], [4, 5, None if short else 6], 3, short)
    a, b = Run(*args), Run.new(*args)
    assert type(b) is Run and _slots(a, Run) == _slots(b, Run)
    assert b.own == [x] and b.own is not a.own and b.ready is False and b.cs is None


@pytest.mark.parametrize("seed", range(6))
def test_tail_pieces_are_layout_pieces(seed) -> None:
    """Random reused ranges over split extents, a chunk ending in its one recomputed run."""
    rng = np.random.default_rng(seed)
    src = Seq.of_array(np.arange(5000, dtype=np.int32))
    views, pos = [], 0
    for _ in range(int(rng.integers(1, 6))):
        s = pos + int(rng.integers(0, 30))
        xs = [Extent(src, int(rng.integers(0, 4000)), int(rng.integers(1, 40)), 1, 0) for _ in range(int(rng.integers(1, 4)))]
        e = s + sum(x.size for x in xs)
        views.append((s, e, xs))
        pos = e
    ends = [e for _, e, _ in views]
    checked = 0
    for a in range(0, pos):
        b = pos + int(rng.integers(1, 50))
        g = layout_gaps(views, 0, a, b)
        if len(g) != 1 or g[0][1] != b or g[0][0] == a:
            continue
        i = bisect_right(ends, a)
        own = Extent(src, g[0][0], b - g[0][0], 1, 0)
        want = layout_pieces(views, i, [own], g, a, b)
        got = _tail_pieces(views, i, own, g[0][0], a, b)
        assert got == want and [type(p) for p in got] == [type(p) for p in want]
        checked += 1
    assert checked > 0


def _lean():
    pol = policies.build("irminsul", PolicyContext(math.inf, BPT, verify=False),
                         {"avg_chunk": 128, "min_chunk": 32, "max_chunk": 256})
    assert pol._store.lean
    return pol


@pytest.mark.parametrize("width", [5, 15, 16, 40])
def test_runs_short_flag_is_the_length_test(width) -> None:
    """A prompt with a marker segment of ``width`` tokens (S2: hard cuts at its edges, so chunks of any length), and a
    prompt of ``width`` tokens: a run is short exactly when a chunk of it is under min_match (16) tokens, and only
    such a chunk has no keys."""
    rng = np.random.default_rng(width)
    toks = rng.integers(0, 5000, 2000, dtype=np.int32)
    marked = RequestView(0, "s", toks, np.array([0, 1000, 1000 + width, 2000], np.int64), np.arange(3, dtype=np.uint64),
                         np.array([0, KIND_CODE["marker"], 0], np.uint8))
    for req in (marked, RequestView.from_tokens(0, toks[:width])):
        pol = _lean()
        assert pol.admit(req, pol.lookup(req, 0), 0)
        runs = [c for c in pol._live[0][1] if type(c) is Run]
        assert runs
        for r in runs:
            sizes = [r.bounds[r.k + i + 1] - r.bounds[r.k + i] for i in range(r.n)]
            assert r.short == (min(sizes) < 16)
            assert [h is None for h in r.heads] == [n < 16 for n in sizes] == [t is None for t in r.tails]
        if width < 16:
            assert any(r.short for r in runs)
        pol.commit(req, 1)
        pol.release(req, 2)
        pol.usage().check()


def test_key_table_update_of_a_list_counts_as_an_iterable() -> None:
    pytest.importorskip("numba")
    from pic import accel
    from pic.engine.policies.irminsul_index import KeyTable

    accel.set_mode("1")
    try:
        fast = accel.kernels(1, "irm")
    finally:
        accel.set_mode(None)
    assert fast is not None
    keys = [2**64 - 1, 0, 5, 5, 2**63 + 7]
    a, b = KeyTable(fast), KeyTable(fast)
    a.update(keys)
    b.update(iter(keys))
    assert a.pending == b.pending == array("Q", keys)
    assert sorted(a.items()) == sorted(b.items()) == [(0, 1), (5, 2), (2**63 + 7, 1), (2**64 - 1, 1)]


@pytest.mark.parametrize("seed", range(3))
def test_prompt_repeating_chunks_admits_each_fingerprint_once(seed) -> None:
    """Prompts holding a document two or three times (fingerprints repeated after the exact prefix, in a row and
    apart): the lean store registers each fingerprint's first chunk only, stores the same tokens and serves the
    same plans as the exact store."""
    rng = np.random.default_rng(seed)
    doc = rng.integers(0, 5000, 700, dtype=np.int32)
    head = rng.integers(0, 5000, 60, dtype=np.int32)
    prompts = [np.concatenate([head, doc, doc]),
               np.concatenate([head, doc, doc, rng.integers(0, 5000, 90, dtype=np.int32), doc, doc]),
               np.concatenate([rng.integers(0, 5000, 30, dtype=np.int32), doc, doc, doc])]
    pols = [_lean(), _lean()]
    pols[0]._store.lean = False
    for i, toks in enumerate(prompts):
        req = RequestView.from_tokens(i, toks)
        got = []
        for pol in pols:
            before = set(pol._store.entries)
            plan = pol.lookup(req, 10 * i)
            assert pol.admit(req, plan, 10 * i)
            fps = pol._pending[i][1]
            assert len(set(fps)) < len(fps)             # (the prompt repeats chunks)
            assert set(pol._store.entries) == before | set(fps)
            if pol._store.lean:                         # each position's chunk is its fingerprint's first
                cs = pol._pending[i][5]
                assert cs is not None and [pol._store.chunk_of(c, fp).fp for c, fp in zip(cs, fps, strict=True)] == fps
            pol.commit(req, 10 * i + 1)
            pol.release(req, 10 * i + 2)
            got.append([(s.start, s.end, int(s.action), s.source_pos) for s in plan.spans])
            pol.usage().check()
        assert got[0] == got[1]
        assert pols[0].usage() == pols[1].usage()
    assert sorted(pols[0]._store.entries) == sorted(pols[1]._store.entries)
    runs = [[(x[1], x[2]) for x in p.footprint().runs] for p in pols]
    assert sorted(runs[0]) == sorted(runs[1])


def _place_reference(store, cs, js, bounds, fps) -> None:
    """:meth:`RunChunks.place` as it was (every run's chunk found by searching its fingerprints)."""
    for j in js:
        r = cs[j]
        if type(r) is not Run:
            continue
        i = r.index(fps[j])
        eb, jb = run_edges(r)
        a = eb[jb + i]
        if a != bounds[j] or eb[jb + i + 1] - a != bounds[j + 1] - bounds[j]:
            cs[j] = store.chunk_at(r, i)


@pytest.mark.parametrize("seed", range(3))
def test_place_finds_each_runs_chunk_as_a_search_does(seed, monkeypatch) -> None:
    """``place`` (a run's chunk first looked for at the layout's own index) leaves every chunk list as the search of
    the run's fingerprints does, on conversations (next turns: the same indices) and streams of shared documents
    (elsewhere)."""
    from pic.engine.policies.irminsul_runs import RunChunks
    from tests.policies.test_irminsul_speed import _stream, _views

    orig, seen = RunChunks.place, []

    def place(self, cs, js, bounds, fps):
        js = list(js)
        want = list(cs)
        _place_reference(self, want, js, bounds, fps)
        orig(self, cs, js, bounds, fps)
        assert [id(c) for c in cs] == [id(c) for c in want]
        seen.append(sum(type(c) is Run for c in want))

    monkeypatch.setattr(RunChunks, "place", place)
    rng = np.random.default_rng(seed)
    toks = rng.integers(0, 5000, 500, dtype=np.int32)
    reqs = []
    for i in range(8):                        # a conversation: each turn continues the last
        toks = np.concatenate([toks, rng.integers(0, 5000, 700, dtype=np.int32)])
        reqs.append(RequestView.from_tokens(i, toks))
    # a document behind headers of other lengths: its stored run's chunks hit at other indices of the layout
    doc = rng.integers(0, 5000, 3000, dtype=np.int32)
    for i, h in enumerate((40, 700, 1500, 300)):
        reqs.append(RequestView.from_tokens(50 + i, np.concatenate([rng.integers(0, 5000, h, dtype=np.int32), doc])))
    reqs += [RequestView.from_tokens(100 + r.request_id, r.tokens) for r in _views(_stream(seed, 40), seed)]
    pol = _lean()
    for t, req in enumerate(reqs):
        plan = pol.lookup(req, 10 * t)
        assert pol.admit(req, plan, 10 * t)
        pol.commit(req, 10 * t + 1)
        pol.release(req, 10 * t + 2)
    assert sum(seen) > 0


def test_place_finds_a_runs_chunk_at_another_index() -> None:
    """A layout naming a run's chunk at another index than the run's own layout (in range of the run, or past it),
    at the same place or elsewhere: ``place`` gives the chunk list the search gives."""
    rng = np.random.default_rng(5)
    pol = _lean()
    req = RequestView.from_tokens(0, rng.integers(0, 5000, 2000, dtype=np.int32))
    assert pol.admit(req, pol.lookup(req, 0), 0)
    pol.commit(req, 1)
    r = next(c for c in pol._live[0][1] if type(c) is Run)
    assert r.k == 0 and r.n >= 6
    st = pol._store
    b = r.bounds
    for shift in (-2, -1, 1, 2, r.n):
        for moved in (False, True):
            j0 = 2 + shift                    # r's chunks 2 .. 4 at indices j0 .. j0 + 2 of a made-up layout
            fps = [7000 + i for i in range(j0)] + r.fps[2:5] + [9000]
            off = b[2] - j0 * 50 + (5 if moved else 0)
            bounds = [off + 50 * i for i in range(j0)] + [x + (5 if moved else 0) for x in b[2:6]]
            bounds.append(bounds[-1] + 10)
            cs = [None] * j0 + [r, r, r, None]
            want = list(cs)
            _place_reference(st, want, range(j0, j0 + 3), bounds, fps)
            st.place(cs, range(j0, j0 + 3), bounds, fps)
            assert [id(c) for c in cs] == [id(c) for c in want]
            assert (cs[j0] is r) == (not moved)
    pol.release(req, 2)


@pytest.mark.parametrize("seed", range(2))
def test_make_ready_shortcut_is_ready_each(seed) -> None:
    """``make_ready``'s shortcut for a lean request of a run (and the chunk straddling the reused prefix's end) leaves
    the prefilter counts, the trie log and every chunk's readiness and keys as ``_ready_each`` does."""
    from pic.engine.policies.irminsul_records import Chunk
    from tests.policies.test_irminsul_speed import _stream, _views

    pols = [_lean(), _lean()]
    st = pols[1]._store
    st.make_ready = lambda chunks, now_us, windows: st._ready_each(chunks, windows)
    rng = np.random.default_rng(seed)
    toks = rng.integers(0, 5000, 400, dtype=np.int32)
    reqs = []
    for i in range(8):                        # a conversation: a straddling chunk and a run per turn
        toks = np.concatenate([toks, rng.integers(0, 5000, 600, dtype=np.int32)])
        reqs.append(RequestView.from_tokens(i, toks))
    reqs += [RequestView.from_tokens(100 + r.request_id, r.tokens) for r in _views(_stream(seed, 30), seed)]
    def log(s) -> list:
        return [(type(x), x.fp if type(x) is Chunk else x.k) if type(x) in (Chunk, Run) else x for x in s._log]

    a, b = (p._store for p in pols)
    logged = 0
    for t, req in enumerate(reqs):
        for pol in pols:
            assert pol.admit(req, pol.lookup(req, 10 * t), 10 * t)
            pol.commit(req, 10 * t + 1)
            pol.release(req, 10 * t + 2)
        assert log(a) == log(b)               # (after each commit: a lookup may replay it into the tries)
        logged += len(a._log)
    assert logged > 0
    assert sorted(a._heads.items()) == sorted(b._heads.items()) and sorted(a._tails.items()) == sorted(b._tails.items())

    def state(e):
        if type(e) is Run:
            return ("run", e.k, e.n, e.ready, e.heads, e.tails)
        return ("chunk", e.fp, e.ready, e.indexed, e.head, e.keys)
    assert [state(e) for e in a.entries.values()] == [state(e) for e in b.entries.values()]
    assert sum(type(e) is Chunk and e.ready for e in a.entries.values()) > 5
