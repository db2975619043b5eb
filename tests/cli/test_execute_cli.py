"""`pic execute` / `pic calibrate` / `pic replay --profile` / `pic report` on measurements: the CPU-side paths
(one-line errors without a GPU, --plans-only, output safety, profiles, the measured-vs-predicted table)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pic.cli.app import app
from pic.engine.measurements import summarize, write_measurements
from pic.engine.planlog import read_plan_log
from tests.engine.test_cost import PROFILE

runner = CliRunner()
SAMPLE = "traces/samples/rag-reorder.parquet"


def _one_line_error(res, needle: str) -> None:
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], res.output


def test_execute_needs_gpu_flag(tmp_path):
    """Without --gpu (or --plans-only) nothing runs and nothing is written."""
    res = runner.invoke(app, ["execute", SAMPLE, "-o", str(tmp_path / "x")])
    _one_line_error(res, "pass --gpu")
    assert not (tmp_path / "x").exists()


def test_execute_without_a_gpu_is_one_line(tmp_path):
    """On a machine without a CUDA GPU (or under the Triton interpreter, or without torch): one line, no
    traceback."""
    res = runner.invoke(app, ["execute", SAMPLE, "--gpu", "-o", str(tmp_path / "x")])
    needle = next((n for n in ("GPU", "pic[gpu]") if n in res.output), "TRITON_INTERPRET")
    _one_line_error(res, needle)
    assert not (tmp_path / "x").exists()
    res = runner.invoke(app, ["calibrate", "--gpu", "-o", str(tmp_path / "p.json")])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert not (tmp_path / "p.json").exists()


def test_plans_only_writes_a_plan_log(tmp_path):
    """--plans-only replays the trace through the policy and writes its Plans (no GPU involved)."""
    out = tmp_path / "plans.parquet"
    res = runner.invoke(app, ["execute", SAMPLE, "--plans-only", "--policy", "fixed-chunk", "-o", str(out)])
    assert res.exit_code == 0, res.output
    log = read_plan_log(out)
    assert log.meta["policy"] == "fixed-chunk" and len(log) > 10
    again = runner.invoke(app, ["execute", SAMPLE, "--plans-only", "-o", str(out)])
    assert again.exit_code == 0, again.output          # pic's own plan log may be replaced
    foreign = tmp_path / "notes.parquet"
    foreign.write_text("mine")
    _one_line_error(runner.invoke(app, ["execute", SAMPLE, "--plans-only", "-o", str(foreign)]), "not written by pic")
    assert foreign.read_text() == "mine"
    _one_line_error(runner.invoke(app, ["execute", SAMPLE, "--plans-only", "-o", SAMPLE]), "input")


def test_plan_log_input_checks_policy(tmp_path):
    """A plans.parquet input keeps its policy; asking for another one is an error."""
    out = tmp_path / "plans.parquet"
    assert runner.invoke(app, ["execute", SAMPLE, "--plans-only", "-o", str(out)]).exit_code == 0
    res = runner.invoke(app, ["execute", str(out), "--plans-only", "--policy", "prefix", "-o", str(tmp_path / "y.parquet")])
    _one_line_error(res, "holds 'irminsul' plans")


def test_replay_profile_prices_with_measured_times(tmp_path):
    """`pic replay --profile` uses the profile (config.json names it) and changes the predicted TTFT."""
    prof = tmp_path / "prof.json"
    prof.write_text(json.dumps(PROFILE))
    a, b = tmp_path / "roof", tmp_path / "cal"
    assert runner.invoke(app, ["replay", SAMPLE, "--policy", "irminsul", "-o", str(a)]).exit_code == 0
    res = runner.invoke(app, ["replay", SAMPLE, "--policy", "irminsul", "--profile", str(prof), "-o", str(b)])
    assert res.exit_code == 0, res.output
    cfg = json.loads((b / "config.json").read_text())
    assert cfg["cost"]["profile"] == str(prof) and cfg["cost"]["busy_watts"] == PROFILE["watts_busy"]
    s_a = json.loads((a / "summary.json").read_text())["policies"]["irminsul"]
    s_b = json.loads((b / "summary.json").read_text())["policies"]["irminsul"]
    assert s_a["ttft_p50_s"] != s_b["ttft_p50_s"] and s_a["token_hit_rate"] == s_b["token_hit_rate"]
    wrong = dict(PROFILE, model="llama-3.1-8b")
    prof.write_text(json.dumps(wrong))
    _one_line_error(runner.invoke(app, ["replay", SAMPLE, "--profile", str(prof), "-o", str(tmp_path / "z")]),
                    "profile is for")


def test_bundled_profile_by_name(tmp_path):
    """The shipped H200 DeepSeek-V2-Lite profile is usable by name."""
    from pic.engine.calibration import bundled_profiles, load_profile

    names = bundled_profiles()
    if "h200-deepseek-v2-lite" not in names:
        pytest.skip("no bundled profile yet")
    p = load_profile("h200-deepseek-v2-lite")
    assert p.gpu == "h200" and p.model == "deepseek-v2-lite" and p.prefill_seconds(2048, 0) > 0
    res = runner.invoke(app, ["replay", SAMPLE, "--policy", "irminsul", "--profile", "h200-deepseek-v2-lite",
                              "-o", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output


def _rows(n: int = 4) -> list[dict]:
    return [{"request_id": i, "prompt_tokens": 1000, "reused_tokens": 900, "ttft_s": 0.02, "ttft_full_s": 0.1,
             "hbm_bytes": 1e9, "hbm_bytes_full": 4e9, "joules": 5.0, "joules_full": 25.0, "joules_dyn": 1.0,
             "joules_dyn_full": 5.0, "predicted_ttft_s": 0.025, "predicted_full_s": 0.09, "predicted_joules": 6.0,
             "predicted_full_joules": 24.0, "predicted_hbm_bytes": 1.5e9, "predicted_full_hbm_bytes": 4e9}
            for i in range(n)]


def test_report_shows_measured_beside_predicted(tmp_path):
    """`pic report` on a pic execute folder prints the measured/predicted table (and --json carries it)."""
    rows = _rows()
    out = write_measurements(tmp_path / "exec", rows, summarize(rows, {"policy": "irminsul", "model": "m"}))
    res = runner.invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    assert "TTFT / full prefill p50" in res.output and "+25.0%" in res.output
    assert "HBM bytes per request, GB" in res.output and "+50.0%" in res.output   # 1.5 GB predicted vs 1.0
    js = runner.invoke(app, ["report", str(out), "--json"])
    doc = json.loads(js.output)
    assert doc["measured"][str(out)]["ttft_ratio_p50"] == pytest.approx(0.2)
    assert doc["measured"][str(out)]["fidelity"]["hbm_bytes_mare"] == pytest.approx(0.5)
    _one_line_error(runner.invoke(app, ["report", str(out), "--plots", str(tmp_path / "pl")]), "replay run dir")
    assert not (tmp_path / "pl").exists()


def _measured_cells(text: str, label: str) -> list[str]:
    """The cells of the Markdown row ``label`` of the measured table."""
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


def test_report_html_and_markdown_of_a_measured_folder(tmp_path):
    """--html / --md of a `pic execute` folder: the measured-vs-predicted table (TTFT, HBM bytes, joules),
    names escaped, the HTML self-contained."""
    rows = _rows()
    rows[0]["ttft_s"] = 0.04    # one slow request: p50 stays 20 ms (linear interpolation), the mean moves
    out = write_measurements(tmp_path / "exec", rows, summarize(rows, {"policy": "<script>x|y", "model": "m",
                                                                        "gpu": "NVIDIA H200", "priced_with": "p.json"}))
    res = runner.invoke(app, ["report", str(out), "--html", str(tmp_path / "r.html"), "--md", str(tmp_path / "r.md")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "r.md").read_text()
    assert "## Measured on the GPU" in md and "predicted with p.json" in md
    assert _measured_cells(md, "TTFT p50, ms") == ["20.00", "25.00", "+25.0%"]
    assert _measured_cells(md, "HBM bytes per request, GB") == ["1.00", "1.50", "+50.0%"]
    assert _measured_cells(md, "joules per full prefill") == ["25.00", "24.00", "-4.0%"]
    assert _measured_cells(md, "energy saved per hit") == ["80.0%", "75.0%", "-6.3%"]
    assert "<script>" not in md and "&lt;script&gt;x\\|y" in md
    page = (tmp_path / "r.html").read_text()
    assert "<h2>Measured on the GPU</h2>" in page and "<td>+50.0%</td>" in page and "&lt;script&gt;" in page
    assert "<script" not in page.replace("&lt;script", "") and "src='http" not in page and "<link" not in page
    # outputs pic wrote may be replaced; the measured folder's own files are never an output
    again = runner.invoke(app, ["report", str(out), "--md", str(tmp_path / "r.md")])
    assert again.exit_code == 0, again.output
    _one_line_error(runner.invoke(app, ["report", str(out), "--md", str(out / "execute.json")]), "execute.json")


def test_report_of_a_replay_run_dir_with_measurements(tmp_path):
    """`pic replay --execute` leaves measurements in the run dir: its HTML / Markdown report has the policy
    comparison and the measured table."""
    run = tmp_path / "run"
    assert runner.invoke(app, ["replay", SAMPLE, "--policy", "prefix,irminsul", "-o", str(run)]).exit_code == 0
    rows = _rows()
    write_measurements(run, rows, summarize(rows, {"policy": "irminsul", "model": "deepseek-v2-lite"}),
                       into_run_dir=True)
    res = runner.invoke(app, ["report", str(run), "--html", str(tmp_path / "r.html"), "--md", str(tmp_path / "r.md")])
    assert res.exit_code == 0, res.output
    md, page = (tmp_path / "r.md").read_text(), (tmp_path / "r.html").read_text()
    assert "## Policy comparison" in md and "## Measured on the GPU" in md and "[Measured on the GPU](#" in md
    assert _measured_cells(md, "TTFT / full prefill p50") == ["0.200", "0.278", "+38.9%"]
    assert "<section id='comparison'>" in page and "<section id='measured'>" in page and "href='#measured'" in page


def test_run_dir_input_reuses_its_replay(tmp_path):
    """A `pic replay` run dir as input: its trace and settings are replayed again, --policy picks one."""
    run = tmp_path / "run"
    assert runner.invoke(app, ["replay", SAMPLE, "--policy", "prefix,irminsul", "--set", "irminsul.avg_chunk=512",
                               "-o", str(run)]).exit_code == 0
    out = tmp_path / "p.parquet"
    res = runner.invoke(app, ["execute", str(run), "--plans-only", "-o", str(out)])
    assert res.exit_code == 0, res.output
    log = read_plan_log(out)
    assert log.meta["policy"] == "irminsul" and log.meta["policy_config"]["avg_chunk"] == 512
    res = runner.invoke(app, ["execute", str(run), "--plans-only", "--policy", "fixed-chunk", "-o", str(out)])
    _one_line_error(res, "not 'fixed-chunk'")
