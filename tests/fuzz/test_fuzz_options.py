"""Property: any `--set POLICY.KEY=VALUE` / `cost.KEY=VALUE` value and any `--model` config.json either
fails the config check with one ValueError line naming the option (or the file and field), or the replay
then runs to the end: nothing fails later, deep in the engine (issue #9)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from pic.cli.app import app
from pic.engine import policies as registry
from pic.engine.config import ReplayConfig
from pic.engine.cost import CostConfig
from pic.engine.replay import check_config, replay
from pic.traces.io import write_trace
from tests.engine.test_replay import _trace
from tests.fuzz.strategies import INTS, OPTION_TEXT, VALUES

FUZZ = settings(max_examples=int(os.environ.get("PIC_FUZZ_EXAMPLES", "60")), deadline=None, derandomize=not os.environ.get("PIC_FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.too_slow])
TRACE = _trace(num=6)
#: (scope, option) pairs a user can --set: every registered policy's options, and the cost model's
OPTIONS = sorted({(name, f.name) for name in registry.names() if dataclasses.is_dataclass(registry.get(name).Config)
                  for f in dataclasses.fields(registry.get(name).Config) if not f.name.startswith("over_")}
                 | {("cost", f.name) for f in dataclasses.fields(CostConfig)})
CAPACITIES = st.sampled_from([math.inf, float(2**30), float(64 * 2**20)])


def _replay_or_refuse(config_kwargs: dict, *mentions: str) -> None:
    try:
        config = ReplayConfig(**config_kwargs)
        check_config(config)
    except ValueError as e:
        msg = str(e)
        assert "\n" not in msg and any(m in msg for m in mentions), msg
        return
    result = replay(TRACE, config)                 # an accepted setting must not fail later
    for s in result.summary["policies"].values():
        assert s["requests"] == TRACE.num_requests


@FUZZ
@given(option=st.sampled_from(OPTIONS), value=OPTION_TEXT, capacity=CAPACITIES)
def test_set_values_are_checked_up_front(option, value, capacity):
    """One `--set SCOPE.KEY=VALUE` with any text as VALUE."""
    scope, key = option
    policy = "prefix" if scope == "cost" else scope
    kwargs = {"policies": (policy,), "capacity_bytes": capacity, "seed": 1}
    if scope == "cost":
        kwargs["cost"] = {key: value}
    else:
        kwargs["policy_options"] = {scope: {key: value}}
    _replay_or_refuse(kwargs, key, f"{scope}: ")


@FUZZ
@given(sets=st.lists(st.tuples(st.sampled_from([o for o in OPTIONS if o[0] == "irminsul"]), OPTION_TEXT),
                     min_size=2, max_size=4))
def test_combinations_of_set_values(sets):
    """Several options at once (min/avg/max chunk interplay): refused naming the options, or replayed."""
    opts = {key: value for (_, key), value in sets}
    _replay_or_refuse({"policies": ("irminsul",), "policy_options": {"irminsul": opts}}, "irminsul")


GQA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
       "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000}
MLA = {"model_type": "deepseek_v2", "num_hidden_layers": 3, "hidden_size": 512, "num_attention_heads": 4,
       "kv_lora_rank": 64, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32,
       "intermediate_size": 1024, "moe_intermediate_size": 128, "n_routed_experts": 4, "num_experts_per_tok": 2,
       "n_shared_experts": 1, "first_k_dense_replace": 1, "vocab_size": 1000}
HYBRID = {"model_type": "qwen3_next", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 64, "full_attention_interval": 2, "linear_num_key_heads": 2,
          "linear_num_value_heads": 4, "linear_key_head_dim": 32, "linear_value_head_dim": 32, "vocab_size": 1000}
FIELDS = sorted({k for cfg in (GQA, MLA, HYBRID) for k in cfg} | {"partial_rotary_factor", "torch_dtype",
                                                                    "layer_types", "text_config", "head_dim"})


@FUZZ
@given(base=st.sampled_from([GQA, MLA, HYBRID]),
       changes=st.dictionaries(st.sampled_from(FIELDS), st.one_of(INTS, VALUES), min_size=1, max_size=3))
def test_model_config_values(base, changes):
    """A --model config.json with any value in any field: one line naming the file, or a replay that runs."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "config.json"
        p.write_text(json.dumps({**base, **changes}))
        _replay_or_refuse({"model": str(p), "policies": ("prefix",)}, "config.json")


runner = CliRunner()


@settings(FUZZ, max_examples=int(os.environ.get("PIC_FUZZ_CLI_EXAMPLES", "12")))
@given(option=st.sampled_from(OPTIONS), value=OPTION_TEXT)
def test_replay_cli_exit_codes(option, value):
    """`pic replay --set`: exit 0 with a run dir, or exit 1 with one stderr line and nothing written."""
    scope, key = option
    with tempfile.TemporaryDirectory() as d:
        t = write_trace(TRACE, Path(d) / "t.parquet")
        out = Path(d) / "run"
        policy = "prefix" if scope == "cost" else scope
        res = runner.invoke(app, ["replay", str(t), "--policy", policy, "--set", f"{scope}.{key}={value}", "-o",
                                  str(out)])
        assert res.exit_code in (0, 1), (res.exit_code, res.output, res.exception)
        if res.exit_code == 1:
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1 and "internal error" not in lines[0], res.stderr
            assert not out.exists()
        else:
            assert (out / "summary.json").exists()
        assert not [p.name for p in Path(d).iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("value", ["200.7", "1e400", "inf", "nan", "-1", "9" * 30, "0x10", ""])
def test_irminsul_avg_chunk_never_silently_changes(value):
    """Regression anchors for the fuzz: these exact values are refused, never rounded or clamped."""
    with pytest.raises(ValueError, match="irminsul.avg_chunk"):
        check_config(ReplayConfig(policies=("irminsul",), policy_options={"irminsul": {"avg_chunk": value}}))
