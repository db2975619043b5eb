"""Child processes of the speed-and-scale benchmarks (issue #12): each measurement runs in a fresh process so
that its peak RSS and CPU seconds belong to one thing. ``run_child`` runs a command and reads its CPU time
from ``wait4``; ``python benchmarks/bench_children.py KIND ARGS`` is child mode (used by ``child_json``):
it prints one JSON line.

    python benchmarks/bench_children.py replay TRACE POLICY MAX_REQUESTS PROFILE_ROWS
    python benchmarks/bench_children.py open TRACE
    python benchmarks/bench_children.py cdc NUM_TOKENS
    python benchmarks/bench_children.py digests TRACE POLICY[,POLICY] MAX_REQUESTS CAPACITY
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
POLICIES = ("prefix", "block-hash", "fixed-chunk", "irminsul")
ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
       "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


# ---- running children --------------------------------------------------------------------------------
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
    r = run_child([sys.executable, str(Path(__file__).resolve()), *args])
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


def child_cdc(num_tokens: int) -> dict:
    """CDC + fingerprints vs raw xxh64 over the same bytes (one stream), best of 5, this process: the numpy
    paths and, where numba loads, the compiled kernels (``pic.accel``), side by side; and the two parts
    apart: chunking, and the fingerprints alone (the ratio CDC + fingerprints could reach if chunking cost
    nothing). The compiled rows for both Gear value kinds: ``compiled`` (the default, ``gear="mix"``: table-free) and
    ``compiled_table`` (``CDCConfig(gear="table")``, the default before #12's tenth round; other cuts), each also per 4096-token prompt with
    the fused ``layout_fps`` (one call per prompt). ``lookup_floor``: one pass that only reads each token's
    Gear table entry (compiled here, not a kernel of pic: :func:`_gear_lookups`): a chunker with this table
    does at least these loads, so ``xxh64 / (lookups + fingerprints)`` bounds the table's ratio from above
    for the current hash definition; ``table_scan_ms``: the compiled candidate scan alone (it prefetches its
    tokens and makes the table indices in vectors, so it can beat the plain pass: the ceiling takes the faster
    of the two)."""
    from dataclasses import replace

    import numpy as np
    import xxhash

    sys.path.insert(0, str(REPO))
    from pic import accel
    from pic.engine.cdc import CDCConfig, chunk, fingerprints, gear_hash, gear_table, layout_fps

    toks = np.random.default_rng(0).integers(0, 150_000, num_tokens, dtype=np.int32)
    raw = toks.tobytes()

    def best(fn) -> float:
        b = float("inf")
        for _ in range(5):
            t0 = time.process_time()
            fn()
            b = min(b, time.process_time() - t0)
        return b

    prompts = [toks[s:s + 4096] for s in range(0, num_tokens, 4096)]

    def per_prompt(cfg) -> None:
        for p in prompts:
            fingerprints(p, chunk(p, cfg))

    def per_prompt_fused(cfg) -> None:
        for p in prompts:
            layout_fps(p, cfg)

    t_xxh = best(lambda: xxhash.xxh64_intdigest(raw))
    out = {"tokens": num_tokens, "xxh64_Mtok_s": round(num_tokens / t_xxh / 1e6, 1)}
    t0 = time.process_time()
    compiled = accel.available() and accel._load("pic._accel_numba_cdc") is not None
    out["accel_load_cpu_s"] = round(time.process_time() - t0, 3)
    for m, tag, gear in (("0", "numpy", "mix"), ("1", "compiled", "mix"), ("1", "compiled_table", "table")):
        if m == "1" and not compiled:
            out["compiled"] = "numba not available"
            break
        accel.set_mode(m)
        cfg = replace(CDCConfig(), gear=gear)
        t_gear = best(lambda cfg=cfg: gear_hash(toks, cfg.seed, cfg.gear))
        t_cdc = best(lambda cfg=cfg: fingerprints(toks, chunk(toks, cfg)))
        t_pp = best(lambda cfg=cfg: per_prompt(cfg))
        bounds = chunk(toks, cfg)
        t_chunk = best(lambda cfg=cfg: chunk(toks, cfg))
        t_fp = best(lambda b=bounds: fingerprints(toks, b))
        out[tag] = {"gear": gear, "gear_Mtok_s": round(num_tokens / t_gear / 1e6, 1),
                    "chunk_ms": round(t_chunk * 1e3, 2), "fingerprints_ms": round(t_fp * 1e3, 2),
                    "xxh64_ms": round(t_xxh * 1e3, 2),
                    # the ceiling: chunking for free, the fingerprints (one xxh64 per chunk) alone
                    "fp_alone_vs_xxh64": round(t_xxh / t_fp, 3),
                    "cdc_fp_Mtok_s": round(num_tokens / t_cdc / 1e6, 1),
                    "cdc_fp_per_4096_prompt_Mtok_s": round(num_tokens / t_pp / 1e6, 1),
                    "gear_vs_xxh64": round(t_xxh / t_gear, 3), "cdc_fp_vs_xxh64": round(t_xxh / t_cdc, 3),
                    "cdc_fp_per_prompt_vs_xxh64": round(t_xxh / t_pp, 3)}
        if m == "1":
            t_fused = best(lambda cfg=cfg: per_prompt_fused(cfg))
            out[tag]["layout_fps_per_prompt_vs_xxh64"] = round(t_xxh / t_fused, 3)
            if gear == "table":
                t_look = best(lambda cfg=cfg: _gear_lookups(toks, gear_table(cfg.seed)))
                fast = accel.kernels(num_tokens, "cdc")
                t_scan = best(lambda cfg=cfg, fast=fast: fast.gear_candidates(toks, gear_table(cfg.seed), cfg.threshold, 63,
                                                                              num_tokens - 1))
                out[tag]["lookup_floor_ms"] = round(t_look * 1e3, 2)
                out[tag]["table_scan_ms"] = round(t_scan * 1e3, 2)
                out[tag]["table_ceiling_vs_xxh64"] = round(t_xxh / (min(t_look, t_scan) + t_fp), 3)
    accel.set_mode(None)
    return out


def _gear_lookups(toks, table):
    """Every token's Gear table entry, read into 8 independent shift-add chains (the loads alone: no compare,
    no candidates; shift-add chains keep LLVM from making vector gathers of it, which ran 2x slower here).
    The compiled table scan (``pic._accel_numba_cdc.gear_candidates``) runs about this fast since it loads
    the entries the same way."""
    global _LOOKUPS
    if _LOOKUPS is None:
        import numpy as np
        from numba import njit

        @njit(inline="always")
        def _e(toks, table, u):
            return table[np.uint32(np.uint32(toks[u]) * np.uint32(0x9E3779B1)) >> np.uint32(16)]

        @njit(cache=False, boundscheck=False)
        def lookups(toks, table):
            one = np.uint64(1)
            a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = np.uint64(0)
            for i in range(0, toks.shape[0] - 7, 8):
                u = np.uint64(i)
                a0 = (a0 << one) + _e(toks, table, u)
                a1 = (a1 << one) + _e(toks, table, u + np.uint64(1))
                a2 = (a2 << one) + _e(toks, table, u + np.uint64(2))
                a3 = (a3 << one) + _e(toks, table, u + np.uint64(3))
                a4 = (a4 << one) + _e(toks, table, u + np.uint64(4))
                a5 = (a5 << one) + _e(toks, table, u + np.uint64(5))
                a6 = (a6 << one) + _e(toks, table, u + np.uint64(6))
                a7 = (a7 << one) + _e(toks, table, u + np.uint64(7))
            return a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7

        _LOOKUPS = lookups
    return _LOOKUPS(toks, table)


_LOOKUPS = None


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



def main(argv: list[str]) -> None:
    kind, *rest = argv
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


if __name__ == "__main__":
    main(sys.argv[1:])
