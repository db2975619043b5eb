"""``rdr``: the greedy allocation against brute force on small cases, protected spans, the budget, the
composition over reuse policies (registry names, options, capacity in tokens) and the cost model hook."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from pic.engine import policies
from pic.engine.angle_codes import EVICTED
from pic.engine.cost import CostModel
from pic.engine.plan import Action
from pic.engine.policies import PolicyContext, RequestView
from pic.engine.rdr_alloc import allocate, gqa_options, make_options, mla_options
from pic.engine.specs import gpu_from_name, model_from_name
from pic.traces.schema import KIND_CODE
from tests.policies.conftest import serve

LLAMA = model_from_name("llama-3.1-8b")


def _brute(opts, w, size, prot, budget):
    """Minimum Σ w·ε² over every assignment with Σ size·frac <= budget (protected at the best tier)."""
    best = math.inf
    choices = [[opts.best] if p else range(len(opts.bits)) for p in prot]
    for combo in itertools.product(*choices):
        o = np.array(combo)
        if np.sum(size * opts.frac[o]) <= budget * (1 + 1e-12):
            best = min(best, float(np.sum(w * opts.eps2[o])))
    return best


def _random_options(rng):
    k = int(rng.integers(2, 5))
    frac = np.concatenate([[0.0], np.sort(rng.uniform(0.05, 1.0, k))])
    eps2 = np.concatenate([[1.0], np.sort(rng.uniform(0.0, 0.9, k))[::-1]])
    return make_options((EVICTED, *range(1, k + 1)), frac, eps2)


@pytest.mark.parametrize("seed", range(40))
def test_greedy_matches_brute_force(seed):
    """Greedy is optimal for the bytes it uses, and within one step's gain of the optimum at the budget."""
    rng = np.random.default_rng(seed)
    opts = gqa_options(128, (8, 4, 3, 2)) if seed % 3 == 0 else _random_options(rng)
    U = int(rng.integers(2, 6))
    w = rng.lognormal(0, 1, U) * (rng.random(U) < 0.9)
    w[int(rng.integers(U))] = w[0]                          # ties exercise the tie-break
    size = rng.integers(1, 65, U).astype(float)
    prot = rng.random(U) < 0.2
    budget = float(rng.uniform(0, 1.05) * np.sum(size * opts.frac[opts.best]))
    a = allocate(opts, w, size, prot, budget)
    assert np.all(a.option[prot] == opts.best)
    if a.forced <= budget:
        assert a.used <= budget * (1 + 1e-9)
    assert a.distortion == pytest.approx(_brute(opts, w, size, prot, a.used), rel=1e-9, abs=1e-12)
    opt = _brute(opts, w, size, prot, budget)
    if math.isfinite(opt):
        gap = float(np.max(w[:, None] * opts.step_gain[None, :], initial=0.0))
        assert opt - 1e-12 <= a.distortion <= opt + gap + 1e-12


def test_tier_two_is_off_the_hull_with_bf16_values():
    """With V kept in bf16 the first step costs the whole value: tier 2 never pays off against tier 3
    (GQA, 128-dim heads); every allocation uses only evicted/3/4/8."""
    opts = gqa_options(128, (8, 4, 3, 2))
    assert [opts.bits[i] for i in opts.hull] == [0, 3, 4, 8]
    assert np.all(np.diff(opts.efficiency()) < 0)
    mla = mla_options(512, 64, (8, 4, 3, 2))
    assert mla.frac[mla.best] > 0.9   # MLA: only k_r is coded, little to save


def test_more_budget_never_more_distortion():
    """Distortion is non-increasing in the budget; the whole budget is used up to one step."""
    rng = np.random.default_rng(1)
    opts = gqa_options(128, (8, 4, 3, 2))
    w, size = rng.lognormal(0, 1, 500), np.full(500, 64.0)
    prot = np.zeros(500, bool)
    prev = math.inf
    for frac in np.linspace(0.05, 0.8, 16):
        budget = frac * size.sum()
        a = allocate(opts, w, size, prot, budget)
        assert a.distortion <= prev + 1e-12
        assert min(budget, size.sum() * opts.frac[opts.best]) - a.used <= 64 * np.max(opts.step_frac) + 1e-9
        prev = a.distortion


def test_protected_over_budget_is_kept_and_counted():
    """Protected units keep the best tier even when they alone exceed the budget; the rest are evicted."""
    opts = gqa_options(128, (8, 4, 3, 2))
    a = allocate(opts, np.ones(4), np.full(4, 64.0), np.array([True, True, False, False]), 10.0)
    assert list(a.option[:2]) == [opts.best] * 2 and list(opts.frac[a.option[2:]]) == [0.0, 0.0]
    assert a.forced > 10.0


