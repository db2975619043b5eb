"""A lean irminsul store's runs keep their layout's own rest of edges and fingerprints once the flat prompt index
keeps the layout as the one it continues (``PromptIndex._add_flat``: ``Run.bounds`` / ``Run.fps`` the rests it keeps,
``Run.k`` counted from them): the same plans, stats, registry chunks (made of the runs) and stored runs as runs that
keep the layout's whole lists (no layout continued: ``_CHAIN`` 0)."""

from __future__ import annotations

import math

import pytest

from pic import accel
from pic.engine import policies
from pic.engine.policies import PolicyContext, irminsul_prompts
from pic.engine.policies.irminsul_records import Run
from tests.policies.conftest import plans_of
from tests.policies.test_irminsul_straddle import _turns

pytest.importorskip("numba")


def _run(seed: int, chain: int, recent: int, monkeypatch) -> tuple:
    monkeypatch.setattr(irminsul_prompts, "_CHAIN", chain)
    monkeypatch.setattr(irminsul_prompts, "_RECENT", recent)
    pol = policies.build("irminsul", PolicyContext(math.inf, 2), {"avg_chunk": 128, "min_chunk": 32, "max_chunk": 256})
    reqs = _turns(seed) + _turns(seed + 7)
    plans = plans_of(pol, reqs)
    st = pol._store
    runs = {id(e): e for e in st.entries.values() if type(e) is Run}
    rests = sum(type(r.bounds) is tuple for r in runs.values())
    # every run's chunks as a reader makes them (chunk_at: edges, fingerprint, pieces), and the stored runs
    rid = {id(q.seq): i for i, q in enumerate(reqs)}          # (objects named by what they are: two policies)
    chunks = [(c.fp, rid[id(c.src)], c.pos, c.size, [(x.base_pos, x.size, x.owner, o, n) for x, o, n in c.pieces],
               c.ready, c.node is None) for r in runs.values() for c in st.chunks_of(r)]
    stored = st.stored_runs()
    stored = ([rid[id(q)] for q in stored.seqs], stored.src.tolist(), stored.lo.tolist(), stored.hi.tolist())
    lays = sorted((lay[0], lay[1], [(c.x.base_pos, c.x.size, c.n) if type(c) is Run else c.fp for c in lay[5]])
                  for lay in st.prompts.layouts())
    return plans, dict(pol.stats.extra), pol.stats.hits, len(st.entries), st.num_extents, st.protected, chunks, \
        stored, lays, rests


@pytest.mark.parametrize("recent", [0, 4096])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_runs_keeping_their_layouts_rests_answer_as_whole_lists(seed: int, recent: int, monkeypatch) -> None:
    try:
        accel.set_mode("1")
        want = _run(seed, 0, recent, monkeypatch)
        got = _run(seed, 16, recent, monkeypatch)
    finally:
        accel.set_mode(None)
    assert want[-1] == 0 and got[-1] > 3          # (runs keep rests only where a layout continues another)
    assert got[:-1] == want[:-1]
