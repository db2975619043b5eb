"""irminsul, fixed-chunk and linearkv taking ``prefix``'s simulation where their plans are ``prefix``'s
(``prefix_twin.take``, #12): every output of a replay (requests.parquet's rows, summary.json less wall times,
config.json's stats) equals the one that simulates the policy; where a plan is not ``prefix``'s (reuse past the
exact prefix, tails, S1), capacity is bounded, several replicas or something watches, it is not taken. A policy told
(its ``tally``) where the trace-level oracle proves its plans: told only there, asked where it declines."""

from __future__ import annotations

import json

import pytest

import pic.engine.replay as R
from pic.engine.config import ReplayConfig
from pic.engine.policies import prefix_twin as I
from tests.policies.test_block_answers import _strip, _trace
from tests.policies.test_oracle_lines import _opaque_trace
from tests.policies.test_oracle_told import _grown_trace

_TAKE = I.take


def _both(trace, cfg, monkeypatch, spoil=None) -> tuple:
    """(taken shortcut's run, the simulated run, whether a policy took prefix's simulation)."""
    took, real = [], _TAKE

    def spy(name, pols, *a):
        got = real(name, pols, *a)
        if name in I.NAMES:
            took.append(bool(got))
            if got and spoil is not None:
                spoil(pols[0])
        return got

    monkeypatch.setattr(I, "take", spy)
    on = R.replay(trace, cfg)
    monkeypatch.setattr(I, "take", lambda *a: None)       # (the simulation)
    off = R.replay(trace, cfg)
    return on, off, any(took)


def _same(on, off) -> bool:
    return (on.table.equals(off.table)
            and json.dumps(_strip(on.summary), sort_keys=True) == json.dumps(_strip(off.summary), sort_keys=True)
            and json.dumps(_strip(on.resolved), sort_keys=True) == json.dumps(_strip(off.resolved), sort_keys=True))


CONFIGS = [({}, True), ({"token_budget": 64}, True), ({"max_requests": 90, "rate": 3000.0}, True),
           ({"policies": ("prefix", "irminsul")}, True), ({"policies": ("irminsul", "oracle")}, True),
           ({"policies": ("irminsul", "prefix")}, True),        # (prefix simulated first: before block-hash)
           ({"policies": ("irminsul", "prefix"), "baselines": ("prefix",)}, False),    # (irminsul first)
           ({"capacity_bytes": 2e8}, False), ({"replicas": 2}, False), ({"verify": True}, False),
           ({"check_invariants": True}, False), ({"closed_loop": True}, False),
           ({"policy_options": {"irminsul": {"s1": True}}}, False),
           ({"policy_options": {"irminsul": {"avg_chunk": 64, "min_chunk": 16}}}, None)]   # (taken or not)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("change, taken", CONFIGS)
def test_taken_equals_the_simulation(seed, change, taken, monkeypatch):
    """Prompts whose only content met earlier is a prefix: the same outputs, prefix's simulation taken where the
    replay allows it."""
    trace = _grown_trace(seed)
    on, off, took = _both(trace, ReplayConfig(**{"policies": ("irminsul",), **change}), monkeypatch)
    assert _same(on, off)
    assert took == taken or taken is None
    assert (on.summary["policies"]["irminsul"]["wall_seconds"] == 0.0) == took


@pytest.mark.parametrize("seed", [0, 4])
def test_not_taken_where_a_plan_rotates(seed, monkeypatch):
    """A window repeated inside a prompt: irminsul reuses the prefix's tokens as prefix does, part of them rotated
    (its plan is not prefix's): not taken."""
    on, off, took = _both(_grown_trace(seed), ReplayConfig(policies=("irminsul",)), monkeypatch)
    assert _same(on, off) and not took
    assert on.summary["policies"]["irminsul"]["wall_seconds"] > 0.0


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_not_taken_past_the_prefix(seed, monkeypatch):
    """Rows met again at other positions (irminsul reuses past the exact prefix) and block-cut prompts: not
    taken where a plan is not prefix's; the outputs equal either way."""
    for trace in (_opaque_trace(seed, 120), _trace(150, seed)):
        on, off, took = _both(trace, ReplayConfig(policies=("irminsul",)), monkeypatch)
        assert _same(on, off)
        if took:
            s = on.resolved["policies"]["irminsul"]["stats"]
            assert s["extended_tokens"] == s["chunk_hits"] == s["tail_tokens"] == 0


