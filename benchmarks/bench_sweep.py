"""`pic sweep` speed-up on this machine's cores: serial (`--backend local -j 1`) vs 2 local worker processes vs
a real local Ray with 2 CPUs (issue #12), the same 2 x 3 grid (2 models x 3 capacities), measured in one run.

Usage:
    python benchmarks/bench_sweep.py [--requests 2000] [--repeats 2] [--quick] [--json out.json]

Each configuration is a child process `python -m pic sweep ...` timed from process start to exit (wall
seconds: a speed-up is a wall-clock ratio), on two traces: the bundled sample (200 requests, cells of a
fraction of a second, so start-up dominates) and a synthetic early-variation trace of --requests requests.
Configurations alternate and each is repeated (--repeats), best wall kept; every run's requests.parquet
files are compared byte for byte across the three. Also measured alone: `ray.init()` + `ray.shutdown()` with
the sweep's own settings. The load average is printed before and after: on a shared machine a second worker
competes with other people's work, so read the speed-up together with it. CPU seconds are those wait4
reports for the child (for Ray this misses the workers, which are the raylet's children).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "traces" / "samples" / "early-variation.parquet"
MODELS = "deepseek-v2-lite,llama-3.1-8b"
CAPS = "1GiB,4GiB,inf"
POLICIES = "prefix,fixed-chunk,irminsul"
CONFIGS = {"serial (local, -j 1)": ["--backend", "local", "-j", "1"],
           "local, -j 2": ["--backend", "local", "-j", "2"],
           "ray, -j 2": ["--backend", "ray", "-j", "2"]}
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
RAY_INIT = """
import json, time
t0 = time.perf_counter()
import ray
from pic.engine.sweep import SweepConfig, ray_init_args
ray.init(**ray_init_args(SweepConfig(traces=("x",), backend="ray", num_jobs=2)))
t1 = time.perf_counter()
ray.get(ray.remote(lambda: 1).remote())
t2 = time.perf_counter()
ray.shutdown()
print(json.dumps({"init_s": round(t1 - t0, 2), "first_task_s": round(t2 - t1, 2),
                  "shutdown_s": round(time.perf_counter() - t2, 2)}))
"""


def run(cmd: list[str]) -> dict:
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=ENV, cwd=REPO)
        out = p.stdout.read().decode()
        _, status, ru = os.wait4(p.pid, 0)
        err.seek(0)
        tail = err.read().decode()[-1500:]
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({rc}):\n{tail}")
    return {"wall_s": time.perf_counter() - t0, "cpu_s": ru.ru_utime + ru.ru_stime, "stdout": out}


def sweep(trace: Path, out: Path, extra: list[str]) -> dict:
    return run([sys.executable, "-m", "pic", "sweep", str(trace), "--policy", POLICIES, "--model", MODELS,
                "--capacity", CAPS, "--force", "-o", str(out), *extra])


def parquet_bytes(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("requests.parquet"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000, help="synthetic trace size")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="500 requests, 1 repeat")
    ap.add_argument("--json", type=Path, help="write the results here too")
    a = ap.parse_args()
    n, repeats = (500, 1) if a.quick else (a.requests, a.repeats)
    res: dict = {"cpus": os.cpu_count(), "load_before": os.getloadavg(), "grid": f"{MODELS} x {CAPS}",
                 "policies": POLICIES}
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} before", flush=True)
    res["ray_start"] = json.loads(run([sys.executable, "-c", RAY_INIT])["stdout"].strip().splitlines()[-1])
    print(f"ray start-up alone: {res['ray_start']}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        synth = Path(tmp) / f"ev{n}.parquet"
        run([sys.executable, "-m", "pic", "synth", "--scenario", "early-variation", "--requests", str(n),
             "--seed", "0", "-o", str(synth)])
        for k, (label, trace) in enumerate((("sample (200 requests)", SAMPLE),
                                            (f"synthetic early-variation ({n} requests)", synth))):
            rows = {c: {"wall_s": float("inf")} for c in CONFIGS}
            for _ in range(repeats):
                for c, extra in CONFIGS.items():
                    out = Path(tmp) / f"s{k}" / c.split()[0].strip(",")
                    r = sweep(trace, out, extra)
                    if r["wall_s"] < rows[c]["wall_s"]:
                        rows[c] = {"wall_s": round(r["wall_s"], 2), "cpu_s": round(r["cpu_s"], 2)}
                    rows[c]["bytes"] = parquet_bytes(out)
            blobs = [r.pop("bytes") for r in rows.values()]
            identical = len(blobs[0]) == 6 and all(b == blobs[0] for b in blobs)
            first = rows["serial (local, -j 1)"]
            for r in rows.values():
                r["speedup_vs_serial"] = round(first["wall_s"] / r["wall_s"], 2)
            res[label] = {"configs": rows, "requests_parquet_identical": identical}
            print(f"\n{label}: 6 cells, requests.parquet identical across configs: {identical}")
            print(f"| configuration | wall s (best of {repeats}) | CPU s (wait4) | speed-up vs serial |")
            print("|---|---:|---:|---:|")
            for c, r in rows.items():
                print(f"| {c} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['speedup_vs_serial']:.2f}× |", flush=True)
    res["load_after"] = os.getloadavg()
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
