"""A lean (unbounded) irminsul store against the exact one: one extent per run of chunks recomputed whole, no
users sets, pieces left naming split extents. On random streams with overlapping requests (locks split runs
while their producers still hold them) both give the same plans, the same usage after every call, the same
stored runs; once the lean store turns exact (an explicit eviction, a request released uncommitted) its
chunks, extents, users and evictable set are those of the exact store, and it keeps serving correctly."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest

from pic.engine import policies
from pic.engine.policies import PolicyContext, RequestView
from pic.engine.policies.irminsul_records import Run
from pic.engine.policies.irminsul_runs import run_edges
from tests.policies.test_irminsul_speed import _stream, _views

BPT = 2


def _build(lean: bool, verify: bool = True, opts: dict | None = None):
    """An unbounded irminsul with its store lean or exact."""
    pol = policies.build("irminsul", PolicyContext(math.inf, BPT, verify=verify),
                         {"avg_chunk": 128, "min_chunk": 32, "max_chunk": 256, **(opts or {})})
    pol._store.lean = lean
    return pol


def _pair(opts: dict | None = None, verify: bool = True):
    """``(exact, lean)`` stores, otherwise alike."""
    return [_build(lean, verify, opts) for lean in (False, True)]


def _plan(plan) -> list:
    return [(s.start, s.end, int(s.action), s.source_pos) for s in plan.spans]


def _runs(pol) -> list:
    return [(x[0].tokens(x[1], x[2]).tobytes(), x[1], x[2]) for x in pol.footprint().runs]


def _layout(pol) -> list:
    """Every chunk's pieces as (extent position, extent size, offset, length), its users; the evictable
    extents."""
    st = pol._store
    chunks = [(fp, c.size, [(x.base_pos, x.size, xo, n, sorted(x.users)) for x, xo, n in c.pieces])
              for fp, c in st.entries.items()]
    return [chunks, st.evictable, st.protected, st.num_extents]


def _path(trie, node) -> bytes:
    """The tokens of a trie node's path from the root."""
    return trie.tokens_of(node).tobytes()


def _drive(pols, reqs, lag: int = 2, uncommitted: frozenset = frozenset()) -> list:
    """Serve ``reqs`` on both policies alike, each request committed ``lag`` arrivals after its admission and
    released one arrival later (so up to ``lag + 1`` hold locks at once); the plans."""
    plans, flight = [], deque()
    for t, req in enumerate(reqs):
        got = [_plan(p.lookup(req, 10 * t)) for p in pols]
        assert got[0] == got[1], f"request {t}"
        plans.append(got[0])
        ok = {p.admit(req, p.lookup(req, 10 * t), 10 * t) for p in pols}
        assert len(ok) == 1
        if ok.pop():
            flight.append(req)
        while flight and (len(flight) > lag or t == len(reqs) - 1):
            r = flight.popleft()
            for p in pols:
                if r.request_id not in uncommitted:
                    p.commit(r, 10 * t + 1)
                p.release(r, 10 * t + 2)
        for p in pols:
            p.usage().check()
        assert pols[0].usage() == pols[1].usage()
        assert [p.holds(req) for p in pols] == [pols[0].holds(req)] * 2
    for p in pols:
        assert p.stats.collisions == 0
    return plans


@pytest.mark.parametrize("seed,lag", [(0, 0), (1, 2), (2, 3), (3, 1)])
def test_lean_store_gives_the_exact_stores_plans_usage_and_runs(seed, lag):
    exact, lean = _pair({"s1": seed == 3})
    reqs = _views(_stream(seed, 80), seed)
    plans = _drive((exact, lean), reqs, lag)
    assert sum(s[1] - s[0] for p in plans for s in p if s[2] != 2) > 0            # the stream reuses
    assert lean._store.lean and not exact._store.lean
    assert _runs(lean) == _runs(exact)
    assert lean.footprint().entries == exact.footprint().entries
    # turned exact: the same chunks over the same extents as the exact store
    lean._store._exact()
    assert not lean._store.lean
    assert _layout(lean) == _layout(exact)
    assert _runs(lean) == _runs(exact)


