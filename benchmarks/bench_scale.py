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
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("PIC_DATA", REPO.parent / "shared" / "data"))
if not DATA.exists():
    DATA = Path("/work/shared/data")
RAW = {
    "mooncake-conv": DATA / "mooncake" / "conversation_trace.jsonl",
    "mooncake-synth": DATA / "mooncake" / "synthetic_trace.jsonl",
    "azure-conv": DATA / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv",
}
POLICIES = ("prefix", "block-hash", "fixed-chunk", "irminsul")
ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
       "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


# ---- child processes --------------------------------------------------------------------------------
def run_child(cmd: list[str], timeout: float | None = None, cwd: Path = REPO) -> dict:
    """Run ``cmd`` in ``cwd``; return its exit code, CPU seconds (user + sys, from wait4), peak RSS, stdout."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=ENV, cwd=cwd)
        try:
            _, status, ru = os.wait4(p.pid, 0)
        except KeyboardInterrupt:
            p.kill()
            raise
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    res = {"rc": p.returncode, "cpu_s": ru.ru_utime + ru.ru_stime, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
           "wall_s": time.perf_counter() - t0, "peak_rss_mb": ru.ru_maxrss / 1024, "stdout": stdout}
    if p.returncode != 0:
        res["stderr"] = stderr[-2000:]
    return res


def child_json(args: list[str]) -> dict:
    """Run this script in child mode; its last stdout line is a JSON object."""
    r = run_child([sys.executable, __file__, *args])
    if r["rc"] != 0:
        return {"error": r.get("stderr", "")[-600:], "peak_rss_mb": r["peak_rss_mb"]}
    d = json.loads(r["stdout"].strip().splitlines()[-1])
    d["child_peak_rss_mb"] = round(r["peak_rss_mb"])
    d["child_cpu_s"] = round(r["cpu_s"], 3)
    return d


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child_replay(trace: str, policy: str, max_requests: int | None, profile: int) -> dict:
    """In-process: read the trace, then time replay() alone (process CPU)."""
    import gc

    sys.path.insert(0, str(REPO))
    from pic.engine.config import ReplayConfig
    from pic.engine.replay import read_trace_file, replay

    c0 = time.process_time()
    tr = read_trace_file(trace)
    read_cpu = time.process_time() - c0
    rss_read = _rss_mb()
    config = ReplayConfig(policies=(policy,), max_requests=max_requests)
    gc_time = [0.0]
    gc_t0 = [0.0]

    def gc_cb(phase: str, _info: dict) -> None:
        if phase == "start":
            gc_t0[0] = time.process_time()
        else:
            gc_time[0] += time.process_time() - gc_t0[0]

    gc.callbacks.append(gc_cb)
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile(time.process_time)
        prof.enable()
    c0 = time.process_time()
    res = replay(tr, config)
    cpu = time.process_time() - c0
    if prof is not None:
        prof.disable()
    gc.callbacks.remove(gc_cb)
    s = res.summary["policies"][policy]
    out = {"trace": Path(trace).name, "policy": policy, "requests": s["requests"],
           "prompt_tokens": s["prompt_tokens"], "read_cpu_s": round(read_cpu, 3), "replay_cpu_s": round(cpu, 3),
           "req_per_cpu_s": round(s["requests"] / cpu), "token_hit_rate": s["token_hit_rate"],
           "gc_cpu_s": round(gc_time[0], 3), "rss_after_read_mb": round(rss_read), "peak_rss_mb": round(_rss_mb())}
    if prof is not None:
        import pstats
        st = pstats.Stats(prof)
        rows = []
        total = sum(v[2] for v in st.stats.values())
        for (fn, line, name), (_cc, nc, tt, ct, _) in sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:profile]:
            short = fn.replace(str(REPO) + "/", "")
            rows.append({"function": f"{short}:{line}({name})", "calls": nc, "own_s": round(tt, 3),
                         "cum_s": round(ct, 3), "own_share": round(tt / total, 3) if total else 0})
        out["profile_total_s"] = round(total, 3)
        out["profile"] = rows
    return out


def child_open(trace: str) -> dict:
    """In-process: CPU seconds and RSS to open (read + validate) a canonical trace."""
    sys.path.insert(0, str(REPO))
    from pic.traces.io import read_trace
    rss0 = _current_rss_mb()
    c0 = time.process_time()
    tr = read_trace(trace)
    cpu = time.process_time() - c0
    return {"open_cpu_s": round(cpu, 3), "rss_before_open_mb": round(rss0), "rss_after_open_mb": round(_current_rss_mb()),
            "peak_rss_mb": round(_rss_mb()), "requests": tr.num_requests, "segments": len(tr.segments)}


def child_digests(trace: str, policies: list[str], max_requests: int | None, capacity: str) -> dict:
    """In-process: sha256 of every Plan each policy's lookup returned, in call order (shadow excluded)."""
    import hashlib

    sys.path.insert(0, str(REPO))
    from pic.engine import policies as registry
    from pic.engine.config import ReplayConfig, parse_size
    from pic.engine.replay import read_trace_file, replay

    tr = read_trace_file(trace)
    out = {}
    for name in policies:
        h = hashlib.sha256()
        build = registry.build

        def recording_build(pname, ctx, opts=None, _name=name, _h=h, _build=build):
            pol = _build(pname, ctx, opts)
            if pname != _name:
                return pol
            inner = pol.lookup

            def lookup(req, now, _inner=inner):
                plan = _inner(req, now)
                _h.update(repr((req.request_id, now, plan.num_tokens,
                                [(s.start, s.end, int(s.action), s.source_pos, int(s.tier)) for s in plan.spans],
                                plan.correction)).encode())
                return plan
            pol.lookup = lookup
            return pol

        registry.build = recording_build
        try:
            replay(tr, ReplayConfig(policies=(name,), max_requests=max_requests,
                                   capacity_bytes=parse_size(capacity)))
        finally:
            registry.build = build
        out[name] = h.hexdigest()[:20]   # the plans (and when they were asked for) only
    return {"trace": Path(trace).name, "capacity": capacity, "max_requests": max_requests, "digests": out}


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
                d = child_json(["--child", "replay", str(path), p, str(limit or 0), "0"])
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
            d = child_json(["--child", "replay", str(path), p, str(limit), "14"])
            res[p] = d
            self.log(f"profile mooncake-conv {p}: total {d.get('profile_total_s')} s, gc {d.get('gc_cpu_s')} s")
            for row in d.get("profile", [])[:10]:
                self.log(f"    {row['own_share']:6.1%} {row['own_s']:7.3f} s {row['calls']:>9} {row['function']}")

    def sec_cdc(self) -> None:
        self.results["cdc"] = d = child_json(["--child", "cdc", str(2_000_000 if self.a.quick else 10_000_000)])
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
            d = child_json(["--child", "open", str(path)])
            d["bytes_on_disk"] = path.stat().st_size
            d["ingest"] = self.results.get("ingest", {}).get(t)
            if t.startswith("mooncake"):
                r = child_json(["--child", "replay", str(path), "prefix", "0", "0"])
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
            d = child_json(["--child", "digests", str(path), ",".join(POLICIES), str(lim), cap])
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


