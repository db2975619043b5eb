"""traces.outputs: the output-safety rules every writing command shares (DESIGN.md §11)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pic.traces.outputs import (
    MARKER,
    OutputError,
    atomic_dir,
    atomic_path,
    check_distinct,
    check_output,
    claim_dir,
    is_parquet,
    is_pic_report,
    is_pic_trace,
    pic_files,
    remove_stale_temps,
)


def test_input_paths_are_refused_however_spelled(tmp_path, monkeypatch):
    """Same file, relative path, symlink, hard link, symlinked folder, folder containing it: refused."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    inp = tmp_path / "d" / "in.jsonl"
    inp.write_text("x")
    os.symlink(inp, tmp_path / "link")
    os.link(inp, tmp_path / "hard")
    os.symlink(tmp_path / "d", tmp_path / "dlink")
    for out in ("d/in.jsonl", "./d/../d/in.jsonl", "link", "hard", "dlink/in.jsonl", "d", "dlink", ".",
                str(tmp_path)):
        for force in (False, True):
            with pytest.raises(OutputError, match="input"):
                check_output(out, inputs=["d/in.jsonl"], force=force)
    assert check_output("d/out.parquet", inputs=["d/in.jsonl"]).name == "out.parquet"   # beside it: fine
    check_output("x", inputs=["deepseek-v2-lite", None])   # names that are not paths are ignored


def test_existing_file_rules(tmp_path):
    """An existing file: refused unless pic's own (own=...) or force; a folder or a pipe: always refused."""
    f = tmp_path / "notes.txt"
    f.write_text("n")
    with pytest.raises(OutputError, match="--force"):
        check_output(f)
    check_output(f, force=True)
    check_output(f, own=lambda p: True)
    with pytest.raises(OutputError, match="is a folder"):
        check_output(tmp_path, force=True)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="not a regular file"):
        check_output(fifo, force=True)
    with pytest.raises(OutputError, match="a parent of this path is a file"):
        check_output(f / "x.parquet", force=True)


def test_folder_rules(tmp_path):
    """A folder output: new or empty fine; a file refused always; a user's folder only with force; a name
    pic did not write refused even with force."""
    check_output(tmp_path / "new", kind="run-dir")
    (tmp_path / "empty").mkdir()
    check_output(tmp_path / "empty", kind="run-dir")
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match="not a folder"):
        check_output(tmp_path / "f", kind="run-dir", force=True)
    user = tmp_path / "user"
    user.mkdir()
    (user / "summary.json").write_text("{}")
    with pytest.raises(OutputError, match="--force"):
        check_output(user, kind="run-dir")
    check_output(user, kind="run-dir", force=True)
    with pytest.raises(OutputError, match="never replaces"):
        check_output(user, kind="run-dir", force=True, names=["summary.json"])


def test_check_distinct():
    """Two outputs of one command on the same path are refused."""
    check_distinct({"--html": "a.html", "--md": "a.md", "--plots": None})
    with pytest.raises(OutputError, match="--md"):
        check_distinct({"--html": "a", "--md": "./a"})


def test_atomic_path_leaves_nothing_on_failure(tmp_path):
    """A failing block leaves neither the file nor a temp file; a success renames into place."""
    out = tmp_path / "o.txt"
    with pytest.raises(RuntimeError), atomic_path(out) as tmp:
        tmp.write_text("half")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with atomic_path(out) as tmp:
        tmp.write_text("whole")
    assert out.read_text() == "whole" and list(tmp_path.iterdir()) == [out]


