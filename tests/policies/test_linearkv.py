"""linearkv: whole-chunk reuse with recurrent-state initialisation, recompute selectors, state bytes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic.engine import policies, selectors
from pic.engine.cost import CostModel
from pic.engine.plan import Action
from pic.engine.policies import PolicyContext, RequestView
from pic.engine.specs import GPUS, MODELS
from tests.policies import test_contract
from tests.policies.conftest import serve

QNEXT, OLMO, V2L = MODELS["qwen3-next-80b-a3b"], MODELS["olmo-hybrid-7b"], MODELS["deepseek-v2-lite"]
RNG = np.random.default_rng(13)
DOC_A, DOC_B, DOC_C = (RNG.integers(0, 40_000, n, dtype=np.int32) for n in (3000, 2500, 2000))


def _req(rid: int, *parts) -> RequestView:
    return RequestView.from_tokens(rid, np.concatenate(parts))


def _policy(model=QNEXT, capacity=math.inf, **opts):
    ctx = PolicyContext(capacity, model.kv_bytes_per_token, model=model)
    return policies.build("linearkv", ctx, {"avg_chunk": 256, "min_chunk": 32, "max_chunk": 1024, **opts})


def _shifted(pol) -> tuple:
    """Serve A+B+C+q0, then look up hdr+C+A+q2 (documents shifted and reordered)."""
    serve(pol, _req(0, DOC_A, DOC_B, DOC_C, np.arange(40, dtype=np.int32)), 0)
    req = _req(1, np.arange(77, dtype=np.int32) + 50_000, DOC_C, DOC_A, np.arange(40, dtype=np.int32) + 60_000)
    return req, pol.lookup(req, 10)


@pytest.mark.parametrize("compose", ["single-block", "exact"])
def test_shifted_documents_reuse_whole_chunks_with_a_state(compose):
    """Reordered documents come back as rotated whole chunks; S_init is one state (single-block) or a fold
    of every matched chunk (exact); r of the reused tokens are recomputed."""
    pol = _policy(compose=compose)
    req, plan = _shifted(pol)
    # whole chunks only: the chunk straddling each document edge differs, the rest comes back
    assert plan.num_rotated > 0.7 * (len(DOC_A) + len(DOC_C))
    reused_chunks = [s for s in plan.spans if s.action != Action.RECOMPUTE]
    assert all(s.action == Action.REUSE_ROTATED for s in reused_chunks)
    c = plan.correction
    k = pol.stats.extra["chunk_hits"]
    assert k >= 10
    assert c.recompute_tokens == round(0.2 * plan.num_reused)
    assert (c.state_loads, c.state_compositions) == ((1, 0) if compose == "single-block" else (k, k))
    assert c.probe_tokens == 0 and c.state_store_tokens == req.num_tokens - plan.num_reused


def test_cacheblend_selection_pass_is_in_the_plan():
    """The CacheBlend selector needs a pass over the reused tokens: probe_tokens = reused."""
    _, plan = _shifted(_policy(selector="cacheblend", recompute_ratio=0.1))
    assert plan.correction.probe_tokens == plan.num_reused
    assert plan.correction.recompute_tokens == round(0.1 * plan.num_reused)


@pytest.mark.parametrize("compose,ops", [("single-block", False), ("exact", True)])
def test_states_and_operators_count_against_capacity(compose, ops):
    """Each stored chunk holds its KV, its end state and (exact) its transition operator; the prefix stage
    holds the prompt's KV once more (the engine's own prefix cache, as deployed)."""
    per = QNEXT.state_bytes + (QNEXT.operator_bytes if ops else 0)
    for stage in (False, True):
        pol = _policy(compose=compose, prefix_stage=stage)
        serve(pol, _req(0, DOC_A), 0)
        n = pol.stats.extra["stored_chunks"]
        assert pol.usage().total == (1 + stage) * len(DOC_A) * QNEXT.kv_bytes_per_token + n * per
    assert pol.usage().total > 5 * len(DOC_A) * QNEXT.kv_bytes_per_token   # states dwarf 256-token chunks


def test_capacity_for_kv_only_does_not_fit_states():
    """A cache sized for the KV alone cannot hold the states: ``always`` runs the request uncached; the
    default admits it, its prompt's KV goes to the prefix stage and no chunk is stored."""
    kvb = QNEXT.kv_bytes_per_token
    req = _req(0, DOC_A)
    pol = _policy(capacity=len(DOC_A) * kvb * 1.5, admission="always")
    assert not pol.admit(req, pol.lookup(req, 0), 0)
    assert pol.usage().total == 0
    pol = _policy(capacity=len(DOC_A) * kvb * 1.5)
    serve(pol, req, 0)
    assert pol.usage().total == len(DOC_A) * kvb
    assert pol.stats.extra["stored_chunks"] == 0 and pol.stats.extra["unstored_chunks"] >= 5


