"""Plan log: the replay's Plans in admission order, stored with pyarrow, and the providers of reused spans."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic.engine.config import ReplayConfig
from pic.engine.measurements import read_measurements, summarize, write_measurements
from pic.engine.plan import Action, Plan, Span
from pic.engine.planlog import PlanLog, PlannedRequest, is_plan_log, read_plan_log, record_plans
from pic.engine.replay import read_trace_file, replay

SAMPLE = "traces/samples/rag-reorder.parquet"


@pytest.fixture(scope="module")
def log() -> PlanLog:
    return record_plans(read_trace_file(SAMPLE), ReplayConfig(policies=("irminsul",)), "irminsul")


def test_plans_match_the_replay(log):
    """The logged Plans are the ones the replay priced: same reused/rotated tokens per request."""
    res = replay(read_trace_file(SAMPLE), ReplayConfig(policies=("irminsul",)))
    rows = {r["request_id"]: r for r in res.requests.iter_rows(named=True)}
    assert len(log) == len(rows)
    for r in log.requests:
        assert r.plan.num_reused == rows[r.request_id]["reused_tokens"]
        assert r.plan.num_rotated == rows[r.request_id]["rotated_tokens"]
        assert r.num_tokens == rows[r.request_id]["prompt_tokens"]
        assert math.isclose(r.sim_ttft_s, rows[r.request_id]["ttft_s"], abs_tol=1e-6)
        assert r.predicted_s > 0 and r.predicted_full_s >= r.predicted_s * 0.99
    assert [r.order for r in log.requests] == list(range(len(log)))


def test_roundtrip_and_recognition(log, tmp_path):
    """plans.parquet reads back to the same Plans, tokens and prices; other files are not plan logs."""
    path = log.write(tmp_path / "plans.parquet")
    back = read_plan_log(path)
    assert is_plan_log(path) and not is_plan_log(SAMPLE)
    assert back.meta["policy"] == "irminsul" and back.meta["model"] == "deepseek-v2-lite"
    for a, b in zip(log.requests, back.requests, strict=True):
        assert a.plan == b.plan and np.array_equal(a.tokens, b.tokens)
        assert (a.request_id, a.replica, a.predicted_s, a.roofline_s) == (b.request_id, b.replica, b.predicted_s,
                                                                          b.roofline_s)
    with pytest.raises(ValueError, match="not a pic plan log"):
        read_plan_log(SAMPLE)


def test_sample_is_seeded_and_filtered(log):
    """Same seed, same sample (in log order); max_tokens and min_reuse restrict the pool."""
    a, b = log.sample(5, seed=3), log.sample(5, seed=3)
    assert a == b == sorted(a) and len(a) == 5
    assert log.sample(5, seed=4) != a
    short = log.sample(None, max_tokens=3000)
    assert all(log.requests[i].num_tokens <= 3000 for i in short)
    assert all(log.requests[i].plan.num_reused >= 0.5 * log.requests[i].num_tokens
               for i in log.sample(None, min_reuse=0.5))


def test_every_reused_token_has_a_provider(log):
    """Each reused token maps to an earlier request holding the same token at the source position."""
    for i in log.sample(12, seed=0):
        r = log.requests[i]
        srcs = log.resolve_sources(i)
        assert sum(s.end - s.start for s in srcs) == r.plan.num_reused
        for s in srcs:
            p = log.requests[s.provider]
            assert s.provider < i
            assert np.array_equal(p.tokens[s.provider_pos:s.provider_pos + s.end - s.start], r.tokens[s.start:s.end])


def _req(order, tokens, plan):
    return PlannedRequest(order, 10 + order, 0, np.asarray(tokens, np.int32), plan)


def test_span_of_two_producers_is_split():
    """A merged span whose halves come from different earlier requests resolves to two sources."""
    a, b = list(range(100, 140)), list(range(500, 540))
    target = a + b
    log = PlanLog([_req(0, [1] * 10 + a, Plan.recompute_all(50)), _req(1, [2] * 50 + b, Plan.recompute_all(90)),
                   _req(2, target, Plan(80, (Span(0, 80, Action.REUSE_ROTATED, 10),)))])
    srcs = log.resolve_sources(2)
    assert [(s.start, s.end, s.provider, s.provider_pos) for s in srcs] == [(0, 40, 0, 10), (40, 80, 1, 50)]


def test_false_hit_is_an_error():
    """A Plan reusing tokens no earlier request holds is refused by name (request and range)."""
    log = PlanLog([_req(0, [1, 2, 3, 4], Plan.recompute_all(4)),
                   _req(1, [9, 9, 9, 9], Plan(4, (Span(0, 4, Action.REUSE, 0),)))])
    with pytest.raises(ValueError, match=r"request 11: no earlier request .* tokens \[0, 4\)"):
        log.resolve_sources(1)


def test_measurements_roundtrip_and_summary(tmp_path):
    """measurements.parquet + execute.json: headline ratios from the rows, errors as median |rel|."""
    rows = [{"request_id": i, "prompt_tokens": 1000, "reused_tokens": 800 if i else 0, "ttft_s": 0.02 if i else 0.1,
             "ttft_full_s": 0.1, "hbm_bytes": 5.0, "hbm_bytes_full": 10.0, "joules": 4.0 if i else 20.0,
             "joules_full": 20.0, "joules_dyn": 2.0, "joules_dyn_full": 10.0, "predicted_ttft_s": 0.022 if i else 0.1,
             "predicted_full_s": 0.1, "predicted_joules": 5.0, "predicted_full_joules": 20.0,
             "out_dev": 0.01, "top1_match": True, "kv_dev": 0.1, "kv_dev_last": 0.2, "kv_dev_layers": [0.0, 0.2]}
            for i in range(3)]
    s = summarize(rows, {"policy": "irminsul"})
    assert s["requests"] == 3 and s["hits"] == 2 and s["policy"] == "irminsul"
    assert math.isclose(s["ttft_ratio_p50"], 0.2) and math.isclose(s["energy_saved_hits_total"], 0.8)
    assert math.isclose(s["fidelity"]["ttft_mare"], 0.1) and math.isclose(s["hbm_ratio_total"], 0.5)
    out = write_measurements(tmp_path / "exec", rows, s)
    back, summary = read_measurements(out)
    assert [r["request_id"] for r in back] == [0, 1, 2] and "kv_dev_layers" not in back[0]
    assert summary["ttft_ratio_p50"] == s["ttft_ratio_p50"]
