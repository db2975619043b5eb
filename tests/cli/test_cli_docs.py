"""docs/cli.md is generated from --help and must not drift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_cli_docs_up_to_date() -> None:
    """`python tools/gen_cli_docs.py --check` passes (regenerate docs/cli.md when a --help changes)."""
    res = subprocess.run([sys.executable, "tools/gen_cli_docs.py", "--check"], cwd=REPO,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
