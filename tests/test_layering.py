"""Import direction (DESIGN.md §2): traces <- engine <- cli, kernels <- cli; engine never imports torch."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: package -> top-level modules it must never import
FORBIDDEN = {
    "traces": {"pic.engine", "pic.kernels", "pic.cli", "torch", "triton", "typer", "rich"},
    "engine": {"pic.kernels", "pic.cli", "torch", "triton", "typer", "rich"},
    "kernels": {"pic.cli", "typer", "rich", "pic.traces"},
}


def _top(name: str) -> str:
    """``pic.engine.cost`` -> ``pic.engine``; ``torch.nn`` -> ``torch``."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "pic" else parts[0]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(_top(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(_top(node.module))
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_upward_imports(package: str) -> None:
    """No module of the package imports a package above it (or torch/rich where banned)."""
    bad = []
    for path in sorted((REPO / "pic" / package).rglob("*.py")):
        hits = _imports(path) & FORBIDDEN[package]
        if hits:
            bad.append(f"{path.relative_to(REPO)}: {sorted(hits)}")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_layering_sees_the_packages() -> None:
    """The rule above walks real files (a moved package would make it pass vacuously)."""
    for package in FORBIDDEN:
        assert len(list((REPO / "pic" / package).rglob("*.py"))) >= 3, package
