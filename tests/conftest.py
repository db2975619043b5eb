"""Shared fixtures: the real third-party traces in <repo>/../shared/data (skip cleanly when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# PIC_SHARED_DATA points elsewhere (a worktree whose ../shared is not the project's)
SHARED_DATA = Path(os.environ.get("PIC_SHARED_DATA") or (REPO / ".." / "shared" / "data")).resolve()


def shared_file(*parts: str) -> Path:
    """Path under ../shared/data, or skip the calling test when it is not there."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared data not present: {p}")
    return p


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data not present")
    return SHARED_DATA
