"""Import direction (DESIGN.md §2): traces <- engine <- pic_cli, kernels <- pic_cli; engine never imports torch."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: package -> top-level modules it must never import
FORBIDDEN = {
    "traces": {"engine", "kernels", "pic_cli", "torch", "triton", "typer", "rich"},
    "engine": {"kernels", "pic_cli", "torch", "triton", "typer", "rich"},
    "kernels": {"pic_cli", "typer", "rich", "traces"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_upward_imports(package: str) -> None:
    """No module of the package imports a package above it (or torch/rich where banned)."""
    bad = []
    for path in sorted((REPO / package).rglob("*.py")):
        hits = _imports(path) & FORBIDDEN[package]
        if hits:
            bad.append(f"{path.relative_to(REPO)}: {sorted(hits)}")
    assert not bad, "upward imports:\n" + "\n".join(bad)
