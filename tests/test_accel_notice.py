"""A kernel not in numba's cache says so once on an interactive stderr (the first run after an install compiles for
~10-25 s, silent otherwise); nothing on a pipe, nothing when the cache answers (pic.accel._compiling)."""

from __future__ import annotations

import importlib
import io
import sys

import pytest

from pic import accel

pytest.importorskip("numba")

_SRC = "from numba import njit\n\n\n@njit('int64(int64)', cache=True)\ndef f(x):\n    return x + {k}\n"


class _Tty(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def _load(tmp_path, name: str, k: int):
    path = tmp_path / f"{name}.py"
    if not path.exists():              # (rewritten, numba would see a new source: a miss)
        path.write_text(_SRC.format(k=k))
    with accel._loading():
        return importlib.import_module(name)


@pytest.mark.parametrize("tty", [True, False])
def test_a_cache_miss_says_so_once(tmp_path, monkeypatch, tty) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(accel._state, "told", False)
    err = _Tty(tty)
    monkeypatch.setattr(sys, "stderr", err)
    tag = f"{tty:d}{tmp_path.name[-6:]}".replace("-", "_")
    assert _load(tmp_path, f"_pic_notice_a{tag}", 1).f(1) == 2          # (compiled: a miss)
    assert _load(tmp_path, f"_pic_notice_b{tag}", 2).f(1) == 3          # (another miss: no second line)
    assert err.getvalue().count("compiling kernels once") == (1 if tty else 0)


def test_a_cache_hit_says_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = f"_pic_notice_hit{tmp_path.name[-6:]}".replace("-", "_")
    _load(tmp_path, name, 3)                                            # (compiled and cached)
    del sys.modules[name]
    monkeypatch.setitem(accel._state, "told", False)
    err = _Tty(True)
    monkeypatch.setattr(sys, "stderr", err)
    assert _load(tmp_path, name, 3).f(1) == 4                           # (loaded from the cache)
    assert err.getvalue() == ""
