"""`pic replay` --config / reproduction, serving-benchmark options, typed choices, -h, warnings, units."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from pic.cli.app import COMMANDS, app

runner = CliRunner()
SAMPLE = "traces/samples/early-variation.parquet"
ENV = {"COLUMNS": "200"}


def _run(*args: str):
    return runner.invoke(app, list(args), env=ENV)


def _flat(text: str) -> str:
    """Output with rich's panel borders and line breaks removed (an error box wraps long messages)."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", text).split())


@pytest.mark.parametrize("cmd", [[], *([c] for c in COMMANDS)], ids=["pic", *COMMANDS])
def test_dash_h_is_help(cmd):
    """-h prints the same help as --help, for pic and every command."""
    short, long = _run(*cmd, "-h"), _run(*cmd, "--help")
    assert short.exit_code == 0 and short.output == long.output and "Usage" in short.output


def test_config_json_replays_the_run_byte_identically(tmp_path):
    """`pic replay --config RUN/config.json -o RUN2` writes the same requests.parquet and summary.json (but
    the wall time), and its config.json differs only in the command that made it."""
    first, second = tmp_path / "a", tmp_path / "b"
    res = _run("replay", SAMPLE, "--policy", "prefix,irminsul", "--capacity", "300MiB", "--replicas", "2",
               "--router", "cache-aware", "--limit", "60", "--seed", "3", "--set", "irminsul.avg_chunk=200",
               "--set", "cost.mfu=0.55", "--time-scale", "0.5", "--percentiles", "50,99.9",
               "--slo", "ttft=80ms,tpot=20ms", "-o", str(first))
    assert res.exit_code == 0, res.output
    conf = json.loads((first / "config.json").read_text())
    assert conf["command"].startswith(f"pic replay {SAMPLE} --output {first} --policy prefix,irminsul")
    assert "--slo ttft=80ms,tpot=20ms" in conf["command"] and conf["pic_version"]
    assert len(conf["trace_sha256"]) == 64
    res = _run("replay", "--config", str(first / "config.json"), "-o", str(second))
    assert res.exit_code == 0, res.output
    assert (first / "requests.parquet").read_bytes() == (second / "requests.parquet").read_bytes()
    s1, s2 = (json.loads((d / "summary.json").read_text()) for d in (first, second))
    for s in (s1, s2):
        for p in s["policies"].values():
            p.pop("wall_seconds")
    assert s1 == s2 and "itl_p99.9_s" in s1["policies"]["irminsul"] and "goodput_rps" in s1["policies"]["prefix"]
    c1, c2 = (json.loads((d / "config.json").read_text()) for d in (first, second))
    assert "--config" in c2.pop("command") and c1.pop("command")
    assert c1 == c2


def test_toml_config_with_command_line_overrides(tmp_path):
    """A TOML file sets the run; options on the command line win; policy options merge."""
    (tmp_path / "run.toml").write_text(
        f'trace = "{SAMPLE}"\npolicy = "prefix,irminsul"\ncapacity = "1GiB"\nlimit = 30\n'
        '[set]\nirminsul = { avg_chunk = 200 }\n')
    out = tmp_path / "r"
    res = _run("replay", "--config", str(tmp_path / "run.toml"), "--capacity", "2GiB", "--set",
               "irminsul.s1=false", "-o", str(out))
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "config.json").read_text())["replay"]
    assert rep["capacity_bytes"] == 2 * 2**30 and rep["max_requests"] == 30
    assert rep["policies"] == ["prefix", "irminsul"]
    assert rep["policy_options"]["irminsul"] == {"avg_chunk": 200, "s1": "false"}


def test_config_errors_are_one_line(tmp_path):
    """An unknown key in a config file, a missing trace, and a trace changed since config.json: exit 1."""
    (tmp_path / "bad.yaml").write_text(f"trace: {SAMPLE}\ncapcity: 1GiB\n")
    res = _run("replay", "--config", str(tmp_path / "bad.yaml"), "-o", str(tmp_path / "r"))
    assert res.exit_code == 1 and "unknown setting 'capcity' (did you mean 'capacity'?)" in res.output
    res = _run("replay", "-o", str(tmp_path / "r"))
    assert res.exit_code == 1 and "TRACE: missing" in res.output
    import shutil

    t = tmp_path / "t.parquet"
    shutil.copy(SAMPLE, t)
    assert _run("replay", str(t), "--limit", "20", "-o", str(tmp_path / "a")).exit_code == 0
    shutil.copy("traces/samples/chat.parquet", t)
    res = _run("replay", "--config", str(tmp_path / "a" / "config.json"), "-o", str(tmp_path / "b"))
    assert res.exit_code == 1 and "the trace changed since" in res.output
    assert not (tmp_path / "b").exists()


