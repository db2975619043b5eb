"""Replay runner: run dir contents, determinism, config errors before work, per-policy independence."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from pic.engine.config import ReplayConfig, parse_size
from pic.engine.metrics import REQUEST_SCHEMA
from pic.engine.replay import check_config, replay, workload_from_trace, write_run
from pic.traces.outputs import MARKER, OutputError
from pic.traces.schema import SegmentTable, Trace, requests_frame


def _trace(num=60, seed=0) -> Trace:
    rng = np.random.default_rng(seed)
    table = SegmentTable()
    system = table.add(np.arange(1, 700), "system")
    docs = [table.add(rng.integers(1000, 50_000, 300), "document") for _ in range(6)]
    rows = {k: [] for k in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    t = 0
    for i in range(num):
        t += int(rng.integers(0, 200_000))
        picked = [docs[j] for j in rng.permutation(6)[:2]]
        user = table.add(rng.integers(50_000, 60_000, int(rng.integers(5, 400))), "user")
        for k, v in (("request_id", i), ("session_id", f"s{i % 4}"), ("agent_id", "a"), ("arrival_us", t),
                     ("output_tokens", int(rng.integers(1, 200))), ("segment_ids", [system, *picked, user])):
            rows[k].append(v)
    return Trace(table.build(), requests_frame(rows), source="test-trace")


CFG = ReplayConfig(policies=("prefix", "none"), check_invariants=True)


def test_run_dir_has_exact_columns_and_summary_keys(tmp_path):
    """requests.parquet has the documented columns/dtypes, sorted; summary.json the documented keys."""
    res = replay(_trace(), CFG)
    out = write_run(res, tmp_path / "run")
    df = pl.read_parquet(out / "requests.parquet")
    assert dict(df.schema) == REQUEST_SCHEMA
    assert df.height == 2 * 60 and df.equals(df.sort(["policy", "request_id"]))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["version"] == 1 and summary["capacity_bytes"] is None and summary["replicas"] == 1
    want = {"requests", "prompt_tokens", "reused_tokens", "rotated_tokens", "token_hit_rate", "prefix_hit_rate",
            "recovery_beyond_prefix", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "queue_p50_s", "prefill_joules",
            "energy_saved_vs_none", "energy_saved_vs_prefix", "peak_resident_bytes", "evictions", "collisions",
            "uncached", "sim_seconds", "wall_seconds"}
    assert want <= set(summary["policies"]["prefix"])
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["replay"]["policies"] == ["prefix", "none"] and "cost" in cfg and "prefix" in cfg["policies"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temp leftovers


def test_summary_matches_rows():
    """Hit rates, recovery beyond prefix and energy saved are the documented ratios of row sums."""
    res = replay(_trace(), CFG)
    for name, s in res.summary["policies"].items():
        rows = res.requests.filter(pl.col("policy") == name)
        n, reused, pref = (rows[c].sum() for c in ("prompt_tokens", "reused_tokens", "prefix_reused_tokens"))
        assert s["token_hit_rate"] == pytest.approx(reused / n)
        assert s["prefix_hit_rate"] == pytest.approx(pref / n)
        assert s["recovery_beyond_prefix"] == pytest.approx((reused - pref) / (n - pref))
        saved = 1 - rows["prefill_joules"].sum() / rows["nocache_prefill_joules"].sum()
        assert s["energy_saved_vs_none"] == pytest.approx(saved)
        assert s["ttft_p50_s"] == pytest.approx(float(np.percentile(rows["ttft_s"].to_numpy(), 50)))
    assert res.summary["policies"]["prefix"]["token_hit_rate"] > 0.3
    for s in res.summary["policies"].values():   # 1 replica: busy within the run; energy covers the prefills
        assert 0 < s["busy_seconds"] <= s["sim_seconds"] and s["gpu_joules"] > s["prefill_joules"] * 0.5
    assert res.summary["policies"]["none"]["token_hit_rate"] == 0.0
    assert res.summary["policies"]["none"]["prefix_hit_rate"] > 0.3    # the shadow still sees prefix reuse


def test_same_seed_gives_byte_identical_requests_parquet(tmp_path):
    """Two runs with the same config write byte-identical requests.parquet."""
    cfg = ReplayConfig(policies=("prefix", "none"), capacity_bytes=parse_size("200MiB"), replicas=2,
                       router="least-loaded")
    a = write_run(replay(_trace(seed=3), cfg), tmp_path / "a")
    b = write_run(replay(_trace(seed=3), cfg), tmp_path / "b")
    assert (a / "requests.parquet").read_bytes() == (b / "requests.parquet").read_bytes()


def test_write_run_rewrites_its_own_files_only(tmp_path):
    """Rewriting a run dir replaces pic's files; a folder pic did not write needs force, and even then
    its other files stay (issue #9)."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "mine.txt").write_text("old")
    with pytest.raises(OutputError, match="not written by pic"):
        write_run(replay(_trace(num=10), ReplayConfig()), out)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    write_run(replay(_trace(num=10), ReplayConfig()), out, force=True)
    first = (out / "summary.json").read_bytes()
    write_run(replay(_trace(num=12), ReplayConfig()), out)          # pic's own run dir now: no force needed
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "config.json", "mine.txt", "requests.parquet",
                                                     "summary.json"]
    assert (out / "mine.txt").read_text() == "old" and (out / "summary.json").read_bytes() != first


