"""The two-pass replay of one replica (engine.serving.timeline + the compiled timeline, pic._accel_numba_serve): every
output the event loop gives (request columns, ITL segments, busy time, events, peak, the policy's stats and final
state), on workloads built to hit every branch of the timeline, and where it does not apply, the event loop."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pic import accel
from pic.engine import policies as registry
from pic.engine.config import ReplayConfig
from pic.engine.cost import CostModel
from pic.engine.policies.base import PolicyContext, RequestView
from pic.engine.replay import replay
from pic.engine.serving import ServingModel, Workload, timeline
from pic.engine.serving import model as serving_model
from pic.engine.specs import gpu_from_name, model_from_name
from tests.engine.test_replay import _trace

pytestmark = pytest.mark.skipif(not accel.available(), reason="numba not installed")


@pytest.fixture
def modes():
    yield
    accel.set_mode(None)


def _workload(num, seed, span_us, long=20000, max_out=300, burst=False):
    """Prompts sharing prefixes of one document (some repeated whole: full hits; some a prefix of an earlier one),
    arrivals spread over ``span_us`` (``burst``: many at one instant), outputs of 1 to ``max_out`` tokens."""
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, 5000, 6000).astype(np.int32)
    toks = []
    for _ in range(num):
        k = rng.integers(0, 5)
        if k == 0 and toks:
            toks.append(toks[int(rng.integers(0, len(toks)))].copy())                 # a repeat: a full hit
        elif k == 1 and toks:
            t = toks[int(rng.integers(0, len(toks)))]
            toks.append(t[:max(1, int(rng.integers(1, t.size + 1)))].copy())      # a prefix of an earlier one
        else:
            toks.append(np.concatenate([shared[:rng.integers(0, 6000)],
                                        rng.integers(6000, 9000, rng.integers(1, long))]).astype(np.int32))
    arr = np.sort(rng.integers(0, span_us, num)).astype(np.int64)
    if burst:
        arr[num // 3: num // 2] = arr[num // 3]
    return Workload(np.arange(num, dtype=np.int64), [f"s{i % 4}" for i in range(num)],
                    np.array([t.size for t in toks], np.int64), rng.integers(1, max_out, num), arr,
                    lambda i: RequestView.from_tokens(i, toks[i], f"s{i % 4}"))


def _run(mode, w, cost, budget, lean=False, policy="prefix"):
    accel.set_mode(mode)
    pol = registry.build(policy, PolicyContext(float("inf"), 1))
    m = ServingModel(w, [pol], cost, token_budget=budget, lean=lean)
    reqs = m.run()
    rep = m.replicas[0]
    cols = {f: np.asarray(reqs.cols[f]).tolist() for f in reqs.cols}
    state = (pol.stats.as_dict(), pol.usage(), pol.footprint().entries, pol.peak_bytes, pol.tree.num_nodes,
             pol.tree.evictable_tokens, pol.tree.protected_tokens)
    return cols, rep.itl.array().tolist(), rep.busy_us, rep.steps, m.sim.num_events, m.peak_resident, state


@pytest.mark.parametrize("model, kv_read", [("deepseek-v2-lite", None), ("llama-3.1-8b", None),
                                            ("deepseek-v2-lite", 60.0), ("deepseek-v3", None)])
@pytest.mark.parametrize("span_us, budget, burst", [(3_000_000, 8192, False), (400_000_000, 8192, False),
                                                    (2_000, 64, True), (30_000_000, 512, True)])
def test_two_pass_gives_every_output_of_the_event_loop(modes, monkeypatch, model, kv_read, span_us, budget, burst):
    """Busy, idle and overloaded replicas (decoders finishing inside chunked prefills, decode phases cut by
    arrivals, arrivals at one instant), MLA and GQA models, MoE and dense weights, a decode read other than the
    KV written: every output equal, the two-pass replay used (and not in mode 0)."""
    w = _workload(150, seed=span_us % 101 + budget, span_us=span_us, burst=burst)
    cost = CostModel(model_from_name(model), gpu_from_name("h200"), kv_read_bytes=kv_read)
    used = []
    real = timeline.run_two_pass
    monkeypatch.setattr(serving_model, "run_two_pass", lambda sm: used.append(real(sm)) or used[-1])
    a = _run("0", w, cost, budget)
    b = _run("1", w, cost, budget)
    assert used == [False, True]
    for k, (x, y) in enumerate(zip(a, b, strict=True)):
        assert x == y, k
    cols = a[0]
    n = len(cols["num_reused"])
    reused = cols["num_reused"]
    assert 0 < sum(1 for r in reused if r) < n                                              # hits and misses
    assert any(r == p for r, p in zip(reused, cols["num_prompt_tokens"], strict=True))     # a full hit


def test_two_pass_lean_gives_the_event_loops_lean_columns(modes):
    w = _workload(120, seed=3, span_us=5_000_000)
    cost = CostModel(model_from_name("deepseek-v2-lite"), gpu_from_name("h200"))
    a, b = _run("0", w, cost, 8192, lean=True), _run("1", w, cost, 8192, lean=True)
    assert a[1:] == b[1:]
    for f in ("start_us", "first_token_us", "finish_us", "num_reused", "prefill_joules", "nocache_prefill_joules",
              "num_recomputed", "admitted", "uncached"):
        assert a[0][f] == b[0][f], f


def test_the_event_loop_runs_where_the_two_passes_do_not_apply(modes, monkeypatch):
    """Several replicas, the closed loop, a bounded cache, an observer, a policy whose lookup is watched: the
    event loop (run_two_pass answers False, nothing done)."""
    accel.set_mode("1")
    w = _workload(40, seed=1, span_us=1_000_000)
    cost = CostModel(model_from_name("deepseek-v2-lite"), gpu_from_name("h200"))

    def model(**k):
        ctx = PolicyContext(k.pop("cap", float("inf")), 1)
        pols = [registry.build("prefix", ctx) for _ in range(k.pop("n", 1))]
        return ServingModel(w, pols, cost, **k)

    m = model(n=2)
    assert not timeline.applies(m)
    assert not timeline.applies(model(closed_loop=True))
    assert not timeline.applies(model(cap=10**6))
    m = model()
    m.sim.observers.append(lambda ev, now: None)
    assert not timeline.applies(m)
    m = model()
    m.policies[0].lookup = m.policies[0].lookup      # (watched: no fused start_prefix)
    m = ServingModel(w, m.policies, cost)
    assert not timeline.applies(m)
    assert timeline.applies(model())
    hybrid = CostModel(model_from_name("olmo-hybrid-7b"), gpu_from_name("h200"))
    assert timeline.constants(hybrid) is None
    assert timeline.constants(cost) is not None


@pytest.mark.parametrize("policies", [("prefix",), ("block-hash",), ("prefix", "block-hash"), ("none",), ("oracle",)])
def test_replay_outputs_equal_with_and_without_the_two_passes(modes, policies):
    """A replay (block-hash answering from the prefix replay, both baselines) writes the same rows and summary
    (but wall times) with the compiled timeline as with the event loop."""
    def strip(d):
        return {k: strip(v) for k, v in d.items() if k != "wall_seconds"} if isinstance(d, dict) else d

    trace, config = _trace(120, seed=7), ReplayConfig(policies=policies)
    accel.set_mode("0")
    a = replay(trace, config)
    accel.set_mode("1")
    b = replay(trace, config)
    assert a.table.equals(b.table)
    assert strip(a.summary) == strip(b.summary)
    assert a.resolved["policies"] == b.resolved["policies"]


def test_a_refusal_in_the_answer_pass_raises(modes):
    """A policy claiming ``order_only`` that refuses a request: an error, not a silent timeline."""
    accel.set_mode("1")
    w = _workload(10, seed=2, span_us=1_000)
    cost = CostModel(model_from_name("deepseek-v2-lite"), gpu_from_name("h200"))
    pol = registry.build("prefix", PolicyContext(float("inf"), 1))
    m = ServingModel(w, [pol], cost)
    m._starts = [lambda v, now: -1]
    with pytest.raises(RuntimeError, match="refused"):
        m.run()
    w2 = dataclasses.replace(w, num_prompt=w.num_prompt + 1)
    with pytest.raises(RuntimeError, match="workload's prompt"):
        ServingModel(w2, [registry.build("prefix", PolicyContext(float("inf"), 1))], cost).run()
