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


@pytest.fixture
def modes():
    """Run a function under the numpy path and under the compiled kernels (``pic.accel`` modes "0" and "1");
    restore the mode after (tests/test_accel*.py)."""
    from pic import accel

    def both(fn):
        out = []
        for m in ("0", "1"):
            accel.set_mode(m)
            out.append(fn())
        return out
    yield both
    accel.set_mode(None)
