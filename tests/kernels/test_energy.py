"""Energy meter on a synthetic counter: stepped like NVML's, busy 500 W while work runs, idle 100 W."""

from __future__ import annotations

import time

import pytest

from pic.kernels.energy import EnergyMeter, EnergyUnavailable


class FakeBoard:
    """A board whose energy counter (mJ) only moves every ``step`` seconds, like NVML's."""

    def __init__(self, step: float = 0.05, idle: float = 100.0, busy: float = 500.0) -> None:
        self.step, self.idle, self.busy = step, idle, busy
        self.t0 = time.perf_counter()
        self.busy_s = 0.0

    def energy(self, t: float) -> float:
        return (self.idle * (t - self.t0) + (self.busy - self.idle) * self.busy_s) * 1000.0

    def read(self) -> tuple[float, float]:
        t = time.perf_counter()
        stepped = self.t0 + ((t - self.t0) // self.step) * self.step
        return self.energy(min(stepped, t)), t

    def work(self) -> None:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.02:
            pass
        self.busy_s += time.perf_counter() - t


def test_meter_recovers_busy_and_idle_power():
    """Idle power and per-call joules come out within a few percent despite the 50 ms counter steps."""
    board = FakeBoard()
    m = EnergyMeter(reader=board.read)
    assert m.idle_watts(0.3) == pytest.approx(100.0, rel=0.05)
    got = m.measure(board.work, min_seconds=0.4)
    per_call_s = board.busy_s / got.calls          # >= 20 ms: the busy-wait overshoots on a loaded machine
    assert got.calls >= 10
    assert got.per_call == pytest.approx(500.0 * per_call_s, rel=0.1)
    assert got.dynamic_per_call == pytest.approx(400.0 * per_call_s, rel=0.15)
    assert got.watts == pytest.approx(500.0, rel=0.1)


def test_missing_nvml_is_a_clear_error(monkeypatch):
    """Without nvidia-ml-py the meter says how to get it (no traceback material)."""
    import builtins

    real = builtins.__import__

    def no_pynvml(name, *a, **k):
        if name == "pynvml":
            raise ImportError("no pynvml")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    with pytest.raises(EnergyUnavailable, match="nvidia-ml-py"):
        EnergyMeter()
