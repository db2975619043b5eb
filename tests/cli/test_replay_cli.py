"""`pic replay` CLI: builds the ReplayConfig, calls engine.replay once, prints table/JSON, fails early."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

import pic.engine.replay as engine
from pic.cli.app import app
from pic.engine.replay import replay as real_replay
from pic.traces.io import write_trace
from tests.engine.test_replay import _trace

runner = CliRunner()


@pytest.fixture
def trace_file(tmp_path):
    return write_trace(_trace(num=20), tmp_path / "t.parquet")


def test_passes_config_and_writes_run_dir(trace_file, tmp_path, monkeypatch):
    """Options become one ReplayConfig; the run dir is written; the table names each policy."""
    seen = {}

    def spy(trace, config, progress=None, **kw):
        seen["config"] = config
        return real_replay(trace, config, progress, **kw)

    monkeypatch.setattr(engine, "replay", spy)   # (pic.cli.replay imports it per command)
    out = tmp_path / "run"
    res = runner.invoke(app, ["replay", str(trace_file), "--policy", "prefix,none", "--capacity", "2GiB",
                              "--replicas", "2", "--router", "least-loaded", "--set", "prefix.page_size=16",
                              "--seed", "7", "--limit", "15", "--verify", "-o", str(out)])
    assert res.exit_code == 0, res.output
    c = seen["config"]
    assert c.policies == ("prefix", "none") and c.capacity_bytes == 2 * 2**30 and c.replicas == 2
    assert c.router == "least-loaded" and c.policy_options == {"prefix": {"page_size": "16"}}
    assert c.seed == 7 and c.max_requests == 15 and c.verify and c.check_invariants
    assert (out / "requests.parquet").exists() and "prefix" in res.output and "none" in res.output


def test_json_prints_summary(trace_file, tmp_path):
    """--json prints exactly summary.json to stdout."""
    out = tmp_path / "run"
    res = runner.invoke(app, ["replay", str(trace_file), "--capacity", "inf", "--json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    printed = json.loads(res.stdout)
    on_disk = json.loads((out / "summary.json").read_text())
    assert printed == on_disk and math.isclose(printed["policies"]["prefix"]["token_hit_rate"],
                                               on_disk["policies"]["prefix"]["token_hit_rate"])


@pytest.mark.parametrize("args, message", [
    (["--policy", "prefix,nope"], "unknown policy 'nope'"),
    (["--model", "gpt-17"], "unknown model"),
    (["--capacity", "10K"], "below one token"),
    (["--capacity", "lots"], "size 'lots'"),
    (["--set", "prefix.nope=1"], "unknown option"),
    (["--baseline", "irminsul"], "not an exact-prefix cache"),
    (["--baseline", "block-hash,block-hash"], "distinct"),
])
def test_bad_options_fail_before_any_work(trace_file, tmp_path, monkeypatch, args, message):
    """Impossible settings exit 1 with one clear line and never start a replay."""
    monkeypatch.setattr(engine, "replay", lambda *a, **k: pytest.fail("replay started"))
    res = runner.invoke(app, ["replay", str(trace_file), *args, "-o", str(tmp_path / "r")])
    assert res.exit_code == 1 and message in res.output and not (tmp_path / "r").exists()


def test_list_policies_shows_registry_and_options():
    """--list-policies lists every registered policy with its options."""
    res = runner.invoke(app, ["replay", "--list-policies"])
    assert res.exit_code == 0
    for name in ("prefix", "none", "page_size"):
        assert name in res.output


def test_cost_overrides_reach_the_cost_model(trace_file, tmp_path):
    """--set cost.KEY=VALUE lands in ReplayConfig.cost and in config.json's resolved CostConfig."""
    out = tmp_path / "run"
    res = runner.invoke(app, ["replay", str(trace_file), "--set", "cost.mfu=0.25", "-o", str(out)])
    assert res.exit_code == 0, res.output
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["replay"]["cost"] == {"mfu": "0.25"} and cfg["cost"]["config"]["mfu"] == 0.25


def test_one_baseline_replays_only_it(trace_file, tmp_path):
    """--baseline block-hash compares with vLLM's prefix caching alone: only it is simulated beside the policy,
    named as the baseline in the summary, the headline and config.json (which replays it again)."""
    out = tmp_path / "run"
    res = runner.invoke(app, ["replay", str(trace_file), "--policy", "fixed-chunk", "--baseline", "block-hash",
                              "-o", str(out)])
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert set(s["baselines"]) == {"best", "block-hash"} and s["baselines"]["best"] == "block-hash"
    assert s["policies"]["fixed-chunk"]["baseline"] == "block-hash" and "(block-hash)" in res.output
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["replay"]["baselines"] == ["block-hash"] and set(cfg["policies"]) == {"fixed-chunk", "block-hash"}


def test_headline_of_a_hybrid_run_is_about_linearkv():
    """``pic replay``'s sentence (from summary.json) features linearkv on a hybrid model, irminsul otherwise."""
    from pic.cli.settings import summary_headline

    pol = {"token_hit_rate": 0.9, "prefix_hit_rate": 0.5, "ttft_p50_s": 0.01, "prefill_joules": 1.0,
           "energy_saved_vs_prefix": 0.2, "oracle_share": 0.9, "baseline": "prefix"}
    s = {"policies": {"prefix": {**pol, "token_hit_rate": 0.5, "energy_saved_vs_prefix": 0.0},
                      "irminsul": pol, "linearkv": {**pol, "token_hit_rate": 0.8}}}
    assert summary_headline({**s, "model": "olmo-hybrid-7b"}).startswith("linearkv reuses 80.0%")
    assert summary_headline({**s, "model": "llama-3.1-8b"}).startswith("irminsul reuses 90.0%")
