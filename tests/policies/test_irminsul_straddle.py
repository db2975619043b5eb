"""irminsul's walk skips the chunk straddling the exact prefix's end when it misses every stage (its fingerprint not
registered, the key of its tokens from the prefix's end (``opaque_layout``'s query key) in no head prefilter, its tail
key in no tail prefilter): the plans, stats and store of the walk that asks each stage of it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic import accel
from pic.engine import policies
from pic.engine.policies import PolicyContext
from pic.engine.policies import irminsul as irminsul_mod
from pic.engine.policies import irminsul_index as index_mod
from pic.engine.policies import irminsul_lookup as lookup_mod
from pic.engine.policies.irminsul_index import KeyTable
from pic.engine.policies.irminsul_layout import opaque_layout
from tests.policies.conftest import plans_of
from tests.policies.test_irminsul_opaque_layout import _store, _view

pytest.importorskip("numba")


def _turns(seed: int) -> list:
    """Sessions that continue their last turn with segments of a small shared pool (so a turn's new content often
    begins or ends as a chunk another session stored), interleaved."""
    store = _store(seed + 20, 24)
    rng = np.random.default_rng(seed)
    sessions: list[list[int]] = [[] for _ in range(5)]
    out = []
    for rid in range(60):
        s = sessions[int(rng.integers(5))]
        s += rng.choice(24, int(rng.integers(1, 3)), replace=False).tolist()
        out.append(_view(store, list(s), rid))
    return out


@pytest.mark.parametrize("tables", [False, True])
@pytest.mark.parametrize("capacity", [math.inf, 30000])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_straddling_chunk_skip_changes_nothing(seed: int, capacity: float, tables: bool, monkeypatch) -> None:
    if tables:                                # (the prefilters as compiled key tables from the 4th lookup on)
        monkeypatch.setattr(irminsul_mod, "_TABLES_AT", 4)
        monkeypatch.setattr(irminsul_mod, "_TABLES_PER_LOOKUP", 0)
    walks = []
    longest = index_mod.ChunkIndexes.longest

    def counted(self, *a, **k):
        walks[-1] += 1
        return longest(self, *a, **k)
    monkeypatch.setattr(index_mod.ChunkIndexes, "longest", counted)

    def run() -> tuple:
        walks.append(0)
        cap = capacity * 2 if capacity < math.inf else math.inf
        pol = policies.build("irminsul", PolicyContext(cap, 2), {"avg_chunk": 128, "min_chunk": 32, "max_chunk": 256})
        plans = plans_of(pol, _turns(seed))
        st = pol._store
        assert (type(st._heads) is KeyTable) == tables
        return plans, dict(pol.stats.extra), pol.stats.hits, len(st.entries), st.num_extents, st.protected, \
            st.evictable, sorted(st._heads.items()), sorted(st._tails.items())

    try:
        accel.set_mode("1")
        # the layout without the one-call kernel (no query key): the walk asks each stage of the straddling chunk
        monkeypatch.setattr(lookup_mod, "opaque_layout", lambda *a: None)
        want = run()
        monkeypatch.setattr(lookup_mod, "opaque_layout", opaque_layout)
        got = run()
    finally:
        accel.set_mode(None)
    assert got == want
    stats = want[1]
    assert stats["prefix_tokens"] > 0 and stats["tail_tokens"] + stats["extended_tokens"] > 0
    assert walks[1] < walks[0]                # (skipped: fewer chunk-trie questions)
