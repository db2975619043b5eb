"""The serving model's batched pricing and folded SCHEDULEs (engine.serving.shares, ServingModel._quiet): the same
outputs as one step at a time and one event per loop turn, with a real CostModel."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine.cost import CostModel
from pic.engine.cost_fns import one_chunk_terms_fn, one_chunk_terms_np, prefill_shares_fn, prefill_step_fn
from pic.engine.policies.base import PolicyContext, RequestView
from pic.engine.serving import ServingModel, Workload
from pic.engine.serving import model as serving_model
from pic.engine.serving import shares as shares_mod
from pic.engine.specs import gpu_from_name, model_from_name
from tests.engine.test_serving import BrutePrefix


def _cost(name="deepseek-v2-lite"):
    return CostModel(model_from_name(name), gpu_from_name("h200"))


def _workload(num, seed, span_us, max_out=200, long=20000):
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, 5000, 4000).astype(np.int32)
    toks = [np.concatenate([shared[:rng.integers(0, 4000)], rng.integers(6000, 9000, rng.integers(1, long))])
            .astype(np.int32) for _ in range(num)]
    return Workload(np.arange(num, dtype=np.int64), [f"s{i % 4}" for i in range(num)],
                    np.array([t.size for t in toks], np.int64), rng.integers(1, max_out, num),
                    np.sort(rng.integers(0, span_us, num)).astype(np.int64),
                    lambda i: RequestView.from_tokens(i, toks[i], f"s{i % 4}"))


def _run(w, budget, closed_loop=False, observe=False):
    m = ServingModel(w, [BrutePrefix(PolicyContext(float("inf"), 1))], _cost(), token_budget=budget,
                     closed_loop=closed_loop)
    seen = []
    if observe:      # the loop's step() path: every event dispatched by the loop (nothing folded)
        m.sim.observers.append(lambda ev, now: seen.append(now))
    reqs = m.run()
    cols = {f: np.asarray(reqs.cols[f]).tolist() for f in reqs.cols}
    return cols, m.replicas[0].itl.array().tolist(), m.replicas[0].busy_us, m.sim.num_events, len(seen), m


@pytest.mark.parametrize("name", ["deepseek-v2-lite", "llama-3.1-8b", "olmo-hybrid-7b"])
def test_batched_shares_equal_the_step_by_step_ones(name):
    """prefill_shares_fn gives prefill_step's share for every step, exactly (arrays of many step shapes)."""
    rng = np.random.default_rng(5)
    for kv in (None, 77.5):
        cost = CostModel(model_from_name(name), gpu_from_name("h200"), kv_read_bytes=kv)
        step, shares = prefill_step_fn(cost), prefill_shares_fn(cost)
        n = np.concatenate([rng.integers(1, 9000, 3000), np.arange(1, 40)])
        c = rng.integers(0, 40000, n.size)
        nd = np.concatenate([rng.integers(0, 300, 3000), np.zeros(39, np.int64)])
        ctx = np.where(nd > 0, rng.integers(0, 10**7, n.size), 0)
        want = [step(*a)[1] for a in zip(n.tolist(), c.tolist(), nd.tolist(), ctx.tolist(), strict=True)]
        assert shares(n, c, nd, ctx).tolist() == want


@pytest.mark.parametrize("name", ["deepseek-v2-lite", "llama-3.1-8b", "deepseek-v3"])
def test_batched_one_chunk_terms_equal_the_closure(name):
    """one_chunk_terms_np gives one_chunk_terms' values (but the last) exactly, full hits included; None for a
    hybrid model (its plans priced by CostModel.prefill)."""
    rng = np.random.default_rng(9)
    cost = CostModel(model_from_name(name), gpu_from_name("h200"), kv_read_bytes=60.0)
    one, many = one_chunk_terms_fn(cost), one_chunk_terms_np(cost)
    tok = rng.integers(1, 40000, 3000)
    new = np.minimum(rng.integers(0, 9000, tok.size), tok)
    new[:40], new[40:80] = 0, rng.integers(1, 4, 40)
    got = many(tok, new, tok - new)
    want = [one(*a) for a in zip(tok.tolist(), new.tolist(), (tok - new).tolist(), strict=True)]
    for k in range(5):
        assert got[k].tolist() == [w[k] for w in want]
    assert one_chunk_terms_np(_cost("olmo-hybrid-7b")) is None


