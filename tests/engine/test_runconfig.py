"""Config files (TOML / YAML / a run's config.json) -> ReplayConfig, overrides on top, provenance."""

from __future__ import annotations

import json
import math

import pytest

from pic.engine.config import ReplayConfig
from pic.engine.replay import read_trace_file, replay, write_run
from pic.engine.runconfig import (
    file_settings,
    merge,
    normalize,
    read_config_file,
    replay_config,
    trace_sha256,
)

SAMPLE = "traces/samples/early-variation.parquet"

TOML = """
trace = "traces/samples/early-variation.parquet"
policy = "prefix,irminsul"
capacity = "256MiB"
token-budget = 4096
limit = 40
percentiles = [50, 99.9]
slo = { ttft = "80ms", tpot = 0.02 }   # a number is seconds, as config.json writes it
time_scale = 0.5

[set]
irminsul = { avg_chunk = 128 }
"cost.mfu" = 0.5
"""

YAML = """
trace: traces/samples/early-variation.parquet
policy: [prefix, irminsul]
capacity: 256MiB
token_budget: 4096
limit: 40
percentiles: "50,99.9"
slo: {ttft: 80ms, tpot: 20ms}
time-scale: 0.5
set: ["irminsul.avg_chunk=128", "cost.mfu=0.5"]
"""


def _from(path) -> tuple[ReplayConfig, dict]:
    values, extras = file_settings(read_config_file(path), str(path))
    return replay_config(values, {}), extras


def test_toml_and_yaml_give_the_same_config(tmp_path):
    """The same settings in TOML and in YAML (CLI spellings, tables or P.K=V lists) build one ReplayConfig."""
    (tmp_path / "a.toml").write_text(TOML)
    (tmp_path / "b.yaml").write_text(YAML)
    a, ea = _from(tmp_path / "a.toml")
    b, eb = _from(tmp_path / "b.yaml")
    assert ea["trace"] == eb["trace"] == SAMPLE
    assert a.policies == ("prefix", "irminsul") and a.capacity_bytes == 256 * 2**20
    assert a.token_budget == 4096 and a.max_requests == 40 and a.time_scale == 0.5
    assert a.percentiles == (50.0, 99.9) and a.slo == {"ttft": 0.08, "tpot": 0.02}
    assert a.policy_options == {"irminsul": {"avg_chunk": 128}} and a.cost == {"mfu": 0.5}
    for f in ("policies", "capacity_bytes", "token_budget", "max_requests", "time_scale", "percentiles", "slo"):
        assert getattr(a, f) == getattr(b, f), f
    assert {k: float(v) for k, v in b.policy_options["irminsul"].items()} == {"avg_chunk": 128.0}


def test_overrides_win_and_options_merge(tmp_path):
    """Command-line values override the file; policy options and cost factors merge key by key."""
    file = normalize({"policy": "prefix,irminsul", "capacity": "1GiB", "set": ["irminsul.avg_chunk=128",
                                                                               "cost.mfu=0.5"]}, "f")
    cli = normalize({"capacity": "2GiB", "set": ["irminsul.s1=false", "cost.mbu=0.7"]}, "cli")
    cfg = replay_config(file, cli)
    assert cfg.capacity_bytes == 2 * 2**30
    assert cfg.policy_options == {"irminsul": {"avg_chunk": "128", "s1": "false"}}
    assert cfg.cost == {"mfu": "0.5", "mbu": "0.7"}
    assert merge({"a": 1}, {"a": 2, "b": 3}) == {"a": 2, "b": 3}


@pytest.mark.parametrize(("content", "suffix", "match"), [
    ("capcity = '1GiB'\n", ".toml", r"c\.toml: unknown setting 'capcity' \(did you mean 'capacity'\?\)"),
    ("policy = [1, 2]\n", ".toml", r"policy: expected a comma-separated string or a list"),
    ("capacity = 'lots'\n", ".toml", r"size 'lots'"),
    ("x = [\n", ".toml", r"c\.toml: invalid TOML"),
    ("a: [1\nb: 2\n", ".yaml", r"c\.yaml:\d+: invalid YAML"),
    ("[1, 2]\n", ".json", r"c\.json: expected a mapping of settings, got list"),
    ("set = 5\n", ".toml", r"set: expected a table or a list"),
    ("rate = 'fast'\n", ".toml", r"rate 'fast'"),
], ids=["typo", "policy-type", "size", "toml-syntax", "yaml-syntax", "not-a-mapping", "set-type", "rate"])
def test_bad_config_files_fail_in_one_line(tmp_path, content, suffix, match):
    """A bad file, key or value is a ValueError naming the file (and line where the parser gives one)."""
    p = tmp_path / f"c{suffix}"
    p.write_text(content)
    with pytest.raises(ValueError, match=match):
        _from(p)


