"""Replay speed of the `prefix` policy (with its shadow) on real traces: requests/s, tokens/s, events/s,
peak RSS. Each trace runs in its own subprocess so peak RSS is per trace; ingest is setup, not timed.

    python benchmarks/bench_replay.py                      # both traces, best of 3
    python benchmarks/bench_replay.py --trace mooncake --repeat 1 --profile 25

The timed region is exactly ``engine.replay.replay(trace, config)`` (workload build, every event,
per-request rows and the summary). Wall time and process CPU time are both reported: the 2-core
machine is shared, so CPU time is the steadier figure.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / ".." / "shared" / "data"
TRACES = {
    "mooncake": DATA / "mooncake" / "conversation_trace.jsonl",
    "azure-conv": DATA / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv",
}


def run_one(name: str, repeat: int, profile: int, policy: str, replicas: int) -> dict:
    sys.path.insert(0, str(REPO))
    from pic.engine.config import ReplayConfig
    from pic.engine.replay import replay
    from pic.traces.ingest import read_sources

    t0 = time.perf_counter()
    trace = read_sources([TRACES[name]])[0]
    setup_s = time.perf_counter() - t0
    setup_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    config = ReplayConfig(policies=(policy,), replicas=replicas)
    best = None
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        res = replay(trace, config)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if best is None or wall < best[0]:
            best = (wall, cpu, res)
    wall, cpu, res = best
    s = res.summary["policies"][policy]
    out = {
        "trace": name, "policy": policy, "replicas": replicas, "requests": s["requests"],
        "prompt_tokens": s["prompt_tokens"], "output_tokens": int(res.requests["output_tokens"].sum()),
        "events": s["events"], "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
        "req_per_s_wall": round(s["requests"] / wall), "req_per_s_cpu": round(s["requests"] / cpu),
        "prompt_tok_per_s_wall": round(s["prompt_tokens"] / wall), "events_per_s_wall": round(s["events"] / wall),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "peak_rss_after_setup_mb": round(setup_rss),
        "setup_ingest_s": round(setup_s, 2), "token_hit_rate": round(s["token_hit_rate"], 5),
        "sim_seconds": round(s["sim_seconds"], 1), "ttft_p50_s": round(s["ttft_p50_s"], 4),
    }
    if profile:
        prof = cProfile.Profile(time.process_time)
        prof.enable()
        replay(trace, config)
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(profile)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", choices=[*TRACES, "all"], default="all")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", type=int, default=0, help="print the top N cProfile entries (stderr)")
    ap.add_argument("--policy", default="prefix")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(run_one(a.trace, a.repeat, a.profile, a.policy, a.replicas)))
        return
    for name in (TRACES if a.trace == "all" else [a.trace]):
        if not TRACES[name].exists():
            print(json.dumps({"trace": name, "skipped": f"missing {TRACES[name]}"}))
            continue
        cmd = [sys.executable, __file__, "--one", "--trace", name, "--repeat", str(a.repeat),
               "--profile", str(a.profile), "--policy", a.policy, "--replicas", str(a.replicas)]
        print(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
