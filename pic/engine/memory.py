"""Memory of a replay: the cyclic GC kept off while simulations run, their state freed between them, and
freed C-heap memory handed back to the OS (:mod:`engine.replay`, ``pic replay``)."""

from __future__ import annotations

import ctypes
import functools
import gc
from collections.abc import Callable
from contextlib import contextmanager

COLLECT_LAST_MIN = 100_000


def free_cycles(num_requests: int | None = None) -> None:
    """A full cyclic-GC pass and the freed memory handed back (:func:`release_freed`); with ``num_requests``
    (the state left at the end of a run), only from ``COLLECT_LAST_MIN`` requests on.

    NOTE (speed): a small run's last state is left to the GC (a CLI run exits first, saving the pass and the
    frees: 0.24-0.68 CPU s on Azure / Mooncake conversation). NOTE (memory): at scale it is freed before the
    summary and the writes (chat 10^6 `prefix`: the last radix tree, ~1.8 GB, and the trace's cycles stayed
    alive through the write)."""
    if num_requests is None or num_requests >= COLLECT_LAST_MIN:
        gc.collect()
        release_freed()


def release_freed() -> None:
    """Hand memory the C allocator holds free back to the OS (glibc ``malloc_trim``; a no-op elsewhere), where it
    holds ``TRIM_MIN_BYTES`` or more free.

    NOTE (memory): numpy arrays below glibc's mmap threshold live on the heap; after the oracle ~290 MB of
    it (chat 10^5) stays free but mapped, and Python's object arenas, which are mapped separately, cannot
    reuse it: the next simulation's objects then stack on top of it.
    NOTE (speed): a page handed back is faulted in again when the heap grows over it (~3.5 us a page on the
    2-core VM): below ``TRIM_MIN_BYTES`` free (Mooncake conversation: 5, 28 and 11 MB at its three calls) the
    memory is left for the next arrays to reuse."""
    trim = _malloc_trim()
    if trim is not None and _free_bytes() >= TRIM_MIN_BYTES:
        trim(0)


TRIM_MIN_BYTES = 64 << 20


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


@functools.cache
def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    try:
        f = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    f.restype = _MallInfo2
    return f


def _free_bytes() -> float:
    """Bytes glibc's arenas hold free (``mallinfo2().fordblks``); unknown (glibc < 2.33): infinite (trim)."""
    info = _mallinfo2()
    return float("inf") if info is None else float(info().fordblks)


@contextmanager
def no_cyclic_gc():
    """NOTE (speed): the trace and workload are frozen out of the cyclic GC's scans, and the GC is off
    while the simulations run (they make no reference cycles that outlive a request; the GC's passes
    over millions of live nodes cost 5-20 % of a replay). Both are restored afterwards."""
    gc.collect()
    release_freed()
    gc.freeze()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        # NOTE (speed): everything goes to the oldest generation (freeze resets the young count, unfreeze
        # moves all to the oldest): re-enabling the GC over a young generation holding the last policy's
        # whole state started a pass over it at once (0.68 CPU s at exit, irminsul on Mooncake)
        gc.freeze()
        gc.unfreeze()
        if was:
            gc.enable()
