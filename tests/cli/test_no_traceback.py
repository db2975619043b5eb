"""No input reaches the user as a traceback (issue #9): one precise line on stderr, exit 1 (2 for usage),
nothing left behind; user-supplied strings are escaped before the terminal sees them."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

import pic.cli.ingest as ingest_cli
from pic.cli.app import app
from pic.cli.errors import SafeConsole, shown
from pic.traces.io import write_trace
from pic.traces.outputs import MARKER, atomic_path
from tests.engine.test_replay import _trace

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
GQA_CFG = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000}


def one_line(res, code: int = 1) -> str:
    """The single stderr line of a failed command (asserting the exit code and that it is one line)."""
    assert res.exit_code == code, (res.exit_code, res.output, res.exception)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.output and "internal error" not in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_trace(_trace(num=8), tmp_path / "t.parquet")
    return tmp_path


# ---- the top-level guard ------------------------------------------------------------------------------

def test_unexpected_error_is_one_line_with_the_debug_hint(here, monkeypatch):
    """An exception nobody expected: one line naming it, '--debug' for the traceback; --debug shows it."""
    def boom(*a, **k):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(ingest_cli, "ingest", boom)
    (here / "x.jsonl").write_text('{"tokens": [1]}\n')
    res = runner.invoke(app, ["ingest", "x.jsonl", "-o", "o.parquet"])
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert lines == ["error: internal error: ZeroDivisionError: division by zero (re-run with `--debug` for the "
                     "traceback)"]
    res = runner.invoke(app, ["--debug", "ingest", "x.jsonl", "-o", "o.parquet"])
    assert isinstance(res.exception, ZeroDivisionError)


def test_usage_errors_are_one_line(here):
    """Typer's usage errors (bad option value, unknown command) are one line too, exit 2."""
    line = one_line(runner.invoke(app, ["replay", "t.parquet", "--replicas", "abc", "-o", "r"]), code=2)
    assert "--replicas" in line and "pic replay --help" in line
    assert "No such command" in one_line(runner.invoke(app, ["nope"]), code=2)


# ---- deep JSON outside the readers ----------------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000


def test_deep_model_config(here):
    """A --model config.json nested 100k deep: one line naming the file."""
    (here / "cfg.json").write_text('{"num_hidden_layers": ' + DEEP + "}")
    line = one_line(runner.invoke(app, ["replay", "t.parquet", "--model", "cfg.json", "-o", "r"]))
    assert "cfg.json" in line and "nested too deeply" in line
    line = one_line(runner.invoke(app, ["models", "--config", "cfg.json"]))
    assert "nested too deeply" in line


def test_deep_summary_json(here):
    """A run's summary.json nested 100k deep: `pic report` says which file."""
    assert runner.invoke(app, ["replay", "t.parquet", "-o", "run"]).exit_code == 0
    (here / "run" / "summary.json").write_text('{"version": ' + DEEP + "}")
    line = one_line(runner.invoke(app, ["report", "run"]))
    assert "summary.json" in line and "nested too deeply" in line


# ---- options validated at the boundary -----------------------------------------------------------------

