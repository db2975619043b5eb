"""Re-timing a workload's arrivals (``pic replay --time-scale / --rate``; moved out of engine.replay)."""

from __future__ import annotations

import math

import numpy as np


def retime(arrival_us: np.ndarray, time_scale: float = 1.0, rate: float | None = None) -> tuple[np.ndarray, float]:
    """Sorted arrivals re-timed about the first one: ``time_scale`` multiplies every gap; ``rate`` (requests/s)
    rescales them so that (n − 1) / span equals it, the pattern kept; ``inf`` puts every arrival at the first.
    Returns (new int64 µs arrivals, the factor applied). Raises ValueError when a rate cannot be reached."""
    a = np.asarray(arrival_us, dtype=np.int64)
    if rate is None and time_scale == 1.0:
        return a, 1.0
    if a.size == 0:
        return a, time_scale
    origin, rel = int(a[0]), a - a[0]
    if rate is not None and math.isinf(rate):
        return np.full_like(a, origin), 0.0
    if rate is not None:
        span = int(rel[-1])
        if a.size < 2 or span <= 0:
            raise ValueError(f"rate: the {a.size} request(s) all arrive at one instant; there is no pattern to "
                             "re-time to a rate (use --rate inf, or a trace with arrival times)")
        time_scale = (a.size - 1) / (span / 1e6) / rate
    return origin + np.rint(rel * time_scale).astype(np.int64), time_scale
