"""The console entry ends the process without the interpreter's teardown, keeping exit status, exit
handlers and buffered output (pic.cli.app._exit)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_fast_exit_runs_handlers_flushes_and_keeps_the_status() -> None:
    p = _run("import atexit, sys\n"
             "from pic.cli.app import _exit\n"
             "atexit.register(lambda: print('handler', end=''))\n"
             "print('out-', end=''); print('err', end='', file=sys.stderr)\n"
             "_exit(3)\n")
    assert p.returncode == 3
    assert p.stdout == "out-handler"
    assert p.stderr == "err"


def test_fast_exit_message_code_prints_it_and_exits_1() -> None:
    p = _run("from pic.cli.app import _exit\n_exit('bad thing')\n")
    assert p.returncode == 1
    assert p.stderr.strip() == "bad thing"


def test_exit_with_a_live_thread_waits_for_it() -> None:
    p = _run("import threading, time\n"
             "from pic.cli.app import _exit\n"
             "def work():\n    time.sleep(0.3); print('thread done', flush=True)\n"
             "threading.Thread(target=work).start()\n"
             "_exit(0)\n")
    assert p.returncode == 0
    assert p.stdout.strip() == "thread done"


def test_replay_through_the_console_entry_writes_complete_outputs(tmp_path) -> None:
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "pic", "replay", "traces/samples/chat.parquet", "--policy",
                        "prefix", "-o", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    import json

    import pyarrow.parquet as pq
    assert json.loads((out / "summary.json").read_text())["policies"]
    rows = pq.read_table(out / "requests.parquet")
    assert rows.num_rows == 200 and set(rows.column("policy").to_pylist()) == {"prefix"}


def test_main_in_process_ends_in_system_exit_not_a_process_exit() -> None:
    p = _run("import sys\nfrom pic.cli.app import main\nsys.argv = ['pic', '--version']\n"
             "try:\n    main()\nexcept SystemExit as e:\n    print('caught', e.code)\n")
    assert p.returncode == 0
    assert p.stdout.splitlines()[-1] == "caught 0"


def test_exit_with_the_gpu_stack_loaded_is_the_normal_one() -> None:
    """With torch imported the process exits through the interpreter (native exit hooks run)."""
    p = _run("import sys, types\n"
             "sys.modules['torch'] = types.ModuleType('torch')\n"
             "class Probe:\n    def __del__(self):\n        print('finalized', flush=True)\n"
             "keep = Probe()\n"
             "from pic.cli.app import _exit\n_exit(4)\n")
    assert p.returncode == 4
    assert "finalized" in p.stdout
