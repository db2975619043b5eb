"""`pic sweep` CLI: builds one SweepConfig, prints the hit-rate grid, fails early, then `pic report` on it."""

from __future__ import annotations

import json
import math
import sys

import pytest
from typer.testing import CliRunner

import pic.cli.sweep as cli
from pic.cli.app import app
from pic.engine.sweep import run_sweep as real_run_sweep
from pic.traces.io import write_trace
from pic.traces.synth import synth

runner = CliRunner()


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    return str(write_trace(synth("early-variation", 24, seed=2), tmp_path_factory.mktemp("t") / "ev.parquet"))


def test_options_become_one_sweep_config(trace_file, tmp_path, monkeypatch):
    """Comma lists become the product axes; replay options land in the shared ReplayConfig; grid printed."""
    seen = {}

    def spy(config, out_dir, progress=None):
        seen["config"] = config
        return real_run_sweep(config, out_dir, progress)

    monkeypatch.setattr(cli, "run_sweep", spy)
    out = tmp_path / "s"
    res = runner.invoke(app, ["sweep", trace_file, "--policy", "prefix,fixed-chunk", "--capacity", "1GiB, inf",
                              "--model", "deepseek-v2-lite", "--set", "prefix.page_size=16", "--seed", "5",
                              "--limit", "20", "--replicas", "2", "-j", "1", "-o", str(out)])
    assert res.exit_code == 0, res.output
    c = seen["config"]
    assert c.capacities == (2**30, math.inf) and c.models == ("deepseek-v2-lite",) and c.num_jobs == 1
    assert c.replay.policies == ("prefix", "fixed-chunk") and c.replay.policy_options == {"prefix": {"page_size": "16"}}
    assert c.replay.seed == 5 and c.replay.max_requests == 20 and c.replay.replicas == 2 and c.backend == "local"
    assert (out / "ev" / "deepseek-v2-lite" / "cap-1GiB" / "requests.parquet").is_file()
    assert "fixed-chunk" in res.output and "1GiB" in res.output and "2 cells (2 done)" in res.output
    again = runner.invoke(app, ["sweep", trace_file, "--policy", "prefix,fixed-chunk", "--capacity", "1GiB,inf",
                                "--set", "prefix.page_size=16", "--seed", "5", "--limit", "20", "--replicas", "2",
                                "-o", str(out)])
    assert again.exit_code == 0 and "2 cells (2 skipped)" in again.output


def test_json_prints_sweep_json(trace_file, tmp_path):
    """--json prints sweep.json: one entry per cell with its run dir and status."""
    res = runner.invoke(app, ["sweep", trace_file, "--capacity", "inf", "--limit", "10", "--json",
                              "-o", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [(c["run_dir"], c["status"]) for c in doc["cells"]] == [("ev/deepseek-v2-lite/cap-inf", "done")]


def test_bad_cell_fails_before_any_work(trace_file, tmp_path):
    """An impossible capacity for one model is one error line, exit 1, and no sweep dir."""
    out = tmp_path / "s"
    res = runner.invoke(app, ["sweep", trace_file, "--model", "deepseek-v2-lite,llama-3.1-8b",
                              "--capacity", "inf,100000", "-o", str(out)])
    assert res.exit_code == 1 and "llama-3.1-8b" in res.output and "error:" in res.output
    assert not out.exists()


def test_address_without_ray_names_the_extra(trace_file, tmp_path, monkeypatch):
    """--address implies the ray backend; without Ray installed it says how to install it."""
    monkeypatch.setitem(sys.modules, "ray", None)
    res = runner.invoke(app, ["sweep", trace_file, "--address", "auto", "-o", str(tmp_path / "s")])
    assert res.exit_code == 1 and "pic[dist]" in res.output


def test_failed_cell_exits_nonzero(trace_file, tmp_path, monkeypatch):
    """A cell that raises is reported with its message and makes the command exit 1."""
    import pic.engine.sweep as sweep

    def boom(trace, config, progress=None):
        raise RuntimeError("kaput")

    monkeypatch.setattr(sweep, "replay", boom)
    res = runner.invoke(app, ["sweep", trace_file, "--capacity", "inf", "-j", "1", "-o", str(tmp_path / "s")])
    assert res.exit_code == 1 and "kaput" in res.output and "1 of 1 cells failed" in res.output


def test_report_on_sweep_dir_draws_capacity_plot(trace_file, tmp_path):
    """`pic report SWEEP_DIR --plots` writes hit_rate_vs_capacity.png and the HTML."""
    out = tmp_path / "s"
    res = runner.invoke(app, ["sweep", trace_file, "--policy", "prefix,fixed-chunk", "--capacity", "256MiB,inf",
                              "--limit", "12", "-j", "1", "-o", str(out)])
    assert res.exit_code == 0, res.output
    rep = runner.invoke(app, ["report", str(out), "--html", str(tmp_path / "r.html"), "--plots",
                              str(tmp_path / "p")])
    assert rep.exit_code == 0, rep.output
    assert (tmp_path / "p" / "hit_rate_vs_capacity.png").is_file() and (tmp_path / "r.html").is_file()
    assert "ev/deepseek-v2-lite/cap-256MiB" in (tmp_path / "r.html").read_text()
