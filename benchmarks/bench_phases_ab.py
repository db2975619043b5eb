"""`pic replay` phase by phase, two checkouts side by side: CPU s of reading the trace, the oracle, each simulation,
numba's load (``pic.accel._loading``, inside the simulation that loads the kernels), the collects, the footprint
(``_held``: the policy's ``footprint()`` and ``duplicate_tokens``), the summary and the writes, measured in process
(the CLI's ``main``), interleaved A, B, A, B ..., the smallest of the repeats per phase.

    python3 benchmarks/bench_phases_ab.py --before /tmp/pic-before --policies prefix,irminsul --repeats 3 \\
        /tmp/bs/azure-conv.parquet /tmp/bs/mooncake-conv.parquet
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def child(argv: list[str]) -> None:
    """Run ``pic`` with ``argv`` in this process, the phases timed; prints ``PHASES {json}`` on stderr."""
    import contextlib
    import functools
    import time

    clock = time.process_time
    t_start = clock()
    acc: dict[str, float] = {}

    def add(k: str, v: float) -> None:
        acc[k] = acc.get(k, 0.0) + v

    import pic.accel as accel
    import pic.engine.replay as R

    def wrap(name: str) -> None:
        fn = getattr(R, name)

        @functools.wraps(fn)
        def w(*a, **k):
            t = clock()
            out = fn(*a, **k)
            add(name, clock() - t)
            return out
        setattr(R, name, w)

    for n in ("read_trace_file", "_oracle", "free_cycles", "_held", "_summary", "write_run", "duplicate_tokens"):
        wrap(n)
    simulate, footprint, loading = R._simulate, R._footprint, accel._loading

    def sim(name, *a, **k):
        t = clock()
        out = simulate(name, *a, **k)
        add(f"sim:{name}", clock() - t)
        return out

    def fp(pols, *a, **k):
        cls = type(pols[0])
        orig = cls.footprint

        def f(self):
            t = clock()
            out = orig(self)
            add("footprint()", clock() - t)
            return out
        cls.footprint = f
        try:
            return footprint(pols, *a, **k)
        finally:
            cls.footprint = orig

    depth = [0]

    @contextlib.contextmanager
    def timed_loading():
        t = clock()
        depth[0] += 1
        try:
            with loading():
                yield
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                add("numba load", clock() - t)

    R._simulate, R._footprint, accel._loading = sim, fp, timed_loading
    sys.argv = ["pic", *argv]
    from pic.cli.app import main as pic_main
    try:
        pic_main()
    except SystemExit:
        pass
    acc["total"] = clock() - t_start
    print("PHASES " + json.dumps({k: round(v, 4) for k, v in acc.items()}), file=sys.stderr)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", default=str(REPO))
    ap.add_argument("--policies", default="prefix,irminsul")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    sides = {"before": a.before, "after": a.after}
    for trace in a.traces:
        for policy in a.policies.split(","):
            got: dict[str, list[dict]] = {s: [] for s in sides}
            for _ in range(a.repeats):
                for side, path in sides.items():
                    out = Path(tempfile.mkdtemp(prefix="pic-ph-")) / "run"
                    r = subprocess.run([sys.executable, __file__, "--child", "replay", trace, "--policy", policy, "-o",
                                        str(out), "--force"], cwd=path, env={**os.environ, "PYTHONPATH": path},
                                       capture_output=True, text=True)
                    shutil.rmtree(out.parent, ignore_errors=True)
                    line = [x for x in r.stderr.splitlines() if x.startswith("PHASES ")]
                    got[side].append(json.loads(line[0][7:]) if line else {})
            keys = sorted({k for runs in got.values() for d in runs for k in d},
                          key=lambda k: -max((d.get(k, 0.0) for d in got["after"]), default=0.0))
            print(f"{Path(trace).name} {policy}: CPU s, min of {a.repeats} (before | after | change)", flush=True)
            for k in keys:
                b, x = (min(d.get(k, 0.0) for d in got[s]) for s in ("before", "after"))
                print(f"  {k:20s} {b:7.3f} {x:7.3f} {x - b:+7.3f}", flush=True)


if __name__ == "__main__":
    main()
