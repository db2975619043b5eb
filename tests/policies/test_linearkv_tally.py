"""``linearkv`` told, not asked (``linearkv_tally.tally``, #12): its prompts chunked as the asked pass chunks them
(resumed from an earlier prompt with the same first segments), their fingerprints looked up in the set of those
stored so far: where no chunk is a hit, the told state (stats, usage, footprint, describe, peak) equals the asked
pass's (``prefix_twin._asked``), compiled kernels or numpy; where the asked pass meets a hit (content met past the
prefix), it declines; and where it does not cover the configuration. A wrong tally fails the comparison."""

from __future__ import annotations

import numpy as np
import pytest

from pic import accel
from pic.engine import policies as registry
from pic.engine.config import ReplayConfig
from pic.engine.policies import prefix_twin as I
from pic.engine.policies.linearkv_tally import sources
from pic.engine.replay import workload_from_trace
from tests.policies.test_block_answers import _trace
from tests.policies.test_fixed_chunk_tally import (
    _policy,
    _prefixes,
    fresh_trace,
    one_more_usage,
    told_and_asked,
    wrong_tally_fails,
)
from tests.policies.test_linearkv_resume import OPTS, _conversations
from tests.policies.test_oracle_lines import _opaque_trace
from tests.policies.test_oracle_told import _grown_trace
from tests.policies.test_prefix_twin import _both, _same


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("make", [fresh_trace, _grown_trace, lambda s: fresh_trace(s, 200)])
@pytest.mark.parametrize("opts", [None, OPTS])
def test_told_equals_asked(seed, make, opts):
    """Fresh content past the prefixes (repeats inside a prompt too: the chunks' set decides), turns resuming CDC
    from earlier prompts, default and small chunks: told, the asked pass's state."""
    told, mine, theirs = told_and_asked(make(seed), "linearkv", opts)
    assert told and mine == theirs
    assert mine[0]["stored_chunks"] > 0 and mine[0]["chunk_hits"] == 0


@pytest.mark.parametrize("mode", ["0", "1"])
@pytest.mark.parametrize("seed", [0, 3])
def test_numpy_and_compiled_agree(mode, seed):
    """The numpy path (the reference) and the compiled kernels tell the same state, the asked one."""
    accel.set_mode(mode)
    try:
        told, mine, theirs = told_and_asked(fresh_trace(seed, 120), "linearkv", OPTS)
    finally:
        accel.set_mode(None)
    assert told and mine == theirs


@pytest.mark.parametrize("seed", range(6))
def test_declines_where_a_chunk_is_a_hit(seed):
    """Content met again past the prefix (rows at other positions, block-cut prompts, conversations sharing pieces):
    where the asked pass's plans are not prefix's, never told; where they are, told the asked state."""
    for trace in (_opaque_trace(seed, 120), _trace(150, seed), _conversations(seed, 100)):
        work = workload_from_trace(trace)
        pfx = _prefixes(work)
        asked = I._asked(_policy("linearkv"), work, pfx.tolist())
        told, mine, theirs = told_and_asked(trace, "linearkv")
        assert told <= asked
        assert not told or mine == theirs


@pytest.mark.parametrize("opts, model", [({"prefix_stage": False}, None), ({"prefix_page_size": 2}, None),
                                         (None, "qwen3-next-80b-a3b")])
def test_declines_what_it_does_not_cover(opts, model):
    """No prefix stage, pages, a hybrid model (recurrent states stored: not prefix's plans): declined."""
    work = workload_from_trace(fresh_trace(1))
    assert not _policy("linearkv", opts, model).tally(work, _prefixes(work), 8, 64)


def test_sources_share_their_rows():
    """Each source is earlier, and holds the item's first rows (``shared`` tokens, within its prefix)."""
    from pic.engine.policies.fixed_chunk_tally import prompt_rows

    work = workload_from_trace(_conversations(2, 200))
    store, rows, offs, _ = prompt_rows(work)
    pfx = _prefixes(work)
    src, shared = sources(rows, offs, np.diff(store.offsets), pfx)
    L = np.diff(store.offsets)
    assert (src < np.arange(src.shape[0])).all() and (shared <= pfx).all() and (shared > 0).sum() > 50
    for i in np.flatnonzero(shared > 0).tolist():
        a, s = rows[offs[i]:offs[i + 1]], rows[offs[src[i]]:offs[src[i] + 1]]
        k = int(np.searchsorted(np.cumsum(L[a]), shared[i]) + 1)
        assert L[a[:k]].sum() == shared[i] and np.array_equal(a[:k], s[:k])


@pytest.mark.parametrize("seed", [0, 4])
def test_replay_told_equals_the_simulation(seed, monkeypatch):
    """Through a replay (prefix_twin.take): told, the same outputs as the simulated policy."""
    cls, told = registry.get("linearkv"), []
    real = cls.tally

    def spy(self, *a):
        told.append(real(self, *a))
        return told[-1]

    monkeypatch.setattr(cls, "tally", spy)
    on, off, took = _both(fresh_trace(seed, 120), ReplayConfig(policies=("linearkv",)), monkeypatch)
    assert took and told == [True] and _same(on, off)


@pytest.mark.parametrize("spoil", ["stored", "lookups", "usage"])
def test_a_wrong_tally_fails(spoil, monkeypatch):
    """A tally off by one fails both comparisons (the state's and the replay's outputs)."""
    def spoiled(pol):
        if spoil == "stored":
            pol.stats.extra["stored_chunks"] += 1
        elif spoil == "lookups":
            pol.stats.extra["chunk_lookups"] -= 1
        else:
            one_more_usage(pol)

    wrong_tally_fails(monkeypatch, "linearkv", spoiled)