@pytest.mark.parametrize("seed", [4, 5])
def test_lean_store_turns_exact_on_eviction_and_serves_on(seed):
    """An explicit eviction of a lean store holding locks (requests in flight) first makes it exact (the
    exact store's chunks and extents), then evicts only unlocked KV and serves on correctly. (Which KV goes
    first may differ: the parts of a run keep the run's recency.)"""
    exact, lean = _pair()
    reqs = _views(_stream(seed, 90), seed)
    flight = deque()
    for t, req in enumerate(reqs[:60]):
        for p in (exact, lean):
            assert p.admit(req, p.lookup(req, 10 * t), 10 * t)
        flight.append(req)
        if len(flight) > 2:
            r = flight.popleft()
            for p in (exact, lean):
                p.commit(r, 10 * t + 1)
                p.release(r, 10 * t + 2)
    assert lean._store.lean
    lean._store._exact()
    assert _layout(lean) == _layout(exact)
    for pol in (exact, lean):
        want = pol.usage().evictable // 2
        assert pol.evict(want, 700) >= want
        pol.usage().check()
        for r in flight:
            assert pol.holds(r)
            pol.commit(r, 701)
            pol.release(r, 702)
        for t, req in enumerate(reqs[60:]):
            plan = pol.lookup(req, 800 + 10 * t)
            assert pol.admit(req, plan, 800 + 10 * t)
            pol.commit(req, 801 + 10 * t)
            pol.release(req, 802 + 10 * t)
            pol.usage().check()
        assert pol.stats.collisions == 0 and pol.stats.verified_hits > 0


def test_lean_store_turns_exact_when_a_request_is_released_uncommitted():
    exact, lean = _pair()
    reqs = _views(_stream(6, 50), 6)
    _drive((exact, lean), reqs, 2, uncommitted=frozenset({20, 21, 35}))
    assert not lean._store.lean
    assert _layout(lean) == _layout(exact)
    assert _runs(lean) == _runs(exact)


def test_lean_prefix_over_a_run_is_one_use():
    """A prompt continuing a stored one reuses its run of new chunks as one reused range (one lock) after
    the first chunk (a chunk at position 0 takes the general path: the first-chunk clip)."""
    exact, lean = _pair()
    rng = np.random.default_rng(9)
    a = rng.integers(0, 5000, 3000, dtype=np.int32)
    b = np.concatenate([a, rng.integers(0, 5000, 500, dtype=np.int32)])
    _drive((exact, lean), [RequestView.from_tokens(0, a)])
    assert lean._store.num_extents == 1 < exact._store.num_extents == len(exact._store.entries)
    got = [p._analyze(RequestView.from_tokens(1, b)).uses for p in (exact, lean)]
    assert len(got[1]) == 2 < len(got[0])
    assert [(u[0], u[1]) for u in got[1]] == [got[0][0][:2], (got[0][1][0], got[0][-1][1])]


def test_lean_stored_runs_when_a_request_id_comes_again():
    """Stored runs belong to the admission that made them, not to a request id: a caller reusing an id (its
    new prompt viewing what the id's first prompt stored) gets the exact store's runs."""
    exact, lean = _pair()
    rng = np.random.default_rng(11)
    a = rng.integers(0, 5000, 2000, dtype=np.int32)
    b = np.concatenate([rng.integers(0, 5000, 40, dtype=np.int32), a[300:1800], rng.integers(0, 5000, 300,
                                                                                            dtype=np.int32)])
    plans = _drive((exact, lean), [RequestView.from_tokens(7, a), RequestView.from_tokens(7, b)], lag=0)
    assert sum(s[1] - s[0] for s in plans[1] if s[2] != 2) > 1000
    assert _runs(lean) == _runs(exact)


@pytest.mark.parametrize("seed,lean,lag", [(0, True, 0), (1, True, 2), (2, False, 1), (6, True, 3)])
def test_unverified_walk_gives_the_verified_walks_plans_and_state(seed, lean, lag):
    """The exact-prefix stage without --verify (its fast loop: entries in one pass, the use being extended kept
    in locals) gives the plans, usage, stored runs and chunk layout of the verified walk (no collision here)."""
    pols = [_build(lean, verify) for verify in (True, False)]
    reqs = _views(_stream(seed, 80), seed)
    plans = _drive(pols, reqs, lag)
    assert sum(s[1] - s[0] for p in plans for s in p if s[2] != 2) > 0            # the stream reuses
    assert pols[0].stats.verified_hits > 0 and pols[1].stats.verified_hits == 0
    assert _runs(pols[0]) == _runs(pols[1])
    for p in pols:
        p._store._exact()
    assert _layout(pols[0]) == _layout(pols[1])


