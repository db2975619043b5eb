"""Bless golden outputs: the ONLY way to rewrite the files the golden and example tests diff against.

    python -m tests.golden.regen                 # traces + expected JSON + docs/examples/*.out
    python -m tests.golden.regen --check         # recompute everything, write nothing, exit 1 on a difference
    python -m tests.golden.regen --only golden   # or: --only examples

Run it from the repository root after a deliberate change to a policy, the serving model, the cost
model, the metrics or the trace generators; then review ``git diff tests/golden docs/examples`` (the
expected JSON names every policy/metric that moved) and commit the new files with the change.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.golden.golden import TRACES, diff, expected_document

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "examples"


def example_scripts() -> list[Path]:
    """``docs/examples/<policy>.py`` files, sorted (helpers starting with ``_`` excluded)."""
    return sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))


def run_example(script: Path) -> str:
    """Run one example as a user would (``python docs/examples/X.py`` from the repo root); its stdout."""
    # NOTE: this checkout's pic first (a git worktree must not run the editable install's copy)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(script.relative_to(REPO))], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{script.name} exited {proc.returncode}:\n{proc.stderr}")
    return proc.stdout


def regen_golden(check: bool) -> list[str]:
    problems = []
    for trace in TRACES:
        if check:
            with tempfile.TemporaryDirectory() as tmp:
                fresh = Path(tmp) / trace.path.name
                trace.make(fresh)
                if fresh.read_bytes() != trace.path.read_bytes():
                    problems.append(f"{trace.path.name}: regenerated trace differs from the committed one")
            expected = json.loads(trace.expected_path.read_text()) if trace.expected_path.exists() else {}
            problems += [f"{trace.name}: {line}" for line in diff(expected, expected_document(trace))]
            continue
        trace.path.parent.mkdir(parents=True, exist_ok=True)
        trace.make(trace.path)
        trace.expected_path.parent.mkdir(parents=True, exist_ok=True)
        doc = expected_document(trace)
        trace.expected_path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"wrote {trace.path.relative_to(REPO)} ({trace.path.stat().st_size:,} B), "
              f"{trace.expected_path.relative_to(REPO)}")
    return problems


def regen_examples(check: bool) -> list[str]:
    problems = []
    for script in example_scripts():
        out = script.with_suffix(".out")
        text = run_example(script)
        if check:
            if not out.exists() or out.read_text() != text:
                problems.append(f"{out.relative_to(REPO)}: output differs")
            continue
        out.write_text(text)
        print(f"wrote {out.relative_to(REPO)}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only; write nothing; exit 1 on a difference")
    ap.add_argument("--only", choices=("golden", "examples"), help="regenerate just one family")
    args = ap.parse_args(argv)
    problems = []
    if args.only in (None, "golden"):
        problems += regen_golden(args.check)
    if args.only in (None, "examples"):
        problems += regen_examples(args.check)
    for line in problems:
        print(line)
    if args.check:
        print("up to date" if not problems else f"{len(problems)} difference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
