"""Cost model: Plan costs, the MLA-vs-GQA rotation contrast, affine decode steps, calibration profiles."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pic.engine.calibration import CalibrationProfile, load_profile, write_profile
from pic.engine.cost import CostConfig, CostModel
from pic.engine.plan import Action, Correction, Plan, Span, Tier
from pic.engine.specs import GPUS, MODELS

H200 = GPUS["h200"]
V2L, LLAMA, QNEXT = MODELS["deepseek-v2-lite"], MODELS["llama-3.1-8b"], MODELS["qwen3-next-80b-a3b"]


def _rotated_plan(n: int = 8192, head: int = 512, tail: int = 512, tier: Tier = Tier.HBM) -> Plan:
    """Recompute a header, reuse the middle at a shifted position, recompute a tail."""
    return Plan(n, (Span(0, head, Action.RECOMPUTE),
                    Span(head, n - tail, Action.REUSE_ROTATED, source_pos=0, tier=tier),
                    Span(n - tail, n, Action.RECOMPUTE)))


def test_reuse_reduces_flops_and_time():
    """Reusing a prefix costs fewer FLOPs and less time than recomputing it, for every preset."""
    for m in MODELS.values():
        cm = CostModel(m, H200)
        full, half = cm.prefill(Plan.recompute_all(4096)), cm.prefill(Plan.from_prefix(4096, 2048))
        assert half.flops < full.flops and half.time_s < full.time_s
        assert half.cache_read_bytes == 2048 * m.kv_bytes_per_token and full.cache_read_bytes == 0


def test_recompute_all_flops_match_spec():
    """A full recompute costs exactly the spec's prefill FLOPs."""
    cm = CostModel(V2L, H200)
    assert cm.prefill(Plan.recompute_all(3000)).flops == pytest.approx(V2L.prefill_flops(3000, 0))


def test_mla_rotation_cheap_vs_gqa():
    """Rotated reuse: MLA's fused 64-dim k_r correction costs far less than GQA's full-K rewrite."""
    plan = _rotated_plan()
    mla, gqa = CostModel(V2L, H200).prefill(plan), CostModel(LLAMA, H200).prefill(plan)
    assert mla.rotation_bytes == 0 and gqa.rotation_bytes == 2 * plan.num_rotated * LLAMA.rope_key_bytes_per_token
    assert gqa.rotation_flops / mla.rotation_flops > 10
    mla_unfused = CostModel(V2L, H200, CostConfig(fused_rotation=False)).prefill(plan)
    assert gqa.rotation_bytes / mla_unfused.rotation_bytes > 15


def test_fused_rotation_adds_zero_bytes_unfused_adds_kr():
    """Fused MLA rotation adds no HBM bytes; unfused adds a read+write of k_r per rotated token."""
    plan = _rotated_plan()
    fused = CostModel(V2L, H200, CostConfig(fused_rotation=True)).prefill(plan)
    unfused = CostModel(V2L, H200, CostConfig(fused_rotation=False)).prefill(plan)
    same_place = Plan(plan.num_tokens, tuple(replace(s, action=Action.REUSE, source_pos=s.start)
                                              if s.action == Action.REUSE_ROTATED else s for s in plan.spans))
    base = CostModel(V2L, H200).prefill(same_place)
    assert fused.hbm_bytes == base.hbm_bytes
    assert unfused.hbm_bytes - base.hbm_bytes == pytest.approx(2 * plan.num_rotated * 27 * 64 * 2)
    assert unfused.time_s > fused.time_s


def test_gqa_rotation_fraction_of_recompute_larger():
    """The rotation share of a rotated-reuse prefill is much larger for GQA than for MLA."""
    plan = _rotated_plan()

    def share(m):
        cm = CostModel(m, H200)
        c = cm.prefill(plan)
        return cm._phase(c.rotation_flops, c.rotation_bytes) / c.time_s
    assert share(LLAMA) > 20 * share(V2L)


def test_quality_recompute_costs_like_prefill():
    """CacheBlend-style recompute of reused tokens adds prefill FLOPs for those tokens."""
    cm = CostModel(LLAMA, H200)
    plan = _rotated_plan()
    blended = Plan(plan.num_tokens, plan.spans, Correction(recompute_tokens=1000))
    extra = cm.prefill(blended).flops - cm.prefill(plan).flops
    assert extra > LLAMA.linear_flops(1000)


