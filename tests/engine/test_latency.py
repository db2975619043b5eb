"""Serving-benchmark metrics: ITL/TPOT/E2EL from the closed form vs per-token reference times; series
statistics vs numpy; goodput; re-timing; warnings."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from pic.engine.config import ReplayConfig, parse_duration, parse_percentiles, parse_rate, parse_slo
from pic.engine.latency import describe, describe_series, serving_summary
from pic.engine.metrics import request_frame
from pic.engine.replay import replay, retime
from pic.engine.sanity import fit_warnings, saturation_warning
from pic.engine.serving import ServingModel
from pic.engine.specs import gpu_from_name, model_from_name
from pic.traces.io import read_trace
from tests.engine.test_serving import BrutePrefix, FakeCost, _workload

SAMPLE = "traces/samples/early-variation.parquet"
PCTS = (50.0, 90.0, 99.0, 99.9)


def _token_times(w, cost: FakeCost, budget: int) -> list[list[float]]:
    """Step-by-step single replica (as tests/engine/test_serving._reference): every output token's time."""
    n = w.num_requests
    times: list[list[float]] = [[] for _ in range(n)]
    t, nxt, queue, cur, decoders = 0.0, 0, [], None, []   # decoders: [idx, remaining, context]
    arr = w.arrival_us / 1e6
    while nxt < n or queue or cur is not None or decoders:
        while nxt < n and arr[nxt] <= t + 1e-12:
            queue.append(nxt)
            nxt += 1
        if cur is None and queue:
            cur = [queue.pop(0), 0]
        if cur is None and not decoders:
            t = arr[nxt]
            continue
        nd, ctx = len(decoders), sum(d[2] for d in decoders)
        chunks = []
        if cur is not None:
            chunks = [(min(int(w.num_prompt[cur[0]]) - cur[1], max(1, budget - nd)), cur[1])]
        t += cost.step_time(chunks, nd, ctx)
        for d in decoders:
            d[1] -= 1
            d[2] += 1
            times[d[0]].append(t)
        decoders = [d for d in decoders if d[1] > 0]
        if cur is not None:
            cur[1] += chunks[0][0]
            if cur[1] == int(w.num_prompt[cur[0]]):
                i = cur[0]
                times[i].append(t)
                if int(w.num_output[i]) > 1:
                    decoders.append([i, int(w.num_output[i]) - 1, int(w.num_prompt[i]) + 1])
                cur = None
    return times


@pytest.mark.parametrize("budget, seed, span_us", [(512, 1, 1_000_000), (64, 2, 300_000), (8192, 4, 1),
                                                  (64, 3, 100_000)])
def test_itl_tpot_e2el_match_per_token_reference(budget, seed, span_us):
    """The closed-form ITL series, TPOT and E2EL equal those of a simulation that times every token."""
    w = _workload(50, seed=seed, max_out=60, span_us=span_us)
    cost = FakeCost(fixed=1e-3, a=1e-6, b=0.0, c=1e-6)
    sm = ServingModel(w, [BrutePrefix(reject=True)], cost, token_budget=budget)
    rows = request_frame("p", sm.run())
    got = serving_summary(rows, sm.replicas[0].itl, percentiles=PCTS, slo={})
    times = _token_times(w, cost, budget)
    itls = np.concatenate([np.diff(t) for t in times])
    assert itls.size == int((np.maximum(w.num_output, 1) - 1).sum()) > 500
    want = describe(itls, "itl", PCTS)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-6, abs=1e-9), k
    assert serving_summary(rows, sm.replicas[0].itl.array(), percentiles=PCTS, slo={}) == got
    arrival = w.arrival_us / 1e6
    e2el = np.array([t[-1] for t in times]) - arrival
    tpot = np.array([(t[-1] - t[0]) / (len(t) - 1) for t in times if len(t) > 1])
    for k, v in {**describe(e2el, "e2el", PCTS), **describe(tpot, "tpot", PCTS)}.items():
        assert got[k] == pytest.approx(v, rel=1e-5, abs=2e-6), k