def test_output_is_required_but_list_policies_needs_none():
    """-o is a required option (shown so); --list-policies still works alone."""
    res = _run("replay", SAMPLE)
    assert res.exit_code == 2 and "Missing option '--output'" in res.output
    assert "[required]" in _run("replay", "-h").output
    assert _run("replay", "--list-policies").exit_code == 0


@pytest.mark.parametrize(("args", "want"), [
    (["--router", "cache-awre"], "did you mean 'cache-aware'?"),
    (["--gpu", "h20"], "did you mean 'h200'?"),
])
def test_typed_choices_suggest(tmp_path, args, want):
    """Enum options show their choices in --help and suggest the closest value on a typo."""
    res = _run("replay", SAMPLE, *args, "-o", str(tmp_path / "r"))
    assert res.exit_code == 2 and want in _flat(res.output)
    assert "<round-robin|least-loaded|cache-aware>" in _run("replay", "-h").output
    assert "<h200|h100|a100>" in _run("replay", "-h").output


def test_warnings_headline_and_units(tmp_path):
    """--rate inf saturates: warned on stderr; the table shows ms, a speed-up column, no -0.0%; the
    headline sentence follows the table."""
    res = _run("replay", SAMPLE, "--policy", "prefix,irminsul", "--limit", "60", "--rate", "inf",
               "-o", str(tmp_path / "r"))
    assert res.exit_code == 0, res.output
    out = res.output
    assert "warning:" in out and "saturated" in out
    assert " ms " in out and "speed-up" in out and "peak GiB (all replicas)" in out
    assert "-0.0%" not in out and "\u22120.0%" not in out
    assert re.search(r"irminsul reuses [\d.]+% of prompt tokens vs [\d.]+% for the best prefix cache \(prefix\)",
                     out)


def test_sweep_config_file_and_overrides(tmp_path):
    """`pic sweep --config` takes the axes (traces, models, capacities) and replay settings from YAML;
    --capacity on the command line replaces the file's list."""
    (tmp_path / "s.yaml").write_text(f"traces: [{SAMPLE}]\ncapacities: [1GiB, 4GiB]\npolicy: prefix,irminsul\n"
                                     "limit: 20\njobs: 1\nslo: {ttft: 100ms}\n")
    out = tmp_path / "sw"
    res = _run("sweep", "--config", str(tmp_path / "s.yaml"), "--capacity", "2GiB,inf", "-o", str(out))
    assert res.exit_code == 0, res.output
    cells = sorted(p.parent.name for p in out.rglob("summary.json"))
    assert cells == ["cap-2GiB", "cap-inf"]
    conf = json.loads(next(out.rglob("cap-2GiB/config.json")).read_text())
    assert conf["replay"]["policies"] == ["prefix", "irminsul"] and conf["replay"]["max_requests"] == 20
    assert conf["replay"]["slo"] == {"ttft": 0.1}
    res = _run("sweep", "-o", str(tmp_path / "none"))
    assert res.exit_code == 1 and "TRACES: missing" in res.output


def test_synth_set_takes_an_optional_scenario_scope_and_suggests(tmp_path):
    """synth --set KNOB=V and --set SCENARIO.KNOB=V are the same; another scope is refused; a misspelt
    scenario names the closest one."""
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert _run("synth", "-s", "rag-reorder", "-n", "12", "--set", "docs_max=6", "-o", str(a)).exit_code == 0
    assert _run("synth", "-s", "rag-reorder", "-n", "12", "--set", "rag-reorder.docs_max=6", "-o",
                str(b)).exit_code == 0
    assert a.read_bytes() == b.read_bytes()
    res = _run("synth", "-s", "rag-reorder", "-n", "12", "--set", "chat.docs_max=3", "-o", str(tmp_path / "c.parquet"))
    assert res.exit_code == 1 and "scope must be the scenario being generated (rag-reorder)" in res.output
    res = _run("synth", "-s", "rag-reordr", "-o", str(tmp_path / "d.parquet"))
    assert res.exit_code == 2 and "did you mean 'rag-reorder'?" in _flat(res.output)


def test_set_values_are_typed_no_silent_truncation(tmp_path):
    """--set irminsul.avg_chunk=200.7 is refused (an integer option), not truncated to 200."""
    res = _run("replay", SAMPLE, "--policy", "irminsul", "--set", "irminsul.avg_chunk=200.7", "--limit", "5",
               "-o", str(tmp_path / "r"))
    assert res.exit_code == 1 and "avg_chunk" in res.output and "200.7" in res.output
    assert not (tmp_path / "r").exists()