def test_a_wrong_stat_fails(monkeypatch):
    """The comparison sees a stat that the shortcut would get wrong."""
    trace = _grown_trace(1)
    cfg = ReplayConfig(policies=("irminsul",))

    def chunks(pol):
        pol.stats.extra["chunk_lookups"] += 1

    def hits(pol):
        pol.stats.hits += 1

    for spoil in (chunks, hits):
        on, off, took = _both(trace, cfg, monkeypatch, spoil)
        assert took and not _same(on, off)


def test_not_taken_where_lookup_is_watched(monkeypatch):
    """A caller watching the lookups (benchmarks' plan digests: the plans and when they were asked) sees the
    simulation's."""
    from pic.engine import policies as registry

    build, seen = registry.build, []

    def watched(name, ctx, opts=None):
        pol = build(name, ctx, opts)
        if name == "irminsul":
            inner = pol.lookup
            pol.lookup = lambda req, now: seen.append(now) or inner(req, now)
        return pol

    monkeypatch.setattr(registry, "build", watched)
    on, off, took = _both(_grown_trace(1), ReplayConfig(policies=("irminsul",)), monkeypatch)
    assert not took and _same(on, off) and seen


def test_progress_moves_while_irminsul_is_asked(monkeypatch):
    """The bar moves through irminsul's asked pass (its own lookups are most of its time), never backwards while
    taken, and ends at the total."""
    monkeypatch.setattr(I, "_TICK", 8)
    took = []
    real = I.take

    def spy(name, pols, *a):
        got = real(name, pols, *a)
        if name in I.NAMES:
            took.append(got)
        return got
    monkeypatch.setattr(I, "take", spy)
    n = 40
    ticks = []
    R.replay(_grown_trace(5, n), ReplayConfig(policies=("irminsul",)),
             progress=lambda done, total: ticks.append((done, total)))
    assert took == [True]
    total = 3 * n
    mine = [d for d, _ in ticks if d > 2 * n]      # (irminsul is simulated last: after prefix and block-hash)
    assert [d - 2 * n for d in mine[:4]] == [8, 16, 24, 32]
    assert mine == sorted(mine) and ticks[-1] == (total, total)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", ["fixed-chunk", "linearkv"])
@pytest.mark.parametrize("change, taken", [({}, True), ({"token_budget": 64}, True), ({"capacity_bytes": 2e8}, False),
                                           ({"replicas": 2}, False), ({"closed_loop": True}, False)])
def test_chunk_policies_take_it_too(seed, name, change, taken, monkeypatch):
    """fixed-chunk and linearkv: the same outputs, prefix's simulation taken where the replay allows it."""
    on, off, took = _both(_grown_trace(seed), ReplayConfig(**{"policies": (name,), **change}), monkeypatch)
    assert _same(on, off)
    assert took == taken
    assert (on.summary["policies"][name]["wall_seconds"] == 0.0) == took


def _tallied(monkeypatch, answer):
    """irminsul given a ``tally`` that records what it was told and answers ``answer(pol, work, pfx, m)``."""
    from pic.engine.policies.irminsul import Irminsul

    told = []

    def tally(self, work, pfx, m, window):
        told.append((work.num_requests, pfx.copy(), m, window))
        return answer(self, work, pfx, m)

    monkeypatch.setattr(Irminsul, "tally", tally, raising=False)
    return told