def _ctx(capacity_tokens=math.inf, model=LLAMA):
    cap = math.inf if math.isinf(capacity_tokens) else capacity_tokens * model.kv_bytes_per_token
    return PolicyContext(cap, model.kv_bytes_per_token, model)


def _request(rid, pieces):
    """A request from (kind, tokens) pieces."""
    toks = np.concatenate([t for _, t in pieces]).astype(np.int32)
    bounds = np.cumsum([0] + [len(t) for _, t in pieces]).astype(np.int64)
    return RequestView(rid, "s", toks, bounds, np.arange(len(pieces), dtype=np.uint64),
                       np.array([KIND_CODE[k] for k, _ in pieces], np.uint8))


@pytest.mark.parametrize("budget", [1.0, 0.75, 0.6])
def test_policy_charge_and_protected_spans(budget):
    """The reuse policy is charged budget × dense bytes/token (at most the all-tier-8 size); documents,
    tool outputs and sinks are all at tier 8; resident bytes meet the budget."""
    pol = policies.build("prefix+rdr", _ctx(), {"budget": budget})
    opts = pol.opts
    assert pol.kv_bytes_per_token == math.ceil(LLAMA.kv_bytes_per_token * min(budget, opts.frac[opts.best]))
    assert pol.inner.ctx.bytes_per_token == pol.kv_bytes_per_token
    rng = np.random.default_rng(0)
    req = _request(0, [("system", rng.integers(0, 9, 300)), ("document", rng.integers(0, 9, 500)),
                       ("user", rng.integers(0, 9, 200)), ("tool_output", rng.integers(0, 9, 100))])
    serve(pol, req, 1)
    ex = pol.stats.extra
    HL = LLAMA.num_attn_layers * LLAMA.num_kv_heads
    assert ex["rdr_tokens"] == 1100 and ex["rdr_protected_tokens"] == 600 + 4
    assert sum(ex[f"rdr_unit_tokens_b{b}"] for b in opts.bits) == 1100 * HL
    assert ex["rdr_unit_tokens_b8"] >= 604 * HL
    assert ex["rdr_bytes"] <= budget * 1100 * LLAMA.kv_bytes_per_token * (1 + 1e-9) + ex["rdr_over_budget_bytes"]
    if budget == 1.0:
        assert ex["rdr_unit_tokens_b8"] == 1100 * HL and ex["rdr_over_budget_bytes"] == 0


def test_reused_tokens_are_not_reencoded():
    """Only a request's recomputed tokens are encoded (plan correction) and allocated."""
    pol = policies.build("prefix+rdr", _ctx(), {"budget": 0.6})
    a = RequestView.from_tokens(0, np.arange(1000))
    serve(pol, a, 1)
    b = RequestView.from_tokens(1, np.arange(1300))
    plan = pol.lookup(b, 2)
    assert plan.num_reused == 1000 and plan.correction.reencode_tokens == 300
    assert pol.admit(b, plan, 2)
    pol.commit(b, 3)
    assert pol.stats.extra["rdr_tokens"] == 1300


def test_more_tokens_fit_under_the_same_capacity():
    """At a capacity of 3,100 dense tokens (3 prompts), prefix+rdr at 60 % holds 5: a later request hits."""
    prompts = [RequestView.from_tokens(i, np.arange(1000) + 10_000 * i) for i in range(5)]
    hits = {}
    for name, opts in (("prefix", {}), ("prefix+rdr", {"budget": 0.6})):
        pol = policies.build(name, _ctx(3100), opts)
        for i, r in enumerate(prompts):
            serve(pol, r, i)
        again = pol.lookup(RequestView.from_tokens(9, np.arange(1000)), 10)
        hits[name] = again.num_reused
    assert hits == {"prefix": 0, "prefix+rdr": 1000}