def test_state_compositions_cost():
    """Exact LinearKV compositions add FLOPs and time on a hybrid model, none on a pure-attention one."""
    plan = Plan.from_prefix(4096, 2048)
    comp = Plan(4096, plan.spans, Correction(state_compositions=8))
    cq = CostModel(QNEXT, H200)
    assert cq.prefill(comp).flops - cq.prefill(plan).flops == pytest.approx(8 * QNEXT.state_composition_flops())
    assert cq.prefill(comp).time_s > cq.prefill(plan).time_s
    cl = CostModel(LLAMA, H200)
    assert cl.prefill(Plan(4096, plan.spans, Correction(state_compositions=8))).flops == cl.prefill(plan).flops


def test_host_tier_adds_transfer_time():
    """KV reused from the HOST tier adds link transfer time and bytes."""
    cm = CostModel(V2L, H200)
    hbm, host = cm.prefill(_rotated_plan()), cm.prefill(_rotated_plan(tier=Tier.HOST))
    assert host.transfer_bytes == _rotated_plan().num_rotated * V2L.kv_bytes_per_token and hbm.transfer_bytes == 0
    assert host.time_s > hbm.time_s


def test_full_hit_costs_one_token():
    """A fully reused prompt still runs its last token (for logits) and no more."""
    cm = CostModel(V2L, H200)
    c = cm.prefill(Plan(4096, (Span(0, 4096, Action.REUSE, 0),)))
    assert c.flops == pytest.approx(V2L.prefill_flops(1, 4095))


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("num_decode", [1, 7, 64, 300])
def test_decode_step_coeffs_exact(name, num_decode):
    """step_time([], n, C) equals fixed + per * C exactly, for several C."""
    cm = CostModel(MODELS[name], H200)
    fixed, per = cm.decode_step_coeffs(num_decode)
    assert fixed > 0 and per > 0
    for ctx in (0, 1, 1000, 123_457, 10**7):
        assert cm.step_time([], num_decode, ctx) == fixed + per * ctx


def test_step_time_properties():
    """Empty steps cost nothing; adding prefill chunks or decode context costs more."""
    cm = CostModel(V2L, H200)
    assert cm.step_time([], 0, 0) == 0.0 and cm.decode_step_coeffs(0) == (0.0, 0.0)
    base = cm.step_time([(512, 0)], 0, 0)
    assert cm.step_time([(512, 0)], 16, 16_000) > base > 0
    assert cm.step_time([(512, 8000)], 0, 0) > base
    alone = cm.prefill(Plan.recompute_all(2048)).time_s
    assert cm.step_time([(2048, 0)], 0, 0) == pytest.approx(alone, rel=1e-9)


def test_energy():
    """Energy is busy watts x busy seconds + idle watts x idle seconds."""
    cm = CostModel(V2L, H200)
    assert cm.energy(2.0, 10.0) == 2.0 * 670 + 10.0 * 120
    assert cm.prefill(Plan.recompute_all(1024)).joules == pytest.approx(cm.prefill(Plan.recompute_all(1024)).time_s * 670)
    assert json.dumps(cm.to_dict())


# ---- Calibration profiles ---------------------------------------------------------------------------
PROFILE = {"format": "pic-calibration/1", "gpu": "h200", "model": "deepseek-v2-lite", "watts_busy": 600.0,
           "watts_idle": 80.0,
           "prefill": [[128, 0, 0.010], [1024, 0, 0.030], [4096, 0, 0.100],
                       [128, 8192, 0.020], [1024, 8192, 0.060], [4096, 8192, 0.200]],
           "decode": [[1, 0, 0.004], [1, 10000, 0.005], [64, 0, 0.012], [64, 100000, 0.032]]}


@pytest.fixture
def profile_path(tmp_path):
    p = tmp_path / "h200-v2l.json"
    p.write_text(json.dumps(PROFILE))
    return p


def test_profile_interpolates_prefill(profile_path):
    """Prefill seconds hit measured points and interpolate linearly between them."""
    prof = load_profile(profile_path)
    assert prof.prefill_seconds(1024, 0) == pytest.approx(0.030)
    assert prof.prefill_seconds(2560, 0) == pytest.approx(0.065)
    assert prof.prefill_seconds(1024, 4096) == pytest.approx(0.045)
    assert prof.prefill_seconds(8192, 0) > prof.prefill_seconds(4096, 0)


