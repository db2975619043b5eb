"""Regenerate docs/cli.md from every command's --help (checked in CI by tests/cli/test_cli_docs.py).

    python tools/gen_cli_docs.py          # rewrite docs/cli.md
    python tools/gen_cli_docs.py --check  # exit 1 if docs/cli.md is stale

Everything from the line :data:`HAND_WRITTEN` to the end of docs/cli.md is prose written by hand
(e.g. "What pic writes, and what it never touches"): it is kept as it is.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.update({"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb", "_TYPER_FORCE_DISABLE_TERMINAL": "1"})
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this checkout's pic, not an installed one

from typer.testing import CliRunner  # noqa: E402

from pic.cli.app import COMMANDS, app  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
HAND_WRITTEN = "<!-- Hand-written from here to the end: tools/gen_cli_docs.py keeps it as it is. -->"


def _help(args: list[str]) -> str:
    res = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"})
    if res.exit_code != 0:
        raise SystemExit(f"pic {' '.join(args)} --help failed: {res.output}")
    return "\n".join(line.rstrip() for line in res.output.strip("\n").splitlines())


def _hand_written() -> str:
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    at = text.find(HAND_WRITTEN)
    return text[at:] if at >= 0 else ""


def render() -> str:
    parts = ["# CLI reference", "",
             "Generated from `--help` by `python tools/gen_cli_docs.py`; a test fails when it is stale.",
             "What every command may write, and what it never touches: "
             "[see the end of this page](#what-pic-writes-and-what-it-never-touches).", "",
             "## pic", "", "```", _help([]), "```", ""]
    for name in COMMANDS:
        parts += [f"## pic {name}", "", "```", _help([name]), "```", ""]
    tail = _hand_written()
    return "\n".join(parts) + (f"\n{tail}" if tail else "")


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not DOC.exists() or DOC.read_text(encoding="utf-8") != text:
            print("docs/cli.md is stale: run python tools/gen_cli_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
