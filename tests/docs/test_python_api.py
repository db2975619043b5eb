"""docs/python-api.md: its Python blocks run, in order, in one namespace (executed docs)."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "python-api.md"


def test_python_api_page_runs(tmp_path: Path) -> None:
    """Every ```python block of the page runs without error from a folder holding traces/samples."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) >= 4
    (tmp_path / "traces").symlink_to(REPO / "traces")
    cwd = Path.cwd()
    ns: dict = {}
    out = io.StringIO()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(out):
            for i, code in enumerate(blocks):
                exec(compile(code, f"{PAGE.name}[block {i}]", "exec"), ns)
    finally:
        os.chdir(cwd)
    assert (tmp_path / "runs" / "notebook" / "report.html").is_file()
    assert "irminsul" in out.getvalue()
