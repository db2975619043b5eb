"""What ``prefix_twin.take`` makes before a policy's simulation (#12, memory): the proof that would tell it is made
only where it may be used (the trace-level oracle's reuse is prefix's) and from the oracle's own prefixes where that
oracle ran on the same trace and order (not a second structure pass); the asked pass reads its columns a block at a
time. The proof's answers, the policies told and the replays' outputs are those of the whole computations."""

from __future__ import annotations

import numpy as np
import pytest

import pic.engine.replay as R
from pic.engine import coverage, oracle
from pic.engine.config import ReplayConfig
from pic.engine.policies import oracle as O
from pic.engine.policies import prefix_twin as I
from tests.policies.test_block_answers import _trace
from tests.policies.test_oracle_lines import _opaque_trace
from tests.policies.test_oracle_told import _grown_trace
from tests.policies.test_prefix_twin import _both, _same

_TAKE = I.take


def _facts(trace, m: int = 64):
    """(trace, its workload, the trace-level oracle's reuse made now, m)."""
    oracle._MEMO.clear()
    work = R.workload_from_trace(trace)
    return trace, work, coverage.workload_oracle(trace, work, m), m


@pytest.mark.parametrize("make", [lambda: _grown_trace(1), lambda: _grown_trace(2), lambda: _opaque_trace(0, 120),
                                  lambda: _trace(150, 1), lambda: _trace(150, 2)])
def test_the_proof_from_the_oracles_prefixes_is_the_structure_passs(make, monkeypatch):
    """``proven_prefixes`` right after the trace-level oracle (its prefixes kept) equals the one made without them,
    and makes no second structure pass (``resident_prefixes`` is not called)."""
    facts = _facts(make())
    assert coverage._POINTS
    calls = []
    real = coverage.resident_prefixes
    monkeypatch.setattr(coverage, "resident_prefixes", lambda *a, **k: calls.append(1) or real(*a, **k))
    fast = O.proven_prefixes(*facts)
    assert not calls
    coverage._POINTS.clear()
    slow = O.proven_prefixes(*facts)
    assert (fast is None) == (slow is None)
    if fast is not None:
        assert np.array_equal(fast[0], slow[0]) and fast[0].dtype == slow[0].dtype and fast[1] == slow[1]


def test_the_oracles_prefixes_are_read_only_for_their_trace_and_order():
    """Prefixes kept for another order of the trace (or another trace) are not read."""
    trace, work, reuse, m = _facts(_grown_trace(1))
    order = np.lexsort((trace.column("request_id"), trace.column("arrival_us")))
    assert O._oracle_prefixes(trace, order) is not None
    assert O._oracle_prefixes(trace, order[:-1]) is None
    assert O._oracle_prefixes(_grown_trace(1), order) is None


def test_may_prove_only_where_the_oracle_is_prefixs_reuse():
    reuse = np.array([0, 5, 7], np.int64)
    twin = I.Twin(lambda: (None, None, reuse.copy(), 64))
    assert twin.may_prove(reuse) and twin.may_prove(reuse.astype(np.int32))
    assert not twin.may_prove(reuse + (reuse == 7))
    assert not I.Twin(None).may_prove(reuse)
    twin._pfx = None                    # (made already: proven() answers at once)
    assert twin.may_prove(reuse + 1)


@pytest.mark.parametrize("seed", [0, 1])
def test_no_proof_where_it_could_not_tell(seed, monkeypatch):
    """Where irminsul reuses past the exact prefix (the oracle's reuse is not prefix's), the proof is not made; it is
    where they are equal; the outputs are the simulation's either way."""
    made = []
    real = I.Twin.proven
    monkeypatch.setattr(I.Twin, "proven", lambda self: made.append(1) or real(self))
    trace = _opaque_trace(seed, 120)
    facts = _facts(trace)
    t = R.replay(trace, ReplayConfig(policies=("prefix",))).table
    rid, reused = t.column("request_id").to_numpy(), t.column("reused_tokens").to_numpy()
    k = np.argsort(rid)
    differ = not np.array_equal(facts[2], reused[k[np.searchsorted(rid[k], facts[1].request_ids)]])
    del made[:]
    on, off, _ = _both(trace, ReplayConfig(policies=("irminsul",)), monkeypatch)
    assert _same(on, off)
    assert bool(made) != differ
    del made[:]
    on, off, took = _both(_grown_trace(1), ReplayConfig(policies=("irminsul",)), monkeypatch)
    assert _same(on, off) and took and made


def test_asked_in_blocks_is_asked_whole(monkeypatch):
    """The asked pass a block of requests at a time (blocks of 7, of 1, one block) gives the answer and the state of
    the pass over whole lists: taken where it was, with the same outputs and progress."""
    outs = []
    for tick in (7, 1, 1 << 20):
        monkeypatch.setattr(I, "_TICK", tick)
        monkeypatch.setattr(I, "take", _TAKE)
        ticks = []
        R.replay(_grown_trace(5, 40), ReplayConfig(policies=("irminsul",)), progress=lambda d, n, ticks=ticks: ticks.append(d))
        mine = [d - 80 for d in ticks if d > 80]      # (irminsul asked last, taken: after prefix and block-hash)
        assert mine == sorted(mine) and mine[-1] == 40
        assert mine[:2] == ([tick, 2 * tick] if tick < 20 else [40])
        for trace in (_grown_trace(0), _grown_trace(3, 60)):
            on, off, took = _both(trace, ReplayConfig(policies=("irminsul",)), monkeypatch)
            assert _same(on, off)
            outs.append((took, on.summary["policies"]["irminsul"]["registry_entries"]))
    assert outs[:2] == outs[2:4] == outs[4:]
