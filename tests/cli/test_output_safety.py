"""What pic writes, and what it never touches (issue #9's data-loss table, DESIGN.md §11).

Each row of the table is a scratch folder of a user's files and one command; the command must exit 1 with
one line on stderr that names the path, and every file of the user must be byte-identical afterwards.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import pic.cli.synth as synth_cli
from pic.cli.app import app
from pic.traces.io import write_trace
from pic.traces.outputs import MARKER
from tests.engine.test_replay import _trace

runner = CliRunner()
OA = '{"messages": [{"role": "user", "content": "hello there"}], "session_id": "s"}\n'
GQA_CFG = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000}


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _refused(res, *needles: str) -> None:
    """Exit 1, exactly one line on stderr, naming what it must."""
    assert res.exit_code == 1, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture
def proj(tmp_path, monkeypatch):
    """A user's project folder holding a trace, source code and a thesis; the cwd is inside it."""
    d = tmp_path / "proj"
    (d / "src").mkdir(parents=True)
    (d / "src" / "main.py").write_text("print('hi')\n")
    (d / "thesis.txt").write_text("years of work\n")
    write_trace(_trace(num=8), d / "t.parquet")
    monkeypatch.chdir(d)
    return d


def _replay(*args: str):
    return runner.invoke(app, ["replay", "t.parquet", "--capacity", "inf", *args])


# ---- the data-loss table, row by row --------------------------------------------------------------

def test_replay_into_the_current_folder_is_refused(proj):
    """`cd proj && pic replay t.parquet -o "$PWD"`: the folder holding the trace is never the run dir."""
    before = _snapshot(proj)
    for extra in ([], ["--force"]):
        _refused(_replay("-o", str(proj), *extra), str(proj), "input")
        _refused(_replay("-o", ".", *extra), "input")
    assert _snapshot(proj) == before


def test_replay_into_a_users_folder_is_refused_and_force_adds_only_pics_files(proj):
    """`-o keep` (data/important.csv, notes.txt): refused; --force writes pic's files beside them."""
    keep = proj / "keep"
    (keep / "data").mkdir(parents=True)
    (keep / "data" / "important.csv").write_text("a,b\n1,2\n")
    (keep / "notes.txt").write_text("notes\n")
    before = _snapshot(keep)
    _refused(_replay("-o", "keep"), "keep", "--force")
    assert _snapshot(keep) == before
    res = _replay("-o", "keep", "--force")
    assert res.exit_code == 0, res.output
    after = _snapshot(keep)
    assert {k: after[k] for k in before} == before
    assert set(after) - set(before) == {"config.json", "requests.parquet", "summary.json", MARKER}
    # a second run replaces pic's files only; the user's stay
    res = _replay("-o", "keep", "--seed", "3")
    assert res.exit_code == 0, res.output
    assert {k: v for k, v in _snapshot(keep).items() if k in before} == before


def test_force_never_replaces_a_file_pic_did_not_write(proj):
    """A user's own summary.json inside the forced folder stays; the command says so and writes nothing."""
    keep = proj / "keep"
    keep.mkdir()
    (keep / "summary.json").write_text('{"mine": true}\n')
    res = _replay("-o", "keep", "--force")
    _refused(res, "summary.json", "not written by pic")
    assert sorted(p.name for p in keep.iterdir()) == ["summary.json"]
    assert (keep / "summary.json").read_text() == '{"mine": true}\n'


def test_replay_onto_an_existing_file_is_refused(proj):
    """`-o notes.txt`: a file is never replaced by a run dir (with or without --force)."""
    (proj / "notes.txt").write_text("notes\n")
    for extra in ([], ["--force"]):
        _refused(_replay("-o", "notes.txt", *extra), "notes.txt", "not a folder")
    assert (proj / "notes.txt").read_text() == "notes\n"


def test_replay_onto_its_own_trace_is_refused(proj):
    """`pic replay t.parquet -o t.parquet` (also through ./, a symlink or a hard link)."""
    before = _snapshot(proj)
    os.symlink(proj / "t.parquet", proj / "link.parquet")
    os.link(proj / "t.parquet", proj / "hard.parquet")
    for out in ("t.parquet", "./t.parquet", str(proj / "src" / ".." / "t.parquet"), "link.parquet",
                "hard.parquet"):
        for extra in ([], ["--force"]):
            _refused(_replay("-o", out, *extra), "input")
    assert {k: v for k, v in _snapshot(proj).items() if k in before} == before


