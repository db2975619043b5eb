"""Tables of docs/bench-execute.md from one GPU run of benchmarks/gpu_execute.py (CPU only).

    python benchmarks/execute_report.py RESULTS_DIR --plans ev=plans/ev.parquet rag=... miniswe=...

RESULTS_DIR holds execute.json and profile.json (and ncu_*.csv / ncu_*_counts.json when ncu ran). For every
executed request the same Plan is re-priced by the cost model: uncalibrated (roofline, the H200 preset),
calibrated with the profile measured in the same run (the attention-makespan model when the profile has an
``extend`` block), and calibrated the pre-#11-fix way (one forward over the pair-equivalent cached length);
each is compared with the measured TTFT (median and p90 |relative error|) and joules. Prints Markdown.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

import numpy as np

from pic.engine.calibration import load_profile
from pic.engine.cost import CostModel
from pic.engine.plan import Plan
from pic.engine.planlog import read_plan_log
from pic.engine.specs import gpu_from_name, model_from_name


def mare(pred, meas) -> float:
    p, m = np.asarray(pred, float), np.asarray(meas, float)
    ok = np.isfinite(p) & np.isfinite(m) & (m > 0)
    return float(np.median(np.abs(p[ok] - m[ok]) / m[ok])) if ok.any() else math.nan


def bias(pred, meas) -> float:
    p, m = np.asarray(pred, float), np.asarray(meas, float)
    ok = np.isfinite(p) & np.isfinite(m) & (m > 0)
    return float(np.median((p[ok] - m[ok]) / m[ok])) if ok.any() else math.nan


def p90(pred, meas) -> float:
    p, m = np.asarray(pred, float), np.asarray(meas, float)
    ok = np.isfinite(p) & np.isfinite(m) & (m > 0)
    return float(np.percentile(np.abs(p[ok] - m[ok]) / m[ok], 90)) if ok.any() else math.nan


def pct(a, q) -> float:
    a = np.asarray(a, float)
    a = a[np.isfinite(a)]
    return float(np.percentile(a, q)) if a.size else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--plans", nargs="+", required=True, help="NAME=plans.parquet (NAME as in execute.json)")
    args = ap.parse_args()
    res = json.loads((args.results / "execute.json").read_text())
    prof = load_profile(args.results / "profile.json")
    model, gpu = model_from_name("deepseek-v2-lite"), gpu_from_name("h200")
    import dataclasses
    roof, cal = CostModel(model, gpu), CostModel(model, gpu, profile=prof)
    pairs = CostModel(model, gpu, profile=dataclasses.replace(prof, extend=None))
    plans = dict(p.split("=", 1) for p in args.plans)
    ex = res["sections"]["execute"]
    sec = res["sections"]
    if "full_depth_timing" in sec:
        print("## Full prefill, all layers (CUDA graph / eager)\n")
        print("| new tokens | graph ms | eager ms |\n|---|---|---|")
        for k, v in sec["full_depth_timing"].items():
            print(f"| {k.split('_')[1]} | {v['graph_ms']:.1f} | {v['eager_ms']:.1f} |")
        print()
    if "small_new" in sec:
        print("## Small recomputes: extend kernel vs one-token sequences through the decode kernel (all layers)\n")
        print("| new tokens over 4096 cached | extend ms | decode ms |\n|---|---|---|")
        for k, v in sec["small_new"].items():
            print(f"| {k.split('_')[1]} | {v['extend_ms']:.2f} | {v['decode_ms']:.2f} |")
        print()
    print("## Calibration profile: prefill ms (rows: new tokens, columns: cached tokens)\n")
    cached = sorted({c for _, c, _ in prof.prefill})
    print("| new \\ cached | " + " | ".join(f"{c:,}" for c in cached) + " |")
    print("|---" * (len(cached) + 1) + "|")
    for n in sorted({n for n, _, _ in prof.prefill}):
        vals = {c: t for nn, c, t in prof.prefill if nn == n}
        print(f"| {n:,} | " + " | ".join(f"{vals[c] * 1e3:.2f}" if c in vals else "" for c in cached) + " |")
    print("\nDecode steps: " + ", ".join(f"{b} seqs x {c // b:,} = {t * 1e3:.2f} ms" for b, c, t in prof.decode))
    if prof.prefill_rotated:
        plain = {(a, b): x for a, b, x in prof.prefill}
        print("\nRotated points (every cached page read with δ != 0), ms: " + ", ".join(
            f"{n:,} over {c:,}: {t * 1e3:.2f} (plain {plain.get((n, c), math.nan) * 1e3:.2f})"
            for n, c, t in prof.prefill_rotated))
    if prof.fit is not None:
        f = prof.fit
        print(f"\nAttention makespan fit (pic.engine.attn_waves, on this grid only): {f.slots} concurrent extend "
              f"programs ({prof.extend.sm_count} SMs, {prof.extend.tokens_per_program} tokens x "
              f"{prof.extend.head_groups} head group(s) per program), {f.seconds_per_key * 1e9:.2f} ns per key read "
              f"(whole forward), rotated keys x{f.rotated_factor:.2f} (decode kernel x{f.decode_rotated_factor:.2f}); "
              f"fitted forward times on the grid's extend points: median |error| {f.grid_error:.1%}")
    print(f"\nBoard power: idle {prof.watts_idle:.0f} W, busy {prof.watts_busy:.0f} W (1024 new over 8192 cached)\n")
    print("## Measured TTFT and energy (irminsul plans vs full prefill)\n")
    print("| trace | requests | reuse | TTFT ratio p50 | p90 | mean | plan TTFT p50 ms | full TTFT p50 ms | "
          "energy saved per hit (board) | (above idle) | J per hit | J per full prefill | HBM bytes ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    fid_rows, dev_rows, all_rows, hi_rows, per_req = [], [], [], [], []
    for name, path in plans.items():
        e = ex.get(name)
        if not e or "rows" not in e:
            print(f"| {name} | (not run: {e.get('error') if e else 'missing'}) |")
            continue
        log = read_plan_log(path)
        by_id = {r.request_id: r for r in log.requests}
        rows = e["rows"]
        all_rows += rows
        N = np.array([r["prompt_tokens"] for r in rows], float)
        reused = np.array([r["reused_tokens"] for r in rows], float)
        t = np.array([r["ttft_s"] for r in rows])
        tf = np.array([r["ttft_full_s"] for r in rows])
        j = np.array([r["joules"] for r in rows])
        jf = np.array([r["joules_full"] for r in rows])
        jd = np.array([r["joules_dyn"] for r in rows])
        jdf = np.array([r["joules_dyn_full"] for r in rows])
        hit = reused > 0
        ratio = t / tf
        hb = sum(r["hbm_bytes"] for r in rows) / sum(r["hbm_bytes_full"] for r in rows)
        hi = reused / N >= 0.77
        hi_rows.append((name, int(hi.sum()), float(reused[hi].sum() / N[hi].sum()) if hi.any() else math.nan,
                        pct(ratio[hi], 50), pct(ratio[hi], 90), pct(N[hi], 50),
                        float(1 - j[hi].sum() / jf[hi].sum()) if hi.any() else math.nan))
        print(f"| {name} | {len(rows)} | {reused.sum() / N.sum():.1%} | {pct(ratio, 50):.3f} | {pct(ratio, 90):.3f} | "
              f"{ratio.mean():.3f} | {pct(t, 50) * 1e3:.1f} | {pct(tf, 50) * 1e3:.1f} | "
              f"{1 - j[hit].sum() / jf[hit].sum():.1%} | {1 - jd[hit].sum() / jdf[hit].sum():.1%} | "
              f"{j[hit].mean():.1f} | {jf.mean():.1f} | {hb:.3f} |")
        pr, pc, prf, pcf, jr, jc, jrf, jcf, pp = ([] for _ in range(9))
        for r in rows:
            plan = by_id[r["request_id"]].plan
            full = Plan.recompute_all(plan.num_tokens)
            a, b, c, d = roof.prefill(plan), cal.prefill(plan), roof.prefill(full), cal.prefill(full)
            pr.append(a.time_s), pc.append(b.time_s), prf.append(c.time_s), pcf.append(d.time_s)
            jr.append(a.joules), jc.append(b.joules), jrf.append(c.joules), jcf.append(d.joules)
            pp.append(pairs.prefill(plan).time_s)
            per_req.append((name, r, b.time_s, pp[-1]))
        fid_rows.append((name, mare(pc, t), p90(pc, t), bias(pc, t), mare(pp, t), p90(pp, t), mare(pr, t), p90(pr, t),
                         bias(pr, t), mare(pcf, tf), p90(pcf, tf), mare(prf, tf), mare(jc, j), mare(jr, j),
                         mare(jcf, jf), mare(jrf, jf)))
        dev_rows.append((name, pct([r["out_dev"] for r in rows], 50), max(r["out_dev"] for r in rows),
                         float(np.mean([r["top1_match"] for r in rows])), pct([r["kv_dev_first"] for r in rows], 50),
                         pct([r["kv_dev_last"] for r in rows], 50)))
    print("\nRequests with >= 77 % of their prompt reused:\n")
    print("| trace | requests | reuse | TTFT ratio p50 | p90 | prompt tokens p50 | energy saved |")
    print("|---|---|---|---|---|---|---|")
    for h in hi_rows:
        print(f"| {h[0]} | {h[1]} | {h[2]:.1%} | {h[3]:.3f} | {h[4]:.3f} | {h[5]:,.0f} | {h[6]:.1%} |")
    print("\n## Fidelity: the cost model's price of the same Plan vs the measurement (|rel. error| median / p90)\n")
    print("| trace | Plan TTFT calibrated | p90 | (bias) | pair-equivalent mapping (before) | p90 | roofline | p90 | "
          "(bias) | full prefill calibrated | p90 | roofline | joules calibrated | roofline | full-prefill joules "
          "calibrated | roofline |")
    print("|---" * 17 + "|")
    for f in fid_rows:
        print(f"| {f[0]} | " + " | ".join(f"{x:+.1%}" if i in (2, 7) else f"{x:.1%}" for i, x in enumerate(f[1:])) + " |")
    print("\nPer request (calibrated, makespan model vs the pair-equivalent mapping):\n")
    print("| trace | request | N | reuse | new | seqs | TTFT ms | calibrated ms | error | pair-equivalent ms | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r, b, q in per_req:
        t = r["ttft_s"]
        print(f"| {name} | {r['request_id']} | {r['prompt_tokens']:,} | {r['reused_tokens'] / r['prompt_tokens']:.2f} | "
              f"{r['executed_tokens']:,} | {r['sequences']} | {t * 1e3:.1f} | {b * 1e3:.1f} | {b / t - 1:+.0%} | "
              f"{q * 1e3:.1f} | {q / t - 1:+.0%} |")
    print("\n## Quality: Plan vs full prefill of the same prompt (random weights)\n")
    print("| trace | final hidden rel. L2 p50 | max | top-1 token agreement | reused KV rel. RMS, layer 0 (p50) | "
          "last layer (p50) |")
    print("|---|---|---|---|---|---|")
    for d in dev_rows:
        print(f"| {d[0]} | {d[1]:.3f} | {d[2]:.3f} | {d[3]:.0%} | {d[4]:.1e} | {d[5]:.3f} |")
    if all_rows:
        w = [r["watts"] for r in all_rows]
        wf = [r["watts_full"] for r in all_rows]
        print(f"\nBoard power while executing: plans p50 {pct(w, 50):.0f} W (p10 {pct(w, 10):.0f}, p90 {pct(w, 90):.0f}),"
              f" full prefills p50 {pct(wf, 50):.0f} W; idle {res['sections'].get('idle_power', {}).get('idle_watts', 0):.0f} W;"
              f" profile busy {prof.watts_busy:.0f} W, idle {prof.watts_idle:.0f} W.")
    for m in ("plan", "full"):
        p = args.results / f"ncu_{m}.csv"
        c = args.results / f"ncu_{m}_counts.json"
        if not (p.exists() and c.exists()):
            continue
        rd = wr = 0.0
        n = 0
        with open(p) as fh:
            lines = [ln for ln in fh if ln.startswith('"')]
        for row in csv.DictReader(lines):
            v = float(row["Metric Value"].replace(",", ""))
            scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(row.get("Metric Unit", "byte"), 1)
            if row["Metric Name"] == "dram__bytes_read.sum":
                rd += v * scale
                n += 1
            elif row["Metric Name"] == "dram__bytes_write.sum":
                wr += v * scale
        cnt = json.loads(c.read_text())
        b = cnt["bytes"]
        issued = _issued_sample(plans.get("ev"), cnt["request_id"], m)
        print(f"\nncu ({m}, 2 layers, request {cnt['request_id']}, {cnt['new_tokens']} new of "
              f"{cnt['prompt_tokens']}): {n} kernels, DRAM read {rd / 1e9:.3f} GB + write {wr / 1e9:.3f} GB = "
              f"{(rd + wr) / 1e9:.3f} GB; counted: hbm_bytes {b['hbm_bytes'] / 1e9:.3f} GB (weights "
              f"{b['weights'] / 1e9:.3f}, activations {b['activations'] / 1e9:.3f}, KV read {b['kv_read'] / 1e9:.3f}), "
              f"access_bytes (as issued) {issued / 1e9:.3f} GB")


def _issued_sample(plans_path: str | None, request_id: int, which: str) -> float:
    """issued_bytes of the ncu sample's forward (2 layers priced as 2), rebuilt from the plan log."""
    import dataclasses

    from pic.kernels.executor.accounting import issued_bytes
    from pic.kernels.executor.layout import PagePool, full_layout, owned_rows_needed, plan_layout
    from pic.kernels.model import exec_spec

    if plans_path is None:
        return math.nan
    log = read_plan_log(plans_path)
    i = next(k for k, r in enumerate(log.requests) if r.request_id == request_id)
    r = log.requests[i]
    spec = dataclasses.replace(exec_spec(model_from_name("deepseek-v2-lite"), layers=2), full_layers=2)
    srcs = log.resolve_sources(i)
    pool = PagePool(1 << 20)
    own = {s.provider: pool.alloc(-(-log.requests[s.provider].num_tokens // 64)) for s in srcs}
    own[i] = pool.alloc(-(-r.num_tokens // 64))
    if which == "full":
        hb = full_layout(r.tokens, own[i], 64, spec.vocab_size)
    else:
        scratch = pool.alloc(-(-owned_rows_needed(r.plan, srcs, 64) // 64))
        hb = plan_layout(r.tokens, r.plan, srcs, own, scratch, 64, spec.vocab_size)
    return issued_bytes(spec, hb, tile={"BLOCK_T": 4, "BLOCK_HH": 16, "BLOCK_N": 64})

if __name__ == "__main__":
    main()
