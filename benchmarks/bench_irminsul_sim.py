"""CPU seconds of one policy's serving simulation on a trace, as ``pic replay`` runs it (issue #12: irminsul's own
cost next to prefix's), with the numba kernels loaded before the clock starts (their load is timed apart),
and its footprint (``_held``) timed apart.

    PYTHONPATH=. python3 benchmarks/bench_irminsul_sim.py /tmp/bs/azure-conv.parquet --policies prefix,irminsul
"""

from __future__ import annotations

import argparse
import gc
import time

from pic import accel
from pic.engine import replay as rp
from pic.engine.config import ReplayConfig
from pic.engine.policies.base import PolicyContext


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--policies", default="prefix,irminsul")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--profile", default=None, help="cProfile the last policy's simulation into this file")
    ap.add_argument("--calls", action="store_true", help="CPU s inside each policy method (lookup, admit, ...)")
    a = ap.parse_args()
    spent: dict[str, int] = {}
    if a.calls:
        from pic.engine import policies
        for name in a.policies.split(","):
            _time_calls(policies.get(name), spent)
    t = time.process_time()
    accel.set_mode("1")
    accel.kernels(1)
    print(f"kernel load {time.process_time() - t:.3f} CPU s")
    trace = rp.read_trace_file(a.trace)
    names = a.policies.split(",")
    cfg = ReplayConfig(policies=tuple(names))
    model, gpu, cost, _ = rp.check_config(cfg)
    work = rp.workload_from_trace(trace)
    ctx = PolicyContext(cfg.capacity_bytes, model.kv_bytes_per_token, model, cfg.seed, cfg.verify)
    gc.disable()
    for _ in range(a.repeats):
        for name in names:
            prof = None
            if a.profile and name == names[-1]:
                import cProfile
                prof = cProfile.Profile(time.process_time)
                prof.enable()
            t = time.process_time()
            sim = rp._simulate(name, work, ctx, cost, cfg, None)
            t1 = time.process_time()
            held = rp._held(sim.pols, 16)
            t2 = time.process_time()
            if prof is not None:
                prof.disable()
                prof.dump_stats(a.profile)
            print(f"{name}: simulate {t1 - t:.3f} CPU s, footprint {t2 - t1:.3f} CPU s, reused {sim.reused}, "
                  f"dup {held['footprint'].get('duplicate_stored_tokens')}", flush=True)
            if spent:
                print("  " + ", ".join(f"{k} {v / 1e9:.3f}" for k, v in spent.items()))
                spent.clear()
            sim = held = None
            gc.collect()


def _time_calls(cls: type, spent: dict[str, int]) -> None:
    """Wrap the policy's methods to add up the CPU ns spent in each."""
    clock = time.process_time_ns
    for m in ("lookup", "admit", "commit", "release", "usage", "footprint"):
        f = getattr(cls, m)

        def timed(*args, _f=f, _m=m):
            t = clock()
            try:
                return _f(*args)
            finally:
                spent[_m] = spent.get(_m, 0) + clock() - t
        setattr(cls, m, timed)


if __name__ == "__main__":
    main()
