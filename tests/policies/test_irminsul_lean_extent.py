"""A lean (unbounded) irminsul store's extents are :class:`LeanExtent` records without recency slots (the store keeps
its admissions' times, last accesses and hits); once the store turns exact each extent's ``users`` is a
:class:`Late` set holding its admission's recency: the time the exact store's extent was made, a last access and
hits no older nor fewer than the exact store's extents of that admission. Copies and pickles keep them. A
conversation's turns do not split the runs' extents they reuse. A lean store's chunks keep no end nodes nor head
key (found when it turns exact)."""

from __future__ import annotations

import copy
import pickle
import sys

import numpy as np
import pytest

from pic.engine.policies import RequestView, irminsul_lookup
from pic.engine.policies.irminsul_records import LEAN, Extent, Late, LeanExtent, Run, new_extent
from pic.engine.seq import Seq
from tests.policies.test_irminsul_lean import _drive, _layout, _pair, _runs
from tests.policies.test_irminsul_speed import _stream, _views


def _extents(st) -> list:
    """Every live extent the registry's chunks read, once each, in registry order."""
    seen: dict[int, object] = {}
    for c in st.chunks():
        for x, xo, n in c.pieces:
            for y, _, _ in st.live(x, xo, xo + n) or ():
                seen.setdefault(id(y), y)
    return list(seen.values())


def test_a_lean_extent_has_no_recency_slots() -> None:
    src = Seq.of_array(np.arange(100, dtype=np.int32))
    x, y = new_extent(src, 0, 50, 7, 1, LEAN, 3), new_extent(src, 0, 50, 7, 1, set(), 3)
    assert type(x) is LeanExtent and type(y) is Extent
    assert sys.getsizeof(x) == sys.getsizeof(y) - 3 * 8
    assert (x.last_access_us, x.hits, x.created_us, x.users) == (0, 0, 0, LEAN)
    assert (y.last_access_us, y.hits, y.created_us) == (7, 0, 7)


def test_late_users_copy_and_pickle_with_their_recency() -> None:
    u = Late(30, 2, 10, [5, 9])
    for v in (copy.deepcopy(u), copy.copy(u), pickle.loads(pickle.dumps(u))):
        assert type(v) is Late and v == {5, 9} and (v.last_access_us, v.hits, v.created_us) == (30, 2, 10)
    src = Seq.of_array(np.arange(100, dtype=np.int32))
    x = new_extent(src, 0, 50, 7, 1, LEAN, 3)
    x.users = u
    x.last_access_us, x.hits = 40, 3
    z = copy.deepcopy(x)
    assert type(z) is LeanExtent and z.users == {5, 9}
    assert (z.last_access_us, z.hits, z.created_us) == (40, 3, 10)


def test_a_lean_store_turned_exact_gives_its_extents_their_admissions_recency() -> None:
    exact, lean = _pair()
    reqs = _views(_stream(3, 70), 3)
    _drive((exact, lean), reqs, 2)
    st = lean._store
    assert st.lean and st.num_extents > 0
    xs = _extents(st)
    assert xs and all(type(x) is LeanExtent for x in xs)
    born = {x.owner: st._born[x.owner] for x in xs}
    assert all(t % 10 == 0 for t in born.values()) and len(set(born.values())) > 1    # (admit's times: 10 * t)
    st._exact()
    exact._store._exact()
    assert _layout(lean) == _layout(exact)
    got, want = _extents(st), _extents(exact._store)
    assert [(x.base_pos, x.size) for x in got] == [(x.base_pos, x.size) for x in want]
    touched = 0
    for x, y in zip(got, want, strict=True):
        assert type(x.users) is Late or type(x) is Extent
        assert x.created_us == y.created_us           # (its admission's time: when the exact store made it)
        if type(x) is LeanExtent:
            assert x.created_us == born[x.owner]
        assert x.last_access_us >= y.last_access_us and x.hits >= y.hits
        touched += y.hits > 0
    assert touched > 0
    # the formerly lean store evicts by that recency (lru): everything unlocked goes, as in the exact store
    for p in (exact, lean):
        assert p.evict(p.usage().evictable, 10**6) >= 0
        assert p.usage().evictable == 0


