"""engine.memory.release_freed and traces.io's Arrow pool release: memory handed back only where there is enough of
it (a page handed back is faulted in again when reused)."""

from __future__ import annotations

from pic.engine import memory
from pic.traces import io


def test_release_freed_trims_only_past_the_threshold(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(memory, "_malloc_trim", lambda: calls.append)
    for free, want in ((0, []), (memory.TRIM_MIN_BYTES - 1, []), (memory.TRIM_MIN_BYTES, [0]),
                       (float("inf"), [0])):
        calls.clear()
        monkeypatch.setattr(memory, "_free_bytes", lambda free=free: free)
        memory.release_freed()
        assert calls == want


def test_free_bytes_is_glibcs_count() -> None:
    """mallinfo2's free bytes in glibc's arenas (or, unknown: infinite, always trimmed)."""
    got = memory._free_bytes()
    info = memory._mallinfo2()
    if info is None:
        assert got == float("inf")
    else:
        assert got >= 0 and abs(got - float(info().fordblks)) < 64 << 20     # (the heap moves between the calls)
    memory.release_freed()


class _Pool:
    def __init__(self, peak: int) -> None:
        self.peak, self.released = peak, 0

    def max_memory(self) -> int:
        return self.peak

    def release_unused(self) -> None:
        self.released += 1


def test_arrow_pool_released_only_once_it_held_enough() -> None:
    small, big = _Pool(io._POOL_RELEASE_MIN - 1), _Pool(io._POOL_RELEASE_MIN)
    io._release_pool(small)
    io._release_pool(big)
    assert (small.released, big.released) == (0, 1)

