"""irminsul's lookup without the probes of its new chunks where the prompt's content past the exact prefix is in no
earlier prompt (``irminsul_fresh.FreshContent``, the compiled ``kt_fresh``): its answer against a brute-force count of
segment keys, and the policy's analyses, plans, stats and store with it equal to those without it."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from pic import accel
from pic.engine import policies
from pic.engine.policies import PolicyContext, RequestView
from pic.engine.policies import irminsul_lookup as lookup_mod
from pic.engine.policies.irminsul_fresh import FreshContent, start_fresh
from pic.engine.policies.irminsul_layout import _columns
from pic.engine.policies.irminsul_lookup import ChunkWalk
from tests.policies.conftest import opaque_store
from tests.policies.test_irminsul_opaque_layout import _view
from tests.policies.test_irminsul_shortcuts import BPT, CFG, _analysis, _requests

pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def _compiled():
    accel.set_mode("1")
    yield
    accel.set_mode(None)


@pytest.mark.parametrize("held", [1 << 20, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nothing_past_is_no_earlier_key_from_pos_on(seed: int, held: int, monkeypatch) -> None:
    """Against the keys of the earlier prompts' segments, counted in Python; keys repeat across rows (one content), the
    table grows from its first size, and (``held`` 3) the prompts held back are counted as they are noted."""
    monkeypatch.setattr(FreshContent, "_HELD", held)
    store = opaque_store(seed, 6000, 40)
    store.keys[5000:] = store.keys[:1000]         # (rows 5000.. hold the content of rows 0..: same key ^ salt)
    store.salts[5000:] = store.salts[:1000]
    kx = store.keys ^ store.salts
    lens = np.diff(store.offsets)
    rng = np.random.default_rng(seed)
    fr, seen, answers, prev = None, set(), [0, 0], []
    for rid in range(400):
        rows = rng.choice(6000, int(rng.integers(1, 25)), replace=False).tolist()
        if rid % 3 == 0 and rid:
            rows = prev[:int(rng.integers(0, len(prev) + 1))] + rows
        prev = rows
        req = _view(store, rows, rid)
        n = req.num_tokens
        fr = start_fresh(_Pol(), req) if fr is None else fr.note(req)
        assert fr is not None
        pos = int(rng.integers(0, n + 1))
        got = fr.nothing_past(req, pos, 0, 0, [0, n], [1], 1, {})
        s, want = 0, True
        for r in rows:
            if s + lens[r] > pos and s < n and lens[r] and int(kx[r]) in seen:
                want = False
            s += lens[r]
        assert got == want, (rid, pos)
        answers[got] += 1
        seen.update(int(kx[r]) for r in rows if lens[r])
    assert min(answers) > 20
    assert fr.tab.shape[0] > 2 << 12          # (grown)


class _Pol:
    """What :func:`start_fresh` reads of a policy."""

    _shortcuts, _entries = True, {}

    class config:
        s1, min_chunk, min_match = False, 64, 16

    class ctx:
        verify = False


def test_the_chunks_it_cannot_tell_are_asked_of_the_registry() -> None:
    store = opaque_store(3, 50, 400)
    req = _view(store, [5, 6, 7], 0)
    fr = start_fresh(_Pol(), req)
    n = req.num_tokens
    bounds, fps = [0, 100, n - 10, n], [11, 12, 13]
    assert fr.nothing_past(req, 50, 0, 1, bounds, fps, 16, {})
    assert not fr.nothing_past(req, 50, 0, 1, bounds, fps, 16, {11: None})      # the straddling chunk's
    assert fr.nothing_past(req, 100, 1, 1, bounds, fps, 16, {11: None})         # (none straddles)
    assert not fr.nothing_past(req, 100, 1, 1, bounds, fps, 16, {13: None})     # the last, under min_match
    assert fr.nothing_past(req, 100, 1, 1, bounds, fps, 8, {13: None})          # (not under it)


def test_where_it_does_not_apply() -> None:
    store = opaque_store(4, 50, 400)
    req = _view(store, [5, 6, 7], 0)
    for attr, value in [("_shortcuts", False), ("_entries", {1: None})]:
        pol = _Pol()
        setattr(pol, attr, value)
        assert start_fresh(pol, req) is None
    assert start_fresh(_Pol(), RequestView.from_tokens(0, np.arange(300, dtype=np.int32))) is None
    fr = start_fresh(_Pol(), req)
    assert fr.note(_view(store, [8], 1)) is fr
    assert fr.note(_view(opaque_store(4, 50, 400), [8], 2)) is None          # another store
    assert fr.note(RequestView.from_tokens(3, np.arange(300, dtype=np.int32))) is None
    assert _columns(store)[5]


@pytest.mark.parametrize("tables", [False, True])
@pytest.mark.parametrize("capacity", [math.inf, 40_000])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_policy_with_it_is_the_policy_without_it(seed: int, capacity: float, tables: bool, monkeypatch) -> None:
    from pic.engine.policies import irminsul as irminsul_mod

    if tables:
        monkeypatch.setattr(irminsul_mod, "_TABLES_AT", 4)
        monkeypatch.setattr(irminsul_mod, "_TABLES_PER_LOOKUP", 0)
    analyze, asked = ChunkWalk._analyze, []
    nothing_past = FreshContent.nothing_past

    def counted(self, *a):
        out = nothing_past(self, *a)
        asked.append(out)
        return out
    monkeypatch.setattr(FreshContent, "nothing_past", counted)

    def run(fresh: bool) -> tuple:
        monkeypatch.setattr(lookup_mod, "start_fresh", start_fresh if fresh else lambda pol, req: None)
        pol = policies.build("irminsul", PolicyContext(capacity * BPT, BPT), CFG)
        got: list = []

        def kept(self, req):
            a = analyze(self, req)
            got.append(_analysis(a))
            return a
        monkeypatch.setattr(ChunkWalk, "_analyze", kept)
        plans, reqs = [], _requests(seed)
        twin = None
        for rid, req in enumerate(reqs):
            plan = pol.lookup(req, 10 * rid)
            if pol.admit(req, plan, 10 * rid):
                pol.commit(req, 10 * rid + 1)
                pol.release(req, 10 * rid + 2)
            plans.append([(s.start, s.end, int(s.action), s.source_pos) for s in plan.spans])
            if rid == len(reqs) // 2:
                twin = copy.deepcopy(pol)         # (a copy goes on without it: asks every stage)
                assert twin._fresh is None
                rest = len(plans)
        for rid, req in enumerate(reqs[rest:], rest):
            plan = twin.lookup(req, 10 * rid)
            if twin.admit(req, plan, 10 * rid):
                twin.commit(req, 10 * rid + 1)
                twin.release(req, 10 * rid + 2)
            assert [(s.start, s.end, int(s.action), s.source_pos) for s in plan.spans] == plans[rid]
        st = pol._store
        return plans, got, dict(pol.stats.extra), len(st.entries), st.evictable, st.protected, st.num_extents

    on = run(True)
    taken = sum(asked)
    if tables:
        assert taken > 0 and len(asked) > taken   # (both answers given)
    else:
        assert not asked                      # (asked only where the prefilters are key tables: the probes it spares)
    off = run(False)
    assert on[0] == off[0]
    assert on[1] == off[1]
    assert on[2:] == off[2:]
    assert on[2]["chunk_hits"] + on[2]["tail_tokens"] > 0
