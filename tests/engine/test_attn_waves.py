"""Attention makespan model of the extend kernel and its fit to a calibration profile (pic.engine.attn_waves),
and how a calibrated CostModel prices a Plan's sequences with it."""

from __future__ import annotations

import heapq
import json
import math

import numpy as np
import pytest

from pic.engine.attn_waves import ExtendShape, makespan
from pic.engine.calibration import CalibrationProfile, load_profile, write_profile
from pic.engine.cost import CostModel, exec_sequences
from pic.engine.plan import Action, Plan, Span
from pic.engine.specs import gpu_from_name, model_from_name

SHAPE = ExtendShape(tokens_per_program=4, head_groups=1, sm_count=8, decode_max_new=32)


def _list_schedule(seqs, shape: ExtendShape, slots: int, rho: float = 1.0) -> float:
    """Program-by-program list schedule (the reference the grouped model approximates)."""
    free = [0.0] * slots
    for n, plain, rot in seqs:
        for j in range(-(-n // shape.tokens_per_program)):
            w = plain + rho * rot + min((j + 1) * shape.tokens_per_program, n)
            for _ in range(shape.head_groups):
                heapq.heappush(free, heapq.heappop(free) + w)
    return max(free)


def test_makespan_waves_and_longest_program():
    # 8 programs (32 tokens) on 8 slots over 1000 cached keys: one wave, the longest program reads 1032 keys
    assert makespan([(32, 1000, 0)], SHAPE, 8) == pytest.approx(1032, rel=0.01)
    # 9 programs on 8 slots: the 9th (1036 keys) waits for the first free slot (1004 keys)
    assert makespan([(36, 1000, 0)], SHAPE, 8) == pytest.approx(1004 + 1036, rel=0.01)
    # a few tokens over a long context cost as much as that context, not their share of query-key pairs
    short = makespan([(200, 0, 0), (8, 5000, 0)], SHAPE, 64)
    assert short >= 5000
    assert short > 10 * (50 * 102 + 2 * 5006) / 64   # far above the same key reads spread over all slots
    # rotated keys cost rotated_factor plain keys
    assert makespan([(32, 0, 1000)], SHAPE, 8, 1.5) == pytest.approx(makespan([(32, 1500, 0)], SHAPE, 8))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_makespan_tracks_a_program_by_program_schedule(seed):
    g = np.random.default_rng(seed)
    shape = ExtendShape(4, int(g.integers(1, 3)), 16, 32)
    for _ in range(20):
        seqs = [(int(g.integers(1, 600)), int(g.integers(0, 8000)), int(g.integers(0, 3000)))
                for _ in range(int(g.integers(1, 6)))]
        ref = _list_schedule(seqs, shape, 16, 1.3)
        assert makespan(seqs, shape, 16, 1.3) == pytest.approx(ref, rel=0.08)


GRID_SHAPE = ExtendShape(tokens_per_program=4, head_groups=1, sm_count=32, decode_max_new=32)


def _synthetic_profile(slots_mult: int = 2, kappa: float = 2e-6, rho: float = 1.4, extend=GRID_SHAPE, noise=0.0,
                       seed=0) -> CalibrationProfile:
    """A profile whose times follow the model exactly (linear part a + b·n), optionally with noise. The grid
    has single-wave points (64 new tokens: 16 programs) that pin the time per key, and multi-wave ones."""
    g = np.random.default_rng(seed)
    slots = extend.sm_count * slots_mult

    def t(n: int, c: int, rot: int = 0) -> float:
        lin = 5e-3 + 2e-5 * n
        attn = kappa * makespan([(n, c, rot)], extend, slots, rho) if n > extend.decode_max_new else 1e-7 * n * (c + rot)
        return (lin + attn) * (1 + noise * g.standard_normal())

    news, cached = (1, 16, 32, 33, 64, 256, 1024, 4096), (0, 2048, 8192)
    prefill = tuple((n, c, t(n, c)) for c in cached for n in news)
    rotated = tuple((n, c, t(n, 0, c)) for c in (2048, 8192) for n in (64, 1024))
    decode = ((1, 1024, 5e-3), (1, 4096, 6e-3))
    return CalibrationProfile("h200", "deepseek-v2-lite", prefill, decode, 600.0, 100.0,
                              prefill_rotated=rotated, extend=extend)


def test_fit_recovers_the_parameters_of_a_profile_made_by_the_model():
    p = _synthetic_profile(slots_mult=2, kappa=2e-6, rho=1.4)
    f = p.fit
    assert f.slots == 64
    assert f.seconds_per_key == pytest.approx(2e-6, rel=0.02)
    assert f.rotated_factor == pytest.approx(1.4, abs=0.02)
    assert f.grid_error < 0.02
    noisy = _synthetic_profile(slots_mult=2, noise=0.02, seed=3).fit
    assert noisy.slots == 64 and noisy.seconds_per_key == pytest.approx(2e-6, rel=0.1)


def test_plan_seconds_is_the_measured_full_prefill_and_prices_long_short_tails():
    p = _synthetic_profile()
    by = {(n, c): s for n, c, s in p.prefill}
    # a full prefill (one sequence over nothing) is the measured c = 0 forward
    assert p.plan_seconds([(1024, 0, 0)]) == pytest.approx(by[(1024, 0)], rel=1e-12)
    # one sequence over cached tokens lands on the measured grid point (the model made the grid here)
    assert p.plan_seconds([(1024, 8192, 0)]) == pytest.approx(by[(1024, 8192)], rel=0.01)
    # 256 fresh tokens then 64 over 8K: attention waits for the long program, far above the pair-equivalent
    # single forward that the profile alone would give
    seqs = [(256, 0, 0), (64, 7936, 0)]
    pairs_only = CalibrationProfile("h200", "deepseek-v2-lite", p.prefill, p.decode, 600.0, 100.0)
    assert pairs_only.fit is None
    assert p.plan_seconds(seqs) > 1.3 * pairs_only.plan_seconds(seqs)
    # rotated context costs more than the same context plain
    assert p.plan_seconds([(64, 0, 8192)]) > p.plan_seconds([(64, 8192, 0)])
    # decode path (<= 32 new tokens): the profile's interpolation, rotated keys scaled by the decode factor
    assert p.plan_seconds([(16, 2048, 0)]) == pytest.approx(by[(16, 2048)], rel=1e-9)


def test_exec_sequences_mirrors_the_executor_layout():
    P = Plan(100, (Span(0, 10, Action.RECOMPUTE), Span(10, 40, Action.REUSE_ROTATED, 3), Span(40, 45, Action.RECOMPUTE),
                   Span(45, 60, Action.REUSE, 45), Span(60, 70, Action.RECOMPUTE), Span(70, 100, Action.REUSE_ROTATED, 0)))
    # the last token always runs: taken out of the final reused span
    assert exec_sequences(P) == [(10, 0, 0), (5, 10, 30), (10, 30, 30), (1, 40, 59)]   # (new, plain, rotated)
    assert exec_sequences(Plan.recompute_all(50)) == [(50, 0, 0)]
    full_hit = Plan(50, (Span(0, 50, Action.REUSE, 0),))
    assert exec_sequences(full_hit) == [(1, 49, 0)]
    # a reused last token alone joins the recompute run before it
    tail = Plan(20, (Span(0, 10, Action.REUSE, 0), Span(10, 19, Action.RECOMPUTE), Span(19, 20, Action.REUSE_ROTATED, 5)))
    assert exec_sequences(tail) == [(10, 10, 0)]


def test_cost_model_uses_the_fit_only_with_an_extend_block():
    m, g = model_from_name("deepseek-v2-lite"), gpu_from_name("h200")
    p = _synthetic_profile()
    legacy = CalibrationProfile("h200", "deepseek-v2-lite", p.prefill, p.decode, 600.0, 100.0)
    plan = Plan(8000, (Span(0, 256, Action.RECOMPUTE), Span(256, 7936, Action.REUSE_ROTATED, 0),
                       Span(7936, 8000, Action.RECOMPUTE)))
    new, old = CostModel(m, g, profile=p).prefill(plan), CostModel(m, g, profile=legacy).prefill(plan)
    assert new.time_s == pytest.approx(p.plan_seconds(exec_sequences(plan)), rel=1e-4)   # + fused rotation FLOPs
    assert old.time_s == pytest.approx(legacy.prefill_seconds(320, (256 * 257 / 2 + 64 * (7936 + 32.5)
                                                                    - 320 * 321 / 2) / 320), rel=1e-4)
    assert new.time_s > old.time_s
    # full prefills are priced the same either way (the measured c = 0 row)
    full = Plan.recompute_all(4096)
    assert CostModel(m, g, profile=p).prefill(full).time_s == pytest.approx(
        CostModel(m, g, profile=legacy).prefill(full).time_s, rel=1e-9)


def test_profile_file_round_trip_and_errors(tmp_path):
    p = _synthetic_profile()
    path = tmp_path / "p.json"
    write_profile(p, path)
    q = load_profile(path)
    assert q.extend == p.extend and q.prefill_rotated == p.prefill_rotated
    assert q.fit.slots == p.fit.slots and math.isclose(q.fit.seconds_per_key, p.fit.seconds_per_key)
    cfg = json.loads(path.read_text())
    cfg["extend"]["sm_count"] = 0
    path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"p\.json: extend\.sm_count: missing or not an integer >= 1"):
        load_profile(path)
    cfg["extend"] = [4, 1]
    path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"p\.json: extend: expected an object"):
        load_profile(path)
    del cfg["extend"]
    cfg["prefill_rotated"] = [[64, 2048]]
    path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"p\.json: prefill_rotated\[0\]: expected \[int, int, seconds\]"):
        load_profile(path)
    cfg["prefill_rotated"] = []
    path.write_text(json.dumps(cfg))
    assert load_profile(path).extend is None and load_profile(path).fit is None   # older profiles still load


def test_power_by_forward_size(tmp_path):
    """A profile's power rows price a Plan's joules by its forward size (small forwards draw less)."""
    import dataclasses

    p = dataclasses.replace(_synthetic_profile(), power=((16, 4096, 400.0), (1024, 4096, 600.0), (8192, 0, 680.0)))
    assert p.watts_for(8) == 400.0 and p.watts_for(10**6) == 680.0
    assert p.watts_for(128) == pytest.approx(500.0)          # halfway between 16 and 1024 in log(n)
    assert _synthetic_profile().watts_for(128) == 600.0      # no power rows: watts_busy
    m, g = model_from_name("deepseek-v2-lite"), gpu_from_name("h200")
    plan = Plan(4000, (Span(0, 3872, Action.REUSE, 0), Span(3872, 4000, Action.RECOMPUTE)))
    pc = CostModel(m, g, profile=p).prefill(plan)
    assert pc.joules == pytest.approx(pc.time_s * 500.0)
    path = tmp_path / "p.json"
    write_profile(p, path)
    assert load_profile(path).power == p.power
    cfg = json.loads(path.read_text())
    cfg["power"] = [[16, 4096, -1]]
    path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"power\[0\]"):
        load_profile(path)