@pytest.mark.parametrize("seed,lag", [(6, 0), (7, 2)])
def test_lean_layouts_keep_the_registrys_chunks_and_plan_as_the_exact_store(seed, lag):
    """Without --verify (the walk of the exact prefix reads the chunks a lean store's prompt index keeps with
    each layout): the exact store's plans, and every kept chunk is the registry's chunk of its fingerprint;
    once the store turns exact the index no longer reads them."""
    pols = _pair(verify=False)
    exact, lean = pols
    reqs = _views(_stream(seed, 80), seed)
    plans = _drive(pols, reqs, lag)
    assert sum(s[1] - s[0] for p in plans for s in p if s[2] != 2) > 0
    st = lean._store
    kept = st.prompts.layouts()
    assert kept and all(v[5] is not None for v in kept) and st.prompts.lean
    # a layout keeps the registry's chunk of each fingerprint, or the run holding it at the layout's place
    assert any(type(c) is Run for v in kept for c in v[5])
    for bounds, fps, *_, cs in kept:
        for j, (fp, c) in enumerate(zip(fps, cs, strict=True)):
            assert st.chunk_of(c, fp) is st.chunk_of(st.entries[fp], fp)
            if type(c) is Run:
                eb, i = run_edges(c)
                i += c.index(fp)
                assert (eb[i], eb[i + 1]) == (bounds[j], bounds[j + 1])
    assert all(v[5] is None for v in exact._store.prompts.layouts())
    st._exact()
    assert not st.prompts.lean


def test_lean_layout_of_a_prompt_repeating_a_chunk_keeps_every_chunk():
    """A prompt holding the same content twice (a fingerprint again later in the prompt: admit makes its chunk
    once) keeps the chunk at both places of its layout, and its next turn is served as by the exact store (the
    same plans and stage counts)."""
    rng = np.random.default_rng(11)
    doc = rng.integers(0, 5000, 900, dtype=np.int32)
    first = np.concatenate([rng.integers(0, 5000, 50, dtype=np.int32), doc, doc])
    turns = [first, np.concatenate([first, rng.integers(0, 5000, 300, dtype=np.int32)])]
    pols = _pair(verify=False)
    plans = []
    for i, toks in enumerate(turns):
        req = RequestView.from_tokens(i, toks)
        got = []
        for pol in pols:
            plan = pol.lookup(req, 10 * i)
            assert pol.admit(req, plan, 10 * i)
            fps = pol._pending[i][1]                          # (the layout admit keeps for commit)
            assert len(set(fps)) < len(fps) or i > 0          # the first prompt repeats a chunk
            pol.commit(req, 10 * i + 1)
            pol.release(req, 10 * i + 2)
            got.append(_plan(plan))
        assert got[0] == got[1]
        plans.append(got[0])
    st = pols[1]._store
    kept = st.prompts.layouts()
    assert kept and all(v[5] is not None and None not in v[5] for v in kept)
    assert pols[0].stats.extra == pols[1].stats.extra and pols[1].stats.extra["prefix_tokens"] >= first.shape[0] - 64


