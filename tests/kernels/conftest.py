"""Kernel tests: run Triton kernels under the interpreter when there is no GPU; NaN-poison torch.empty*.

Without torch or triton (the simulator-only install: they come with ``pip install -e '.[gpu]'``) no file
here is collected — a test module that imports torch at the top cannot break the run — and the summary
says so."""

from __future__ import annotations

import os

import pytest

try:
    import torch

    _CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover - torch comes with the gpu extra
    torch = None
    _CUDA = False

if not _CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first `import triton`

try:
    import numpy  # noqa: F401 - the interpreter needs it
    import triton  # noqa: F401

    _TRITON_ERR = None
except ImportError as e:  # pragma: no cover - depends on the machine
    _TRITON_ERR = str(e)

DEVICE = "cuda" if _CUDA else "cpu"
GPU_EXTRA = "pip install -e '.[gpu]'"

if torch is None or _TRITON_ERR is not None:
    collect_ignore_glob = ["test_*.py"]


def pytest_terminal_summary(terminalreporter):
    if torch is None or _TRITON_ERR is not None:
        missing = "torch" if torch is None else f"triton ({_TRITON_ERR})"
        terminalreporter.write_line(f"tests/kernels not collected: {missing} is not installed ({GPU_EXTRA})")


def pytest_collection_modifyitems(config, items):
    if _TRITON_ERR is None and torch is not None:
        return
    skip = pytest.mark.skip(reason=f"triton unusable here: {_TRITON_ERR}")
    for item in items:
        if "tests/kernels" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def nan_poison(monkeypatch):
    """Fill every floating tensor from torch.empty / empty_like with NaN, so unwritten outputs fail."""
    if torch is None:
        return
    empty, empty_like = torch.empty, torch.empty_like

    def poison(t):
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", lambda *a, **k: poison(empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: poison(empty_like(*a, **k)))


@pytest.fixture
def device() -> str:
    return DEVICE