@pytest.mark.parametrize("kwargs, match", [
    ({"policies": ("nope",)}, "unknown policy"),
    ({"model": "no-such-model"}, "unknown model"),
    ({"capacity_bytes": 100.0}, "below one token"),
    ({"policy_options": {"prefix": {"bogus": "1"}}}, "unknown option"),
    ({"policies": ("fixed-chunk",), "capacity_bytes": 100 * 31104.0}, "below one fixed-chunk chunk_size"),
])
def test_impossible_configs_fail_before_work(kwargs, match):
    """Unknown policy/model/option and a capacity below one token / chunk raise from check_config."""
    with pytest.raises(ValueError, match=match):
        check_config(ReplayConfig(**kwargs))


@pytest.mark.parametrize("kwargs", [{"replicas": 0}, {"router": "random"}, {"policies": ()},
                                    {"capacity_bytes": 0.0}, {"policies": ("prefix", "prefix")}])
def test_config_validation(kwargs):
    """ReplayConfig rejects bad values on construction."""
    with pytest.raises(ValueError):
        ReplayConfig(**kwargs)


@pytest.mark.parametrize("text, value", [("40GiB", 40 * 2**30), ("512MiB", 512 * 2**20), ("1.5G", 1.5e9),
                                         ("4096", 4096.0), ("inf", math.inf), ("8 K", 8000.0)])
def test_parse_size(text, value):
    """Sizes parse K/M/G (10^3) and KiB/MiB/GiB (2^10) suffixes and inf."""
    assert parse_size(text) == value


def test_small_capacity_evicts_and_stays_within_bounds():
    """A tight cache evicts, never exceeds capacity (invariants checked per event) and hits less."""
    tight = replay(_trace(), ReplayConfig(policies=("prefix",), capacity_bytes=parse_size("60MiB"),
                                          check_invariants=True)).summary["policies"]["prefix"]
    loose = replay(_trace(), ReplayConfig(policies=("prefix",))).summary["policies"]["prefix"]
    assert tight["evictions"] > 0 and tight["peak_resident_bytes"] <= parse_size("60MiB")
    assert tight["token_hit_rate"] <= loose["token_hit_rate"]


def test_workload_views_are_the_trace_prompts():
    """RequestViews carry exactly the trace's prompt tokens and segment bounds."""
    tr = _trace(num=12)
    w = workload_from_trace(tr, max_requests=5)
    assert w.num_requests == 5
    for i in range(5):
        v = w.view(i)
        assert np.array_equal(v.tokens, tr.prompt(i)) and np.array_equal(v.segment_bounds, tr.segment_bounds(i))


def test_max_requests_and_multiple_replicas():
    """--limit keeps the first N arrivals; every replica serves some requests under round-robin."""
    res = replay(_trace(), ReplayConfig(policies=("prefix",), replicas=3, max_requests=30))
    assert res.requests.height == 30 and set(res.requests["replica"].to_list()) == {0, 1, 2}


@pytest.mark.parametrize("name", __import__("pic.engine.policies", fromlist=["names"]).names())
def test_every_registered_policy_replays_within_contract(name):
    """Every policy: usage invariant after each event, capacity kept, no collisions, deterministic rows."""
    cap = parse_size("80MiB")
    cfg = ReplayConfig(policies=(name,), capacity_bytes=cap, replicas=2, router="cache-aware", verify=True,
                       check_invariants=True)
    a, b = replay(_trace(num=40, seed=9), cfg), replay(_trace(num=40, seed=9), cfg)
    s = a.summary["policies"][name]
    assert s["collisions"] == 0 and s["peak_resident_bytes"] <= 2 * cap
    assert a.requests.equals(b.requests)
    rows = a.requests
    assert (rows["reused_tokens"] <= rows["prompt_tokens"]).all()
    assert (rows.filter(pl.col("uncached"))["reused_tokens"] == 0).all()
    assert (rows["first_token_us"] >= rows["start_us"]).all() and (rows["finish_us"] >= rows["first_token_us"]).all()


@pytest.mark.parametrize("policies", [("fixed-chunk",), ("prefix",), ("block-hash", "prefix"), ("oracle",)])
def test_a_baseline_not_replayed_is_simulated_lean_with_the_same_outputs(monkeypatch, policies):
    """A baseline that is not itself replayed runs lean (its unread columns not priced, ServingModel ``lean``);
    the summary (but wall times) and rows are those of a run where every simulation is fully priced."""
    import pic.engine.replay as R

    seen, real = {}, R.ServingModel

    def model(*a, lean=False, **k):
        m = real(*a, lean=lean, **k)
        seen[a[1][0].name] = lean
        return m

    def strip(d):
        return {k: strip(v) for k, v in d.items() if k != "wall_seconds"} if isinstance(d, dict) else d

    trace, config = _trace(), ReplayConfig(policies=policies)
    monkeypatch.setattr(R, "ServingModel", model)
    got = replay(trace, config)
    if policies == ("fixed-chunk",):     # (it may take prefix's simulation: prefix then fully priced)
        assert seen.pop("fixed-chunk", False) is False and seen == {"prefix": False, "block-hash": True}
    elif policies != ("oracle",):     # (the oracle may take prefix's simulation: prefix then fully priced)
        assert seen == {n: n not in policies for n in ("prefix", "block-hash", *policies)}
    monkeypatch.setattr(R, "ServingModel", lambda *a, lean=False, **k: real(*a, **k))
    want = replay(trace, config)
    assert got.table.equals(want.table)
    assert strip(got.summary) == strip(want.summary)