def _splits(st) -> int:
    """How many extents the lean store's records name were split (a run's extent, a chunk's pieces)."""
    seen: dict[int, object] = {}
    for e in st.entries.values():
        for x in ([e.x] if type(e) is Run else [p[0] for p in e.pieces]):
            seen.setdefault(id(x), x)
    return sum(x.parts is not None for x in seen.values())


@pytest.mark.parametrize("join", [True, False])
def test_a_conversation_does_not_split_its_runs_extents(join, monkeypatch) -> None:
    """Each turn continues the last prompt: it reuses the last turn's new chunks (one extent) up to their last chunk and
    then the chunk that straddled the last prompt's end (whose first piece is that last chunk's tokens) as one use of
    that extent (join_use), so no lock splits it (only the first prompt's extent is split, once: its first chunk, at
    position 0, is clipped); without join_use each turn splits one. The exact store's plans, usage and stored runs."""
    if not join:
        monkeypatch.setattr(irminsul_lookup, "join_use", lambda *a: None)
    exact, lean = _pair()
    rng = np.random.default_rng(5)
    toks = rng.integers(0, 5000, 1500, dtype=np.int32)
    reqs = []
    for t in range(8):
        reqs.append(RequestView.from_tokens(t, toks))
        toks = np.concatenate([toks, rng.integers(0, 5000, 400, dtype=np.int32)])
    plans = _drive((exact, lean), reqs, lag=0)
    assert all(sum(s[1] - s[0] for s in p if s[2] != 2) >= 1500 for p in plans[1:])      # (each turn reuses)
    assert sum(len(c.pieces) > 1 for c in lean._store.chunks()) == 7          # (a straddling chunk per turn)
    assert _splits(lean._store) == (1 if join else 7)
    assert _runs(lean) == _runs(exact)


def test_a_lean_stores_chunks_keep_no_end_nodes_nor_head_key_until_it_turns_exact() -> None:
    """While lean a chunk's end nodes in the tries and its head key are not kept (only releasing it reads them: never
    while lean); turned exact, every indexed chunk has the nodes its claims got and its head key (the exact store's:
    the same paths, the same key), found by walks and a hash. ``extendable`` (a walk and a hash while lean) answers
    as the exact store's."""
    exact, lean = _pair()
    reqs = _views(_stream(2, 70), 2)
    _drive((exact, lean), reqs, 2)
    st, sx = lean._store, exact._store
    assert st.rtrie is not None
    st._flush()
    sx._flush()
    # (a chunk made of a run, RunChunks.chunk_at, finds its nodes by that walk then)
    of_runs = {id(c) for r in st.made if type(r) is Run for c in r.cs or () if c is not None}
    made = [e for e in st.entries.values() if type(e) is not Run and id(e) not in of_runs]
    assert sum(c.indexed is not None for c in made) > 10
    assert all(c.node is None and c.rnode is None and c.head is None for c in made)
    ext = [(fp, st.extendable(c)) for fp, c in st.entries.items() if type(c) is not Run and c.ready]
    assert ext == [(fp, sx.extendable(sx.entries[fp])) for fp, _ in ext] and any(e for _, e in ext)
    st._exact()
    n = 0
    for fp, c in st.entries.items():
        d = sx.entries[fp]
        assert c.head == d.head and (c.node is None) == (d.node is None) and (c.rnode is None) == (d.rnode is None)
        for a, b, ta, tb in ((c.node, d.node, st.trie, sx.trie), (c.rnode, d.rnode, st.rtrie, sx.rtrie)):
            if a is not None:
                assert ta.tokens_of(a).tobytes() == tb.tokens_of(b).tobytes()
                n += 1
    assert n > 20
    # and releasing them (every chunk dropped) leaves both tries alike: empty
    for p in (exact, lean):
        for c in list(p._store.entries.values()):
            p._store.drop(c)
        p._store._flush()
        assert p._store.trie.tokens_of(0).shape[0] == p._store.rtrie.tokens_of(0).shape[0] == 0
        assert len(p._store._heads) == len(p._store._tails) == 0
