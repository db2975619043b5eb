"""Where a policy's final state keeps its bytes: every object reached from the policy once its simulation ends,
counted once each, grouped by the attribute path (two levels) that first reaches it (issue #12, scale).

    PYTHONPATH=. python3 benchmarks/state_census.py TRACE [--policy irminsul] [--capacity 1GiB] [--depth 2]

It runs ``pic.engine.replay.replay`` as ``pic replay`` does (baselines first, the oracle) and takes the census
where the replay hands the policy's state to ``_held`` (before it is reduced and dropped). Objects the workload
and the trace reach are excluded (they are the trace's, not the state's). Bytes: ``sys.getsizeof`` (which
counts a tracked object's GC header and a numpy array's own data), per request and in total; also RSS.
"""
from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
import types
from collections import defaultdict
from pathlib import Path

import pic.engine.replay as R
from pic.engine.config import ReplayConfig
from pic.traces.io import read_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_children import _current_rss_mb  # noqa: E402

_OPAQUE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
           types.CodeType, type)


def census(root: object, exclude: set[int], depth: int) -> dict[str, list[int]]:
    """{path: [objects, bytes]}: breadth first from ``root``'s attributes; each object to the first path."""
    seen = set(exclude)
    seen.add(id(root))
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    attrs = getattr(root, "__dict__", {})
    frontier = []
    for k, v in attrs.items():
        frontier.append((v, k, 1))
    while frontier:
        nxt = []
        for o, path, d in frontier:
            if id(o) in seen:
                continue
            seen.add(id(o))
            if isinstance(o, _OPAQUE) or type(o).__module__.startswith("numba"):
                continue            # code, modules and compiled kernels: the process's, not the state's
            rec = out[path]
            rec[0] += 1
            rec[1] += sys.getsizeof(o)
            sub = getattr(o, "__dict__", None) if d < depth else None
            if isinstance(sub, dict):
                seen.add(id(sub))
                for k, v in sub.items():
                    nxt.append((v, f"{path}.{k}", d + 1))
                continue
            slots = getattr(type(o), "__slots__", None) if d < depth else None
            if slots and not isinstance(o, type):
                for k in ((slots,) if isinstance(slots, str) else slots):
                    if hasattr(o, k):
                        nxt.append((getattr(o, k), f"{path}.{k}", d + 1))
            for r in gc.get_referents(o):
                if not isinstance(r, type):
                    nxt.append((r, path, d))
        frontier = nxt
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--policy", default="irminsul")
    ap.add_argument("--capacity", default=None, help="e.g. 1GiB (default: unbounded)")
    ap.add_argument("--depth", type=int, default=2, help="attribute levels kept in the paths")
    a = ap.parse_args()
    t0 = time.process_time()
    trace = read_trace(a.trace)
    kw = {}
    if a.capacity:
        from pic.cli.coerce import parse_bytes  # noqa: PLC0415
        kw["capacity_bytes"] = float(parse_bytes(a.capacity))
    config = ReplayConfig(policies=(a.policy,), **kw)
    orig = R._held
    box: dict = {}

    def held(pols, min_match, collect=False):
        if a.policy in box or pols[0].name != a.policy and getattr(pols[0], "name", a.policy) != a.policy:
            return orig(pols, min_match, collect)
        rss = _current_rss_mb()
        ex = {id(o) for o in gc.get_referents(trace)} | {id(trace)}
        # the trace's and the workload's objects (reached from the policy's context and views) are not the state's
        for o in (trace, getattr(trace, "__dict__", {})):
            ex |= {id(x) for x in gc.get_referents(o)}
        box[a.policy] = (census(pols[0], ex, a.depth), rss)
        return orig(pols, min_match, collect)

    R._held = held
    res = R.replay(trace, config)
    n = res.resolved["num_requests"]
    cpu = time.process_time() - t0
    if a.policy not in box:
        sys.exit(f"{a.policy}: its state never reached _held (told from another simulation?)")
    rows, rss = box[a.policy]
    tot_o = sum(v[0] for v in rows.values())
    tot_b = sum(v[1] for v in rows.values())
    print(f"# {a.trace} {a.policy} cap={a.capacity or 'inf'}: {n:,} requests, RSS at _held {rss:,.0f} MB, "
          f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB, CPU {cpu:.1f} s")
    print(f"{'path':48s} {'objects':>12s} {'MB':>9s} {'B/req':>8s}")
    for path, (o, b) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        if b / n < 1:
            continue
        print(f"{path:48s} {o:12,d} {b / 1e6:9.1f} {b / n:8.0f}")
    print(f"{'total':48s} {tot_o:12,d} {tot_b / 1e6:9.1f} {tot_b / n:8.0f}")


if __name__ == "__main__":
    main()
