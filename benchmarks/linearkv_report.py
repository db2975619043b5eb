"""Price the LinearKV benchmark's plans with the simulator and set them beside the GPU measurement.

    python benchmarks/linearkv_report.py RESULTS.json [--png sweep.png] [--md out.md]
    python benchmarks/linearkv_report.py --sim-only [--png sweep.png]     # no GPU results: simulator alone

For every measured request (``benchmarks/gpu_linearkv.py`` writes its plan: spans + Correction) the cost
model prices the same Plan on the stack's stand-in ModelSpec (Qwen3-Next widths, dense MLP;
``pic.kernels.recurrent.stack.standin_spec``) and on the real ``qwen3-next-80b-a3b`` preset (MoE), H200,
default factors, request alone (``CostModel.prefill(plan).time_s``). Prints Markdown tables: TTFT fraction
of full prefill (measured, simulated, error), single-block vs exact, the r sweep; optional PNG of the sweep.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pic.engine.cost import CostModel  # noqa: E402
from pic.engine.plan import Action, Correction, Plan, Span  # noqa: E402
from pic.engine.specs import GPUS, MODELS  # noqa: E402
from pic.kernels.recurrent.stack import Dims, standin_spec  # noqa: E402

PAPER = "LinearKV paper: 0.46-0.62x of full prefill; single-block 5-17 % faster than exact"


def to_plan(rec: dict) -> Plan:
    spans = [Span(a, b, Action[act], src) for a, b, act, src in rec["spans"]]
    return Plan(rec["num_tokens"], tuple(spans), Correction(**rec["correction"]))


def sim_plan(n: int, chunk: int, compose: str, selector: str, ratio: float, head: int = 512, tail: int = 512) -> dict:
    """The benchmark's plan shape without a GPU run (same as gpu_linearkv.plan_record)."""
    k = len(range(head, n - tail, chunk))
    reused = n - head - tail
    return {"num_tokens": n, "spans": [[0, head, "RECOMPUTE", -1], [head, n - tail, "REUSE_ROTATED", 0],
                                       [n - tail, n, "RECOMPUTE", -1]],
            "correction": {"recompute_tokens": int(round(ratio * reused)),
                           "state_loads": k if compose == "exact" else 1,
                           "state_compositions": k if compose == "exact" else 0,
                           "probe_tokens": reused if selector == "cacheblend" else 0}}


def simulate(rows: list[dict], dims: Dims) -> None:
    """Add ``sim_s``/``sim_fraction`` (stand-in) and ``moe_fraction`` (real Qwen3-Next preset) to rows."""
    h200 = GPUS["h200"]
    cms = {"standin": CostModel(standin_spec(dims), h200), "moe": CostModel(MODELS["qwen3-next-80b-a3b"], h200)}
    full = {}
    for key, cm in cms.items():
        for n in {r["n"] for r in rows}:
            full[key, n] = cm.prefill(Plan.recompute_all(n)).time_s
    for r in rows:
        if "plan" in r:
            p = to_plan(r["plan"])
            c = cms["standin"].prefill(p)
            r["sim_s"] = c.time_s
            r["sim_fraction"] = c.time_s / full["standin", r["n"]]
            r["sim_attn_s"], r["sim_rec_s"] = c.attn_layer_s, c.recurrent_layer_s
            r["moe_fraction"] = cms["moe"].prefill(p).time_s / full["moe", r["n"]]
        elif r.get("config", "").startswith("full"):
            r["sim_s"] = full["standin", r["n"]]
            r["sim_fraction"] = r["moe_fraction"] = 1.0


def _pct(x: float) -> str:
    return f"{100 * x:+.1f} %"


