"""Timing shared by the benchmark scripts (imported as ``_timing``: a script's own folder is on sys.path)."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_cpu(fn: Callable[[], object], repeats: int) -> float:
    """Best process-CPU seconds of ``repeats`` calls of ``fn`` (CPU time: other jobs' load does not count)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best
