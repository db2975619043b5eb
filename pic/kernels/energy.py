"""GPU energy meter over NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ).

The counter advances in steps (about every 100 ms on the H200), so one short kernel cannot be metered:
``measure(fn, min_seconds)`` waits for a counter step, repeats ``fn`` until at least ``min_seconds`` have
passed, synchronises, waits for the next step, and removes the idle tail between the end of the work and
that step with the measured idle power. ``idle_watts`` meters an idle interval the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


class EnergyUnavailable(RuntimeError):
    """NVML (nvidia-ml-py) is missing or the GPU does not expose an energy counter."""


@dataclass(frozen=True, slots=True)
class Metered:
    """Energy of ``calls`` repeats of one unit of work: ``joules`` board energy while it ran (idle tail
    removed), ``seconds`` its wall time; per call: ``joules / calls``; above idle: ``joules − idle_w·seconds``."""

    joules: float
    seconds: float
    calls: int
    idle_watts: float

    @property
    def per_call(self) -> float:
        return self.joules / self.calls

    @property
    def dynamic_per_call(self) -> float:
        """Joules per call above the idle floor."""
        return (self.joules - self.idle_watts * self.seconds) / self.calls

    @property
    def watts(self) -> float:
        return self.joules / self.seconds if self.seconds > 0 else 0.0


class EnergyMeter:
    """NVML energy counter of CUDA device ``index``; ``reader`` (tests) replaces NVML with a function
    returning (millijoules, seconds)."""

    def __init__(self, index: int = 0, reader: Callable[[], tuple[float, float]] | None = None,
                 sync: Callable[[], None] | None = None) -> None:
        self.idle_w = 0.0
        self._sync = sync or (lambda: None)
        if reader is not None:
            self._read = reader
            return
        try:
            import pynvml
        except ImportError:
            raise EnergyUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py, or the 'gpu' extra)") \
                from None
        try:
            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        except pynvml.NVMLError as e:
            raise EnergyUnavailable(f"NVML energy counter unavailable on GPU {index}: {e}") from None
        self._read = lambda: (float(pynvml.nvmlDeviceGetTotalEnergyConsumption(h)), time.perf_counter())

    # ---- Public API -------------------------------------------------------------------------------
    def idle_watts(self, seconds: float = 1.0) -> float:
        """Board power with nothing running, metered over >= ``seconds`` (also kept as ``self.idle_w``)."""
        self._sync()
        e0, t0 = self._step()
        while time.perf_counter() - t0 < seconds:
            time.sleep(0.01)
        e1, t1 = self._step()
        self.idle_w = (e1 - e0) / 1000.0 / (t1 - t0)
        return self.idle_w

    def measure(self, fn: Callable[[], object], min_seconds: float = 1.0, max_calls: int = 100000) -> Metered:
        """Repeat ``fn`` for >= ``min_seconds`` and meter it (see the module doc)."""
        self._sync()
        e0, t0 = self._step()
        calls = 0
        while calls < max_calls:
            fn()
            calls += 1
            if calls & 3 == 0 or calls == 1:
                self._sync()
                if time.perf_counter() - t0 >= min_seconds:
                    break
        self._sync()
        t_end = time.perf_counter()
        e1, t1 = self._step()
        joules = (e1 - e0) / 1000.0 - self.idle_w * max(t1 - t_end, 0.0)
        return Metered(joules, t_end - t0, calls, self.idle_w)

    # ---- Internal helpers -------------------------------------------------------------------------
    def _step(self, timeout: float = 1.0) -> tuple[float, float]:
        """(counter mJ, time) right after the counter's next step."""
        e0, t0 = self._read()
        while True:
            e, t = self._read()
            if e != e0 or t - t0 > timeout:
                return e, t
            time.sleep(0.0005)
