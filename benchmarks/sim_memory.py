"""One policy's simulation alone: CPU seconds and the RSS it adds over the loaded trace (issue #12).

Reads the trace, hands Arrow's pool and malloc's free pages back, resets the peak (``VmHWM``), runs
``_simulate`` for one policy the way ``pic replay`` does (GC frozen and off), and prints CPU seconds, µs per
request, RSS before / after and the peak added. Linux only (``/proc/self``).

    python benchmarks/sim_memory.py /tmp/chat-100000.parquet block-hash
    python benchmarks/sim_memory.py TRACE prefix --checkout /tmp/pic-before     # another checkout's code
    python benchmarks/sim_memory.py TRACE irminsul --held 25      # + what the final state holds, by line

``--held N`` traces allocations (tracemalloc: slower, and RSS figures then include its bookkeeping) and
prints the N allocation sites holding most of the policy's final state (per request and in total).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6


def _hwm_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) / 1e3
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("trace")
    ap.add_argument("policy")
    ap.add_argument("--checkout", default=str(Path(__file__).resolve().parents[1]), help="pic checkout to import")
    ap.add_argument("--held", type=int, default=0, metavar="N", help="tracemalloc: the N sites holding most state")
    a = ap.parse_args()
    sys.path.insert(0, a.checkout)
    import pyarrow as pa

    from pic.engine import replay as r
    from pic.engine.policies.base import PolicyContext

    trace = r.read_trace_file(a.trace)
    pa.default_memory_pool().release_unused()
    cfg = r.ReplayConfig(policies=[a.policy])
    model, _gpu, cost, _ = r.check_config(cfg)
    work = r.workload_from_trace(trace)
    ctx = PolicyContext(cfg.capacity_bytes, model.kv_bytes_per_token, model, cfg.seed, cfg.verify)
    gc.collect()
    r.release_freed()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                                  # reset VmHWM to the current RSS
    before = _rss_mb()
    gc.freeze()
    gc.disable()
    if a.held:
        import tracemalloc
        tracemalloc.start(4)
    t0 = time.process_time()
    sim = r._simulate(a.policy, work, ctx, cost, cfg, None)
    cpu = time.process_time() - t0
    after, peak = _rss_mb(), _hwm_mb()
    print(f"{a.policy}: {cpu:.2f} CPU s, {cpu / work.num_requests * 1e6:.0f} us/request; RSS {before:.0f} -> "
          f"{after:.0f} MB, peak {peak:.0f} MB (+{peak - before:.0f} over the loaded trace); "
          f"{sim.reused} tokens reused")
    if a.held:
        sim.rows = sim.itl = None                     # the policies' state stays (sim.pols)
        gc.collect()
        n = work.num_requests
        held = tracemalloc.take_snapshot()
        total = sum(st.size for st in held.statistics("filename"))
        print(f"held after the simulation (tracemalloc): {total / 1e6:.1f} MB, {total / n:.0f} B per request")
        for st in held.statistics("traceback")[:a.held]:
            where = " < ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}" for f in reversed(st.traceback))
            print(f"  {st.size / 1e6:8.1f} MB {st.size / n:7.0f} B/req {st.count:9d} blocks  {where}")


if __name__ == "__main__":
    main()
