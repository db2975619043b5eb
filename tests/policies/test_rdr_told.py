"""``irminsul+rdr`` told, not asked, where its plans are the proven exact prefixes (``rdr_told``, #12): every output of
a replay (requests.parquet's rows, summary.json less wall times, config.json's stats) equals the one that asks it
request by request in the event loop; told only in a replay in arrival order, unbounded, nothing watching, and
declined (then simulated) where the wrapped policy's plans are not the prefixes. Its timeline runs in the compiled
two-pass path (its re-encode seconds priced as the event loop prices them), or the event loop where the kernels do
not load; its allocation in one batched pass (one per distinct request) or request by request. A deliberately wrong
told state fails the comparison."""

from __future__ import annotations

import numpy as np
import pytest

import pic.engine.replay as R
from pic import accel
from pic.engine.config import ReplayConfig
from pic.engine.cost import CostModel
from pic.engine.plan import Plan
from pic.engine.policies import rdr_told as T
from pic.engine.serving import model as serving_model
from pic.engine.serving import timeline
from pic.engine.specs import gpu_from_name, model_from_name
from tests.policies.test_block_answers import _trace
from tests.policies.test_oracle_lines import _opaque_trace
from tests.policies.test_oracle_told import _grown_trace
from tests.policies.test_prefix_twin import _same

_TELL = T.tell
_NAME = "irminsul+rdr"


@pytest.fixture(autouse=True)
def modes():
    yield
    accel.set_mode(None)


