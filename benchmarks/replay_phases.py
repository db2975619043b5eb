"""Memory of each phase of `pic replay` (issue #12, scale): RSS after each function ``replay()`` calls, the high
point within it and so far (``VmHWM``), and the C heap's free bytes (glibc ``mallinfo2``: slack a trim would hand back).

    PYTHONPATH=. python3 benchmarks/replay_phases.py [--out PHASES.json] -- TRACE --policy irminsul -o DIR [...]

Everything after ``--`` is `pic replay`'s own command line: the CLI runs as `python -m pic replay` does (the same
imports, the same ``del loaded`` and writes), with the functions of ``pic.engine.replay`` it calls wrapped: the trace
read, the workload, the trace-level oracle, each policy's simulation (and, within it, whether it takes prefix's:
``prefix_twin.take``, its proof and its asked pass), the baselines' cycles freed, ``_held`` / ``_footprint`` (the
state reduced and dropped; within it the duplicate count), the tables' concatenation, the trace dropped (the CLI's
``free_cycles``) and ``write_run``. Nothing is freed or collected that the run would not free itself, so the
figures are a plain run's (the high points are reset per phase through ``/proc/self/clear_refs``; the whole run's
peak is the largest of them). One line per phase on stderr as it ends; ``--out``: all of them as JSON.
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
import time

_CLEAR = "/proc/self/clear_refs"


def _status() -> tuple[int, int]:
    """(VmRSS, VmHWM) in KB."""
    rss = hwm = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM"):
                hwm = int(line.split()[1])
    return rss, hwm


def _reset_hwm() -> bool:
    try:
        with open(_CLEAR, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


try:
    _mallinfo2 = ctypes.CDLL(None).mallinfo2
    _mallinfo2.restype = _MallInfo2
except (OSError, AttributeError):
    _mallinfo2 = None


def _heap_free_kb() -> int:
    return -1 if _mallinfo2 is None else _mallinfo2().fordblks // 1024


class Phases:
    """Open phases as a stack: each knows the highest RSS seen while it was open (HWM reset on every entry)."""

    def __init__(self) -> None:
        self.stack: list[dict] = []
        self.done: list[dict] = []
        self.peak = 0
        self.resets = _reset_hwm()
        self.t0 = time.process_time()

    def _fold(self) -> int:
        rss, hwm = _status()
        for f in self.stack:
            f["peak_kb"] = max(f["peak_kb"], hwm)
        self.peak = max(self.peak, hwm)
        return rss

    def enter(self, name: str) -> None:
        rss = self._fold()
        self.stack.append({"phase": name, "depth": len(self.stack), "rss_before_kb": rss, "peak_kb": rss,
                           "cpu0": time.process_time()})
        self.resets and _reset_hwm()

    def leave(self) -> None:
        rss = self._fold()
        f = self.stack.pop()
        f["rss_after_kb"] = rss
        f["peak_so_far_kb"] = self.peak
        f["heap_free_kb"] = _heap_free_kb()
        f["cpu_s"] = round(time.process_time() - f.pop("cpu0"), 2)
        self.done.append(f)
        print(f"[phases] {'  ' * f['depth']}{f['phase']:<28} rss {rss / 1e6:6.3f} GB  peak in it "
              f"{f['peak_kb'] / 1e6:6.3f}  so far {self.peak / 1e6:6.3f}  heap free {f['heap_free_kb'] / 1e6:6.3f}"
              f"  cpu {f['cpu_s']:7.2f} s", file=sys.stderr, flush=True)

    def wrap(self, fn, label):
        def wrapped(*a, **k):
            self.enter(label(*a, **k) if callable(label) else label)
            try:
                return fn(*a, **k)
            finally:
                self.leave()
        wrapped.__wrapped__ = fn
        return wrapped


def install(ph: Phases) -> None:
    """Wrap what ``pic replay`` calls (module attributes: read when the call is made)."""
    import pic.engine.memory as M
    import pic.engine.replay as R

    R.read_trace_file = ph.wrap(R.read_trace_file, "trace read")
    R.replay = ph.wrap(R.replay, "replay()")
    R.workload_from_trace = ph.wrap(R.workload_from_trace, "workload")
    R._oracle = ph.wrap(R._oracle, "trace-level oracle")
    R._simulate = ph.wrap(R._simulate, lambda name, *a, **k: f"sim:{name}")
    # (its RSS after: where the policy's own simulation starts, prefix's simulation not taken)
    R.prefix_twin.take = ph.wrap(R.prefix_twin.take, lambda name, *a, **k: f"take prefix's sim? ({name})")
    # (within it: the trace-level proof that would tell the policy, then the policy asked in arrival order)
    R.prefix_twin.Twin.proven = ph.wrap(R.prefix_twin.Twin.proven, "proof (proven_prefixes)")
    R.prefix_twin._asked = ph.wrap(R.prefix_twin._asked, "asked in arrival order")
    R.free_cycles = ph.wrap(R.free_cycles, "cycles freed (baseline)")
    R.release_freed = ph.wrap(R.release_freed, "release_freed")
    R._held = ph.wrap(R._held, "_held (state reduced)")
    R._footprint = ph.wrap(R._footprint, "_footprint")
    # (within it, after the state's footprint() and its cycles freed: the count over its stored runs)
    R.duplicate_tokens = ph.wrap(R.duplicate_tokens, "duplicate count")
    R._concat = ph.wrap(R._concat, "tables concatenated")
    R.write_run = ph.wrap(R.write_run, "write_run")
    M.free_cycles = ph.wrap(M.free_cycles, "trace dropped (CLI)")


def main() -> None:
    argv = sys.argv[1:]
    out = None
    if "--" not in argv:
        sys.exit(__doc__)
    cut = argv.index("--")
    mine, rest = argv[:cut], argv[cut + 1:]
    if mine[:1] == ["--out"]:
        out = mine[1]
    ph = Phases()
    from pic.cli.startup import imports_without_gc
    with imports_without_gc():
        from pic.cli import app
    install(ph)
    sys.argv = ["pic", "replay", *rest]
    code = 0
    try:
        app.main()
    except SystemExit as e:
        code = e.code or 0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(f"[phases] peak {ph.peak / 1e6:.3f} GB (ru_maxrss {ru.ru_maxrss / 1e6:.3f} GB), "
          f"cpu {ru.ru_utime + ru.ru_stime:.1f} s, exit {code}", file=sys.stderr, flush=True)
    if out:
        with open(out, "w") as f:
            json.dump({"argv": rest, "peak_kb": ph.peak, "ru_maxrss_kb": ru.ru_maxrss, "exit": code,
                       "hwm_reset": ph.resets, "phases": ph.done}, f, indent=1)
    sys.stdout.flush()
    os._exit(int(code) if isinstance(code, int) else 1)


if __name__ == "__main__":
    main()
