"""irminsul's lookup answers without its walk where the answer is known (``ChunkWalk._shortcuts``: a prompt of no
exact prefix the store knows nothing of, ``irminsul_layout.nothing_known``; nothing hot past the exact prefix and no straddling
chunk to walk): the same analyses, plans, stats and store as the walk's, with counters and with key tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic import accel
from pic.engine import policies
from pic.engine.policies import PolicyContext
from pic.engine.policies import irminsul as irminsul_mod
from pic.engine.policies import irminsul_lookup as lookup_mod
from pic.engine.policies.irminsul_index import KeyTable
from pic.engine.policies.irminsul_lookup import ChunkWalk
from tests.policies.test_irminsul_opaque_layout import _conversations, _store, _view

pytest.importorskip("numba")
BPT = 2
CFG = {"avg_chunk": 128, "min_chunk": 32, "max_chunk": 256}


def _requests(seed: int) -> list:
    """Conversations (continued turns, turns in another order), fresh prompts of unseen segments between them, and
    prompts spliced from two earlier ones (one's first segment, then the other's: an exact prefix whose straddling
    chunk goes on into stored content)."""
    store = _store(seed + 20, 70)
    reqs = _conversations(store, seed)
    rng = np.random.default_rng(seed)
    fresh = [_view(store, rng.choice(np.arange(40, 60), 2, replace=False).tolist(), 100 + i) for i in range(8)]
    out = []
    for i, r in enumerate(reqs):
        out.append(r)
        if i % 4 == 1 and fresh:
            out.append(fresh.pop())
        if i % 5 == 4:
            a, b = out[int(rng.integers(len(out)))], out[int(rng.integers(len(out)))]
            rows = a.segment_rows[:1].tolist() + b.segment_rows[:1 if i % 2 else None].tolist()
            out.append(_view(store, rows, 200 + i))
    # a short segment that began a stored prompt, after another prompt's first segment and before unseen ones: the
    # straddling chunk of the exact prefix goes on into a stored chunk's head, nothing after it is stored
    lens = np.diff(store.offsets)
    short = [int(r) for r in np.flatnonzero((lens >= 20) & (lens <= 120)) if r < 40]
    for i, r in enumerate(short[:3]):
        a = out[3 * i + 1].segment_rows[:1].tolist()
        out.append(_view(store, [r, 60 + i], 300 + i))
        out.append(_view(store, a + [r, 65 + i], 310 + i))
    return out + fresh


def _analysis(got) -> tuple:
    """An analysis as comparable values (extents as their position and size)."""
    uses = [(a, b, x.base_pos, x.size, lo) for a, b, x, lo in got.uses]
    return (got.bounds, got.fps, got.anchors, got.hard.tolist(), got.marked, got.toks.tolist(), got.off, uses,
            got.k0, list(got.heads), list(got.tails), None if got.chunks is None else len(got.chunks),
            None if got.hot is None else (got.hot[0], got.hot[1], got.hot[2]), got.whole)


@pytest.mark.parametrize("tables", [False, True])
@pytest.mark.parametrize("capacity", [math.inf, 40_000])
@pytest.mark.parametrize("seed", [0, 1])
def test_shortcuts_answer_what_the_walk_answers(seed: int, capacity: float, tables: bool, monkeypatch) -> None:
    accel.set_mode("1")
    try:
        if tables:
            monkeypatch.setattr(irminsul_mod, "_TABLES_AT", 4)
            monkeypatch.setattr(irminsul_mod, "_TABLES_PER_LOOKUP", 0)
        analyze, known, seen = ChunkWalk._analyze, lookup_mod.nothing_known, []

        def tracked(*a):
            out = known(*a)
            seen.append(out is not None)
            return out

        monkeypatch.setattr(lookup_mod, "nothing_known", tracked)

        def run(short: bool) -> tuple:
            pol = policies.build("irminsul", PolicyContext(capacity * BPT, BPT), CFG)
            pol._shortcuts = short
            got: list = []

            def kept(self, req):
                a = analyze(self, req)
                got.append(_analysis(a))
                return a
            monkeypatch.setattr(ChunkWalk, "_analyze", kept)
            plans = []
            for rid, req in enumerate(_requests(seed)):
                plan = pol.lookup(req, 10 * rid)
                if pol.admit(req, plan, 10 * rid):
                    pol.commit(req, 10 * rid + 1)
                    pol.release(req, 10 * rid + 2)
                plans.append([(s.start, s.end, int(s.action), s.source_pos) for s in plan.spans])
            st = pol._store
            assert (type(st._heads) is KeyTable) == tables
            return plans, got, dict(pol.stats.extra), len(st.entries), st.evictable, st.protected, st.num_extents

        fast = run(True)
        taken = sum(seen)
        seen.clear()
        slow = run(False)
        assert not seen                       # (off: never asked)
        assert fast[0] == slow[0]
        assert fast[1] == slow[1]
        assert fast[2:] == slow[2:]
        assert fast[2]["prefix_tokens"] > 0 and fast[2]["chunk_hits"] + fast[2]["tail_tokens"] > 0
        if not tables:
            assert taken > 0                  # the no-prefix shortcut answered some lookups
    finally:
        accel.set_mode(None)