def test_attention_only_model_has_no_state_work():
    """On an attention-only model there is nothing to load, compose or store."""
    _, plan = _shifted(_policy(model=V2L, compose="exact"))
    c = plan.correction
    assert plan.num_rotated > 0 and c.recompute_tokens > 0
    assert c.state_loads == c.state_compositions == c.state_store_tokens == 0


def test_cost_runs_recurrent_layers_on_recomputed_tokens_only():
    """Priced on OLMo-Hybrid, the linearkv plan runs both layer kinds on the recomputed tokens and costs far
    less than irminsul's plan of the same request, which must rerun the recurrent layers."""
    cm = CostModel(OLMO, GPUS["h200"])
    req, plan = _shifted(_policy(model=OLMO))
    c = cm.prefill(plan)
    assert c.recurrent_tokens == c.attn_tokens == plan.num_recomputed
    irm = policies.build("irminsul", PolicyContext(math.inf, OLMO.kv_bytes_per_token, model=OLMO))
    serve(irm, _req(0, DOC_A, DOC_B, DOC_C, np.arange(40, dtype=np.int32)), 0)
    ci = cm.prefill(irm.lookup(req, 10))
    assert ci.recurrent_tokens == req.num_tokens
    assert c.time_s < 0.6 * ci.time_s


def test_epic_takes_leading_tokens_of_each_chunk():
    """EPIC's U: the first tokens of every reused chunk, in proportion to its length, exactly the budget."""
    ch = np.array([[0, 100], [300, 350], [400, 1000]], dtype=np.int64)
    sel = selectors.get("epic").select(ch, 0.1)
    assert sel.num_tokens == 75 and sel.positions.size == 75
    assert set(sel.positions[:10]) == set(range(10)) and 300 in sel.positions and 400 in sel.positions
    assert np.all(np.diff(sel.positions) > 0)


def test_cacheblend_takes_highest_scores():
    """Given deviation scores, CacheBlend's U is the top-scoring reused positions."""
    ch = np.array([[10, 20], [40, 45]], dtype=np.int64)
    scores = np.zeros(15)
    scores[[3, 12]] = [5.0, 9.0]
    sel = selectors.get("cacheblend").select(ch, 2 / 15, scores)
    assert sel.positions.tolist() == [13, 42] and sel.probe_tokens == 15
    with pytest.raises(ValueError):
        selectors.get("cacheblend").select(ch, 0.5, np.zeros(3))


def test_bad_options_fail_before_work():
    """Unknown compose/selector and an out-of-range ratio are refused by the config."""
    for bad in ({"compose": "approx"}, {"selector": "random"}, {"recompute_ratio": 1.5}):
        with pytest.raises(ValueError):
            policies.make_config("linearkv", bad)


@pytest.mark.parametrize("opts", [{"compose": "exact"}, {"selector": "cacheblend", "recompute_ratio": 0.4}],
                         ids=["exact", "cacheblend"])
@pytest.mark.parametrize("capacity", [20_000, math.inf], ids=["bounded", "inf"])
def test_contract_on_a_hybrid_model(monkeypatch, opts, capacity):
    """The policy contract (usage invariant, locked data kept, no false hit) with state bytes in play."""
    def ctx(cap, verify=False, seed=0):
        c = math.inf if math.isinf(cap) else cap * 3
        return PolicyContext(c, 3, model=OLMO, seed=seed, verify=verify)

    build = policies.build
    monkeypatch.setattr(test_contract, "make_ctx", ctx)
    monkeypatch.setattr(test_contract.policies, "build",
                        lambda name, c, o=None: build(name, c, {**opts, "avg_chunk": 128, "min_chunk": 32}))
    plans, pol = test_contract.drive("linearkv", capacity, seed=4)
    assert any(p.correction.state_loads for p in plans)
    assert pol.stats.extra["stored_chunks"] > 0


