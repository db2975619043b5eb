"""irminsul's prefilters as compiled key tables (``irminsul_index.KeyTable``, :mod:`pic._accel_numba_irm`) count
what the counters (``KeyCounts``) count, and the policy answers the same plans with either (its lookups ask the
tables in one compiled call)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic import accel
from pic.engine import policies
from pic.engine.policies import PolicyContext
from pic.engine.policies.irminsul_index import KeyCounts, KeyTable
from tests.policies.conftest import plans_of
from tests.policies.test_irminsul_speed import _stream, _views

pytest.importorskip("numba")
BPT = 2


@pytest.fixture
def fast():
    accel.set_mode("1")
    yield accel.kernels(1, "irm")
    accel.set_mode(None)


@pytest.mark.parametrize("seed", range(3))
def test_key_table_counts_as_the_counter(fast, seed: int) -> None:
    """Random adds, batch updates and removals (keys from a small pool, so runs collide, grow the table from
    its smallest size and delete inside probe runs): the same counts, membership and size after each step."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 2**64, 3000, dtype=np.uint64).tolist() + [0, 2**64 - 1]
    want, got = KeyCounts(), KeyTable(fast, bits=4)
    for step in range(400):
        r = rng.random()
        if r < 0.4:
            keys = [pool[int(i)] for i in rng.integers(0, len(pool), int(rng.integers(0, 60)))]
            want.update(keys)
            got.update(keys)
        elif r < 0.55:
            k = pool[int(rng.integers(len(pool)))]
            want.add(k)
            got.add(k)
        elif want:
            for k in [*want][:int(rng.integers(1, 40))]:
                want.remove(k)
                got.remove(k)
        if step % 3:                  # (reads count what is held back)
            assert len(got) == len(want) and dict(got.items()) == dict(want)
        probe = [pool[int(i)] for i in rng.integers(0, len(pool), 50)]
        assert [k in got for k in probe] == [k in want for k in probe]
        assert [got.get(k) for k in probe] == [want.get(k, 0) for k in probe]
    assert len(got) > 16             # (grew)


def test_hot_kernel_is_the_two_membership_tests(fast) -> None:
    """kt_hot counts what the tables held back (read in their ``array('Q')``, a repeat counted twice and new once),
    then tells where either key array hits (the second only when asked), and ends its answer with how many keys
    were new to each table."""
    rng = np.random.default_rng(9)
    tabs = [KeyTable(fast) for _ in range(2)]
    sets = [set(rng.integers(0, 2**64, 500, dtype=np.uint64).tolist()) for _ in range(2)]
    for t, s in zip(tabs, sets, strict=True):
        t.update(sorted(s)[100:])
        t.flush()
        t.update(sorted(s)[:100] + sorted(s)[:3])    # (held back: counted by the call itself, before it asks)
    keys = []
    for s in sets:
        k = rng.integers(0, 2**64, 300, dtype=np.uint64)
        hits = rng.random(300) < 0.1
        k[hits] = rng.choice(np.array(sorted(s), np.uint64), int(hits.sum()))
        keys.append(k)
    for ask2 in (True, False):
        held = [t.pending for t in tabs]
        got = fast.kt_hot(tabs[0].tab, tabs[0].shift, tabs[1].tab, tabs[1].shift, ask2, *keys, 7, *held).tolist()
        want = [7 + i for i in range(300) if any(int(keys[j][i]) in sets[j] for j in range(2 if ask2 else 1))]
        assert got[:-2] == want and len(want) > 20
        assert got[-2:] == ([100, 100] if ask2 else [0, 0])
        for t, n in zip(tabs, got[-2:], strict=True):
            t.used += n
            del t.pending[:]
    assert [len(t) for t in tabs] == [500, 500]
    assert [t.get(k) for t, s in zip(tabs, sets, strict=True) for k in sorted(s)[:4]] == [2, 2, 2, 1] * 2


@pytest.fixture
def switch(monkeypatch):
    """Set after how many lookups the prefilters turn compiled (and from any number of chunks per lookup)."""
    from pic.engine.policies import irminsul

    def at(n: int) -> None:
        monkeypatch.setattr(irminsul, "_TABLES_AT", n)
        monkeypatch.setattr(irminsul, "_TABLES_PER_LOOKUP", 0)
    return at