def test_unknown_suffix(tmp_path):
    p = tmp_path / "c.ini"
    p.write_text("x=1\n")
    with pytest.raises(ValueError, match=r"must end in \.toml, \.yaml, \.yml, \.json"):
        read_config_file(p)


def test_config_json_reproduces_the_run_byte_identically(tmp_path):
    """A run's config.json, read back as a config file, replays the same requests.parquet bytes."""
    cfg = ReplayConfig(policies=("prefix", "irminsul"), capacity_bytes=300 * 2**20, max_requests=50, seed=3,
                       policy_options={"irminsul": {"avg_chunk": "200"}}, cost={"mfu": "0.55"}, time_scale=0.4,
                       percentiles=(50.0, 95.0), slo={"ttft": 0.05}, replicas=2, router="cache-aware")
    trace = read_trace_file(SAMPLE)
    first = write_run(replay(trace, cfg, command="pic replay ..."), tmp_path / "a")
    conf = json.loads((first / "config.json").read_text())
    assert conf["trace_sha256"] == trace_sha256(trace) and conf["command"] == "pic replay ..."
    assert conf["pic_version"] and conf["trace_path"].endswith(SAMPLE)
    again, extras = _from(first / "config.json")
    assert again == cfg and extras["trace_sha256"] == conf["trace_sha256"]
    second = write_run(replay(read_trace_file(extras["trace"]), again), tmp_path / "b")
    assert (first / "requests.parquet").read_bytes() == (second / "requests.parquet").read_bytes()
    s1, s2 = (json.loads((d / "summary.json").read_text()) for d in (first, second))
    for s in (s1, s2):
        for p in s["policies"].values():
            p.pop("wall_seconds")
    assert s1 == s2


def test_infinite_values_round_trip(tmp_path):
    """Unbounded capacity (null) and --rate inf ("inf") survive config.json."""
    cfg = ReplayConfig(rate=math.inf, max_requests=5)
    run = write_run(replay(read_trace_file(SAMPLE), cfg), tmp_path / "r")
    again, _ = _from(run / "config.json")
    assert again.rate == math.inf and math.isinf(again.capacity_bytes) and again == cfg


def test_trace_digest_is_content_not_encoding(tmp_path):
    """Re-writing a trace to another file keeps its digest; changing one arrival changes it."""
    from pic.traces.io import write_trace

    t = read_trace_file(SAMPLE)
    write_trace(t, tmp_path / "copy.parquet")
    assert trace_sha256(read_trace_file(tmp_path / "copy.parquet")) == trace_sha256(t)
    import dataclasses

    import polars as pl
    moved = dataclasses.replace(t, requests=t.requests.with_columns(
        pl.when(pl.col("request_id") == 5).then(pl.col("arrival_us") + 1).otherwise(pl.col("arrival_us"))
        .alias("arrival_us")))
    assert trace_sha256(moved) != trace_sha256(t)


def test_the_run_toml_in_docs_is_valid(tmp_path):
    """docs/replay.md's example run.toml builds a ReplayConfig that passes every check."""
    import re
    from pathlib import Path

    from pic.engine.replay import check_config

    doc = (Path(__file__).resolve().parents[2] / "docs" / "replay.md").read_text()
    text = re.search(r"```toml\n(.*?)```", doc, re.S).group(1)
    (tmp_path / "run.toml").write_text(text)
    cfg, extras = _from(tmp_path / "run.toml")
    check_config(cfg)
    assert extras["trace"] == "rag.parquet" and cfg.replicas == 2 and cfg.slo == {"ttft": 0.2, "tpot": 0.04}


def test_trace_digest_of_null_sessions_and_agents(tmp_path):
    """A trace whose requests have no session or agent (null ids pass validation) is hashed, and a null id
    hashes apart from the empty string; a replay of it writes its config.json."""
    import dataclasses

    import polars as pl

    t = read_trace_file(SAMPLE)
    for col in ("session_id", "agent_id"):
        nulled = dataclasses.replace(t, requests=t.requests.with_columns(pl.lit(None, pl.String).alias(col)))
        empty = dataclasses.replace(t, requests=t.requests.with_columns(pl.lit("", pl.String).alias(col)))
        assert trace_sha256(nulled) != trace_sha256(empty) != trace_sha256(t)
        run = write_run(replay(nulled, ReplayConfig(max_requests=5)), tmp_path / col)
        assert json.loads((run / "config.json").read_text())["trace_sha256"] == trace_sha256(nulled)
