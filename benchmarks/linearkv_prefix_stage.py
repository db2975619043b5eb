"""``linearkv`` variants beside ``prefix`` on given traces and hybrid models: one markdown table row per
(trace, model, capacity, variant) from each run's summary.json and config.json.

    python benchmarks/linearkv_prefix_stage.py --models qwen3-next-80b-a3b,granite-4.0-h-small TRACE...
    python benchmarks/linearkv_prefix_stage.py --capacity 2GiB,8GiB \
        --variants ",admission=prefix-first,admission=always" TRACE...

Each run is ``python -m pic replay TRACE --policy prefix,linearkv --model M --capacity C [--set
linearkv.OPTION=VALUE]`` in a temporary folder. Variants: comma-separated ``OPTION=VALUE`` settings of
linearkv, an empty item being the default (default variants: the prefix stage off, then the default).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(trace: str, model: str, variant: str, capacity: str) -> tuple[dict, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "pic", "replay", trace, "--policy", "prefix,linearkv", "--model", model,
               "--capacity", capacity, "-o", str(out)]
        if variant:
            cmd += ["--set", f"linearkv.{variant}"]
        subprocess.run(cmd, cwd=REPO, check=True, capture_output=True)
        stats = json.loads((out / "config.json").read_text())["policies"]["linearkv"]["stats"]
        return json.loads((out / "summary.json").read_text())["policies"], stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--models", default="qwen3-next-80b-a3b,granite-4.0-h-small,olmo-hybrid-7b")
    ap.add_argument("--capacity", default="inf", help="comma-separated capacities (default: inf)")
    ap.add_argument("--variants", default="prefix_stage=false,",
                    help="comma-separated linearkv OPTION=VALUE settings; an empty item is the default")
    a = ap.parse_args()
    print("| trace | model | capacity | policy | token hit rate | energy saved vs prefix | TTFT p50 | TTFT p99 | "
          "peak resident GiB | chunk hits | stored / not stored chunks |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for t in a.traces:
        for m in a.models.split(","):
            for cap in a.capacity.split(","):
                rows = {}
                for v in a.variants.split(","):
                    pol, st = run(t, m, v, cap)
                    rows.setdefault("prefix", (pol["prefix"], None))
                    rows["linearkv" + (f" ({v})" if v else "")] = (pol["linearkv"], st)
                for name, (p, st) in rows.items():
                    extra = ("| | |" if st is None else
                             f"| {st['chunk_hits']:,} | {st['stored_chunks']:,} / {st.get('unstored_chunks', 0):,} |")
                    print(f"| {Path(t).stem} | {m} | {cap} | {name} | {100 * p['token_hit_rate']:.1f} % | "
                          f"{100 * p['energy_saved_vs_prefix']:+.1f} % | {1e3 * p['ttft_p50_s']:.1f} ms | "
                          f"{1e3 * p['ttft_p99_s']:.1f} ms | {p['peak_resident_bytes'] / 2**30:.2f} {extra}", flush=True)


if __name__ == "__main__":
    main()
