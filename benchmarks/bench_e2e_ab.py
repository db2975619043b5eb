"""`pic replay` end to end, two checkouts side by side in one run (issue #12: "ratios measured side by side").

For every trace x policy, the same command runs from checkout A (before) and checkout B (after, default: this
one), interleaved A, B, A, B ... so that both meet the same machine load. Reported: CPU seconds (user + sys
of the child, from ``wait4``), requests per CPU second, peak RSS, and B's speed-up over A; the token hit rate
of both (it must not move).

    git -C REPO worktree add /tmp/pic-before <commit>       # or: git archive <commit> | tar -x -C /tmp/pic-before
    python benchmarks/bench_e2e_ab.py --before /tmp/pic-before /tmp/bs/azure-conv.parquet /tmp/bs/mooncake-conv.parquet
    python benchmarks/bench_e2e_ab.py --before /tmp/pic-before --policies prefix,irminsul --repeats 2 TRACE
    python benchmarks/bench_e2e_ab.py --before /tmp/pic-before --table TRACE     # the default output, not --json

``--table`` runs the command as a user types it (the summary table and headline printed, to a pipe here: the
plain lines a non-terminal gets) and reads the figures from the run's summary.json; without it the command
prints ``--json`` instead.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_children import POLICIES, REPO, machine, run_child  # noqa: E402


def replay(checkout: Path, trace: str, policy: str, table: bool = False) -> dict:
    """One `pic replay` from ``checkout``: CPU s, peak RSS, requests, hit rate (best of nothing: one run);
    ``table``: the default output (not ``--json``)."""
    out = Path(tempfile.mkdtemp(prefix="pic-ab-")) / "run"
    cmd = [sys.executable, "-m", "pic", "replay", trace, "--policy", policy, "-o", str(out), "--force",
           *(() if table else ("--json",))]
    try:
        r = run_child(cmd, cwd=checkout)
        summary = (out / "summary.json").read_text() if table and not r["rc"] else r["stdout"]
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
    if r["rc"]:
        return {"error": r.get("stderr", "")[-400:]}
    s = json.loads(summary)["policies"][policy]
    return {"cpu_s": round(r["cpu_s"], 2), "peak_rss_mb": round(r["peak_rss_mb"]), "requests": s["requests"],
            "token_hit_rate": s["token_hit_rate"], "duplicate_stored_tokens": s.get("duplicate_stored_tokens")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+", help="canonical .parquet traces")
    ap.add_argument("--before", required=True, help="checkout A (the earlier code)")
    ap.add_argument("--after", default=str(REPO), help="checkout B (default: this checkout)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--repeats", type=int, default=1, help="runs per side; the smallest CPU s is kept")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    ap.add_argument("--table", action="store_true", help="run without --json: the summary table a user sees")
    a = ap.parse_args()
    sides = {"before": Path(a.before), "after": Path(a.after)}
    rows = []
    print(f"machine: {machine()}; output: {'table' if a.table else '--json'}", flush=True)
    print("| trace | policy | before CPU s (req/s) | after CPU s (req/s) | speed-up | peak RSS before / after | "
          "hit rate before / after |\n|---|---|---:|---:|---:|---:|---|", flush=True)
    for trace in a.traces:
        for policy in a.policies.split(","):
            best: dict[str, dict] = {}
            for _ in range(a.repeats):
                for side, path in sides.items():
                    r = replay(path, trace, policy, a.table)
                    if "error" in r or r["cpu_s"] < best.get(side, {}).get("cpu_s", float("inf")):
                        best[side] = r
            b, f = best["before"], best["after"]
            row = {"trace": Path(trace).stem, "policy": policy, "before": b, "after": f}
            rows.append(row)
            if "error" in b or "error" in f:
                print(f"| {row['trace']} | {policy} | {b.get('error', '')[:60]} | {f.get('error', '')[:60]} | | | |")
                continue
            n = f["requests"]
            print(f"| {row['trace']} | {policy} | {b['cpu_s']:.2f} ({n / b['cpu_s']:,.0f}) | {f['cpu_s']:.2f} "
                  f"({n / f['cpu_s']:,.0f}) | {b['cpu_s'] / f['cpu_s']:.2f}x | {b['peak_rss_mb']:,} / "
                  f"{f['peak_rss_mb']:,} MB | {b['token_hit_rate']:.4f} / {f['token_hit_rate']:.4f} |", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
