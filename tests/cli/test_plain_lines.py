"""One-line messages on stderr (warnings, errors, notes) without rich where stderr is not a terminal: the same
text rich prints there (pic.cli.errors.print_line), and `pic replay --json` into files and pipes imports no rich."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pic.cli import errors

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = "traces/samples/rag-reorder.parquet"

MESSAGES = ["plain", "  leading and trailing   ", "x" * 500, "wide 中文字符 " * 30, "[bold]markup[/bold] :smile: \\[x]",
            "emoji 😀, a zwj sequence 👨‍👩‍👧, combining é", "tab\there\nnewline\r\x1b[31mred\x07", "\u202eRTL",
            "surrogate \udcff", "", " ", "a" * 79 + " " + "b" * 200, "\u200b zero width", "%s {x} $HOME"]


def _rich_line(parts: tuple) -> str:
    f = io.StringIO()
    errors.SafeConsole(file=f).print(errors.styled(*parts), soft_wrap=True)
    return f.getvalue()


@pytest.mark.parametrize("message", MESSAGES)
@pytest.mark.parametrize("label", ["warning:", "error:", None])
def test_a_plain_line_is_what_rich_prints_to_a_file(message: str, label: str | None, monkeypatch) -> None:
    parts = ((label, "yellow"), " ", message) if label else (message,)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    for v in errors._RICH_ENV:
        monkeypatch.delenv(v, raising=False)
    assert errors.plain_stderr()
    errors.print_line(*parts)
    assert err.getvalue() == _rich_line(parts)


def test_rich_decides_where_it_may_treat_stderr_as_a_terminal(monkeypatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    for v in errors._RICH_ENV:
        monkeypatch.delenv(v, raising=False)
    assert errors.plain_stderr()
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert not errors.plain_stderr()
    monkeypatch.delenv("FORCE_COLOR")

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True
    monkeypatch.setattr(sys, "stderr", Tty())
    assert not errors.plain_stderr()


def _replay_into_a_pipe(tmp_path, *options: str) -> tuple[str, str]:
    """`pic replay` of the sample (30 requests) in a child whose stdout is a pipe: its output, and the rich modules
    it imported."""
    argv = ["pic", "replay", SAMPLE, "--limit", "30", *options, "-o", str(tmp_path / "run")]
    code = ("import sys\nfrom pic.cli.app import main\n"
            f"sys.argv = {argv!r}\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('RICH', sorted(m for m in sys.modules if m.split('.')[0] == 'rich'))\n")
    env = {k: v for k, v in os.environ.items() if k not in errors._RICH_ENV}
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**env, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    out, last = p.stdout.rsplit("RICH", 1)
    return out, last.strip()


def test_replay_json_into_a_pipe_imports_no_rich(tmp_path) -> None:
    out, rich_modules = _replay_into_a_pipe(tmp_path, "--json")
    assert json.loads(out)["policies"]["prefix"]["requests"] == 30
    assert rich_modules == "[]"


def test_replay_table_into_a_pipe_imports_no_rich(tmp_path) -> None:
    out, rich_modules = _replay_into_a_pipe(tmp_path)
    assert "┃ policy" in out and "│ prefix" in out
    assert rich_modules == "[]"