def child_cdc(num_tokens: int) -> dict:
    """CDC + fingerprints vs raw xxh64 over the same bytes (one stream), best of 5, this process: the numpy
    paths and, where numba loads, the compiled kernels (``pic.accel``), side by side."""
    import numpy as np
    import xxhash

    sys.path.insert(0, str(REPO))
    from pic import accel
    from pic.engine.cdc import CDCConfig, chunk, fingerprints, gear_hash

    toks = np.random.default_rng(0).integers(0, 150_000, num_tokens, dtype=np.int32)
    cfg = CDCConfig()
    raw = toks.tobytes()

    def best(fn) -> float:
        b = float("inf")
        for _ in range(5):
            t0 = time.process_time()
            fn()
            b = min(b, time.process_time() - t0)
        return b

    prompts = [toks[s:s + 4096] for s in range(0, num_tokens, 4096)]

    def per_prompt() -> None:
        for p in prompts:
            fingerprints(p, chunk(p, cfg))

    t_xxh = best(lambda: xxhash.xxh64_intdigest(raw))
    out = {"tokens": num_tokens, "xxh64_Mtok_s": round(num_tokens / t_xxh / 1e6, 1)}
    t0 = time.process_time()
    compiled = accel.available()
    out["accel_load_cpu_s"] = round(time.process_time() - t0, 3)
    for m, tag in (("0", "numpy"), ("1", "compiled")):
        if m == "1" and not compiled:
            out["compiled"] = "numba not available"
            continue
        accel.set_mode(m)
        t_gear = best(lambda: gear_hash(toks))
        t_cdc = best(lambda: fingerprints(toks, chunk(toks, cfg)))
        t_pp = best(per_prompt)
        out[tag] = {"gear_Mtok_s": round(num_tokens / t_gear / 1e6, 1),
                    "cdc_fp_Mtok_s": round(num_tokens / t_cdc / 1e6, 1),
                    "cdc_fp_per_4096_prompt_Mtok_s": round(num_tokens / t_pp / 1e6, 1),
                    "gear_vs_xxh64": round(t_xxh / t_gear, 3), "cdc_fp_vs_xxh64": round(t_xxh / t_cdc, 3),
                    "cdc_fp_per_prompt_vs_xxh64": round(t_xxh / t_pp, 3)}
    accel.set_mode(None)
    return out


def machine() -> dict:
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "commit": rev,
            "loadavg": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


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
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        kind, *rest = a.child
        if kind == "replay":
            out = child_replay(rest[0], rest[1], int(rest[2]) or None, int(rest[3]))
        elif kind == "open":
            out = child_open(rest[0])
        elif kind == "cdc":
            out = child_cdc(int(rest[0]))
        elif kind == "digests":
            out = child_digests(rest[0], rest[1].split(","), int(rest[2]) or None, rest[3])
        else:
            raise SystemExit(f"unknown child {kind}")
        print(json.dumps(out))
        return
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