def test_profile_replaces_factors(profile_path):
    """With a profile, a plain prefill costs the measured time and energy uses measured watts."""
    cm = CostModel(V2L, H200, profile=load_profile(profile_path))
    c = cm.prefill(Plan.recompute_all(4096))
    assert c.time_s == pytest.approx(0.100) and c.joules == pytest.approx(0.100 * 600)
    assert cm.energy(1.0, 1.0) == 680.0


def test_profile_decode_affine(profile_path):
    """Profile decode steps are affine in context and match the measured lines."""
    cm = CostModel(V2L, H200, profile=load_profile(profile_path))
    fixed, per = cm.decode_step_coeffs(64)
    assert fixed == pytest.approx(0.012) and per == pytest.approx(2e-7)
    for ctx in (0, 5000, 77_777):
        assert cm.step_time([], 64, ctx) == fixed + per * ctx
    mid = cm.decode_step_coeffs(32)
    assert cm.decode_step_coeffs(1)[0] < mid[0] < fixed


def test_profile_roundtrip(profile_path, tmp_path):
    """write_profile then load_profile returns an equal profile."""
    prof = load_profile(profile_path)
    out = tmp_path / "copy.json"
    write_profile(prof, out)
    again = load_profile(out)
    assert again.prefill == prof.prefill and again.decode == prof.decode and again.watts_busy == 600.0


def test_profile_wrong_pair(profile_path):
    """A profile for another GPU or model is rejected."""
    with pytest.raises(ValueError, match="not gpu='h200' model='llama-3.1-8b'"):
        CostModel(LLAMA, H200, profile=load_profile(profile_path))


@pytest.mark.parametrize("patch,msg", [
    ({"prefill": [[128, 0]]}, r"prefill\[0\]: expected"),
    ({"prefill": [[128, 0, -1.0]]}, r"prefill\[0\]: need"),
    ({"decode": [[1, 0, 0.1], [1, 0, 0.2]]}, "decode: num_seqs=1 needs"),
    ({"watts_busy": "lots"}, "watts_busy: missing or not a number"),
    ({"gpu": None}, "gpu: missing"),
    ({"format": "other/2"}, "format: expected"),
    ({"decode": None}, "decode: missing"),
])
def test_profile_bad_fields(tmp_path, patch, msg):
    """Malformed profiles fail with the file name and the field."""
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({**PROFILE, **patch}))
    with pytest.raises(ValueError, match=msg) as e:
        load_profile(p)
    assert str(p) in str(e.value)


def test_profile_in_memory_validation():
    """Constructing a profile directly validates too."""
    with pytest.raises(ValueError, match="watts"):
        CalibrationProfile("h200", "m", ((1, 0, 1.0),), ((1, 0, 1.0), (1, 5, 2.0)), watts_busy=10, watts_idle=20)


@pytest.mark.parametrize("name", list(MODELS))
def test_fast_weight_bytes_match_spec(name):
    """The cost model's precomputed weight-bytes path equals ModelSpec.weight_bytes_read."""
    cm = CostModel(MODELS[name], H200)
    for t in (1, 2, 17, 256, 5000):
        assert cm._weights(t) == pytest.approx(MODELS[name].weight_bytes_read(t), rel=1e-12)


@pytest.mark.parametrize("name", [n for n, m in MODELS.items() if m.num_experts])
def test_weights_from_every_expert_touched_on_equal_the_formula(name):
    """_weights returns one value from the token count at which the formula's ``1 - (1 - a/E)**n`` rounds to
    1.0 (every expert touched): the same float as the formula, for every count up to 60,000 and sampled to
    10^8; the bytes of a MoE step grow with the tokens until then."""
    import random

    m = MODELS[name]
    cm = CostModel(m, H200)
    n0, w = cm._w_all
    assert 2 < n0 < 60_000
    base = 1.0 - m.num_experts_active / m.num_experts

    def formula(n):
        return cm._w_dense + (m.num_experts * (1.0 - base ** n)) * cm._w_expert

    rng = random.Random(3)
    for n in [*range(2, 60_000), *(rng.randrange(60_000, 10**8) for _ in range(20_000))]:
        assert cm._weights(n) == formula(n), n
    assert w == formula(n0) and formula(n0 - 1) < w and cm.profile is None
    assert CostModel(MODELS["llama-3.1-8b"] if "llama-3.1-8b" in MODELS else next(
        x for x in MODELS.values() if not x.num_experts), H200)._w_all[0] == float("inf")


