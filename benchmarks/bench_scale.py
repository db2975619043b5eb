"""Speed and scale of `pic` as a user meets it (issue #12): every row of the issue's table in one run.

    python benchmarks/bench_scale.py --quick                 # minutes: small sizes, no 10^6 run
    python benchmarks/bench_scale.py                         # full: 10^4..10^6 synth, every policy
    python benchmarks/bench_scale.py --only e2e,trace --json out.json
    python benchmarks/bench_scale.py --only digests --digests-check benchmarks/plan_digests.json

Sections (``--only`` picks some; each runs its measurements in fresh child processes so that peak RSS
and CPU time belong to one thing):

  policies  replay() CPU req/s per policy (process CPU seconds around ``replay()`` only) on Mooncake
            conversation, Azure conversation and a 20k-request rag-reorder synth trace; ratio to prefix
  e2e       ``python -m pic replay TRACE --policy P -o DIR`` from process start to exit, CPU seconds
            (user + sys of the child, from wait4) and peak RSS, every policy, Mooncake + Azure
            conversation (+ Vidur on the Azure trace with ``--vidur DIR``, the same run)
  profile   cProfile (process time) of replay() on Mooncake conversation for the slower policies:
            top functions by own time, and the cyclic GC's share (gc.callbacks)
  cdc       CDC + fingerprints vs raw xxh64 over the same token bytes, one process, side by side
  scale     time per request and peak RSS of ``pic replay`` (prefix, irminsul) on chat and rag-reorder
            synth traces of 10^4, 10^5, 10^6 requests (``--quick``: 10^3, 10^4, 3*10^4)
  trace     Mooncake conversation canonical trace: bytes on disk, CPU s and RSS to open it, prefix hit
            rates (conversation and synthetic, unbounded capacity)
  digests   sha256 of every Plan each policy returned (in call order) per trace: ``--digests-out``
            writes them, ``--digests-check`` compares (plans must stay byte-identical)

CPU seconds, not wall time: the 2-core machine is shared with other jobs. Real traces are read from
``../shared/data`` (skipped when absent). Intermediate traces go to ``--workdir`` (kept between runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_children import ENV, POLICIES, REPO, child_json, machine, run_child  # noqa: E402

DATA = Path(os.environ.get("PIC_DATA", REPO.parent / "shared" / "data"))
if not DATA.exists():
    DATA = Path("/work/shared/data")
RAW = {
    "mooncake-conv": DATA / "mooncake" / "conversation_trace.jsonl",
    "mooncake-synth": DATA / "mooncake" / "synthetic_trace.jsonl",
    "azure-conv": DATA / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv",
}


# ---- sections ---------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.work = Path(args.workdir)
        self.work.mkdir(parents=True, exist_ok=True)
        self.results: dict = {"machine": machine(), "quick": args.quick}

    def log(self, *parts) -> None:
        print(*parts, flush=True)

    # canonical traces (ingested / synthesized once, cached in workdir by the current code version)
    def canonical(self, name: str) -> Path | None:
        if name in RAW:
            if not RAW[name].exists():
                return None
            out = self.work / f"{name}.parquet"
            if not out.exists():
                r = run_child([sys.executable, "-m", "pic", "ingest", str(RAW[name]), "-o", str(out)])
                if r["rc"]:
                    raise RuntimeError(f"ingest {name}: {r.get('stderr')}")
                self.results.setdefault("ingest", {})[name] = {"cpu_s": round(r["cpu_s"], 2),
                                                               "peak_rss_mb": round(r["peak_rss_mb"])}
            return out
        scenario, n = name.rsplit("-", 1)
        out = self.work / f"{name}.parquet"
        if not out.exists():
            r = run_child([sys.executable, "-m", "pic", "synth", "-s", scenario, "-n", n, "--seed", "0",
                           "-o", str(out)])
            if r["rc"]:
                raise RuntimeError(f"synth {name}: {r.get('stderr')}")
            self.results.setdefault("synth", {})[name] = {"cpu_s": round(r["cpu_s"], 2),
                                                          "peak_rss_mb": round(r["peak_rss_mb"])}
        return out

    def sec_policies(self) -> None:
        traces = ["mooncake-conv", "azure-conv", "rag-reorder-" + ("5000" if self.a.quick else "20000")]
        limit = 3000 if self.a.quick else None
        res = self.results["policies"] = {}
        for t in traces:
            path = self.canonical(t)
            if path is None:
                self.log(f"policies: {t} skipped (no data)")
                continue
            rows = {}
            for p in POLICIES:
                d = child_json(["replay", str(path), p, str(limit or 0), "0"])
                rows[p] = d
                self.log(f"policies {t:16s} {p:12s} {d.get('req_per_cpu_s', 'ERR'):>8} req/CPU-s "
                         f"(replay {d.get('replay_cpu_s')} s CPU, gc {d.get('gc_cpu_s')} s, hit "
                         f"{d.get('token_hit_rate', 0):.4f}, peak {d.get('child_peak_rss_mb')} MB)")
            base = rows["prefix"].get("replay_cpu_s")
            for p in POLICIES:
                if base and "replay_cpu_s" in rows[p]:
                    rows[p]["slower_than_prefix"] = round(rows[p]["replay_cpu_s"] / base, 2)
            res[t] = rows

    def sec_e2e(self) -> None:
        res = self.results["e2e"] = {}
        for t in ("mooncake-conv", "azure-conv"):
            path = self.canonical(t)
            if path is None:
                continue
            rows = {}
            for p in POLICIES:
                out = self.work / f"run-e2e-{t}-{p}"
                cmd = [sys.executable, "-m", "pic", "replay", str(path), "--policy", p, "-o", str(out), "--json"]
                if self.a.quick:
                    cmd += ["--limit", "3000"]
                r = run_child(cmd)
                if r["rc"]:
                    rows[p] = {"error": r.get("stderr", "")[-400:]}
                    self.log(f"e2e {t} {p}: FAILED {rows[p]['error']}")
                    continue
                s = json.loads(r["stdout"])["policies"][p]
                rows[p] = {"requests": s["requests"], "cpu_s": round(r["cpu_s"], 3), "user_s": round(r["user_s"], 3),
                           "sys_s": round(r["sys_s"], 3), "req_per_cpu_s": round(s["requests"] / r["cpu_s"]),
                           "peak_rss_mb": round(r["peak_rss_mb"]), "token_hit_rate": s["token_hit_rate"]}
                self.log(f"e2e {t:14s} {p:12s} {rows[p]['req_per_cpu_s']:>7} req/CPU-s ({r['cpu_s']:.2f} s CPU, "
                         f"{r['peak_rss_mb']:.0f} MB)")
                shutil.rmtree(out, ignore_errors=True)
            startup = run_child([sys.executable, "-m", "pic", "replay", "--help"])
            rows["startup (pic replay --help)"] = {"cpu_s": round(startup["cpu_s"], 3),
                                                    "peak_rss_mb": round(startup["peak_rss_mb"])}
            base = rows.get("prefix", {}).get("cpu_s")
            for p in POLICIES:
                if base and "cpu_s" in rows.get(p, {}):
                    rows[p]["slower_than_prefix"] = round(rows[p]["cpu_s"] / base, 2)
            res[t] = rows
        if self.a.vidur:
            res["vidur"] = self.vidur()

    def vidur(self) -> dict:
        """Vidur on the Azure conversation trace (see docs/bench-scale.md for the offline install)."""
        trace = RAW["azure-conv"]
        if not trace.exists():
            return {"skipped": "no Azure trace"}
        out = self.work / "vidur-out"
        shutil.rmtree(out, ignore_errors=True)
        n = 3000 if self.a.quick else 19366
        cmd = [self.a.vidur_python, "-m", "vidur.main",
               "--replica_config_device", "h100", "--replica_config_model_name", "meta-llama/Meta-Llama-3-8B",
               "--cluster_config_num_replicas", "1",
               "--request_generator_config_type", "trace_replay",
               "--trace_request_generator_config_trace_file", str(self._vidur_trace(trace, n)),
               "--replica_scheduler_config_type", "sarathi", "--sarathi_scheduler_config_chunk_size", "8192",
               "--metrics_config_output_dir", str(out),
               "--no-metrics_config_write_metrics", "--no-metrics_config_store_plots",
               "--no-metrics_config_enable_chrome_trace", "--no-metrics_config_save_table_to_wandb"]
        r = run_child(cmd)
        row = {"requests": n, "cpu_s": round(r["cpu_s"], 2), "peak_rss_mb": round(r["peak_rss_mb"]),
               "req_per_cpu_s": round(n / r["cpu_s"]) if r["rc"] == 0 else None, "rc": r["rc"]}
        if r["rc"]:
            row["error"] = r.get("stderr", "")[-800:]
        self.log(f"vidur azure-conv: {row}")
        shutil.rmtree(out, ignore_errors=True)
        return row

    def _vidur_trace(self, azure_csv: Path, n: int) -> Path:
        """Vidur's trace_replay input: arrived_at (s), num_prefill_tokens, num_decode_tokens."""
        import csv
        from datetime import datetime, timezone
        out = self.work / f"vidur-azure-conv-{n}.csv"
        if out.exists():
            return out
        rows = []
        with open(azure_csv) as f:
            for i, row in enumerate(csv.DictReader(f)):
                if i >= n:
                    break
                ts = datetime.fromisoformat(row["TIMESTAMP"][:26]).replace(tzinfo=timezone.utc).timestamp()
                rows.append((ts, max(1, int(row["ContextTokens"])), max(1, int(row["GeneratedTokens"]))))
        t0 = min(r[0] for r in rows)
        with open(out, "w") as f:
            f.write("arrived_at,num_prefill_tokens,num_decode_tokens\n")
            for ts, p, d in sorted(rows):
                f.write(f"{ts - t0:.6f},{p},{d}\n")
        return out

    def sec_profile(self) -> None:
        path = self.canonical("mooncake-conv")
        if path is None:
            return
        limit = 2000 if self.a.quick else 0
        res = self.results["profile"] = {}
        for p in ("prefix", "block-hash", "fixed-chunk", "irminsul"):
            d = child_json(["replay", str(path), p, str(limit), "14"])
            res[p] = d
            self.log(f"profile mooncake-conv {p}: total {d.get('profile_total_s')} s, gc {d.get('gc_cpu_s')} s")
            for row in d.get("profile", [])[:10]:
                self.log(f"    {row['own_share']:6.1%} {row['own_s']:7.3f} s {row['calls']:>9} {row['function']}")

    def sec_cdc(self) -> None:
        self.results["cdc"] = d = child_json(["cdc", str(2_000_000 if self.a.quick else 10_000_000)])
        self.log(f"cdc: {d}")

    def sec_scale(self) -> None:
        sizes = [1000, 10_000, 30_000] if self.a.quick else [10_000, 100_000, 1_000_000]
        sizes = [s for s in sizes if s <= self.a.max_scale]
        res = self.results["scale"] = {}
        for scenario in ("chat", "rag-reorder"):
            for n in sizes:
                path = self.canonical(f"{scenario}-{n}")
                for p in ("prefix", "irminsul"):
                    out = self.work / f"run-scale-{scenario}-{n}-{p}"
                    r = run_child([sys.executable, "-m", "pic", "replay", str(path), "--policy", p, "-o", str(out),
                                   "--json"])
                    key = f"{scenario}-{n}-{p}"
                    if r["rc"]:
                        res[key] = {"error": r.get("stderr", "")[-400:], "peak_rss_mb": round(r["peak_rss_mb"])}
                        self.log(f"scale {key}: FAILED ({res[key]})")
                        continue
                    s = json.loads(r["stdout"])["policies"][p]
                    res[key] = {"requests": n, "cpu_s": round(r["cpu_s"], 2), "us_per_req": round(r["cpu_s"] / n * 1e6),
                                "peak_rss_mb": round(r["peak_rss_mb"]), "token_hit_rate": s["token_hit_rate"],
                                "trace_mb": round(path.stat().st_size / 2**20, 1)}
                    self.log(f"scale {key:28s} {res[key]['us_per_req']:>6} us/req CPU, peak {res[key]['peak_rss_mb']} MB")
                    shutil.rmtree(out, ignore_errors=True)

    def sec_trace(self) -> None:
        res = self.results["trace"] = {}
        for t in ("mooncake-conv", "mooncake-synth", "azure-conv"):
            if t in self.results.get("ingest", {}):
                pass
            path = self.work / f"{t}.parquet"
            if path.exists():     # re-ingest so ingest CPU is measured by this code version
                path.unlink()
            path = self.canonical(t)
            if path is None:
                continue
            d = child_json(["open", str(path)])
            d["bytes_on_disk"] = path.stat().st_size
            d["ingest"] = self.results.get("ingest", {}).get(t)
            if t.startswith("mooncake"):
                r = child_json(["replay", str(path), "prefix", "0", "0"])
                d["prefix_hit_rate_unbounded"] = r.get("token_hit_rate")
            res[t] = d
            self.log(f"trace {t}: {d['bytes_on_disk'] / 1e6:.1f} MB on disk, open {d.get('open_cpu_s')} s CPU, "
                     f"RSS after open {d.get('rss_after_open_mb')} MB (peak {d.get('child_peak_rss_mb')}), prefix hit "
                     f"{d.get('prefix_hit_rate_unbounded')}")

    def sec_digests(self) -> None:
        jobs = [(REPO / "traces" / "samples" / f"{s}.parquet", 0, cap) for s in
                ("chat", "early-variation", "early-variation-markers", "multi-agent", "rag-reorder", "tool-reorder")
                for cap in ("inf", "256MiB")]
        for t, lim in (("mooncake-conv", 1500), ("azure-conv", 1500), ("mooncake-synth", 1500)):
            p = self.canonical(t)
            if p is not None:
                jobs += [(p, lim, "inf"), (p, lim, "2GiB")]
        res = self.results["digests"] = {}
        for path, lim, cap in jobs:
            d = child_json(["digests", str(path), ",".join(POLICIES), str(lim), cap])
            key = f"{Path(path).stem}@{cap}" + (f"[:{lim}]" if lim else "")
            res[key] = d.get("digests", d)
            self.log(f"digests {key}: {res[key]}")
        if self.a.digests_out:
            Path(self.a.digests_out).write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
        if self.a.digests_check:
            want = json.loads(Path(self.a.digests_check).read_text())
            bad = [(k, p) for k, v in want.items() if k in res for p in v if res[k].get(p) != v[p]]
            self.results["digests_changed"] = bad
            self.log("digests: all identical" if not bad else f"digests CHANGED: {bad}")