@pytest.mark.parametrize("seed,lag", [(0, 0), (2, 2)])
def test_runs_give_the_same_plans_whether_or_not_their_chunks_are_made(seed, lag):
    """A lean store keeps each row of new chunks recomputed whole as one record (Run) and makes a chunk of it
    only when a reader needs one: a store whose runs' chunks are all made after every request (as hits, trie
    walks and the store turning exact make them) gives the same plans, usage, stored runs and, once exact, the
    same chunks; a continued conversation makes none."""
    pols = _pair(verify=False)
    pols[0]._store.lean = True
    reqs = _views(_stream(seed, 80), seed)
    orig = pols[0].release

    def release(req, now_us):
        orig(req, now_us)
        pols[0]._store.chunks()

    seen, orig1 = [], pols[1].release

    def release1(req, now_us):
        orig1(req, now_us)
        seen.append(sum(type(e) is Run for e in pols[1]._store.entries.values()))

    pols[0].release, pols[1].release = release, release1
    _drive(pols, reqs, lag)
    assert max(seen) > 10
    assert all(type(e) is not Run for e in pols[0]._store.entries.values())
    assert _runs(pols[0]) == _runs(pols[1])
    # a trie walk puts the runs' chunks in the tries without making them: the runs keep their end nodes
    for p in pols:
        p._store._flush()
    kept = [e for e in pols[1]._store.entries.values() if type(e) is Run and e.nodes is not None]
    assert kept and any(r.cs is None for r in kept)
    for p in pols:
        p._store._exact()
    assert _layout(pols[0]) == _layout(pols[1])
    # and the chunks made of them later have the end nodes of the same paths
    for fp, c in pols[1]._store.entries.items():
        d = pols[0]._store.entries[fp]
        assert (c.node is None) == (d.node is None) and (c.rnode is None) == (d.rnode is None)
        sa, sb = pols[1]._store, pols[0]._store
        for a, b, ta, tb in ((c.node, d.node, sa.trie, sb.trie), (c.rnode, d.rnode, sa.rtrie, sb.rtrie)):
            assert a is None or _path(ta, a) == _path(tb, b)

    # a conversation: each turn continues the last; its rows of new chunks are runs, no chunk is made of them
    pol = _build(True, verify=False)
    rng = np.random.default_rng(seed)
    toks = rng.integers(0, 5000, 700, dtype=np.int32)
    for i in range(6):
        toks = np.concatenate([toks, rng.integers(0, 5000, 900, dtype=np.int32)])
        req = RequestView.from_tokens(i, toks)
        plan = pol.lookup(req, 10 * i)
        assert pol.admit(req, plan, 10 * i)
        pol.commit(req, 10 * i + 1)
        pol.release(req, 10 * i + 2)
        assert i == 0 or plan.num_reused > toks.shape[0] - 1200
    runs = {id(e): e for e in pol._store.entries.values() if type(e) is Run}
    assert len(runs) >= 6 and all(r.cs is None for r in runs.values())
    assert sum(r.n for r in runs.values()) > 0.8 * len(pol._store.entries)


def test_a_prompt_found_nothing_of_is_admitted_as_the_general_path_does(monkeypatch):
    """A lean store admits a prompt its lookup found nothing of as one run directly (``RunChunks.admit_new``): the
    same plans, usage, registry (order included), run records, owners and stored runs as with that path declined,
    on fresh prompts, prompts repeating a chunk (declined: undone whole, the admission count too) and continued
    ones (not taken)."""
    from pic.engine.policies import irminsul_runs

    rng = np.random.default_rng(7)
    doc = rng.integers(0, 5000, 700, dtype=np.int32)
    fresh = [rng.integers(0, 5000, int(rng.integers(200, 1500)), dtype=np.int32) for _ in range(12)]
    prompts = []
    for i, f in enumerate(fresh):
        prompts.append(f)
        if i % 3 == 1:          # nothing found, a chunk twice in it
            prompts.append(np.concatenate([rng.integers(0, 5000, 40, dtype=np.int32), doc, doc + (i + 1)]))
            prompts.append(np.concatenate([rng.integers(0, 5000, 60, dtype=np.int32), doc + 7 * i, doc + 7 * i]))
        if i % 4 == 3:          # continues an earlier prompt
            prompts.append(np.concatenate([fresh[i - 2], rng.integers(0, 5000, 400, dtype=np.int32)]))
    reqs = [RequestView.from_tokens(i, t) for i, t in enumerate(prompts)]
    orig, taken, declined = irminsul_runs.RunChunks.admit_new, [], []

    def counted(self, *a):
        got = orig(self, *a)
        (taken if got is not None else declined).append(1)
        return got

    pols = _pair(verify=False)
    pols[0]._store.lean = True
    monkeypatch.setattr(irminsul_runs.RunChunks, "admit_new", counted)
    monkeypatch.setattr(pols[0]._store, "admit_new", lambda *a: None)      # the general path
    _drive(pols, reqs, lag=1)
    assert len(taken) >= 12 and declined
    a, b = pols[0]._store, pols[1]._store
    assert list(a.entries) == list(b.entries) and a._admissions == b._admissions
    assert [(type(e).__name__, e.owner) for e in a.entries.values()] == \
        [(type(e).__name__, e.owner) for e in b.entries.values()]
    assert [(r.x.base_pos, r.x.size, r.x.owner, r.k, r.n) for r in a.made if type(r) is Run] == \
        [(r.x.base_pos, r.x.size, r.x.owner, r.k, r.n) for r in b.made if type(r) is Run]
    assert _runs(pols[0]) == _runs(pols[1])
    for p in pols:
        p._store._exact()
    assert _layout(pols[0]) == _layout(pols[1])
