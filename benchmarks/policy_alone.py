"""One policy's methods alone, no serving model: CPU µs per request in lookup, admit, commit and release (#12).

Each request of the trace, in arrival order, is looked up, admitted, committed and released before the next
(one at a time: no queueing, batching or cost model), with the GC frozen and off as in ``pic replay``. The
CPU time of each call (``time.process_time``) is summed per method. This is what the policy itself costs per
request, apart from the serving machinery that every policy shares.

    python benchmarks/policy_alone.py /tmp/bs/mooncake-conv.parquet block-hash prefix
    python benchmarks/policy_alone.py TRACE block-hash --checkout /tmp/pic-before    # another checkout's code
    python benchmarks/policy_alone.py TRACE block-hash --capacity 20GiB
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("trace", help="canonical .parquet trace")
    ap.add_argument("policies", nargs="+", help="registered policy names")
    ap.add_argument("--checkout", help="import pic from this checkout (default: this one)")
    ap.add_argument("--capacity", default="inf", help="cache capacity per replica (40GiB, 1e9, inf)")
    ap.add_argument("--repeats", type=int, default=1, help="runs per policy; the smallest total is kept")
    args = ap.parse_args()
    sys.path.insert(0, args.checkout or str(Path(__file__).resolve().parents[1]))
    from pic.engine import policies
    from pic.engine.config import parse_size
    from pic.engine.policies.base import PolicyContext
    from pic.engine.replay import ReplayConfig, check_config, read_trace_file, workload_from_trace

    trace = read_trace_file(args.trace)
    work = workload_from_trace(trace)
    views = [work.view(i) for i in range(work.num_requests)]
    n = len(views)
    print(f"{args.trace}: {n:,} requests, pic from {policies.__file__.rsplit('/pic/', 1)[0]}")
    for name in args.policies:
        best = None
        for _ in range(args.repeats):
            cfg = ReplayConfig(policies=[name], capacity_bytes=parse_size(args.capacity))
            model, _, _, _ = check_config(cfg)
            pol = policies.build(name, PolicyContext(cfg.capacity_bytes, model.kv_bytes_per_token, model,
                                                     cfg.seed, cfg.verify))
            gc.collect()
            gc.freeze()
            gc.disable()
            pt = time.process_time
            acc = [0.0, 0.0, 0.0, 0.0]
            for i, v in enumerate(views):
                a = pt()
                plan = pol.lookup(v, i)
                b = pt()
                ok = pol.admit(v, plan, i)
                c = pt()
                if ok:
                    pol.commit(v, i)
                d = pt()
                if ok:
                    pol.release(v, i)
                e = pt()
                acc[0] += b - a
                acc[1] += c - b
                acc[2] += d - c
                acc[3] += e - d
            gc.enable()
            gc.unfreeze()
            if best is None or sum(acc) < sum(best):
                best = acc
        parts = "  ".join(f"{k} {x / n * 1e6:.1f}" for k, x in zip(("lookup", "admit", "commit", "release"),
                                                                     best, strict=True))
        print(f"{name:12s} {sum(best) / n * 1e6:7.1f} us/request  ({parts})  total {sum(best):.3f} CPU s")


if __name__ == "__main__":
    main()
