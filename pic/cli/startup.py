"""What a `pic` process pays before its command runs (issue #12: `pic replay` end to end, CPU seconds)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def imports_without_gc() -> Iterator[None]:
    """Imports with the cyclic GC off, and what they built frozen after (it lives to the end of the process:
    no later pass need walk it); the GC is back on after, unless it was off before.

    NOTE (speed): the GC's passes over the objects imports build (modules, classes, functions: ~90 k for a
    `pic replay`) cost ~35 ms CPU in every run, and found next to nothing to free."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()
