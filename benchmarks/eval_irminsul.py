"""Irminsul evaluation: synthetic scenarios, the real LMCache agent traces, and the MLA-vs-GQA contrast.

    python benchmarks/eval_irminsul.py [--requests 400] [--seed 0] [--sections synth,real,gqa,chunk]

Library equivalents of ``pic synth --scenario S [--markers]`` + ``pic replay --policy P [--set ...]``:
every (trace, policy variant) pair is one ``engine.replay.replay`` run (DeepSeek-V2-Lite, H200, unbounded
capacity unless ``--capacity``), and the table prints summary.json's token_hit_rate, prefix_hit_rate,
recovery_beyond_prefix and energy_saved_vs_prefix. Markdown tables go to stdout.

Sections:
* synth — every scenario, plain and ``--markers`` traces; none / prefix / fixed-chunk / irminsul(±S1, ±S2);
* real  — ../shared/data/lmcache-agent-trace/{miniswe,taubench} (skipped when absent);
* gqa   — irminsul's plans on early-variation priced for deepseek-v2-lite (MLA) and llama-3.1-8b (GQA);
* chunk — sensitivity of irminsul's recovery to avg_chunk on early-variation and rag-reorder;
* cap   — bounded capacity (1-8 GiB): fixed-chunk vs irminsul(±S1) on early-variation and rag-reorder.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from pic.engine.config import ReplayConfig, parse_size
from pic.engine.cost import CostConfig, CostModel
from pic.engine.plan import Plan
from pic.engine.policies import PolicyContext, RequestView, build
from pic.engine.replay import replay, workload_from_trace
from pic.engine.specs import gpu_from_name, model_from_name
from pic.traces.schema import Trace
from pic.traces.synth import SCENARIOS, synth

REPO = Path(__file__).resolve().parents[1]
DATA = (REPO / ".." / "shared" / "data" / "lmcache-agent-trace").resolve()

OFF = {"s1": False, "s2": False}  # plain CDC (irminsul's defaults turn S1 and S2 on)
PLAIN = [("none", {}), ("prefix", {}), ("fixed-chunk", {}), ("irminsul", OFF), ("irminsul", {"s1": True, "s2": False})]
MARKED = [("prefix", {}), ("fixed-chunk", {}), ("irminsul", OFF), ("irminsul", {"s1": False, "s2": True}),
          ("irminsul", {"s1": True, "s2": True})]
COLS = ("token_hit_rate", "prefix_hit_rate", "recovery_beyond_prefix", "energy_saved_vs_prefix")


def label(name: str, opts: dict) -> str:
    on = [k.upper() for k, v in opts.items() if v is True]
    rest = [f"{k}={v}" for k, v in opts.items() if v is not True and v is not False]
    return name + "".join(f"+{x}" for x in on) + "".join(f" {x}" for x in rest)


def run(trace: Trace, name: str, opts: dict, args, model: str = "deepseek-v2-lite") -> dict:
    cfg = ReplayConfig(policies=(name,), policy_options={name: opts} if opts else {}, model=model,
                       capacity_bytes=args.capacity, seed=args.seed, verify=args.verify)
    return replay(trace, cfg).summary["policies"][name]


def row(cells: list) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(title: str, rows: list[tuple[str, str, str, dict]]) -> None:
    print(f"\n### {title}\n")
    print(row(["trace", "variant", "policy", *COLS, "collisions"]))
    print(row(["---"] * (4 + len(COLS))))
    for trace, variant, pol, s in rows:
        print(row([trace, variant, pol, *[f"{s[c]:.4f}" for c in COLS], s["collisions"]]))


def section_synth(args) -> None:
    rows = []
    for sc in args.scenarios:
        for markers, variants in ((False, PLAIN), (True, MARKED)):
            tr = synth(sc, args.requests, args.seed, markers=markers)
            for name, opts in variants:
                rows.append((sc, "markers" if markers else "plain", label(name, opts), run(tr, name, opts, args)))
    table(f"synthetic scenarios ({args.requests} requests, seed {args.seed}, deepseek-v2-lite)", rows)


def section_real(args) -> None:
    from pic.traces.ingest import read_sources
    rows = []
    for sub in ("miniswe", "taubench"):
        if not (DATA / sub).is_dir():
            print(f"\n(skipped {sub}: {DATA / sub} not present)")
            continue
        tr = read_sources([DATA / sub])[0]
        for name, opts in PLAIN[1:]:
            rows.append((sub, f"{tr.num_requests} req", label(name, opts), run(tr, name, opts, args)))
    if rows:
        table("LMCache agent traces (builtin tokenizer, deepseek-v2-lite)", rows)


def drive_plans(trace: Trace, name: str, opts: dict) -> list[Plan]:
    """Plans of ``name`` over ``trace`` in arrival order, one request at a time (unbounded cache)."""
    work = workload_from_trace(trace)
    pol = build(name, PolicyContext(math.inf, 1), opts)
    plans = []
    for i in range(work.num_requests):
        req: RequestView = work.view(i)
        plan = pol.lookup(req, i)
        pol.admit(req, plan, i)
        pol.commit(req, i)
        pol.release(req, i)
        plans.append(plan)
    return plans


def section_gqa(args) -> None:
    tr = synth("early-variation", args.requests, args.seed)
    plans = {p: drive_plans(tr, p, o) for p, o in (("prefix", {}), ("irminsul", {"s1": True}))}
    full = [Plan.recompute_all(p.num_tokens) for p in plans["prefix"]]
    gpu = gpu_from_name("h200")
    print(f"\n### MLA vs GQA: early-variation ({args.requests} requests), irminsul+S1 plans priced per model\n")
    print(row(["model", "attention", "full prefill s", "prefix s", "irminsul s", "saved vs prefix",
               "rotated tokens", "rotation ms", "rotation HBM GB", "rotation % of irminsul"]))
    print(row(["---"] * 10))
    for mname, fused in (("deepseek-v2-lite", True), ("deepseek-v2-lite", False), ("llama-3.1-8b", True)):
        m = model_from_name(mname)
        cm = CostModel(m, gpu, CostConfig(fused_rotation=fused))
        t_full = sum(cm.prefill(p).time_s for p in full)
        t_pre = sum(cm.prefill(p).time_s for p in plans["prefix"])
        costs = [cm.prefill(p) for p in plans["irminsul"]]
        t_irm = sum(c.time_s for c in costs)
        rot_b = sum(c.rotation_bytes for c in costs)
        rot_f = sum(c.rotation_flops for c in costs)
        rot_s = cm._phase(rot_f, rot_b)     # the rotation phase of CostModel.prefill's roofline sum
        n_rot = sum(p.num_rotated for p in plans["irminsul"])
        att = m.attention + ("" if m.attention != "mla" else ", fused" if fused else ", unfused")
        print(row([mname, att, f"{t_full:.3f}", f"{t_pre:.3f}", f"{t_irm:.3f}",
                   f"{1 - t_irm / t_pre:.3f}", n_rot, f"{1e3 * rot_s:.3f}", f"{rot_b / 1e9:.2f}",
                   f"{100 * rot_s / t_irm:.3f}"]))
    print("\nreplay (serving simulation, same trace): energy saved vs none / vs prefix, TTFT p50\n")
    print(row(["model", "policy", "energy_saved_vs_none", "energy_saved_vs_prefix", "ttft_p50_s"]))
    print(row(["---"] * 5))
    for mname in ("deepseek-v2-lite", "llama-3.1-8b"):
        for name, opts in (("prefix", {}), ("irminsul", {"s1": True})):
            s = run(tr, name, opts, args, model=mname)
            print(row([mname, label(name, opts), f"{s['energy_saved_vs_none']:.4f}",
                       f"{s['energy_saved_vs_prefix']:.4f}", f"{s['ttft_p50_s']:.4f}"]))


def section_chunk(args) -> None:
    rows = []
    for sc in ("early-variation", "rag-reorder"):
        tr = synth(sc, args.requests, args.seed)
        for avg, mn in ((128, 32), (256, 64), (512, 128), (1024, 256)):
            for s1 in (False, True):
                opts = {"avg_chunk": avg, "min_chunk": mn, "max_chunk": 8 * avg, "s1": s1, "s2": False}
                rows.append((sc, f"avg {avg}", label("irminsul", {"s1": s1}), run(tr, "irminsul", opts, args)))
    table("chunk-size sensitivity (min = avg/4, max = 8 avg)", rows)


def section_cap(args) -> None:
    rows = []
    for sc in ("early-variation", "rag-reorder"):
        tr = synth(sc, args.requests, args.seed)
        for gib in (1, 2, 4, 8):
            sub = argparse.Namespace(**{**vars(args), "capacity": gib * 2**30})
            for name, opts in (("prefix", {}), ("fixed-chunk", {}), ("irminsul", OFF), ("irminsul", {"s1": True, "s2": False})):
                rows.append((sc, f"{gib} GiB", label(name, opts), run(tr, name, opts, sub)))
    table("bounded capacity (per replica, deepseek-v2-lite)", rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--capacity", type=parse_size, default=math.inf)
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--sections", default="synth,real,gqa,chunk,cap")
    args = ap.parse_args()
    args.scenarios = args.scenarios.split(",")
    for sec in args.sections.split(","):
        {"synth": section_synth, "real": section_real, "gqa": section_gqa, "chunk": section_chunk,
         "cap": section_cap}[sec](args)


if __name__ == "__main__":
    main()