def test_registry_composition_names_and_options():
    """NAME+rdr builds rdr over NAME; options split between the two; bad compositions are refused."""
    cfg = policies.make_config("irminsul+rdr", {"budget": "0.6", "avg_chunk": "512", "protect_sinks": "8"})
    assert cfg.over == "irminsul" and cfg.budget == 0.6 and cfg.protect_sinks == 8
    assert cfg.over_config.avg_chunk == 512
    pol = policies.build("irminsul+rdr", _ctx(), {"budget": "0.6"})
    assert pol.inner.name == "irminsul" and pol.describe()["over"] == "irminsul"
    assert "budget" in policies.option_help("irminsul+rdr") and "avg_chunk" in policies.option_help("irminsul+rdr")
    for bad, msg in (("rdr+prefix", "wrapper"), ("prefix+irminsul", "compose"), ("a+b+c", "one wrapper"),
                     ("nope+rdr", "unknown policy")):
        with pytest.raises(ValueError, match=msg):
            policies.make_config(bad)
    with pytest.raises(ValueError, match="unknown option"):
        policies.make_config("prefix+rdr", {"avg_chunk": 3})
    with pytest.raises(ValueError, match="budget"):
        policies.make_config("prefix+rdr", {"budget": "1.5"})
    with pytest.raises(ValueError, match="tiers"):
        policies.make_config("rdr", {"tiers": "8,5"})
    with pytest.raises(ValueError, match="protect"):
        policies.make_config("rdr", {"protect": "documents"})


def test_cost_model_reads_compressed_bytes_in_decode():
    """Decode HBM bytes per step and the per-context-token decode time scale with the rdr charge."""
    cost = CostModel(LLAMA, gpu_from_name("h200"))
    small = cost.with_kv_read_bytes(0.6 * LLAMA.kv_bytes_per_token)
    dense_b, rdr_b = cost.decode_hbm_bytes(8, 8 * 32768), small.decode_hbm_bytes(8, 8 * 32768)
    kv = 8 * 32768 * LLAMA.kv_bytes_per_token
    assert dense_b - rdr_b == pytest.approx(0.4 * kv)
    assert small.decode_step_coeffs(8)[1] == pytest.approx(0.6 * cost.decode_step_coeffs(8)[1])
    assert cost.decode_hbm_bytes(0, 100) == 0.0


def test_plans_are_the_reuse_policy_plans():
    """rdr never changes what is reused: spans equal the inner policy's, only the encode correction is added."""
    stream = [RequestView.from_tokens(i, np.r_[np.arange(200), np.arange(50) + 1000 * i]) for i in range(6)]
    plain, wrapped = policies.build("fixed-chunk", _ctx(), {"chunk_size": 64}), \
        policies.build("fixed-chunk+rdr", _ctx(), {"chunk_size": 64})
    for i, r in enumerate(stream):
        a, b = plain.lookup(r, i), wrapped.lookup(r, i)
        assert a.spans == b.spans and b.correction.reencode_tokens == a.tokens_by(Action.RECOMPUTE)
        assert plain.admit(r, a, i) and wrapped.admit(r, b, i)
        plain.commit(r, i)
        wrapped.commit(r, i)
        plain.release(r, i)
        wrapped.release(r, i)


@pytest.mark.parametrize("seed", range(6))
def test_greedy_order_is_lexicographic_with_ties(seed):
    """The greedy takes hull steps by (-key, unit, step): equal to an explicit lexsort of the pairs, also
    when many units share one density (ties broken by the lower unit) and some are protected or empty."""
    rng = np.random.default_rng(seed)
    opts = gqa_options(128, (8, 4, 3, 2)) if seed % 2 else mla_options(512, 64, (8, 4, 3))
    n = int(rng.integers(50, 400))
    w = rng.choice(rng.random(5) + 0.1, n)                # few distinct weights: many equal keys
    size = rng.choice([0.0, 16.0, 64.0, 64.0], n)
    prot = rng.random(n) < 0.1
    budget = float(rng.uniform(0.1, 1.0) * size.sum())
    a = allocate(opts, w, size, prot, budget)
    # reference: the same greedy with an explicit three-key lexsort
    K = len(opts.step_frac)
    level = np.where(prot, len(opts.hull) - 1, 0)
    room = budget - float(np.sum(size[prot]) * opts.frac[opts.best])
    free = np.flatnonzero(~prot & (size > 0))
    if room > 0 and free.size:
        key = ((w[free] / size[free])[:, None] * opts.efficiency()[None, :]).ravel()
        cost = (size[free][:, None] * opts.step_frac[None, :]).ravel()
        unit, step = np.repeat(free, K), np.tile(np.arange(K), free.size)
        order = np.lexsort((step, unit, -key))
        taken = order[:int(np.searchsorted(np.cumsum(cost[order]), room * (1 + 1e-12), side="right"))]
        level = level + np.bincount(unit[taken], minlength=n)
    assert np.array_equal(a.option, opts.hull[level])
    assert a.used == float(np.sum(size * opts.frac[opts.hull[level]]))