@pytest.mark.parametrize(("args", "expect"), [
    (["--set", "irminsul.avg_chunk=1e400"], "irminsul.avg_chunk: expected an integer, got '1e400'"),
    (["--set", "irminsul.avg_chunk=200.7"], "irminsul.avg_chunk: expected an integer, got '200.7'"),
    (["--set", "cost.step_overhead_s=1e300"], "cost.step_overhead_s: 1e+300 is out of range"),
    (["--set", "cost.disk_bytes_per_s=inf"], "cost.disk_bytes_per_s: must be a finite number"),
    (["--set", "cost.mfu=nan"], "cost.mfu: must be a finite number"),
    (["--set", "irminsul.gear_seed=-1"], "irminsul.gear_seed: -1 is out of range"),
    (["--set", "irminsul.s1=maybe"], "irminsul.s1: expected true or false"),
    (["--set", "irminsul.gear=xx"], "irminsul.gear=xx: gear must be one of mix, table"),
    (["--set", "prefix.page_size=99999999999"], "prefix.page_size: 99999999999 is out of range"),
    (["--set", "irminsul.min_chunk=900"], "irminsul.min_chunk=900: "),
    (["--replicas", "20000000"], "replicas: must be 1 to 4096"),
    (["--capacity", "1e400"], "over 1 EiB"),
    (["--capacity", "nan"], "must be > 0"),
    (["--seed", str(2**70)], "seed: must be 0 to 2**63-1"),
    (["--token-budget", str(2**40)], "token_budget: must be 1 to"),
], ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_bad_option_values(here, args, expect):
    """Every option value is checked (type, finite, in range) before any work, naming the option."""
    policy = "irminsul" if any("irminsul" in a for a in args) else "prefix"
    line = one_line(runner.invoke(app, ["replay", "t.parquet", "--policy", policy, *args, "-o", "r"]))
    assert expect in line, line
    assert not (here / "r").exists()


@pytest.mark.parametrize(("value", "expect"), [
    ("1e400", "num_hidden_layers: expected a non-negative integer, got inf"),
    ("-3", "num_hidden_layers: -3 is out of range"),
    ("1e12", "num_hidden_layers: 1000000000000.0 is out of range (0 to 16,777,216)"),
    ('"12"', "num_hidden_layers: expected a non-negative integer, got '12'"),
])
def test_bad_model_config_numbers(here, value, expect):
    """--model config.json with absurd numbers: one line naming the file and the field."""
    text = json.dumps(GQA_CFG).replace('"num_hidden_layers": 2', f'"num_hidden_layers": {value}')
    (here / "config.json").write_text(text)
    line = one_line(runner.invoke(app, ["replay", "t.parquet", "--model", "config.json", "-o", "r"]))
    assert "config.json" in line and expect in line, line


def test_bad_model_config_types(here):
    """Wrong types in less common fields (interval 0, a list where a name goes) are named, not crashes."""
    for extra in ({"model_type": "qwen3_next", "full_attention_interval": 0},
                  {"layer_types": [["attention"]] * 2},
                  {"partial_rotary_factor": {"a": 1}}):
        (here / "config.json").write_text(json.dumps({**GQA_CFG, **extra}))
        line = one_line(runner.invoke(app, ["replay", "t.parquet", "--model", "config.json", "-o", "r"]))
        assert "config.json: " in line, line


def test_synth_knobs_are_checked(here):
    """`pic synth --set` knobs get the same checks (integral, finite, in range)."""
    for knob, expect in (("pool_size=2.5", "pool_size: expected an integer"),
                         ("rate=inf", "rate: must be a finite number"),
                         ("think_s=1e9", "think_s: 1e+09 is out of range")):
        line = one_line(runner.invoke(app, ["synth", "-s", "rag-reorder", "--set", knob, "-o", "s.parquet"]))
        assert expect in line, line


# ---- traces that parse but hold nothing -----------------------------------------------------------------

def test_trace_with_segments_but_no_requests(here):
    """inspect prints zeros; replay says there is nothing to replay."""
    import numpy as np

    from pic.traces.schema import SegmentTable, Trace, requests_frame

    t = SegmentTable()
    t.add(np.arange(1, 9), "user")
    cols = ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")
    write_trace(Trace(t.build(), requests_frame({k: [] for k in cols})), here / "e.parquet")
    res = runner.invoke(app, ["inspect", "e.parquet"])
    assert res.exit_code == 0, res.output
    assert "no requests" in one_line(runner.invoke(app, ["replay", "e.parquet", "-o", "r"]))


# ---- markup and control characters in user strings -------------------------------------------------------

def test_markup_in_paths_is_printed_literally(here):
    """Paths holding rich markup ([/], [bold]) work in every command and print as written."""
    (here / "[").mkdir()
    shutil.copy(here / "t.parquet", here / "[/]t.parquet")
    res = runner.invoke(app, ["inspect", "[/]t.parquet"])
    assert res.exit_code == 0 and "[/]t.parquet" in res.output, res.output
    (here / "x.jsonl").write_text('{"tokens": [1, 2]}\n')
    res = runner.invoke(app, ["ingest", "x.jsonl", "-o", "o[/]x.parquet"])
    assert res.exit_code == 0 and "o[/]x.parquet" in res.output, res.output
    res = runner.invoke(app, ["replay", "[/]t.parquet", "-o", "[bold]run"])
    assert res.exit_code == 0 and "[bold]run" in res.output, res.output
    res = runner.invoke(app, ["report", "[bold]run", "--html", "o[/].html"])
    assert res.exit_code == 0 and "wrote o[/].html" in res.output, res.output
    res = runner.invoke(app, ["sweep", "[/]t.parquet", "-j", "1", "-o", "[red]sw"])
    assert res.exit_code == 0, res.output
    assert "unknown policy '[/]'" in one_line(runner.invoke(app, ["replay", "t.parquet", "--policy", "[/]",
                                                                  "-o", "r2"]))


@pytest.mark.parametrize("name", ["\x1b[2J\x1b]0;pwned\x07.jsonl", "a\nb.jsonl", "x\u202egnp.jsonl", "\r.jsonl"])
def test_control_characters_in_names_are_escaped(here, name):
    """Escape sequences, newlines and bidi overrides in a file name are printed escaped, on one line."""
    res = runner.invoke(app, ["ingest", name, "-o", "o.parquet"])
    line = one_line(res)
    assert shown(name) in line and not any(c in res.stderr for c in "\x1b\x07\u202e\r")


def test_safe_console_renders_no_markup_links_or_escapes():
    """On a real terminal too: no hyperlink from [link=...], no style from [white on white], no raw ESC."""
    from rich.table import Table

    buf = io.StringIO()
    con = SafeConsole(file=buf, force_terminal=True, width=200)
    t = Table(title="[link=https:evil.example]t.parquet")
    t.add_column("x")
    t.add_row("[white on white]hidden[/] \x1b]0;pwned\x07 :fire:")
    con.print(t)
    out = buf.getvalue()
    assert "\x1b]8;" not in out and "\x1b]0;" not in out and "\x07" not in out
    assert "[link=https:evil.example]t.parquet" in out and "[white on white]hidden[/]" in out and ":fire:" in out


def test_markdown_report_escapes_names(here):
    """<script>/<img onerror> in model, GPU and policy names stay text in report.md (and report.html)."""
    assert runner.invoke(app, ["replay", "t.parquet", "-o", "run"]).exit_code == 0
    run = here / "run"
    bad = {"model": "<script>alert(1)</script>", "gpu": "<img src=x onerror=alert(2)>",
           "policy": "pre|fix<img src=x onerror=alert(3)>"}
    summary = json.loads((run / "summary.json").read_text())
    summary["model"], summary["gpu"] = bad["model"], bad["gpu"]
    summary["policies"] = {bad["policy"]: summary["policies"]["prefix"]}
    (run / "summary.json").write_text(json.dumps(summary))
    req = pl.read_parquet(run / "requests.parquet").with_columns(pl.lit(bad["policy"]).alias("policy"))
    req.write_parquet(run / "requests.parquet")
    res = runner.invoke(app, ["report", "run", "--md", "r.md", "--html", "r.html"])
    assert res.exit_code == 0, res.output
    for f in ("r.md", "r.html"):
        text = (here / f).read_text()
        assert "<script>" not in text and "<img src=x" not in text, f
    md = (here / "r.md").read_text()
    assert "&lt;script&gt;" in md and "pre\\|fix" in md


# ---- signals ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_termination_signals_clean_up(here, monkeypatch, sig, code):
    """SIGTERM/SIGHUP (timeout, docker stop, Slurm, a closed terminal) unwind like Ctrl-C: the half-written
    temp file is removed, one line says so, exit 128+signal."""
    def fake_ingest(sources, out, **kw):
        with atomic_path(out) as tmp:
            tmp.write_bytes(b"half")
            # NOTE: to this thread (raise_signal): a process-directed os.kill may land on a library's
            # worker thread (torch, polars), and the main thread's sleep is then not interrupted
            signal.raise_signal(sig)
            time.sleep(5)
        raise AssertionError("not reached")

    monkeypatch.setattr(ingest_cli, "ingest", fake_ingest)
    (here / "x.jsonl").write_text('{"tokens": [1]}\n')
    # SIGINT is Python's own KeyboardInterrupt, unless the process started with it ignored (a shell starts its
    # background jobs so: `pytest &`, `nohup`): then Ctrl-C cannot reach pic at all; test the terminal's case
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        res = runner.invoke(app, ["ingest", "x.jsonl", "-o", "o.parquet"])
    finally:
        signal.signal(signal.SIGINT, old)
    assert res.exit_code == code, res.output
    assert "no half-written file" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in here.iterdir()) == ["t.parquet", "x.jsonl"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL   # handlers restored after the command


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to see the child's CPU time")
def test_sigterm_to_a_real_process(tmp_path):
    """A real `pic synth` killed by SIGTERM mid-work exits 143 with one line and leaves no file."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([sys.executable, "-m", "pic", "synth", "-s", "chat", "-n", "2000000", "-o",
                          str(tmp_path / "s.parquet")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    # wait for 3 s of the child's own CPU time (imports take ~1.5 s): robust however loaded the machine is
    ticks = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
        if (int(fields[11]) + int(fields[12])) / ticks >= 3.0:
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143, (p.returncode, err)
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_closed_stdout_is_not_a_traceback(here):
    """`pic inspect --json t.parquet | head -c 1`: no BrokenPipeError traceback."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = f"{sys.executable} -m pic inspect --json t.parquet | head -c 1 >/dev/null"
    res = subprocess.run(cmd, shell=True, cwd=here, env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in res.stderr and "Error" not in res.stderr, res.stderr


# ---- misleading messages -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["t.pq", "T.PARQUET", "trace"])
def test_parquet_without_the_suffix(here, name):
    """`pic ingest -o t.pq` then `pic replay t.pq` / `pic inspect T.PARQUET`: Parquet is known by its bytes."""
    (here / "x.jsonl").write_text('{"tokens": [1, 2, 3]}\n')
    assert runner.invoke(app, ["ingest", "x.jsonl", "-o", name]).exit_code == 0
    assert runner.invoke(app, ["inspect", name]).exit_code == 0
    res = runner.invoke(app, ["replay", name, "-o", "r"])
    assert res.exit_code == 0, res.output
    assert "already a pic trace" in one_line(runner.invoke(app, ["ingest", name, "-o", "again.parquet"]))


def test_pipe_input_says_pipe(here):
    """A pipe as replay's input is named as a pipe, not 'no such file'."""
    os.mkfifo(here / "p")
    line = one_line(runner.invoke(app, ["replay", "p", "-o", "r"]))
    assert "pipe" in line and "no such file" not in line


def test_unreadable_input_is_one_line(here, monkeypatch):
    """Permission denied on the input: one line naming the file (exit 1, not a usage box)."""
    import builtins

    real_open = builtins.open

    def guarded(file, *a, **k):
        if str(file).endswith("t.parquet"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", guarded)
    line = one_line(runner.invoke(app, ["inspect", "t.parquet"]))
    assert "t.parquet" in line and "permission denied" in line


def test_output_to_a_device_is_refused(here):
    """`-o /dev/null` style outputs (not regular files) are refused up front, never replaced."""
    (here / "x.jsonl").write_text('{"tokens": [1]}\n')
    line = one_line(runner.invoke(app, ["ingest", "x.jsonl", "-o", "/dev/null", "--force"]))
    assert "not a regular file" in line


def test_undecodable_file_names_cli(tmp_path):
    """A file name that is not UTF-8 works end to end and is printed escaped."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    src = os.path.join(os.fsencode(tmp_path), b"bad\xff.jsonl")
    with open(src, "wb") as f:
        f.write(b'{"tokens": [1, 2]}\n')
    run = [sys.executable.encode(), b"-m", b"pic"]
    out = os.path.join(os.fsencode(tmp_path), b"o\xff.parquet")
    for args in ([b"ingest", src, b"-o", out], [b"inspect", out], [b"replay", out, b"-o", out + b".run"]):
        res = subprocess.run([*run, *args], cwd=tmp_path, env=env, capture_output=True, timeout=120)
        assert res.returncode == 0, res.stderr.decode(errors="replace")
        assert b"Traceback" not in res.stderr
    assert (Path(os.fsdecode(out + b".run")) / MARKER).exists()


@pytest.mark.parametrize("suffix", [".json", ".toml", ".yaml"])
def test_deep_settings_and_profile_files(here, suffix):
    """`--config` settings files and `--profile` calibration files nested too deeply: one line naming them."""
    deep = {".json": '{"a": ' + DEEP + "}", ".toml": "a = " + "[" * 20_000 + "]" * 20_000 + "\n",
            ".yaml": "a: " + "[" * 20_000 + "]" * 20_000 + "\n"}[suffix]
    (here / f"s{suffix}").write_text(deep)
    line = one_line(runner.invoke(app, ["replay", "t.parquet", "--config", f"s{suffix}", "-o", "r"]))
    assert f"s{suffix}" in line, line
    if suffix == ".json":
        line = one_line(runner.invoke(app, ["replay", "t.parquet", "--profile", f"s{suffix}", "-o", "r"]))
        assert "s.json" in line and "nested too deeply" in line, line


def test_synth_request_count_is_bounded(here):
    """`pic synth -n 100000000000`: refused at once (at most 10,000,000), one line."""
    line = one_line(runner.invoke(app, ["synth", "-s", "chat", "-n", "100000000000", "-o", "s.parquet"]), code=2)
    assert "--requests" in line
