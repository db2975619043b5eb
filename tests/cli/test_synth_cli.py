"""`pic synth` through typer's CliRunner."""

from __future__ import annotations

from typer.testing import CliRunner

from pic.cli import synth as synth_cli
from pic.cli.app import app
from pic.traces.io import read_trace

runner = CliRunner()


def test_writes_trace_and_summary(tmp_path):
    """A real run writes a readable trace with the requested count and prints the summary."""
    out = tmp_path / "ev.parquet"
    res = runner.invoke(app, ["synth", "-s", "early-variation", "-n", "12", "--seed", "3", "-o", str(out)])
    assert res.exit_code == 0, res.output
    t = read_trace(out)
    assert t.num_requests == 12 and t.meta["synth.seed"] == "3"
    assert "dedup ratio" in res.output


def test_passes_knobs_to_library(tmp_path, monkeypatch):
    """Options and --set become the exact kwargs of traces.synth.synth."""
    seen = {}
    real = synth_cli.synth_lib.synth

    def fake(scenario, num_requests, seed, markers=False, *, progress=None, **knobs):
        seen.update(scenario=scenario, num_requests=num_requests, seed=seed, markers=markers, knobs=knobs)
        assert callable(progress)
        return real(scenario, 3, seed, markers=markers, **knobs)

    monkeypatch.setattr(synth_cli.synth_lib, "synth", fake)
    res = runner.invoke(app, [
        "synth", "-s", "early-variation", "-n", "9", "--seed", "5", "--markers", "--rate", "2.5",
        "--header-len", "20:40", "--pool-size", "10", "--docs", "1:3", "--set", "zipf-a=0.5", "-o",
        str(tmp_path / "x.parquet"),
    ])
    assert res.exit_code == 0, res.output
    assert seen == {"scenario": "early-variation", "num_requests": 9, "seed": 5, "markers": True, "knobs": {
        "header_min": "20", "header_max": "40", "docs_min": "1", "docs_max": "3", "zipf_a": "0.5",
        "rate": 2.5, "pool_size": 10}}


def test_bad_knob_fails_without_output(tmp_path):
    """An unknown knob exits 1 with one error line and leaves no file behind."""
    out = tmp_path / "bad.parquet"
    res = runner.invoke(app, ["synth", "-s", "early-variation", "--set", "bogus=1", "-o", str(out)])
    assert res.exit_code == 1
    assert "unknown knob(s) bogus" in res.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_bad_range_option_and_missing_output(tmp_path):
    """--header-len without MIN:MAX and a missing --output are clear errors."""
    res = runner.invoke(app, ["synth", "-s", "early-variation", "--header-len", "10", "-o",
                                 str(tmp_path / "y.parquet")])
    assert res.exit_code == 1 and "--header-len: expected MIN:MAX" in res.output
    res = runner.invoke(app, ["synth", "-s", "early-variation"])
    assert res.exit_code == 1 and "--output" in res.output


def test_list_knobs_and_unknown_scenario():
    """--list-knobs prints the knob table; an unknown scenario is a usage error."""
    res = runner.invoke(app, ["synth", "-s", "early-variation", "--list-knobs"])
    assert res.exit_code == 0 and "header_min" in res.output
    res = runner.invoke(app, ["synth", "-s", "nope", "-o", "z.parquet"])
    assert res.exit_code == 2