SECTIONS = ("trace", "policies", "e2e", "profile", "cdc", "scale", "digests")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes (minutes)")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma list of: {', '.join(SECTIONS)}")
    ap.add_argument("--workdir", default="/tmp/pic-bench-scale", help="cache of ingested/synthesized traces")
    ap.add_argument("--max-scale", type=int, default=1_000_000, help="largest synth size in the scale section")
    ap.add_argument("--vidur", default=None, help="Vidur checkout (import path) to time on the Azure trace")
    ap.add_argument("--vidur-python", default=sys.executable, help="python that has Vidur's dependencies")
    ap.add_argument("--json", default=None, help="write every result to this JSON file")
    ap.add_argument("--digests-out", default=None)
    ap.add_argument("--digests-check", default=None)
    a = ap.parse_args()
    if a.vidur:
        ENV["PYTHONPATH"] = str(Path(a.vidur).resolve()) + os.pathsep + ENV["PYTHONPATH"]
    b = Bench(a)
    b.log(f"# bench_scale {'--quick ' if a.quick else ''}on {b.results['machine']}")
    for sec in a.only.split(","):
        t0 = time.perf_counter()
        getattr(b, f"sec_{sec.strip()}")()
        b.log(f"# section {sec} done in {time.perf_counter() - t0:.0f} s wall")
    if a.json:
        Path(a.json).write_text(json.dumps(b.results, indent=1) + "\n")


if __name__ == "__main__":
    main()