@pytest.mark.parametrize("call", ["open", "replace"])
def test_atomic_path_errors_name_the_output_not_the_temp(tmp_path, monkeypatch, call):
    """Permission denied (creating the temp file, or renaming it) names the output path, never the temp
    name '.o.txt.123.abc.pic-tmp' (simulated: the tests may run as root)."""
    import errno

    import pic.traces.outputs as outputs

    def denied(path, *a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(outputs.os, call, denied)
    out = tmp_path / "o.txt"
    with pytest.raises(OutputError) as err, atomic_path(out) as tmp:
        tmp.write_text("x")
    assert str(err.value).startswith(f"{out}: cannot write: permission denied") and "pic-tmp" not in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_stale_temps_of_dead_processes_are_removed(tmp_path):
    """Leftovers of a killed run (pic's naming, process gone) are removed; a live process's are kept;
    other hidden files are never touched."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    stale = tmp_path / f".t.parquet.{dead}.0123abcd.pic-tmp"
    live = tmp_path / f".t.parquet.{os.getpid()}.0123abcd.pic-tmp"
    other = tmp_path / ".t.parquet.mine"
    old_style = tmp_path / ".t.parquet.abcd1234.tmp"
    for p in (stale, live, other, old_style):
        p.write_text("x")
    os.utime(old_style, (0, 0))
    (tmp_path / f".run.{dead}.0123abcd.pic-tmp").mkdir()
    assert remove_stale_temps(tmp_path / "t.parquet") == 2
    assert not stale.exists() and not old_style.exists() and live.exists() and other.exists()
    with atomic_dir(tmp_path / "run") as d:
        (d / "summary.json").write_text("{}")
    assert not (tmp_path / f".run.{dead}.0123abcd.pic-tmp").exists()


def test_atomic_dir_merges_into_pics_folder_and_keeps_the_rest(tmp_path):
    """Rewrite: pic's old files are replaced or removed, the user's file stays, the marker lists pic's."""
    run = tmp_path / "run"
    with atomic_dir(run) as d:
        (d / "a.json").write_text("1")
        (d / "old.json").write_text("1")
    assert pic_files(run, "run-dir") == ("a.json", "old.json")
    (run / "mine.txt").write_text("m")
    with atomic_dir(run) as d:
        (d / "a.json").write_text("2")
    assert sorted(p.name for p in run.iterdir()) == [MARKER, "a.json", "mine.txt"]
    assert (run / "a.json").read_text() == "2" and (run / "mine.txt").read_text() == "m"
    assert json.loads((run / MARKER).read_text()) == {"pic": "run-dir", "version": 1, "files": ["a.json"]}


def test_atomic_dir_failure_leaves_the_old_run_whole(tmp_path):
    """A block that fails (or is interrupted) leaves the previous run dir as it was, and no temp folder."""
    run = tmp_path / "run"
    with atomic_dir(run) as d:
        (d / "summary.json").write_text("old")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    with pytest.raises(KeyboardInterrupt), atomic_dir(run) as d:
        (d / "summary.json").write_text("new")
        raise KeyboardInterrupt
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_atomic_dir_refuses_clashes_at_commit(tmp_path):
    """Under force, a file of pic's name that pic did not write is refused and nothing is written."""
    user = tmp_path / "user"
    user.mkdir()
    (user / "summary.json").write_text("mine")
    with pytest.raises(OutputError, match="not written by pic"), atomic_dir(user, force=True) as d:
        (d / "summary.json").write_text("pic")
    assert [p.name for p in user.iterdir()] == ["summary.json"] and (user / "summary.json").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["user"]


def test_legacy_run_dirs_are_recognised(tmp_path):
    """A run dir written before the marker existed (pic's summary.json) counts as pic's own."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"version": 1, "policies": {}}))
    (run / "requests.parquet").write_bytes(b"x")
    assert pic_files(run, "run-dir") == ("config.json", "requests.parquet", "summary.json")
    (run / "summary.json").write_text(json.dumps({"mine": 1}))
    assert pic_files(run, "run-dir") is None


def test_claim_dir_merges_names(tmp_path):
    """claim_dir records pic's files in the marker, keeping what was recorded before."""
    claim_dir(tmp_path / "s", "sweep-dir", ["sweep.json"])
    claim_dir(tmp_path / "s", "sweep-dir", ["other.json"])
    assert pic_files(tmp_path / "s", "sweep-dir") == ("other.json", "sweep.json")
    assert pic_files(tmp_path / "s", "run-dir") is None


def test_recognisers(tmp_path):
    """Parquet by magic bytes (any suffix); a pic trace by its metadata; a pic report by its signature."""
    from pic.traces.io import write_trace
    from tests.engine.test_replay import _trace

    t = write_trace(_trace(num=3), tmp_path / "t.PQ")
    assert is_parquet(t) and is_pic_trace(t)
    (tmp_path / "x.parquet").write_text("PAR1 but text")
    assert not is_parquet(tmp_path / "x.parquet") and not is_pic_trace(tmp_path / "missing")
    (tmp_path / "r.md").write_text("<!-- generated by pic report -->\n# pic report\n")
    (tmp_path / "n.md").write_text("# pic report\n")
    assert is_pic_report(tmp_path / "r.md") and not is_pic_report(tmp_path / "n.md")
