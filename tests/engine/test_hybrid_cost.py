"""Hybrid models in the cost model: recurrent layers priced honestly, work split by layer kind.

A recurrent layer's state after position p depends on every token before p, so reuse that is not an
exact prefix cannot skip the recurrent layers after it unless a hybrid-aware policy (LinearKV) says how
their state starts (``Correction.state_loads``).
"""

from __future__ import annotations

import math

import pytest

from pic.engine.cost import CostModel
from pic.engine.plan import Action, Correction, Plan, Span
from pic.engine.specs import GPUS, MODELS
from pic.engine.specs import hybrid as hy

H200 = GPUS["h200"]
HYBRIDS = ["qwen3-next-80b-a3b", "granite-4.0-h-small", "olmo-hybrid-7b"]


def _shifted(n: int = 8192, head: int = 512, tail: int = 512) -> Plan:
    """A changed header, the shared middle reused at a shifted position, a new tail."""
    return Plan(n, (Span(0, head, Action.RECOMPUTE), Span(head, n - tail, Action.REUSE_ROTATED, source_pos=0),
                    Span(n - tail, n, Action.RECOMPUTE)))


@pytest.mark.parametrize("name", HYBRIDS)
def test_non_prefix_reuse_cannot_skip_recurrent_layers(name):
    """Reuse after a changed header saves at most the attention layers' share of a full prefill (it was
    priced as if recurrent layers had a per-token cache: 54-89 % savings, impossible)."""
    m = MODELS[name]
    cm = CostModel(m, H200)
    full, plan = cm.prefill(Plan.recompute_all(8192)), cm.prefill(_shifted())
    saved = 1 - plan.time_s / full.time_s
    assert saved <= full.attn_layer_s / full.time_s + 1e-9
    # the recurrent layers still run every token from the header on
    assert plan.recurrent_tokens == 8192 and plan.attn_tokens == 1024
    assert plan.recurrent_layer_s >= 0.99 * full.recurrent_layer_s


@pytest.mark.parametrize("name", HYBRIDS)
def test_exact_prefix_skips_both_kinds(name):
    """An exact prefix hit skips recurrent layers too (the state at its end is cached with it)."""
    cm = CostModel(MODELS[name], H200)
    full, pre = cm.prefill(Plan.recompute_all(8192)), cm.prefill(Plan.from_prefix(8192, 6144))
    assert pre.recurrent_tokens == pre.attn_tokens == 2048
    assert pre.recurrent_layer_s < full.recurrent_layer_s and pre.attn_layer_s < full.attn_layer_s
    assert pre.flops < 0.4 * full.flops


def test_state_loads_let_recurrent_layers_run_only_recomputed_tokens():
    """With a LinearKV state (state_loads > 0) the recurrent layers run just the recomputed tokens."""
    m = MODELS["qwen3-next-80b-a3b"]
    cm = CostModel(m, H200)
    base = _shifted()
    lkv = Plan(base.num_tokens, base.spans, Correction(recompute_tokens=1434, state_loads=1))
    c = cm.prefill(lkv)
    assert c.recurrent_tokens == c.attn_tokens == 1024 + 1434
    assert c.time_s < cm.prefill(base).time_s


def test_exact_composition_adds_its_flops_and_bytes():
    """K compositions add K dense operator-state products and read K operators + states."""
    m = MODELS["qwen3-next-80b-a3b"]
    cm = CostModel(m, H200)
    base = _shifted()
    single = cm.prefill(Plan(base.num_tokens, base.spans, Correction(state_loads=1)))
    exact = cm.prefill(Plan(base.num_tokens, base.spans, Correction(state_loads=28, state_compositions=28)))
    assert exact.flops - single.flops == pytest.approx(28 * m.state_composition_flops())
    dk, dv = m.gdn_key_head_dim, m.gdn_value_head_dim
    assert m.state_composition_flops() == 36 * 32 * (2 * dk * dk * dv + dk * dv)
    assert exact.time_s > single.time_s


def test_layer_split_adds_up():
    """attn + recurrent + other layer time equals the request time; attention-only models have no
    recurrent part."""
    for name in [*HYBRIDS, "deepseek-v2-lite", "llama-3.1-8b"]:
        cm = CostModel(MODELS[name], H200)
        for plan in (Plan.recompute_all(4096), _shifted(), Plan.from_prefix(4096, 4000)):
            c = cm.prefill(plan)
            assert c.attn_layer_s >= 0 and c.recurrent_layer_s >= 0
            assert c.attn_layer_s + c.recurrent_layer_s <= c.time_s * (1 + 1e-12)
            if not MODELS[name].is_hybrid:
                assert c.recurrent_layer_s == 0


def test_probe_and_store_are_priced():
    """A CacheBlend selection pass and making zero-start chunk states both cost time."""
    m = MODELS["granite-4.0-h-small"]
    cm = CostModel(m, H200)
    base = _shifted()
    t0 = cm.prefill(Plan(base.num_tokens, base.spans, Correction(state_loads=1))).time_s
    tp = cm.prefill(Plan(base.num_tokens, base.spans, Correction(state_loads=1, probe_tokens=7168))).time_s
    ts = cm.prefill(Plan(base.num_tokens, base.spans, Correction(state_loads=1, state_store_tokens=1024))).time_s
    assert tp > t0 and ts > t0
    assert hy.probe_flops_per_token(m) > 0 and hy.first_attn_layer(m) == 5


def test_kind_params_sum_to_trunk():
    """Attention-layer + recurrent-layer parameters equal the model's decoder-layer parameters."""
    for name, m in MODELS.items():
        total = hy.kind_params(m, "attn") + hy.kind_params(m, "recurrent")
        assert math.isclose(total, m.layer_params_active, rel_tol=1e-12), name
