"""GPU run of issue 11: bf16 checks, probes, calibration and the executed Plans of several traces.

    PYTHONUNBUFFERED=1 PYTHONPATH=. python benchmarks/gpu_execute.py --plans ev.parquet rag.parquet ... [--quick]

Plan logs come from ``python -m pic execute TRACE --plans-only -o X.parquet`` on any machine (the GPU
machine needs pyarrow only). Every section runs in its own try/except and everything lands as JSON in
$OUT (``execute.json``, ``profile.json``). ``--quick`` is the smoke run: checks, probes, a small timing and
a 3-request execution per trace. ``--cpu-test`` runs the same flow on a tiny model under the Triton
interpreter (no GPU) to test this script. ``--ncu plan|full`` profiles one forward of a 2-layer model
between cudaProfilerStart/Stop (run it under ``ncu --profile-from-start off``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path

if "--cpu-test" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

from pic.engine.planlog import read_plan_log  # noqa: E402
from pic.engine.specs import model_from_name  # noqa: E402
from pic.kernels._testing import rel_rms  # noqa: E402
from pic.kernels.executor import ExecConfig, Executor  # noqa: E402
from pic.kernels.executor.calibrate import (  # noqa: E402
    QUICK_CACHED,
    QUICK_NEW,
    QUICK_ROTATED,
    CalibrationGrid,
    calibrate,
)
from pic.kernels.executor.device import Runner, median, to_device  # noqa: E402
from pic.kernels.executor.layout import full_layout  # noqa: E402
from pic.kernels.model import Model, exec_spec, prefill_reference, random_weights, tiny_model_spec  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/gpu_execute_out"))
RESULT: dict = {"sections": {}, "errors": {}}
T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def save() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "execute.json").write_text(json.dumps(RESULT, indent=1, default=_json) + "\n")


def _json(o):
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def section(name: str):
    def wrap(fn):
        def run(*a, **k):
            log(f"== {name}")
            t = time.time()
            try:
                RESULT["sections"][name] = fn(*a, **k)
            except Exception as e:   # noqa: BLE001 - a failed section must not stop the others
                traceback.print_exc()
                RESULT["errors"][name] = f"{type(e).__name__}: {e}"
            log(f"   {name}: {time.time() - t:.1f}s")
            save()
        return run
    return wrap


def sub_model(model: Model, n: int) -> Model:
    """The first n layers of ``model`` (shared weights), priced as an n-layer model."""
    spec = dataclasses.replace(model.spec, num_layers=n, full_layers=n)
    w = {**model.w, "layers": model.w["layers"][:n]}
    return Model(spec, w, tile=model.tile, grouped=model.grouped)


@section("env")
def env(args) -> dict:
    import triton
    d = {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0]}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        d.update(gpu=p.name, sms=p.multi_processor_count, mem_gib=p.total_memory / 2**30)
    return d


@section("build")
def build(args, state) -> dict:
    t = time.time()
    model = model_from_name(args.model) if not args.cpu_test else tiny_model_spec(num_layers=3)
    spec = exec_spec(model, layers=args.layers)
    dev = torch.device("cpu" if args.cpu_test else "cuda")
    dtype = torch.float32 if args.cpu_test else torch.bfloat16
    w = random_weights(spec, device=dev, dtype=dtype, seed=0)
    tile = {"BLOCK_T": 16, "BLOCK_HH": 2, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1} if args.cpu_test else \
        (json.loads(args.tile) if args.tile else None)   # None: Model's default (4 x 16 for 16 heads)
    state["model"] = Model(spec, w, tile=tile)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    nbytes = sum(t.numel() * t.element_size() for layer in w["layers"] for t in layer.values())
    return {"spec": spec.to_dict(), "weight_gib": nbytes / 2**30, "seconds": time.time() - t,
            "grouped_mm": state["model"].grouped, "tile": state["model"].tile}


@section("check")
def check(args, state) -> dict:
    """bf16 full prefill of 2 real-shape layers vs a float64 forward; 1-layer reuse vs full prefill."""
    model = sub_model(state["model"], 2)
    spec, dev, page = model.spec, model.device, args.page
    n = 96 if args.cpu_test else 384
    toks = np.random.default_rng(7).integers(0, 10**6, n).astype(np.int32)
    cache = model.alloc_cache(-(-n // page) + 2, page)
    pages = np.arange(1, -(-n // page) + 1, dtype=np.int32)[::-1].copy()
    hb = full_layout(toks, pages, page, spec.vocab_size)
    hs, logits = model.forward(to_device(hb, spec, dev), cache)
    ref = prefill_reference(spec, model.w, torch.from_numpy(hb.token_ids))
    kv = cache.view(2, -1, spec.row)[:, torch.from_numpy(hb.dst_rows).to(dev)]
    out = {"tokens": n, "kv_rel_rms": rel_rms(ref["kv"], kv), "hidden_rel_rms": rel_rms(ref["hidden"], hs[0]),
           "logits_rel_rms": rel_rms(ref["logits"], logits[0]),
           "top1_match": int(ref["logits"].argmax()) == int(logits[0].argmax())}
    if args.plans:
        one = sub_model(state["model"], 1)
        plog = read_plan_log(args.plans[0])
        idx = plog.sample(2, seed=1, max_tokens=8192 if not args.cpu_test else 400, min_reuse=0.5)
        if not idx:
            raise ValueError(f'{args.plans[0]}: no request of <= 8192 tokens with >= 50% reuse')
        ex = Executor(one, plog, ExecConfig(page_size=page, repeats=1, warmup=0, graphs=False, energy_seconds=0))
        rows = ex.run(idx)
        ex.release()
        out["one_layer_reuse"] = [{k: r[k] for k in ("request_id", "prompt_tokens", "reused_tokens", "rotated_tokens",
                                                     "out_dev", "kv_dev", "top1_match")} for r in rows]
        two = sub_model(state["model"], 2)
        ex = Executor(two, plog, ExecConfig(page_size=page, repeats=1, warmup=0, graphs=False, energy_seconds=0))
        rows = ex.run(idx)
        ex.release()
        out["two_layer_reuse"] = [{k: r[k] for k in ("request_id", "out_dev", "kv_dev", "kv_dev_first",
                                                     "kv_dev_last", "top1_match")} for r in rows]
    log(f"   {out}")
    return out


@section("probe")
def probe(args, state) -> dict:
    """Extend tile configs for 16 heads, eager vs graph, on a 2-layer model: one 4K prefill over 4K cached."""
    model = sub_model(state["model"], 2)
    spec, dev, page = model.spec, model.device, args.page
    from pic.kernels.executor.calibrate import _prefill_batch
    n, c = (64, 64) if args.cpu_test else (4096, 4096)
    cache = model.alloc_cache(-(-(n + c) // page), page).normal_()
    hb = _prefill_batch(n, c, page, spec.vocab_size, np.random.default_rng(0))
    b = to_device(hb, spec, dev)
    out = {}
    configs = {"default": None, "T4-H16": {"BLOCK_T": 4, "BLOCK_HH": 16, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
               "T4-H16-w4": {"BLOCK_T": 4, "BLOCK_HH": 16, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2},
               "T8-H16": {"BLOCK_T": 8, "BLOCK_HH": 16, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
               "T2-H16-n32": {"BLOCK_T": 2, "BLOCK_HH": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3}}
    if args.cpu_test:
        configs = {"test": model.tile}
    from pic.kernels.mla_extend import mla_extend
    H, r = spec.num_heads, spec.kv_lora_rank
    qn = torch.randn(n, H, r, device=dev, dtype=model.dtype)
    qr = torch.randn(n, H, spec.rope_dim, device=dev, dtype=model.dtype)
    ref = None
    for name, cfg in configs.items():
        try:
            fn = lambda cfg=cfg: mla_extend(qn, qr, cache[0], b.block_table, b.seq_lens, b.cu_q, b.block_delta,  # noqa: E731
                                            max_new=n, rope=spec.rope, sm_scale=spec.sm_scale, run_end=b.run_end,
                                            config=cfg)
            o = fn()
            ref = o if ref is None else ref
            t = median(Runner(fn, dev, graphs=False).time(10, 2))
            flops = (n * c + n * (n + 1) / 2) * H * 2 * (2 * r + spec.rope_dim)
            out[f"extend_{name}"] = {"ms": t * 1e3, "tflops": flops / t / 1e12, "rel_vs_default": rel_rms(ref, o)}
        except Exception as e:   # noqa: BLE001
            out[f"extend_{name}"] = f"{type(e).__name__}: {e}"
    run = Runner(lambda: model.forward(b, cache), dev, graphs=dev.type == "cuda")
    out["forward2_graph_ms"] = median(run.time(5)) * 1e3
    out["forward2_eager_ms"] = median(run.time(5, eager=True)) * 1e3
    hb1 = _prefill_batch(16, c, page, spec.vocab_size, np.random.default_rng(1))
    b1 = to_device(hb1, spec, dev)
    run1 = Runner(lambda: model.forward(b1, cache), dev, graphs=dev.type == "cuda")
    out["forward2_16tok_graph_ms"] = median(run1.time(5)) * 1e3
    out["forward2_16tok_eager_ms"] = median(run1.time(5, eager=True)) * 1e3
    log(f"   {out}")
    return out


@section("full_depth_timing")
def full_depth(args, state) -> dict:
    """All built layers: one prefill of 2K and 8K tokens (graph and eager)."""
    model = state["model"]
    spec, dev, page = model.spec, model.device, args.page
    from pic.kernels.executor.calibrate import _prefill_batch
    out = {}
    for n in ((64,) if args.cpu_test else (2048, 8192)):
        cache = model.alloc_cache(-(-n // page), page)
        b = to_device(_prefill_batch(n, 0, page, spec.vocab_size, np.random.default_rng(n)), spec, dev)
        run = Runner(lambda b=b, cache=cache: model.forward(b, cache), dev, graphs=dev.type == "cuda")
        out[f"prefill_{n}"] = {"graph_ms": median(run.time(3)) * 1e3,
                               "eager_ms": median(run.time(2, eager=True)) * 1e3,
                               "scaled_to_full_depth": spec.depth_scale}
        del run, cache
    log(f"   {out}")
    return out


@section("small_new")
def small_new(args, state) -> dict:
    """All built layers, a few new tokens over 4K cached: extend kernel vs one-token sequences (decode kernel)."""
    model = state["model"]
    spec, dev, page = model.spec, model.device, args.page
    from pic.kernels.executor.calibrate import _prefill_batch
    c = 64 if args.cpu_test else 4096
    cache = model.alloc_cache(-(-(c + 128) // page), page).normal_()
    out = {}
    for n in ((1, 8) if args.cpu_test else (1, 4, 16, 32, 64, 128)):
        hb = _prefill_batch(n, c, page, spec.vocab_size, np.random.default_rng(n))
        row = {}
        for name, dmax in (("extend", 0), ("decode", 1 << 20)):
            b = to_device(hb, spec, dev, decode_max_new=dmax)
            run = Runner(lambda b=b: model.forward(b, cache), dev, graphs=dev.type == "cuda")
            row[name + "_ms"] = median(run.time(5)) * 1e3 * spec.depth_scale
            del run
        out[f"new_{n}_cached_{c}"] = row
    log(f"   {out}")
    return out


def _meter(args):
    if args.cpu_test:
        return None
    from pic.kernels.energy import EnergyMeter
    m = EnergyMeter(0, sync=torch.cuda.synchronize)
    return m


@section("idle_power")
def idle_power(args, state) -> dict:
    m = _meter(args)
    state["meter"] = m
    if m is None:
        return {}
    return {"idle_watts": m.idle_watts(2.0)}


@section("calibrate")
def calib(args, state) -> dict:
    model = state["model"]
    grid = CalibrationGrid(new_tokens=QUICK_NEW, cached_tokens=QUICK_CACHED, extra_prefill=(), rotated=QUICK_ROTATED,
                           power=((64, 4096), (2048, 0)), repeats=3) if args.quick else CalibrationGrid(repeats=3)
    if args.cpu_test:
        grid = CalibrationGrid(new_tokens=(1, 48, 64), cached_tokens=(0, 64), decode_seqs=(1, 2),
                               decode_context=(32, 64), extra_prefill=(), rotated=((16, 64), (48, 64)), repeats=1)
    gpu = "h200" if not args.cpu_test else "h200"
    prof, details = calibrate(model, gpu, model.spec.name, grid, args.page, state.get("meter"), 2.0,
                              progress=lambda k, n, what: log(f"   calibrate {k}/{n} {what}") if k % 8 == 0 else None)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "profile.json").write_text(json.dumps(prof.to_dict(), indent=1) + "\n")
    if model.device.type == "cuda":
        torch.cuda.empty_cache()
    return details


@section("execute")
def execute(args, state) -> dict:
    model = state["model"]
    out = {}
    for path in args.plans:
        name = Path(path).stem
        t = time.time()
        try:
            plog = read_plan_log(path)
            k = 3 if args.quick or args.cpu_test else args.requests
            max_tokens = 600 if args.cpu_test else args.max_tokens
            idx = plog.sample(k, seed=args.seed, max_tokens=max_tokens)
            cfg = ExecConfig(page_size=args.page, repeats=2 if args.cpu_test else args.repeats,
                             graphs=not args.cpu_test, eager=args.eager,
                             energy_seconds=0.0 if args.cpu_test else args.energy_seconds)
            ex = Executor(model, plog, cfg, state.get("meter"))
            rows = ex.run(idx, progress=lambda k, n, what, name=name: log(f"   {name} {k}/{n} {what}"))
            out[name] = {"meta": plog.meta, "sample": idx, "fills": ex.num_fills, "rows": rows,
                         "seconds": time.time() - t, "config": dataclasses.asdict(cfg)}
            ex.release()
            r = np.array([x["ttft_s"] / x["ttft_full_s"] for x in rows])
            reuse = np.array([x["reused_tokens"] / x["prompt_tokens"] for x in rows])
            log(f"   {name}: ratio median {np.median(r):.3f} p90 {np.percentile(r, 90):.3f}, "
                f"reuse {reuse.mean():.3f}, {time.time() - t:.1f}s")
        except Exception as e:   # noqa: BLE001
            traceback.print_exc()
            out[name] = {"error": f"{type(e).__name__}: {e}"}
        RESULT["sections"]["execute"] = out
        save()
    return out


@section("fidelity")
def fidelity(args, state) -> dict:
    """Each executed Plan re-priced by the cost model (roofline, and calibrated with this run's profile):
    median / p90 |relative error| against the measured TTFT (the full tables: benchmarks/execute_report.py)."""
    from pic.engine.calibration import load_profile
    from pic.engine.cost import CostModel
    from pic.engine.plan import Plan
    from pic.engine.specs import gpu_from_name
    spec = model_from_name(args.model) if not args.cpu_test else None
    prof = load_profile(OUT / "profile.json")
    out = {"fit": prof.fit.to_dict() if prof.fit else None}
    if spec is None:
        return out
    gpu = gpu_from_name("h200")
    models = {"calibrated": CostModel(spec, gpu, profile=prof), "roofline": CostModel(spec, gpu)}
    for path in args.plans:
        name = Path(path).stem
        e = RESULT["sections"].get("execute", {}).get(name, {})
        if "rows" not in e:
            continue
        by = {r.request_id: r for r in read_plan_log(path).requests}
        res = {}
        for label, cm in models.items():
            for what, key, plan_of in (("plan", "ttft_s", lambda r: r.plan),
                                       ("full", "ttft_full_s", lambda r: Plan.recompute_all(r.num_tokens))):
                err = np.array([abs(cm.prefill(plan_of(by[x["request_id"]])).time_s / x[key] - 1) for x in e["rows"]])
                res[f"{label}_{what}"] = {"median": float(np.median(err)), "p90": float(np.percentile(err, 90))}
        out[name] = res
        log(f"   {name}: calibrated plan error median {res['calibrated_plan']['median']:.1%} "
            f"p90 {res['calibrated_plan']['p90']:.1%}; roofline {res['roofline_plan']['median']:.1%}; "
            f"full prefill calibrated {res['calibrated_full']['median']:.1%}")
    return out


def ncu_sample(args) -> None:
    """One forward (plan or full) of a 2-layer model inside cudaProfilerStart/Stop, plus its byte counts."""
    from pic.kernels.executor.accounting import forward_bytes
    from pic.kernels.executor.layout import owned_rows_needed, plan_layout
    spec = dataclasses.replace(exec_spec(model_from_name(args.model), layers=2), full_layers=2)
    model = Model(spec, random_weights(spec, device="cuda", dtype=torch.bfloat16),
                  tile=json.loads(args.tile) if args.tile else None)
    plog = read_plan_log(args.plans[0])
    i = plog.sample(1, seed=3, max_tokens=8192, min_reuse=0.7)[0]
    ex = Executor(model, plog, ExecConfig(page_size=args.page, graphs=False, energy_seconds=0, deviation=False))
    sources, need = ex.plan_pages([i])
    srcs = sources[i]
    ex._alloc_cache(need)
    for p in sorted({s.provider for s in srcs}):
        ex._ensure_kv(p)
    r = plog.requests[i]
    pages = ex.pool.alloc(-(-r.num_tokens // args.page))
    if args.ncu == "full":
        hb = full_layout(r.tokens, pages, args.page, spec.vocab_size)
    else:
        ex.own[i] = pages
        scratch = ex.pool.alloc(-(-owned_rows_needed(r.plan, srcs, args.page) // args.page))
        hb = plan_layout(r.tokens, r.plan, srcs, ex.own, scratch, args.page, spec.vocab_size)
    fn = ex._forward(hb)
    model.touched = []
    fn()
    touched, model.touched = model.touched, None
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    OUT.mkdir(parents=True, exist_ok=True)
    info = {"request_id": r.request_id, "prompt_tokens": r.num_tokens, "new_tokens": hb.num_new,
            "decode_path": hb.num_new <= 32,
            "bytes": forward_bytes(spec, hb, touched, block_hh=(model.tile or {}).get("BLOCK_HH", 32),
                                   block_t=(model.tile or {}).get("BLOCK_T", 2))}
    (OUT / f"ncu_{args.ncu}_counts.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plans", nargs="*", default=[], help="plan logs (plans.parquet) to execute")
    ap.add_argument("--model", default="deepseek-v2-lite")
    ap.add_argument("--layers", type=int, default=None, help="build only the first N layers (times scaled)")
    ap.add_argument("--requests", type=int, default=12, help="sampled requests per trace")
    ap.add_argument("--max-tokens", type=int, default=16384, help="sample among prompts up to this length")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--energy-seconds", type=float, default=1.0)
    ap.add_argument("--eager", action="store_true", help="also time eager forwards")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--tile", default="", help="JSON extend tile config for the model (default: kernel default)")
    ap.add_argument("--quick", action="store_true", help="smoke run")
    ap.add_argument("--cpu-test", action="store_true", help="tiny model under the Triton interpreter")
    ap.add_argument("--no-calibrate", action="store_true")
    ap.add_argument("--sections", default="", help="comma list of sections to run (default: all)")
    ap.add_argument("--ncu", choices=["plan", "full"], default=None, help="profile one forward (under ncu)")
    args = ap.parse_args()
    if args.cpu_test:
        args.page = 32
    if args.ncu:
        ncu_sample(args)
        return
    RESULT["args"] = vars(args)
    state: dict = {}
    want = set(args.sections.split(",")) if args.sections else None

    def on(name: str) -> bool:
        return want is None or name in want

    env(args)
    build(args, state)
    if "model" not in state:
        return
    if on("check"):
        check(args, state)
    if on("probe"):
        probe(args, state)
    if on("timing"):
        full_depth(args, state)
    if on("small_new"):
        small_new(args, state)
    idle_power(args, state)
    if on("calibrate") and not args.no_calibrate:
        calib(args, state)
    if on("execute") and args.plans:
        execute(args, state)
    if (OUT / "profile.json").exists() and args.plans:
        fidelity(args, state)
    RESULT["total_seconds"] = time.time() - T0
    save()
    log(f"done; errors: {list(RESULT['errors']) or 'none'}")


if __name__ == "__main__":
    main()