def test_replay_into_the_model_config_folder_is_refused(proj):
    """`pic replay t.parquet --model cfg/config.json -o cfg`: the model's folder is an input."""
    (proj / "cfg").mkdir()
    (proj / "cfg" / "config.json").write_text(json.dumps(GQA_CFG))
    before = _snapshot(proj)
    for extra in ([], ["--force"]):
        _refused(_replay("--model", "cfg/config.json", "-o", "cfg", *extra), "cfg", "input")
        _refused(_replay("--model", "cfg", "-o", "cfg", *extra), "cfg", "input")
    assert _snapshot(proj) == before


def test_ingest_onto_its_input_is_refused(tmp_path, monkeypatch):
    """`pic ingest oa.jsonl -o oa.jsonl`; `pic ingest d -o d/a.jsonl`: the input log stays."""
    monkeypatch.chdir(tmp_path)
    Path("oa.jsonl").write_text(OA)
    Path("d").mkdir()
    Path("d/a.jsonl").write_text(OA)
    before = _snapshot(tmp_path)
    for extra in ([], ["--force"]):
        _refused(runner.invoke(app, ["ingest", "oa.jsonl", "-o", "oa.jsonl", *extra]), "oa.jsonl", "input")
        _refused(runner.invoke(app, ["ingest", "d", "-o", "d/a.jsonl", *extra]), "a.jsonl", "input")
        _refused(runner.invoke(app, ["ingest", "d", "-o", "d", *extra]), "input")
    assert _snapshot(tmp_path) == before


def test_ingest_onto_its_tokenizer_is_refused(tmp_path, monkeypatch):
    """`pic ingest oa.jsonl --tokenizer tokenizer.json -o tokenizer.json`: the tokenizer stays."""
    from tests.traces.test_tokenizer import _tiny_tokenizer_json

    monkeypatch.chdir(tmp_path)
    Path("oa.jsonl").write_text(OA)
    _tiny_tokenizer_json(tmp_path / "tokenizer.json")
    before = _snapshot(tmp_path)
    for extra in ([], ["--force"]):
        res = runner.invoke(app, ["ingest", "oa.jsonl", "--tokenizer", "tokenizer.json", "-o", "tokenizer.json",
                                  *extra])
        _refused(res, "tokenizer.json", "input")
    assert _snapshot(tmp_path) == before


@pytest.fixture
def run_dir(proj):
    res = _replay("-o", "run")
    assert res.exit_code == 0, res.output
    return proj / "run"


@pytest.mark.parametrize("option", ["--html", "--md"])
def test_report_onto_its_own_run_dir_files_is_refused(run_dir, option):
    """`pic report run --html run/summary.json` (and the run dir itself, and --md)."""
    before = _snapshot(run_dir)
    for out in ("run/summary.json", "run/requests.parquet", "run", "./run/../run/config.json"):
        for extra in ([], ["--force"]):
            _refused(runner.invoke(app, ["report", "run", option, out, *extra]), "input")
    assert _snapshot(run_dir) == before


def test_report_plots_into_the_run_dir_is_refused(run_dir):
    """--plots naming the run dir (a folder holding the inputs) is refused."""
    before = _snapshot(run_dir)
    _refused(runner.invoke(app, ["report", "run", "--plots", "run", "--force"]), "input")
    assert _snapshot(run_dir) == before


# ---- the same rules for every writing command -------------------------------------------------------

def test_every_writer_refuses_an_existing_user_file_unless_forced(proj, run_dir):
    """ingest/synth/report outputs: an existing file pic did not write is refused without --force."""
    (proj / "oa.jsonl").write_text(OA)
    cases = [
        ["ingest", "oa.jsonl", "-o", "thesis.txt"],
        ["synth", "-s", "chat", "-n", "3", "-o", "thesis.txt"],
        ["report", "run", "--html", "thesis.txt"],
        ["report", "run", "--md", "thesis.txt"],
    ]
    for args in cases:
        _refused(runner.invoke(app, args), "thesis.txt", "--force")
        assert (proj / "thesis.txt").read_text() == "years of work\n"
    for args in cases:
        (proj / "thesis.txt").write_text("years of work\n")
        res = runner.invoke(app, [*args, "--force"])
        assert res.exit_code == 0, (args, res.output)
        assert (proj / "thesis.txt").read_bytes() != b"years of work\n"


def test_pics_own_outputs_are_rewritten_without_force(proj, run_dir):
    """Re-running a command onto its own previous output (a pic trace, a pic report) needs no --force."""
    (proj / "oa.jsonl").write_text(OA)
    for args in (["ingest", "oa.jsonl", "-o", "o.parquet"], ["synth", "-s", "chat", "-n", "3", "-o", "s.parquet"],
                 ["report", "run", "--html", "r.html", "--md", "r.md", "--plots", "plots"],
                 ["replay", "t.parquet", "-o", "run"]):
        for _ in range(2):
            res = runner.invoke(app, args)
            assert res.exit_code == 0, (args, res.output)
    # a pic trace is not a report: --html onto it needs --force
    _refused(runner.invoke(app, ["report", "run", "--html", "s.parquet"]), "s.parquet")