@pytest.mark.parametrize("kv_read", [None, 96.0])
def test_prefill_step_is_step_time_split(kv_read):
    """prefill_step's step equals step_time of the same step exactly (every preset, dense or compressed KV
    reads, with and without decoders); the prefill's share is within the step, and all of it alone."""
    import random

    rng = random.Random(5)
    for m in MODELS.values():
        cm = CostModel(m, H200, kv_read_bytes=kv_read)
        for _ in range(300):
            n, c = rng.choice([1, 7, 512, rng.randrange(1, 9000)]), rng.choice([0, rng.randrange(0, 100_000)])
            nd = rng.choice([0, 1, rng.randrange(1, 300)])
            ctx = rng.randrange(nd, 10**7) if nd else 0
            step, share = cm.prefill_step(n, c, nd, ctx)
            assert step == cm.step_time([(n, c)], nd, ctx)
            assert (share == step) if nd == 0 else (0.0 < share < step)
        assert cm.prefill_step(0, 100, 4, 4000) == (cm.step_time([], 4, 4000), 0.0)


def test_attention_memo_gives_the_attention_flops():
    """prefill_step and the one-chunk terms remember a chunk's attention FLOPs by (new, cached) tokens: a
    remembered value is the model's attention_flops, and a step priced from the memo equals step_time."""
    import random

    rng = random.Random(9)
    for m in MODELS.values():
        cm = CostModel(m, H200)
        attn = m.attention_flops_fn()
        shapes = [(rng.randrange(1, 9000), rng.choice([0, rng.randrange(0, 50_000)])) for _ in range(40)]
        for _ in range(3):                       # first a miss, then hits
            for n, c in shapes:
                nd = rng.randrange(0, 50)
                ctx = rng.randrange(nd, 10**6) if nd else 0
                assert cm.prefill_step(n, c, nd, ctx)[0] == cm.step_time([(n, c)], nd, ctx)
                assert cm.one_chunk_terms is None or cm.one_chunk_terms(n + c, n, c)[0] == cm.prefill(
                    Plan.from_prefix(n + c, c)).flops
        assert cm._attn_memo and all(v == attn(n, c) for (n, c), v in cm._attn_memo.items())


@pytest.mark.parametrize("kv_read", [None, 96.0])
def test_prefill_one_chunk_is_prefill_of_the_plan(kv_read):
    """The serving model's plain-plan pricing equals CostModel.prefill field by field (values and types) for
    prefix plans, full hits, a recomputed head before an in-place reused tail, on every preset."""
    import random

    from pic.engine.serving.model import _one_chunk

    rng = random.Random(11)
    for m in MODELS.values():
        cm = CostModel(m, H200, kv_read_bytes=kv_read)
        for _ in range(150):
            n = rng.choice([1, 2, 5, rng.randrange(1, 200_000)])
            c = rng.choice([0, 1, n - 1, n, rng.randrange(0, n + 1)])
            plans = [Plan.from_prefix(n, c)]
            if 0 < c < n:
                plans.append(Plan(n, (Span(0, c, Action.RECOMPUTE), Span(c, n, Action.REUSE, c))))
            for plan in plans:
                want, got = cm.prefill(plan).to_dict(), cm.prefill_one_chunk(plan, *_one_chunk(plan.spans)).to_dict()
                assert got == want and [type(v) for v in got.values()] == [type(v) for v in want.values()]
                if cm.one_chunk_terms is not None:   # the same values as a tuple (the serving model's path)
                    terms = cm.one_chunk_terms(plan.num_tokens, *_one_chunk(plan.spans))
                    assert terms == tuple(want[k] for k in ("flops", "hbm_bytes", "time_s", "cache_read_bytes",
                                                            "attn_layer_s", "attn_tokens"))
                    assert want["recurrent_layer_s"] == 0.0 and want["recurrent_tokens"] == 0
        assert (cm.one_chunk_terms is None) == m.is_hybrid
    two = Plan(10, (Span(0, 4, Action.RECOMPUTE), Span(4, 10, Action.RECOMPUTE)))
    assert _one_chunk(two.spans) is None    # two prefill chunks: priced by prefill itself
