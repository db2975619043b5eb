"""Hostile-input costs (issue #9): the LMCache prompt splitter on worst-case prompts (must be linear), and
the read cost of the real traces with every row range-checked (CPU seconds, so other jobs on the machine
do not distort them).

Usage:
    python benchmarks/bench_hostile.py [--data DIR] [--repeats 3]

Prints Markdown tables: (1) split_prompt CPU seconds for prompts of unclosed line-opening tags at 0.25 to
4 MB (a linear splitter doubles with the size; the quadratic one took 8 s for 300 KB), (2) read_sources CPU
seconds of the shared real traces.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))     # this checkout's pic

from _timing import best_cpu  # noqa: E402

from pic.traces.formats.lmcache_agent import split_prompt  # noqa: E402
from pic.traces.ingest import read_sources  # noqa: E402

UNITS = ["\n<br>", "\n<a>", "\n<a>x</b>", "\n<a></a>\n<b>"]
SIZES_MB = [0.25, 0.5, 1, 2, 4]
INPUTS = [("lmcache-agent miniswe (dir)", ("lmcache-agent-trace", "miniswe")),
          ("mooncake conversation", ("mooncake", "conversation_trace.jsonl")),
          ("azure conv", ("azure-llm-2023", "AzureLLMInferenceTrace_conv.csv"))]



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print("| unit repeated | " + " | ".join(f"{mb:g} MB" for mb in SIZES_MB) + " |")
    print("|---|" + "---:|" * len(SIZES_MB))
    for unit in UNITS:
        cells = [f"{best_cpu(lambda u=unit, mb=mb: split_prompt(u * int(mb * 2**20 // len(u))), args.repeats):.3f}"
                 for mb in SIZES_MB]
        print(f"| `{unit.encode('unicode_escape').decode()}` | " + " | ".join(cells) + " |")
    print()
    print("| input | requests | read CPU s |")
    print("|---|---:|---:|")
    for label, parts in INPUTS:
        p = args.data.joinpath(*parts)
        if not p.exists():
            print(f"| {label} | (absent) | |")
            continue
        n = read_sources([p])[0].num_requests
        print(f"| {label} | {n:,} | {best_cpu(lambda p=p: read_sources([p]), args.repeats):.2f} |")


if __name__ == "__main__":
    main()