@pytest.mark.parametrize("seed", range(4))
def test_series_statistics_equal_numpy_on_the_expanded_multiset(seed):
    """describe_series on weighted arithmetic series = describe on the values written out."""
    rng = np.random.default_rng(seed)
    segs, vals = [], []
    for _ in range(int(rng.integers(1, 60))):
        d0, n, w = rng.uniform(1e-4, 0.1), int(rng.integers(1, 90)), int(rng.integers(1, 9))
        step = float(rng.choice([0.0, rng.uniform(0, 1e-4)]))
        segs.append((d0, step, n, w))
        vals.append(np.repeat(d0 + step * np.arange(n), w))
    want = describe(np.concatenate(vals), "itl", PCTS)
    got = describe_series(segs, "itl", PCTS)
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-12), k


@pytest.mark.parametrize("seed", range(3))
def test_series_percentiles_on_many_segments_with_ties(seed):
    """Thousands of segments (the search drops settled ones every 8 halvings), many values tied across
    segments and zero weights: the same statistics as the values written out."""
    rng = np.random.default_rng(100 + seed)
    k = 5000
    d0 = np.round(rng.uniform(1e-3, 0.05, k), 4)          # ties across segments
    step = np.where(rng.random(k) < 0.6, 0.0, np.round(rng.uniform(0, 1e-3, k), 5))
    n = rng.integers(1, 40, k)
    w = rng.integers(0, 6, k)
    segs = np.stack([d0, step, n, w], 1).astype(np.float64)
    vals = np.concatenate([np.repeat(a + s * np.arange(m), c) for a, s, m, c in zip(d0, step, n, w, strict=True)])
    want = describe(vals, "itl", PCTS)
    got = describe_series(segs, "itl", PCTS)
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12), key


def test_empty_series_and_empty_values_are_null():
    """No ITL (every request one token) gives null statistics, not zeros."""
    assert set(describe_series([], "itl", (99,)).values()) == {None}
    assert set(describe(np.array([]), "tpot", (99,)).values()) == {None}


def _rows(ttft, tpot, out, arrival=0):
    n = len(ttft)
    first = [arrival + int(t * 1e6) for t in ttft]
    finish = [f + int(p * 1e6) * (o - 1) for f, p, o in zip(first, tpot, out, strict=True)]
    return pl.DataFrame({"arrival_us": [arrival] * n, "start_us": [arrival] * n, "first_token_us": first,
                         "finish_us": finish, "prompt_tokens": [100] * n, "output_tokens": out,
                         "ttft_s": ttft}).with_columns(
        e2el_s=(pl.col("finish_us") - pl.col("arrival_us")) / 1e6,
        tpot_s=pl.when(pl.col("output_tokens") > 1).then(
            (pl.col("finish_us") - pl.col("first_token_us")) / 1e6 / (pl.col("output_tokens") - 1)))


def test_goodput_counts_requests_meeting_every_bound():
    """A request is good when TTFT, TPOT and E2EL meet the SLO; one-token requests have TPOT 0 (vLLM)."""
    rows = _rows([0.1, 0.3, 0.1, 0.1], [0.01, 0.01, 0.05, 0.0], [10, 10, 10, 1])
    s = serving_summary(rows, [], percentiles=(99,), slo={"ttft": 0.2, "tpot": 0.02})
    assert s["good_requests"] == 2 and s["slo_attainment"] == 0.5
    assert s["goodput_rps"] == pytest.approx(2 / s["duration_s"])
    assert s["request_throughput_rps"] == pytest.approx(4 / s["duration_s"])
    assert s["generated_tokens"] == 31   # a zero/one-token request still emits its first token
    s = serving_summary(rows, [], percentiles=(99,), slo={"e2el": 0.15})
    assert s["good_requests"] == 1


def test_parsers():
    """--slo / --percentiles / --rate / durations: units, vLLM forms, and one-line errors."""
    assert parse_slo("ttft=500ms,tpot=50") == {"ttft": 0.5, "tpot": 0.05}
    assert parse_slo("ttft:2s e2el:1min") == {"ttft": 2.0, "e2el": 60.0}
    assert parse_slo({"ttft": 0.25, "tpot": "20ms"}) == {"ttft": 0.25, "tpot": 0.02}
    assert parse_percentiles("99,50 , p90,99.9") == (50.0, 90.0, 99.0, 99.9)
    assert parse_rate("inf") == math.inf and parse_rate(None) is None
    assert parse_duration("250us") == pytest.approx(2.5e-4)
    for bad, call in (("ttft", parse_slo), ("itl=5ms", parse_slo), ("ttft=-1ms", parse_slo),
                      ("100", parse_percentiles), ("x", parse_percentiles), ("0", parse_rate), ("fast", parse_rate)):
        with pytest.raises(ValueError):
            call(bad)
    with pytest.raises(ValueError, match="rate and time_scale"):
        ReplayConfig(rate=2.0, time_scale=2.0)