def test_replay_over_a_run_keeps_its_reports_and_says_they_are_stale(proj, run_dir):
    """`pic report run --html run/report.html ...`, then `pic replay ... -o run` again: the reports pic report
    wrote inside the run dir stay byte for byte (the replay did not write them), a user's file too, and
    the replay says in one line which ones describe the run it replaced and how to refresh them."""
    res = runner.invoke(app, ["report", "run", "--html", "run/report.html", "--md", "run/r.md",
                              "--plots", "run/plots"])
    assert res.exit_code == 0, res.output
    (run_dir / "notes.html").write_text("<p>mine</p>\n")           # a user's html: not a pic report
    kept = {k: v for k, v in _snapshot(run_dir).items() if not k.endswith((".json", ".parquet"))}
    res = _replay("-o", "run", "--seed", "7")
    assert res.exit_code == 0, res.output
    assert {k: v for k, v in _snapshot(run_dir).items() if k in kept} == kept
    notes = [ln for ln in res.stderr.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1, res.stderr
    for needle in ("run/report.html", "run/r.md", "run/plots/",
                   "pic report run --html run/report.html --md run/r.md --plots run/plots"):
        assert needle in notes[0], notes[0]
    assert "notes.html" not in notes[0]
    # a fresh run dir, or one holding no report: no note
    for out in ("run2", "run2"):
        res = _replay("-o", out)
        assert res.exit_code == 0 and "note:" not in res.stderr, res.stderr


def test_synth_checks_its_output_before_generating(proj, monkeypatch):
    """`pic synth -o existing_dir` fails before any request is generated, naming the folder (no temp name)."""
    called = []
    monkeypatch.setattr(synth_cli.synth_lib, "synth", lambda *a, **k: called.append(1))
    (proj / "somedir").mkdir()
    _refused(runner.invoke(app, ["synth", "-s", "chat", "-o", "somedir"]), "somedir", "folder")
    _refused(runner.invoke(app, ["synth", "-s", "chat", "-o", "thesis.txt"]), "thesis.txt")
    assert not called
    assert ".tmp" not in runner.invoke(app, ["synth", "-s", "chat", "-o", "somedir"]).stderr


def test_report_outputs_must_differ(run_dir):
    """--html and --md naming the same file is refused before anything is written."""
    _refused(runner.invoke(app, ["report", "run", "--html", "x.out", "--md", "x.out"]), "x.out")
    assert not Path("x.out").exists()


def test_report_plots_into_a_users_folder(run_dir, proj):
    """--plots into a non-empty folder of the user's: refused; with --force only PNGs are added."""
    pics = proj / "pics"
    pics.mkdir()
    (pics / "holiday.jpg").write_bytes(b"\xff\xd8jpeg")
    _refused(runner.invoke(app, ["report", "run", "--plots", "pics"]), "pics", "--force")
    assert [p.name for p in pics.iterdir()] == ["holiday.jpg"]
    res = runner.invoke(app, ["report", "run", "--plots", "pics", "--force"])
    assert res.exit_code == 0, res.output
    assert (pics / "holiday.jpg").read_bytes() == b"\xff\xd8jpeg"
    assert any(p.suffix == ".png" for p in pics.iterdir())


def test_sweep_output_rules(proj):
    """pic sweep: not into the folder holding the trace; not into a user's folder without --force."""
    before = _snapshot(proj)
    _refused(runner.invoke(app, ["sweep", "t.parquet", "-j", "1", "-o", "."]), "input")
    (proj / "mine").mkdir()
    (proj / "mine" / "a.txt").write_text("mine\n")
    _refused(runner.invoke(app, ["sweep", "t.parquet", "-j", "1", "-o", "mine"]), "mine", "--force")
    assert _snapshot(proj) == {**before, "mine/a.txt": b"mine\n"}
    res = runner.invoke(app, ["sweep", "t.parquet", "-j", "1", "-o", "sw"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["sweep", "t.parquet", "-j", "1", "-o", "sw"])   # resuming its own sweep dir
    assert res.exit_code == 0, res.output


def test_failed_or_refused_runs_leave_no_temp_files(proj):
    """Nothing hidden is left beside a refused output."""
    (proj / "keep").mkdir()
    (proj / "keep" / "x").write_text("x")
    _replay("-o", "keep")
    assert not [p for p in proj.rglob(".*") if p.name != MARKER]
