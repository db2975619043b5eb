"""``linearkv`` with and without its prefix stage, beside ``prefix``, on given traces and hybrid models: one
markdown table row per (trace, model, variant) from each run's summary.json.

    python benchmarks/linearkv_prefix_stage.py --models qwen3-next-80b-a3b,granite-4.0-h-small TRACE...

Each run is ``python -m pic replay TRACE --policy prefix,linearkv --model M [--set
linearkv.prefix_stage=false] [--capacity C]`` in a temporary folder (unbounded capacity by default).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(trace: str, model: str, stage: bool, capacity: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "pic", "replay", trace, "--policy", "prefix,linearkv", "--model", model,
               "--capacity", capacity, "-o", str(out)]
        if not stage:
            cmd += ["--set", "linearkv.prefix_stage=false"]
        subprocess.run(cmd, cwd=REPO, check=True, capture_output=True)
        return json.loads((out / "summary.json").read_text())["policies"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--models", default="qwen3-next-80b-a3b,granite-4.0-h-small,olmo-hybrid-7b")
    ap.add_argument("--capacity", default="inf")
    a = ap.parse_args()
    print("| trace | model | policy | token hit rate | energy saved vs prefix | TTFT p50 | TTFT p99 | peak resident GiB |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for t in a.traces:
        for m in a.models.split(","):
            rows = {}
            for stage in (False, True):
                pol = run(t, m, stage, a.capacity)
                rows.setdefault("prefix", pol["prefix"])
                rows["linearkv" + ("" if stage else " (prefix_stage=false)")] = pol["linearkv"]
            for name, p in rows.items():
                print(f"| {Path(t).stem} | {m} | {name} | {100 * p['token_hit_rate']:.1f} % | "
                      f"{100 * p['energy_saved_vs_prefix']:+.1f} % | {1e3 * p['ttft_p50_s']:.1f} ms | "
                      f"{1e3 * p['ttft_p99_s']:.1f} ms | {p['peak_resident_bytes'] / 2**30:.2f} |", flush=True)


if __name__ == "__main__":
    main()