def _plans(reqs, capacity_tokens: float, s1: bool) -> tuple[list, dict, bool]:
    cap = math.inf if math.isinf(capacity_tokens) else capacity_tokens * BPT
    pol = policies.build("irminsul", PolicyContext(cap, BPT), {"avg_chunk": 128, "min_chunk": 32, "max_chunk": 256,
                                                               "s1": s1, "s1_window": 48})
    out = plans_of(pol, reqs)
    st = pol._store
    counts = (dict(st._heads.items()), dict(st._tails.items()))
    return out, {**pol.stats.extra, "evictions": pol.stats.evictions, "counts": counts}, isinstance(st._heads, KeyTable)


@pytest.mark.parametrize("at", [1, 25])
@pytest.mark.parametrize("capacity", [math.inf, 3000, 800])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plans_with_key_tables_are_the_counters_plans(capacity, seed, at, switch) -> None:
    """From the first lookup on, or from the 25th (the tables made from the counters); seed 1 with S1 (no hot
    pass: the tables answer the walk's trie prefilter questions)."""
    switch(at)
    reqs = _views(_stream(seed), seed)
    try:
        accel.set_mode("0")
        want = _plans(reqs, capacity, s1=seed == 1)
        accel.set_mode("1")
        got = _plans(reqs, capacity, s1=seed == 1)
    finally:
        accel.set_mode(None)
    assert not want[2] and got[2]         # counters, then tables
    assert got[:2] == want[:2]
    assert sum(s[1] - s[0] for p in got[0] for s in p if s[2] != 2) > 0      # the stream reuses


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_prefilters_past_their_key_limit_turn_tables_same_plans(seed, monkeypatch) -> None:
    """An unbounded store whose walks are too short for the tables (never switched by lookups) turns its prefilters
    tables once they hold more than ``_TABLE_KEYS`` keys (mid-stream): the counters' plans, stats and counts."""
    from pic.engine.policies import irminsul, irminsul_index

    monkeypatch.setattr(irminsul, "_TABLES_AT", 10**9)
    monkeypatch.setattr(irminsul_index, "_TABLE_KEYS", 40)
    reqs = _views(_stream(seed), seed)
    try:
        accel.set_mode("0")
        want = _plans(reqs, math.inf, s1=seed == 1)
        accel.set_mode("1")
        got = _plans(reqs[:1], math.inf, s1=seed == 1)
        assert not got[2]                 # (under the limit: counters)
        got = _plans(reqs, math.inf, s1=seed == 1)
        bounded = _plans(reqs, 3000, s1=seed == 1)
    finally:
        accel.set_mode(None)
    assert not want[2] and got[2] and not bounded[2]
    assert got[:2] == want[:2]
    assert sum(got[1]["counts"][0].values()) > 40


@pytest.mark.parametrize("mode", ["0", "1"])
@pytest.mark.parametrize("seed", [0, 2])
def test_admit_asks_only_hot_chunks_same_state(mode, seed, switch) -> None:
    """A lean store's admit right after its lookup asks the registry only for the chunks the lookup found hot
    (and those before them): the plans, stats and the chunks the prompt index keeps with each layout are those
    of asking for every chunk (the lookups' ``hot`` dropped); the shortcut is taken."""
    from pic.engine.policies.irminsul_lookup import ChunkWalk

    reqs = _views(_stream(seed), seed)
    analyze = ChunkWalk._analyze
    switch(10)
    taken = []

    def run(skip: bool):
        if not skip:
            ChunkWalk._analyze = lambda self, req: analyze(self, req)._replace(hot=None)
        else:
            def spy(self, req):
                got = analyze(self, req)
                taken.append(got.hot is not None and got.hot[0] < len(got.fps))
                return got
            ChunkWalk._analyze = spy
        try:
            accel.set_mode(mode)
            pol = policies.build("irminsul", PolicyContext(math.inf, BPT), {"avg_chunk": 128, "min_chunk": 32,
                                                                           "max_chunk": 256})
            out = []
            for rid, req in enumerate(reqs):
                plan = pol.lookup(req, 10 * rid)
                assert pol.admit(req, plan, 10 * rid)
                pol.commit(req, 10 * rid + 1)
                pol.release(req, 10 * rid + 2)
                out.append([(s.start, s.end, int(s.action), s.source_pos) for s in plan.spans])
        finally:
            accel.set_mode(None)
            ChunkWalk._analyze = analyze
        kept = [(v[1], None if v[5] is None else [pol._store.chunk_of(c, fp).fp for fp, c in zip(v[1], v[5], strict=True)])
                for v in pol._store.prompts.layouts()]
        assert pol._store.lean
        return out, dict(pol.stats.extra), sorted(kept, key=repr)

    assert run(True) == run(False)
    assert sum(taken) > len(reqs) // 2