@pytest.mark.parametrize("budget, span_us", [(8192, 3_000_000), (512, 20_000_000), (64, 2_000_000)])
def test_share_book_gives_the_columns_prefill_share_gives(monkeypatch, budget, span_us):
    """Every output with the counterfactual full prefills priced in batches (one step, several, a decoder
    finishing between them: noted step by step) and the exact-prefix plans' columns (TermsBook) equals pricing
    each as the request starts (Replica.prefill_share, one_chunk_terms); several flushes."""
    w = _workload(120, seed=budget, span_us=span_us)
    monkeypatch.setattr(shares_mod, "_FLUSH", 16)
    calls = []
    steps = serving_model.Replica.prefill_steps
    monkeypatch.setattr(serving_model.Replica, "prefill_steps", lambda self, a, b: calls.append(a) or steps(self, a, b))
    a = _run(w, budget)
    assert a[-1]._book is not None and a[-1]._tbook is not None
    fallback = len(calls)
    monkeypatch.setattr(serving_model, "prefill_shares_fn", lambda cost: None)
    b = _run(w, budget)
    assert b[-1]._book is None and b[-1]._tbook is None
    assert a[:4] == b[:4]
    assert min(a[0]["nocache_prefill_joules"]) > 0 and a[0]["nocache_prefill_joules"] == a[0]["prefix_prefill_joules"]
    if budget == 64:
        assert 0 < fallback < len(calls)       # (some priced at once: decoders finishing inside)


def test_terms_book_marks_and_notes_give_the_columns_pricing_at_once(monkeypatch):
    """The exact-prefix plans' columns where a request's view has as many tokens as its workload prompt (marked,
    priced from the columns at the end) and where not (noted), several flushes: every column as priced at once."""
    import dataclasses

    w = _workload(150, seed=4, span_us=3_000_000)
    skew = w.num_prompt.copy()
    skew[::3] += 7                       # (every third: view tokens != workload prompt tokens)
    w = dataclasses.replace(w, num_prompt=skew)
    monkeypatch.setattr(shares_mod, "_FLUSH", 16)
    got = []
    add = shares_mod.TermsBook.add
    monkeypatch.setattr(shares_mod.TermsBook, "add", lambda self, *a: got.append(a) or add(self, *a))
    a = _run(w, 8192)
    assert got and a[-1]._tbook is not None and not any(a[-1]._tbook.marks)
    monkeypatch.setattr(serving_model, "prefill_shares_fn", lambda cost: None)
    b = _run(w, 8192)
    assert b[-1]._tbook is None
    assert a[:4] == b[:4]
    assert sum(1 for x in a[0]["num_reused"] if x) > len(got) > 0      # (both paths taken)


@pytest.mark.parametrize("closed_loop", [False, True])
@pytest.mark.parametrize("span_us, budget", [(2_000_000, 8192), (200_000_000, 8192), (1_000, 256)])
def test_folded_schedules_count_as_the_loop_would(closed_loop, span_us, budget):
    """A SCHEDULE run by the handler that would set it (_fold) changes no output and counts as one event: the
    same columns, ITL, busy time and event count as the run whose loop dispatches every event (an observer)."""
    w = _workload(80, seed=span_us % 97, span_us=span_us, long=6000)
    a, b = _run(w, budget, closed_loop), _run(w, budget, closed_loop, observe=True)
    assert a[:4] == b[:4]
    assert b[4] == b[3]              # the observer saw every counted event
    assert a[-1]._fold and not b[-1]._fold


@pytest.mark.parametrize("policy", ["brute", "prefix"])
@pytest.mark.parametrize("span_us, budget", [(3_000_000, 8192), (1_000, 256)])
def test_lean_model_gives_a_baselines_columns_and_timeline(policy, span_us, budget):
    """``lean`` (a baseline replay read only for its reuse, prefill joules and timeline: engine.replay) gives those
    exactly as the fully priced run does, and skips the rest (no counterfactual prefills, no plan columns)."""
    from pic.engine import policies as registry

    w = _workload(90, seed=budget + 1, span_us=span_us)

    def run(lean):
        ctx = PolicyContext(float("inf"), 1)
        pol = BrutePrefix(ctx) if policy == "brute" else registry.build("prefix", ctx)
        m = ServingModel(w, [pol], _cost(), token_budget=budget, lean=lean)
        reqs = m.run()
        return {f: np.asarray(reqs.cols[f]).tolist() for f in reqs.cols}, m

    (full, a), (lean, b) = run(False), run(True)
    assert a._book is not None and b._book is None and b._lean
    for f in ("start_us", "first_token_us", "finish_us", "num_reused", "num_prompt_tokens", "prefill_joules",
              "uncached", "num_recomputed"):
        assert lean[f] == full[f], f
    assert (a.replicas[0].busy_us, a.sim.num_events) == (b.replicas[0].busy_us, b.sim.num_events)
    assert sum(1 for x in full["num_reused"] if x) > 0
    assert full["nocache_prefill_joules"] != full["prefill_joules"]
    assert lean["nocache_prefill_joules"] == lean["prefill_joules"]        # (not priced: the prefill's own)
    if policy == "prefix":                # (exact-prefix plans' priced columns left at zero; a miss's priced)
        hit = [k for k, (r, n) in enumerate(zip(full["num_reused"], full["num_prompt_tokens"], strict=True)) if 0 < r < n]
        assert hit and all(full["prefill_flops"][k] > 0 and lean["prefill_flops"][k] == 0 for k in hit)