def tables(res: dict) -> str:
    dims = Dims(**res["env"]["dims"])
    ttft, sweep = res.get("ttft", []), res.get("sweep", [])
    simulate(ttft, dims)
    simulate(sweep, dims)
    out = [f"Machine: {res['env'].get('device')}, torch {res['env'].get('torch')}, triton {res['env'].get('triton')}, "
           f"fla-core {res['env'].get('fla')}; {dims.num_layers} layers; repeats {res['env'].get('repeats')}; "
           f"wall {res.get('wall_s', 0):.0f} s. {PAPER}.", ""]
    measured = bool(res["env"].get("repeats"))
    if ttft and measured:
        sdpa = {r["n"]: r["s"] for r in ttft if r["config"] == "full-sdpa"}
        out += ["| N | config | measured | × full | × full (SDPA flash) | simulated | × full (sim) | sim error "
                "| × full (sim, real MoE Qwen3-Next) |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in ttft:
            frac = r.get("fraction", 1.0 if r["config"] == "full-triton" else float("nan"))
            err = r["sim_s"] / r["s"] - 1 if "sim_s" in r else float("nan")
            out.append(f"| {r['n']} | {r['config']} | {r['s'] * 1e3:.1f} ms | {frac:.3f} | "
                       f"{r['s'] / sdpa.get(r['n'], float('nan')):.3f} | "
                       f"{r.get('sim_s', float('nan')) * 1e3:.1f} ms | {r.get('sim_fraction', float('nan')):.3f} | "
                       f"{_pct(err)} | {r.get('moe_fraction', float('nan')):.3f} |")
    elif ttft:
        out += ["| N | config | simulated (stand-in) | × full | × full (real MoE Qwen3-Next) |",
                "|---:|---|---:|---:|---:|"]
        for r in ttft:
            out.append(f"| {r['n']} | {r['config']} | {r['sim_s'] * 1e3:.1f} ms | {r['sim_fraction']:.3f} | "
                       f"{r.get('moe_fraction', 1.0):.3f} |")
    if ttft:
        out += ["", "Single-block vs exact composition (same selector): exact / single-block − 1", "",
                "| N | selector | measured | simulated |", "|---:|---|---:|---:|"]
        by = {(r["n"], r.get("compose"), r.get("selector")): r for r in ttft}
        for (n, comp, sel), r in sorted(by.items(), key=lambda kv: (kv[0][0], str(kv[0][2]))):
            if comp != "exact":
                continue
            s = by.get((n, "single-block", sel))
            if s:
                m = _pct(r["s"] / s["s"] - 1) if measured else "–"
                out.append(f"| {n} | {sel} | {m} | {_pct(r['sim_s'] / s['sim_s'] - 1)} |")
    if res.get("split"):
        cm = CostModel(standin_spec(dims), GPUS["h200"])
        sim_lkv = {r["n"]: r for r in ttft if r["config"] == "single-block-epic"}
        out += ["", "Time by layer kind, measured (events around each layer, one run; a layer includes its MLP) "
                "vs simulated (`attn_layer_s` / `recurrent_layer_s`)", "",
                "| N | run | GDN layers measured | GDN simulated | attention layers measured | attention simulated |",
                "|---:|---|---:|---:|---:|---:|"]
        for sp in res["split"]:
            n = sp["n"]
            full = cm.prefill(Plan.recompute_all(n))
            sims = {"full": (full.recurrent_layer_s, full.attn_layer_s),
                    "single-block-epic": (sim_lkv[n]["sim_rec_s"], sim_lkv[n]["sim_attn_s"]) if n in sim_lkv
                    else (float("nan"),) * 2}
            for run in ("full", "single-block-epic"):
                v, (sr, sa) = sp[run], sims[run]
                out.append(f"| {n} | {run} | {v['gdn'] * 1e3:.1f} ms | {sr * 1e3:.1f} ms | {v['attn'] * 1e3:.1f} ms | "
                           f"{sa * 1e3:.1f} ms |")
    if measured:
        out += ["", *error_summary(ttft + sweep)]
    if sweep:
        out += ["", "r sweep (EPIC): TTFT / full prefill", "",
                "| N | r | compose | measured | simulated | sim error | simulated, real MoE Qwen3-Next |",
                "|---:|---:|---|---:|---:|---:|---:|"]
        for r in sweep:
            if "ratio" in r:
                m = f"{r['fraction']:.3f}" if measured else "–"
                e = _pct(r["sim_s"] / r["s"] - 1) if measured else "–"
                out.append(f"| {r['n']} | {r['ratio']} | {r['compose']} | {m} | {r['sim_fraction']:.3f} | {e} | "
                           f"{r['moe_fraction']:.3f} |")
    return "\n".join(out) + "\n"


def error_summary(rows: list[dict]) -> list[str]:
    """Simulator vs measurement: absolute TTFT, TTFT fraction, and a two-number calibration (fixed seconds
    per forward + a scale) fitted on the full prefills alone, then used to predict every LinearKV run."""
    import numpy as np
    plans = [r for r in rows if "plan" in r and "s" in r]
    full = [r for r in rows if r.get("config") == "full-triton" and "sim_s" in r]
    if not plans or len(full) < 2:
        return []
    raw = np.array([r["sim_s"] / r["s"] - 1 for r in plans])
    frac = np.array([r["sim_fraction"] / r["fraction"] - 1 for r in plans])
    a, b = np.polyfit([r["sim_s"] for r in full], [r["s"] for r in full], 1)[::-1]
    cal = np.array([(a + b * r["sim_s"]) / r["s"] - 1 for r in plans])
    def stats(e):
        return f"median |error| {100 * np.median(np.abs(e)):.1f} %, max {100 * np.abs(e).max():.1f} %"
    return [f"Simulator error over the {len(plans)} LinearKV runs: absolute TTFT {stats(raw)} (signed median "
            f"{100 * np.median(raw):+.1f} %); TTFT as a fraction of full prefill {stats(frac)}; calibrated on the "
            f"{len(full)} full prefills alone (measured = {a * 1e3:.1f} ms + {b:.3f} x simulated) {stats(cal)}."]


def sim_only(sizes=(8192, 16384, 32768), ratios=(0.03, 0.1, 0.2, 0.4), chunk: int = 256) -> dict:
    """A results dict with simulated rows only (``s`` = simulated seconds) for the same grid."""
    dims = Dims()
    ttft, sweep = [], []
    for n in sizes:
        ttft.append({"n": n, "config": "full-triton"})
        for comp in ("single-block", "exact"):
            for sel in ("epic", "cacheblend"):
                ttft.append({"n": n, "config": f"{comp}-{sel}", "compose": comp, "selector": sel, "ratio": 0.2,
                             "plan": sim_plan(n, chunk, comp, sel, 0.2)})
            for r in ratios:
                sweep.append({"n": n, "config": f"{comp}-epic", "compose": comp, "ratio": r,
                              "plan": sim_plan(n, chunk, comp, "epic", r)})
    simulate(ttft, dims)
    simulate(sweep, dims)
    return {"env": {"device": "simulator only (H200 preset)", "dims": Dims().__dict__, "repeats": 0}, "ttft": ttft,
            "sweep": sweep}


def plot(res: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in res.get("sweep", []) if "ratio" in r]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    measured = bool(res["env"].get("repeats"))
    for n, color in zip(sorted({r["n"] for r in rows}), ["C0", "C1", "C2", "C3", "C4"], strict=False):
        for comp, ls, mk in (("single-block", "-", "o"), ("exact", "--", "s")):
            rs = sorted((r for r in rows if r["n"] == n and r["compose"] == comp), key=lambda r: r["ratio"])
            x = [r["ratio"] for r in rs]
            if measured:
                ax.plot(x, [r["fraction"] for r in rs], ls, marker=mk, ms=4, color=color,
                        label=f"{n // 1024}K {comp}, measured")
            if comp == "single-block" or not measured:
                ax.plot(x, [r["sim_fraction"] for r in rs], ":", marker="x", ms=4, color=color, alpha=0.6,
                        label=f"{n // 1024}K {comp}, simulated")
    ax.axhspan(0.46, 0.62, color="0.85", label="LinearKV paper 0.46-0.62x")
    ax.set_xlabel("recompute ratio r")
    ax.set_ylabel("TTFT / full prefill")
    ax.set_title("LinearKV (EPIC) on a Qwen3-Next-like stack, H200")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", help="linearkv.json from benchmarks/gpu_linearkv.py")
    ap.add_argument("--sim-only", action="store_true", help="no GPU results: simulate the same grid")
    ap.add_argument("--png", help="write the r-sweep plot here")
    ap.add_argument("--json", help="write the results with the simulated columns here")
    a = ap.parse_args(argv)
    if not a.results and not a.sim_only:
        ap.error("give RESULTS.json or --sim-only")
    res = sim_only() if a.sim_only else json.load(open(a.results))
    print(tables(res), end="")
    if a.png:
        plot(res, a.png)
        print(f"wrote {a.png}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
