"""Speed of the trace-level oracle (``engine.oracle.trace_oracle``) on large traces.

    python benchmarks/bench_oracle.py [--requests 10000,100000] [--mooncake PATH]

Synthetic: ``pic synth --scenario multi-agent`` traces of each size (seed 0). Mooncake: the conversation
trace read by the Mooncake reader (512-token blocks derived from ``hash_ids``). Reports CPU seconds
(``time.process_time``, so load from other jobs does not count), prompt tokens per CPU second and the
oracle's hit rate; peak RSS from ``resource.getrusage``.
"""

from __future__ import annotations

import argparse
import resource
import time

from pic.engine.oracle import trace_oracle
from pic.engine.replay import read_trace_file, workload_from_trace
from pic.traces.synth import synth


def measure(name: str, trace) -> None:
    w = workload_from_trace(trace)
    prompts = [w.view(i).tokens for i in range(w.num_requests)]
    n = sum(p.shape[0] for p in prompts)
    t0 = time.process_time()
    reused = trace_oracle(prompts, 64)
    cpu = time.process_time() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"| {name} | {w.num_requests:,} | {n:,} | {cpu:.1f} | {n / cpu / 1e6:.1f} | {reused.sum() / n:.4f} "
          f"| {rss:.1f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", default="10000,100000")
    ap.add_argument("--mooncake", default=None)
    args = ap.parse_args()
    print("| trace | requests | prompt tokens | CPU s | M tokens / CPU s | oracle hit rate | peak RSS GiB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in (int(x) for x in args.requests.split(",") if x):
        measure(f"multi-agent synth {r:,}", synth("multi-agent", r, 0))
    if args.mooncake:
        measure("Mooncake conversation", read_trace_file(args.mooncake))


if __name__ == "__main__":
    main()