def _conversation(num_turns: int, seed: int) -> list[RequestView]:
    """Turn k's prompt is turn k-1's plus a new message (an agent's growing context)."""
    rng = np.random.default_rng(seed)
    toks = rng.integers(0, 40_000, 700, dtype=np.int32)
    out = []
    for k in range(num_turns):
        out.append(RequestView.from_tokens(k, toks))
        toks = np.concatenate([toks, rng.integers(0, 40_000, int(rng.integers(20, 400)), dtype=np.int32)])
    return out


def test_prefix_stage_serves_every_exact_prefix():
    """Growing prompts: with its prefix stage linearkv reuses at least what an exact-prefix cache reuses on
    every turn, in place and without recompute on it; the chunk store alone loses each previous prompt's
    last chunk (its cut moves once text is appended) and recomputes a share of what it reuses."""
    ctx = PolicyContext(math.inf, QNEXT.kv_bytes_per_token, model=QNEXT)
    pfx, staged, alone = policies.build("prefix", ctx), _policy(), _policy(prefix_stage=False)
    worse = 0
    for t, req in enumerate(_conversation(12, seed=5)):
        want = pfx.lookup(req, t).num_reused
        p = staged.lookup(req, t)
        assert p.num_reused >= want
        assert p.leading_reuse >= want and p.correction.recompute_tokens == 0
        q = alone.lookup(req, t)
        worse += q.num_reused < want
        for pol, plan in ((pfx, None), (staged, p), (alone, q)):
            assert pol.admit(req, plan or pol.lookup(req, t), t)
            pol.commit(req, t)
            pol.release(req, t)
    assert worse >= 8
    assert staged.stats.extra["prefix_tokens"] > 0 and alone.stats.extra["prefix_tokens"] == 0


def test_prefix_stage_then_moved_chunks():
    """An exact prefix, then a document seen elsewhere: the prefix is reused in place, the document's chunks
    after it rotated, and r of the chunk tokens only (not of the prefix) are recomputed."""
    pol = _policy()
    head = np.arange(500, dtype=np.int32) + 70_000
    serve(pol, _req(0, head, DOC_B), 0)
    serve(pol, _req(1, DOC_A, DOC_C), 1)
    req = _req(2, head, DOC_B[:100], DOC_C, np.arange(30, dtype=np.int32))
    plan = pol.lookup(req, 2)
    assert plan.spans[0].action == Action.REUSE and plan.leading_reuse >= 500 + 100 - 64
    moved = plan.num_reused - plan.leading_reuse
    assert plan.num_rotated == moved > 0.7 * len(DOC_C)
    assert plan.correction.recompute_tokens == round(0.2 * moved)
    assert plan.correction.state_loads == 1


def test_prefix_stage_and_chunks_share_one_capacity():
    """Under a capacity both stores evict, one eviction order over prefix-tree leaves and chunks, and the
    total never exceeds the capacity; after every release nothing stays protected. (``always``: the
    default stores no chunk of these one-off prompts beyond free room, so its tree would not evict.)"""
    kvb = QNEXT.kv_bytes_per_token
    cap = 12 * QNEXT.state_bytes + 8000 * kvb
    pol = _policy(capacity=cap, admission="always")
    rng = np.random.default_rng(3)
    for i in range(12):
        req = _req(i, rng.integers(0, 40_000, int(rng.integers(800, 1500)), dtype=np.int32))
        plan = pol.lookup(req, i)
        if pol.admit(req, plan, i):
            assert pol.usage().total <= cap
            pol.commit(req, i)
            assert pol.usage().total <= cap
            pol.release(req, i)
    u = pol.usage()
    assert u.protected == 0 and u.total <= cap
    assert pol._tree.num_evicted > 0 and pol.stats.evictions > pol._tree.num_evicted


@pytest.mark.parametrize("admission", ["prefix-first", "always"])
def test_admission_changes_nothing_without_a_capacity(admission):
    """Unbounded, every admission rule stores every new chunk: the same plans as the default."""
    a, b = _policy(), _policy(admission=admission)
    for t, req in enumerate(_conversation(6, seed=2) + [_shifted(_policy())[0]]):
        pa, pb = a.lookup(req, t), b.lookup(req, t)
        assert pa == pb
        serve(a, req, t)
        serve(b, req, t)
    assert a.stats.extra == b.stats.extra and a.stats.extra["unstored_chunks"] == 0


