"""`pic report` through typer's CliRunner: exit codes, key lines, the kwargs passed to the library."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import pic.cli.report as report_cli
from pic.cli.app import app
from pic.engine.report import make_report
from tests.engine.test_report import make_run

runner = CliRunner()


def test_table_lists_policies_and_metrics(tmp_path):
    """The terminal table names each policy and the headline metric rows."""
    d = make_run(tmp_path / "run")
    res = runner.invoke(app, ["report", str(d)], env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    for key in ("none", "prefix", "fixed-chunk", "token hit rate", "recovery vs baseline", "oracle share",
                "TTFT p99", "prefill energy saved vs baseline", "peak resident KV", "registry entries"):
        assert key in res.stdout


def test_passes_paths_to_library(tmp_path, monkeypatch):
    """The command calls make_report once with the run dirs and output paths it was given."""
    d = make_run(tmp_path / "run")
    seen = {}

    def spy(run_dirs, **kw):
        seen.update(run_dirs=run_dirs, **kw)
        return make_report(run_dirs, **kw)

    monkeypatch.setattr(report_cli, "make_report", spy)
    html, md, plots = tmp_path / "r.html", tmp_path / "r.md", tmp_path / "plots"
    res = runner.invoke(app, ["report", str(d), "--html", str(html), "--md", str(md), "--plots", str(plots)])
    assert res.exit_code == 0, res.output
    assert seen == {"run_dirs": [d], "html_path": html, "md_path": md, "plots_dir": plots, "force": False,
                    "measured": []}
    assert html.read_text().count("data:image/png;base64,") == 3
    assert f"wrote {html}" in res.stdout and "wrote 3 plots" in res.stdout


def test_json_output(tmp_path):
    """--json prints strict JSON with one entry per (run, policy) and nothing else on stdout."""
    d = make_run(tmp_path / "run", capacity=2**30)
    res = runner.invoke(app, ["report", str(d), "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert [r["policy"] for r in obj["policies"]] == ["none", "prefix", "fixed-chunk"]
    assert obj["runs"][0]["capacity_bytes"] == 2**30


def test_missing_run_dir_is_one_line_error(tmp_path):
    """A missing run dir exits 1 with `error:` naming it, and no traceback."""
    res = runner.invoke(app, ["report", str(tmp_path / "absent")])
    assert res.exit_code == 1
    assert "error:" in res.stderr and "absent: not a run dir" in res.stderr
    assert "Traceback" not in res.output


def test_disagreeing_summary_warns_on_stderr(tmp_path):
    """A summary that disagrees with requests.parquet is reported as a warning but still exits 0."""
    d = make_run(tmp_path / "run", summary_patch={("prefix", "requests"): 7})
    res = runner.invoke(app, ["report", str(d)])
    assert res.exit_code == 0
    assert "warning:" in res.stderr and "requests" in res.stderr