def test_told_only_where_proven(monkeypatch):
    """``tally`` is offered the proven prefixes (prefix's reuse, the oracle's ``min_match``) where nothing past
    them is met earlier, never where content past a prefix is met again; declining it, the policy is asked from a
    fresh state: the outputs equal the simulation's."""
    told = _tallied(monkeypatch, lambda pol, work, pfx, m: pol.stats.extra.__setitem__("chunk_lookups", -7) or False)
    cfg = ReplayConfig(policies=("irminsul",))
    on, off, took = _both(_grown_trace(1), cfg, monkeypatch)
    assert took and _same(on, off) and len(told) == 1
    n, pfx, m, window = told[0]
    assert n == len(pfx) and m in (8, 64) and window == 64 and pfx.sum() == on.table.column("reused_tokens").to_numpy().sum() > 0
    del told[:]
    on, off, took = _both(_opaque_trace(0, 120), cfg, monkeypatch)
    assert _same(on, off) and not told


def test_told_answers_are_used(monkeypatch):
    """A ``tally`` answering True stands for the asked pass: its state is what the run reports (a right one: the
    same outputs; a wrong stat: not)."""
    def right(pol, work, pfx, m):
        return I._asked(pol, work, pfx.tolist())

    def wrong(pol, work, pfx, m):
        ok = I._asked(pol, work, pfx.tolist())
        pol.stats.extra["chunk_lookups"] += 1
        return ok

    cfg = ReplayConfig(policies=("irminsul",))
    for answer, same in ((right, True), (wrong, False)):
        told = _tallied(monkeypatch, answer)
        on, off, took = _both(_grown_trace(2), cfg, monkeypatch)
        assert took and told and _same(on, off) == same


def test_a_known_duplicate_count_is_reported(monkeypatch):
    """A told policy's ``Footprint.duplicates`` is the count the summary reports (not its runs')."""
    from pic.engine.policies.base import Footprint
    from pic.engine.policies.irminsul import Irminsul

    def right(pol, work, pfx, m):
        return I._asked(pol, work, pfx.tolist())

    _tallied(monkeypatch, right)
    real = Irminsul.footprint
    monkeypatch.setattr(Irminsul, "footprint", lambda self: Footprint(real(self).entries, None, 12345))
    on = R.replay(_grown_trace(2), ReplayConfig(policies=("irminsul",)))
    assert on.summary["policies"]["irminsul"]["duplicate_stored_tokens"] == 12345


def test_the_proof_survives_a_cached_oracle(monkeypatch):
    """A second replay of the same content (the trace-level oracle then taken from its cache, not computed) is
    proven at the same ``m`` as the first: the structure is tested again where the oracle was not computed."""
    told = _tallied(monkeypatch, lambda pol, work, pfx, m: False)
    for _ in range(2):
        R.replay(_grown_trace(1), ReplayConfig(policies=("irminsul",)))      # (two trace objects, one content)
    assert [t[2] for t in told] == [8, 8]


@pytest.mark.parametrize("policies, kept", [(("irminsul",), [False]), (("irminsul", "fixed-chunk"), [True]),
                                            (("irminsul", "prefix"), [False])])
def test_prefix_sim_dropped_once_no_later_policy_may_take_it(policies, kept, monkeypatch):
    """prefix's simulation (its rows and ITL: ~0.3 GB at chat 10^6) is not held through the simulation of the last
    policy that may take it once that one did not (a plan rotates: simulated), nor after the last (fixed-chunk takes
    it here); the outputs are the
    same as where it is held."""
    from pic.engine.serving import ServingModel

    twins, during = [], []
    real, run = I.take, ServingModel.run

    def spy(name, pols, work, twin, *a):
        if name in I.NAMES:
            twins.append(twin)
        return real(name, pols, work, twin, *a)

    def watch(self):
        if twins and len(during) < len(twins):
            during.append(twins[-1].sim is not None)
        return run(self)

    monkeypatch.setattr(I, "take", spy)
    monkeypatch.setattr(ServingModel, "run", watch)
    trace = _grown_trace(0)
    cfg = ReplayConfig(policies=policies)
    on = R.replay(trace, cfg)
    assert during == kept and twins[-1].sim is None
    monkeypatch.setattr(R, "_simulate", lambda *a, keep_twin=True: _SIM(*a, keep_twin=True))
    assert _same(on, R.replay(trace, cfg))


_SIM = R._simulate