def test_key_table_copies_and_pickles(fast) -> None:
    import copy
    import pickle

    t = KeyTable(fast, [5, 6, 6, 2**64 - 1])
    t.flush()
    t.add(7)
    for u in (copy.deepcopy(t), pickle.loads(pickle.dumps(t)), copy.copy(t)):
        assert dict(u.items()) == {5: 1, 6: 2, 2**64 - 1: 1, 7: 1}
        u.add(8)
        assert 8 in u and u.fast is fast
    assert 8 not in t


class _Forgets(dict):
    def __setitem__(self, key, value) -> None:
        pass


class _ForgetsFlags(bytearray):
    def __setitem__(self, key, value) -> None:
        pass

    def append(self, item) -> None:
        super().append(0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_layouts_found_whole_once_are_not_asked_again(seed, monkeypatch) -> None:
    """A lean store's prompt index remembers the kept chunk lists it found all ready and whole: the plans and
    stats of forgetting them (asking every time); and it does remember some."""

    reqs = _views(_stream(seed), seed)

    def run(forget: bool):
        pol = policies.build("irminsul", PolicyContext(math.inf, BPT), {"avg_chunk": 128, "min_chunk": 32,
                                                                       "max_chunk": 256})
        if forget:
            pol._store.prompts._whole = _Forgets()
            pol._store.prompts._wf = _ForgetsFlags()
        out = []
        for rid, req in enumerate(reqs):
            plan = pol.lookup(req, 10 * rid)
            assert pol.admit(req, plan, 10 * rid)
            if rid % 4:               # (some committed late: chunks not ready while later prompts look up)
                pol.commit(req, 10 * rid + 1)
                pol.release(req, 10 * rid + 2)
            out.append([(s.start, s.end, int(s.action), s.source_pos) for s in plan.spans])
        return out, dict(pol.stats.extra), len(pol._store.prompts._whole) + sum(pol._store.prompts._wf)

    got, want = run(False), run(True)
    assert got[:2] == want[:2] and got[2] > 0 and want[2] == 0


def test_served_remembers_only_layouts_all_ready_and_whole() -> None:
    from types import SimpleNamespace

    from pic.engine.policies.irminsul_prompts import PromptIndex

    idx = PromptIndex({}, evicts=False)
    idx.lean = True
    bounds = [0, 100, 250, 400, 600]
    cs = [SimpleNamespace(ready=True, size=b - a) for a, b in zip(bounds, bounds[1:], strict=False)]
    cs[2].ready = False
    lay = (bounds, [1, 2, 3, 4], [True] * 5, None, False, cs)
    assert idx._served(lay, 240) == 240 and not idx._whole          # its head is ready, not all of it
    assert idx._served(lay, 500) == 250
    cs[2].ready = True
    cs[3].size = 150                  # (a cut chunk: its head only)
    assert idx._served(lay, 600) == 550 and not idx._whole
    cs[3].size = 200
    assert idx._served(lay, 590) == 590 and id(cs) in idx._whole
    assert idx._served(lay, 600) == 600


def test_key_tables_are_sized_from_the_trace_and_plan_alike(fast, monkeypatch) -> None:
    """The tables start with room for a chunk per ``avg_chunk`` distinct tokens of the trace (its source's, taken at
    the first lookup; up to 2^20 keys): the plans and stats of tables grown from the smallest size."""
    from pic.engine.policies import irminsul as irminsul_mod
    from tests.policies.test_irminsul_opaque_layout import _conversations, _store

    store = _store(5, 30)
    reqs = _conversations(store, 5)
    monkeypatch.setattr(irminsul_mod, "_TABLES_AT", 6)
    monkeypatch.setattr(irminsul_mod, "_TABLES_PER_LOOKUP", 0)

    def run(hint: int | None) -> tuple:
        pol = policies.build("irminsul", PolicyContext(math.inf, BPT), {"avg_chunk": 128, "min_chunk": 32,
                                                                       "max_chunk": 256})
        use = pol._use_tables

        def use_tables() -> None:
            assert pol._hint == int(store.offsets[-1])
            if hint is not None:
                pol._hint = hint
            use()
        pol._use_tables = use_tables
        plans = plans_of(pol, reqs)
        assert type(pol._store._heads) is KeyTable
        return plans, dict(pol.stats.extra), pol._store._heads.tab.shape[0], pol._store._tails.tab.shape[0]

    small, big, huge = run(0), run(10**6), run(10**12)
    assert small[2:] == (2 << 12,) * 2 and big[2:] == (2 << 14,) * 2 and huge[2:] == (2 << 20,) * 2
    assert small[:2] == big[:2] == huge[:2] == run(None)[:2]
    assert small[1]["chunk_lookups"] > 0
