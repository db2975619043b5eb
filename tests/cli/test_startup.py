"""What a `pic` process pays before its command runs (issue #12: `pic replay` end to end): `--help` imports no
engine (numpy, polars, pyarrow), the cyclic GC is back on (its import-time objects frozen) when the command
runs, numpy's BLAS thread pool is one thread unless the user chose, and a replay whose stderr is not a
terminal draws no progress bar (rich printed only a blank line there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = "traces/samples/rag-reorder.parquet"


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**e, "PYTHONPATH": str(ROOT), **env})


_PROBE = ("import gc, json, os, sys\n"
          "import pic.cli.app as app\n"
          "seen = {}\n"
          "real = app._register\n"
          "def register(names):\n"
          "    out = real(names)\n"
          "    seen['gc_during_imports'] = gc.isenabled()\n"
          "    return out\n"
          "app._register = register\n"
          "sys.argv = ['pic', *sys.argv[1:]]\n"
          "try:\n    app.main()\nexcept SystemExit:\n    pass\n"
          "seen.update(gc_after=gc.isenabled(), frozen=gc.get_freeze_count() > 0,\n"
          "            blas=os.environ.get('OPENBLAS_NUM_THREADS'),\n"
          "            engine=sorted(m for m in ('numpy', 'polars', 'pyarrow', 'pic.engine.replay') if m in sys.modules))\n"
          "print(json.dumps(seen))\n")


def _probe(*args: str, **env: str) -> dict:
    p = _run(f"import sys; sys.argv[1:] = {list(args)!r}\n" + _PROBE, **env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


def test_replay_help_imports_no_engine() -> None:
    seen = _probe("replay", "--help")
    assert seen["engine"] == []
    assert seen["gc_during_imports"] is False and seen["gc_after"] is True and seen["frozen"] is True
    assert seen["blas"] == "1"


def test_a_blas_thread_count_the_user_set_is_kept() -> None:
    assert _probe("--version", OPENBLAS_NUM_THREADS="3")["blas"] == "3"


def test_replay_to_a_file_draws_no_progress_bar(tmp_path) -> None:
    p = subprocess.run([sys.executable, "-m", "pic", "replay", SAMPLE, "--limit", "30", "--json", "-o",
                        str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["policies"]["prefix"]["requests"] == 30
    assert all(line.startswith(("warning:", "note:")) for line in p.stderr.splitlines()), p.stderr