def test_retime_scales_gaps_and_reaches_a_rate():
    """time_scale multiplies every gap; rate keeps the pattern at (n-1)/span = rate; inf = all at once."""
    a = np.array([1_000_000, 1_000_000, 3_000_000, 7_000_000], np.int64)
    assert retime(a, 0.5)[0].tolist() == [1_000_000, 1_000_000, 2_000_000, 4_000_000]
    b, factor = retime(a, rate=1.5)
    assert (len(b) - 1) / ((b[-1] - b[0]) / 1e6) == pytest.approx(1.5) and factor == pytest.approx(1 / 3)
    assert retime(a, rate=math.inf)[0].tolist() == [1_000_000] * 4
    assert retime(a)[0] is a
    with pytest.raises(ValueError, match="one instant"):
        retime(np.zeros(3, np.int64), rate=2.0)


def test_fit_warnings():
    """Weights over HBM, and weights + a finite capacity over HBM, are each named; a small run is quiet."""
    h200 = gpu_from_name("h200")
    assert fit_warnings(model_from_name("deepseek-v2-lite"), h200, 8 * 2**30) == []
    (w,) = fit_warnings(model_from_name("deepseek-v3"), h200, math.inf)
    assert w["code"] == "model-does-not-fit" and "at least" in w["message"]
    (w,) = fit_warnings(model_from_name("deepseek-v2-lite"), h200, 200 * 2**30)
    assert w["code"] == "kv-exceeds-hbm"


def test_saturated_replay_is_warned_and_a_light_one_is_not():
    """All arrivals at once (--rate inf) saturates the replica: warned; the recorded pace is not."""
    trace = read_trace(SAMPLE)
    quiet = replay(trace, ReplayConfig(policies=("prefix",), max_requests=60))
    assert [w for w in quiet.summary["warnings"] if w["code"] == "saturated"] == []
    loud = replay(trace, ReplayConfig(policies=("prefix",), max_requests=60, rate=math.inf))
    (w,) = [w for w in loud.summary["warnings"] if w["code"] == "saturated"]
    s = loud.summary["policies"]["prefix"]
    assert w["policy"] == "prefix" and s["queue_p50_s"] > 10 * s["prefill_p50_s"]
    assert loud.resolved["arrival_time_factor"] == 0.0
    assert saturation_warning("x", {**s, "busy_seconds": 0.1 * s["sim_seconds"]}, 1) is None


def test_time_scale_changes_load_not_content():
    """Compressing arrivals 4x keeps hit content the same (infinite cache) and raises throughput."""
    trace = read_trace(SAMPLE)
    base = replay(trace, ReplayConfig(policies=("prefix",), max_requests=80)).summary["policies"]["prefix"]
    fast = replay(trace, ReplayConfig(policies=("prefix",), max_requests=80, time_scale=0.25)).summary["policies"]["prefix"]
    assert fast["prompt_tokens"] == base["prompt_tokens"]
    assert fast["request_throughput_rps"] > 2 * base["request_throughput_rps"]


@pytest.mark.parametrize("seed", range(4))
def test_series_order_statistics_do_not_depend_on_the_others_asked(seed):
    """The counts met by one percentile's search are shared with the others' (latency.describe_series):
    each value is the same whichever other percentiles are asked, and in whatever order (exact floats)."""
    rng = np.random.default_rng(seed)
    k = 3000
    segs = np.stack([rng.uniform(1e-4, 0.1, k), rng.choice([0.0, 1e-5, 3e-4], k), rng.integers(0, 60, k),
                     rng.integers(1, 5, k) if seed % 2 else rng.uniform(0.5, 3, k)], 1)
    alone = {q: describe_series(segs, "itl", (q,))[f"itl_p{q:g}_s"] for q in (1, 50, 90, 99, 99.9)}
    for qs in ((99.9, 1, 90), (50, 99, 1, 99.9, 90)):
        got = describe_series(segs, "itl", qs)
        assert all(repr(got[f"itl_p{q:g}_s"]) == repr(alone[q]) for q in qs), qs
        assert repr(got["itl_median_s"]) == repr(alone[50])
