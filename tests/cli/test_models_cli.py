"""`pic models`: tables and JSON of the presets, extra HF configs, clear errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pic.cli.app import app

runner = CliRunner()


def test_models_table_lists_presets():
    """The table shows every preset name, DeepSeek-V2-Lite's KV bytes and the GPU presets."""
    r = runner.invoke(app, ["models"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for name in ("deepseek-v2-lite", "llama-3.1-8b", "qwen3-next-80b-a3b", "granite-4.0-h-small", "h200", "a100"):
        assert name in r.output
    assert "31,104" in r.output and "131,072" in r.output


def test_models_json():
    """--json prints the catalog with derived sizes."""
    r = runner.invoke(app, ["models", "--json"])
    assert r.exit_code == 0, r.output
    cat = json.loads(r.output)
    by_name = {m["name"]: m for m in cat["models"]}
    assert by_name["deepseek-v2-lite"]["kv_bytes_per_token"] == 31_104
    assert by_name["qwen3-next-80b-a3b"]["state_bytes"] > 0
    assert {g["name"] for g in cat["gpus"]} >= {"h200", "h100", "a100"}


def test_models_extra_config(tmp_path):
    """--config adds a model read from a Hugging Face config.json."""
    d = tmp_path / "my-llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
                                               "num_key_value_heads": 2, "intermediate_size": 512,
                                               "vocab_size": 1000}))
    r = runner.invoke(app, ["models", "--json", "--config", str(d / "config.json")])
    assert r.exit_code == 0, r.output
    m = json.loads(r.output)["models"][-1]
    assert m["name"] == "my-llama" and m["kv_bytes_per_token"] == 2 * 2 * 2 * 64 * 2


def test_models_bad_config(tmp_path):
    """A broken config.json exits 1 with a one-line error naming the file."""
    p = tmp_path / "config.json"
    p.write_text("{")
    r = runner.invoke(app, ["models", "--config", str(p)])
    assert r.exit_code == 1
    assert "invalid JSON" in r.output and "config.json" in r.output


@pytest.mark.parametrize("width", [80, 60])
def test_models_fit_a_narrow_terminal_without_cutting_names(width):
    """In 80 columns every line fits and every preset name (what users copy) is printed whole; at 60 the
    names are still whole (other columns may shrink)."""
    from pic.engine.specs import GPUS, MODELS

    res = CliRunner().invoke(app, ["models"], env={"COLUMNS": str(width)})
    assert res.exit_code == 0
    lines = res.output.splitlines()
    if width == 80:
        assert max(len(line) for line in lines) <= 80
    names = {line.split()[0] for line in lines if line.strip()}
    assert set(MODELS) <= names and set(GPUS) <= names