def _both(trace, cfg, monkeypatch, spoil=None, mode="1") -> tuple:
    """(told run, asked run, whether it was told, whether its timeline ran in two passes)."""
    accel.set_mode(mode)
    told, passes = [], []

    def spy(pols, work, twin):
        _TELL(pols, work, twin)
        if getattr(pols[0], "told_plans", None) is not None:
            told.append(True)
            if spoil is not None:
                spoil(pols[0])

    real = timeline.run_two_pass
    monkeypatch.setattr(T, "tell", spy)
    monkeypatch.setattr(serving_model, "run_two_pass",
                        lambda sm: passes.append((sm.policies[0].name, real(sm))) or passes[-1][1])
    on = R.replay(trace, cfg)
    monkeypatch.setattr(T, "tell", lambda *a: None)       # (asked: the event loop)
    off = R.replay(trace, cfg)
    return on, off, bool(told), ("rdr", True) in passes[:len(passes) // 2 + 1]


CONFIGS = [({}, True), ({"token_budget": 64}, True), ({"max_requests": 90, "rate": 3000.0}, True),
           ({"policies": ("irminsul", _NAME)}, True), ({"policies": (_NAME, "prefix")}, True),
           ({"policy_options": {_NAME: {"protect_sinks": 150, "block_tokens": 16}}}, True),
           ({"policy_options": {_NAME: {"protect": "block", "budget": 0.3}}}, True),     # (protected: one by one)
           ({"model": "llama-3.1-8b"}, True),
           ({"capacity_bytes": 2e8}, False), ({"replicas": 2}, False), ({"verify": True}, False),
           ({"check_invariants": True}, False), ({"closed_loop": True}, False)]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("change, told", CONFIGS)
def test_told_equals_asked(seed, change, told, monkeypatch):
    """Prompts whose only content met earlier is a prefix: the same outputs; told (its timeline in two passes)
    wherever the replay allows it."""
    on, off, was, two = _both(_grown_trace(seed), ReplayConfig(**{"policies": (_NAME,), **change}), monkeypatch)
    assert _same(on, off)
    assert was == told and two == told
    s = on.resolved["policies"][_NAME]["stats"]
    assert s["rdr_tokens"] > 0 and s["rdr_bytes"] > 0


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("over", ["fixed-chunk", "linearkv"])
def test_other_wrapped_policies(seed, over, monkeypatch):
    on, off, was, _ = _both(_grown_trace(seed), ReplayConfig(policies=(f"{over}+rdr",)), monkeypatch)
    assert _same(on, off) and was


@pytest.mark.parametrize("seed", [1, 3])
def test_told_without_the_kernels(seed, monkeypatch):
    """Mode 0 (no compiled kernels): told, its allocation one request at a time, the event loop asking the told
    policy its plans (the same ones): the same outputs."""
    on, off, was, two = _both(_grown_trace(seed), ReplayConfig(policies=(_NAME,)), monkeypatch, mode="0")
    assert _same(on, off) and was and not two


@pytest.mark.parametrize("seed", [1, 2])
def test_cuts_left_to_the_exact_merge(seed, monkeypatch):
    """Requests the batched kernel answers ``redo`` (a cut within rounding of the budget) take ``rdr_request``'s
    exact merge: here all of them, and the allocation is the same."""
    accel.set_mode("1")
    sel = accel.kernels(1, "rdrsel")
    real, calls = sel.rdr_cases, []

    def spoilt(*a):                                       # (every answer spoilt, every request to redo)
        calls.append(a[0].size)
        return (*[x * 0 + 7 for x in real(*a)[:6]], np.ones(a[0].size, bool))

    monkeypatch.setattr(sel, "rdr_cases", spoilt)
    on, off, was, _ = _both(_grown_trace(seed), ReplayConfig(policies=(_NAME,)), monkeypatch)
    assert _same(on, off) and was and calls and calls[0] > 10


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_declined_past_the_prefix(seed, monkeypatch):
    """Rows met again at other positions (irminsul reuses past the exact prefix), block-cut prompts, windows
    repeated inside a prompt (a rotated plan): the same outputs, told only where every plan is the prefix's."""
    for trace in (_opaque_trace(seed, 120), _trace(150, seed), _grown_trace(seed * 4)):
        on, off, was, _ = _both(trace, ReplayConfig(policies=(_NAME,)), monkeypatch)
        assert _same(on, off)
        if was:
            s = on.resolved["policies"][_NAME]["stats"]
            assert s["extended_tokens"] == s["chunk_hits"] == s["tail_tokens"] == 0


def test_a_wrong_told_state_fails(monkeypatch):
    """The comparison sees a counter, the distortion or a plan's re-encoded tokens the told path would get wrong."""
    def rdr_bytes(pol):
        pol.stats.extra["rdr_bytes"] += 1

    def distortion(pol):
        pol._dist[0] *= 1.0 + 1e-12

    def reencoded(pol):
        k = pol.told_plans[1].copy()
        k[np.flatnonzero(k)[3]] += 1
        pol.told_plans = (pol.told_plans[0], k)

    for spoil in (rdr_bytes, distortion, reencoded):
        on, off, was, _ = _both(_grown_trace(1), ReplayConfig(policies=(_NAME,)), monkeypatch, spoil)
        assert was and not _same(on, off)


@pytest.mark.parametrize("model", ["deepseek-v2-lite", "llama-3.1-8b", "deepseek-v3"])
def test_reencode_seconds_are_the_event_loops(model):
    """``timeline._reencode_extra``: ``max(0, prefill(plan).time_s - step_time(one chunk))`` of each re-encoding
    plan, as ``ServingModel._start_prefill`` computes it, bit for bit; zero where nothing is re-encoded."""
    rng = np.random.default_rng(7)
    cost = CostModel(model_from_name(model), gpu_from_name("h200"), kv_read_bytes=300.0)
    n = rng.integers(1, 40000, 400)
    r = np.minimum(rng.integers(0, 40000, 400) * rng.integers(0, 2, 400), n)
    r[:5] = n[:5]                                              # (full hits: nothing re-encoded)
    k = n - r
    got = timeline._reencode_extra(cost, n, r, k, k > 0)
    for i in range(n.size):
        ni, ri, ki = int(n[i]), int(r[i]), int(k[i])
        if not ki:
            assert got[i] == 0.0
            continue
        pc = cost.prefill(Plan.from_prefix(ni, ri).with_reencode(ki))
        want = max(0.0, pc.time_s - cost.step_time(((ki, ni - ki),), 0, 0))
        assert got[i] == want, (ni, ri)
    assert (got > 0).sum() > 300


def test_wanted_only_for_rdr_over_a_twin_policy():
    ctx = R.PolicyContext(float("inf"), 1)
    assert T.wanted(ReplayConfig(policies=(_NAME,)), ctx, lambda: None) is not None
    assert T.wanted(ReplayConfig(policies=("prefix+rdr",)), ctx, lambda: None) is None
    assert T.wanted(ReplayConfig(policies=(_NAME,), replicas=2), ctx, lambda: None) is None
    assert T.wanted(ReplayConfig(policies=(_NAME,)), R.PolicyContext(1e9, 1), lambda: None) is None