def test_chunks_that_do_not_fit_never_cost_the_request_its_prefix():
    """Room for the prompts' KV but not for their chunks' states: ``always`` refuses every request (none is
    cached); ``seen-twice`` admits them, stores the chunks that fit in free room only, and the second
    request reuses the first one's prompt from the prefix stage."""
    kvb = QNEXT.kv_bytes_per_token
    head = np.arange(2000, dtype=np.int32) + 70_000
    cap = 4000 * kvb + 2 * QNEXT.state_bytes
    first, second = _req(0, head), _req(1, head, DOC_B[:1500])
    pol = _policy(capacity=cap, admission="always", avg_chunk=128, min_chunk=32)
    assert not pol.admit(first, pol.lookup(first, 0), 0)
    pol = _policy(capacity=cap, avg_chunk=128, min_chunk=32)
    serve(pol, first, 0)
    plan = pol.lookup(second, 1)
    assert plan.leading_reuse == 2000
    assert pol.admit(second, plan, 1)
    assert pol.usage().total <= cap
    # the states that fit beside the first prompt's KV (cut points decide how many chunks there are)
    fit = (cap - 2000 * kvb) // QNEXT.state_bytes
    ex = pol.stats.extra
    assert 0 < ex["stored_chunks"] <= fit < ex["stored_chunks"] + ex["unstored_chunks"]
    assert plan.correction.state_store_tokens < 2000 + 1500


def test_moved_content_is_stored_in_place_repeats_are_not():
    """Under pressure a chunk computed again in the same context (its prefix evicted) is not stored again,
    while one computed again in another context (moved content, which only the chunk store serves) is,
    and a third occurrence reuses it rotated."""
    kvb = QNEXT.kv_bytes_per_token
    cap = 9000 * kvb + 3 * QNEXT.state_bytes
    pol = _policy(capacity=cap, avg_chunk=512, min_chunk=128)
    doc = DOC_C[:1500]
    heads = [np.arange(n, dtype=np.int32) + 80_000 + 1000 * i for i, n in enumerate((300, 500, 700))]
    filler = [RNG.integers(0, 40_000, 8000, dtype=np.int32) for _ in range(3)]
    serve(pol, _req(0, heads[0], doc), 0)
    serve(pol, _req(1, filler[0]), 1)                  # flushes what has no lock
    stored = pol.stats.extra["stored_chunks"]
    serve(pol, _req(2, heads[0], doc), 2)              # the same context again
    again = pol.stats.extra["stored_chunks"] - stored
    serve(pol, _req(3, filler[1]), 3)
    stored = pol.stats.extra["stored_chunks"]
    serve(pol, _req(4, heads[1], doc), 4)              # moved: stored warm
    moved = pol.stats.extra["stored_chunks"] - stored
    assert moved > again
    plan = pol.lookup(_req(5, heads[2], doc), 5)
    assert plan.num_rotated > 0.5 * len(doc)


def test_prefix_first_evicts_every_chunk_before_a_leaf():
    """``prefix-first``: eviction takes unlocked chunks (oldest first) before any prefix-stage leaf."""
    pol = _policy(capacity=10**15, admission="prefix-first")
    serve(pol, _req(0, DOC_A), 0)
    serve(pol, _req(1, DOC_B), 1)
    chunks, leaves = pol._store.evictable, pol._tree.evictable_tokens
    assert chunks > 0 and leaves > 0
    freed = pol.evict(chunks, 2)
    assert freed >= chunks and pol._store.evictable == 0 and pol._tree.evictable_tokens == leaves


def test_losing_to_prefix_under_a_capacity_names_prefix_first():
    """A bounded linearkv run that spends more prefill energy than the best exact-prefix baseline warns and
    names admission=prefix-first; none when it is already set, without a capacity or when it wins."""
    from pic.engine.sanity import below_prefix_warning

    lose, win = {"energy_saved_vs_prefix": -0.12, "baseline": "prefix"}, {"energy_saved_vs_prefix": 0.03}
    cfg = {"admission": "seen-twice", "prefix_stage": True}
    w = below_prefix_warning("linearkv", lose, cfg, 2 * 2**30, True)
    assert w["code"] == "below-prefix" and "12.0%" in w["message"] and "admission=prefix-first" in w["message"]
    assert "recurrent states" in w["message"]
    assert "recurrent" not in below_prefix_warning("linearkv", lose, cfg, 2 * 2**30, False)["message"]
    assert below_prefix_warning("linearkv", lose, {**cfg, "admission": "prefix-first"}, 2**31, True) is None
    assert below_prefix_warning("linearkv", lose, cfg, math.inf, True) is None
    assert below_prefix_warning("linearkv", win, cfg, 2**31, True) is None
    assert below_prefix_warning("irminsul", lose, cfg, 2**31, True) is None
