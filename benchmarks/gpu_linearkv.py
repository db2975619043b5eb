"""LinearKV on the GPU: full prefill vs single-block vs exact composition TTFT on a Qwen3-Next-like stack.

One command (device machine, repo root; fla-core brought as a wheel, see docs/bench-linearkv.md)::

    PYTHONUNBUFFERED=1 PYTHONPATH=. python benchmarks/gpu_linearkv.py [--quick] [--out $OUT]

Sections, each in its own try/except (a failure prints its traceback and the rest goes on), the JSON
rewritten after each:

1. attention tile tuning: gqa_extend configurations on a causal prefill (the fastest is used after), and
   torch SDPA's flash path beside it;
2. TTFT at each prompt size (default 8K/16K/32K): full prefill (gqa_extend, and SDPA flash), LinearKV
   single-block / exact with the EPIC and CacheBlend selectors at r (default 0.2), plus the per-layer-kind
   split of one instrumented run;
3. the r sweep (default 0.03/0.1/0.2/0.4) at each size, single-block and exact with EPIC;
4. checks (last: they compile fla-core's fp32 and varlen variants): fla-core GDN vs a float64 recurrence;
   per-chunk (Z, T) composed vs the full state; gqa_extend vs a float32 reference (bf16 inputs).

Prompt shape: a new 512-token header, the rest reused in 256-token chunks at a shifted position (delta
+512: moved keys are RoPE-corrected), a new 512-token question. Results -> ``$OUT/linearkv.json`` (plans
included, so ``benchmarks/linearkv_report.py`` prices the same plans with the simulator). ``--tiny`` runs
tiny widths on the CPU (float32, fla-free references, Triton interpreter) to test this script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

RES: dict = {"checks": [], "tune": [], "ttft": [], "sweep": [], "split": [], "errors": []}
HEAD = TAIL = 512


def section(name):
    def wrap(fn):
        def run(*a, **k):
            t0 = time.time()
            print(f"== {name}", flush=True)
            try:
                return fn(*a, **k)
            except Exception:   # noqa: BLE001 - one section's failure must not stop the others
                tb = traceback.format_exc()
                print(tb, flush=True)
                RES["errors"].append({"section": name, "traceback": tb[-3000:]})
            finally:
                print(f"   ({time.time() - t0:.1f} s)", flush=True)
        return run
    return wrap


def bench(fn, repeats: int, warmup: int = 1) -> tuple[float, list[float]]:
    import torch
    for _ in range(warmup):
        fn()
    sync()
    ts = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts), ts


def sync():
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# ---- plans ------------------------------------------------------------------------------------------
def layout(n: int, chunk: int):
    """Reused chunks ``[[a, b)]`` (moved by +HEAD) between a new header and a new question."""
    import numpy as np
    starts = np.arange(HEAD, n - TAIL, chunk)
    return np.stack([starts, np.minimum(starts + chunk, n - TAIL)], 1).astype(np.int64)


def plan_record(n: int, chunks, num_u: int, compose: str, selector: str) -> dict:
    """What the simulator needs to price the same request (spans + Correction fields)."""
    k = len(chunks)
    return {"num_tokens": n, "spans": [[0, HEAD, "RECOMPUTE", -1], [HEAD, n - TAIL, "REUSE_ROTATED", 0],
                                       [n - TAIL, n, "RECOMPUTE", -1]],
            "correction": {"recompute_tokens": num_u, "state_loads": k if compose == "exact" else 1,
                           "state_compositions": k if compose == "exact" else 0,
                           "probe_tokens": (n - HEAD - TAIL) if selector == "cacheblend" else 0}}


class Case:
    """One prompt size: the stack, cached states/operators, and the timed TTFT functions."""

    def __init__(self, d, n: int, device: str, dtype, chunk: int, block: dict | None):
        import torch

        from pic.kernels.recurrent.stack import Stack
        self.torch = torch
        self.st = Stack(d, n, device, dtype)
        if block:
            self.st.block = block
        self.d, self.n, self.chunk, self.device = d, n, chunk, device
        self.chunks = layout(n, chunk)
        self.k = len(self.chunks)
        ng = d.kinds.count("gdn")
        g = torch.Generator(device=device).manual_seed(1)

        def rnd(*shape, scale=1.0):   # generated on the device: the exact-mode tensors are GBs at 32K
            return (torch.randn(*shape, generator=g, device=device, dtype=torch.float32) * scale).to(dtype)
        self.x = rnd(n, d.hidden, scale=0.5)
        self.pos = torch.arange(n, device=device)
        # cached per-chunk zero-start states and transition operators of every GDN layer (random stand-ins
        # of the right shapes; a near-identity operator keeps the fold bounded)
        hv = ng * d.gdn_vh
        self.z = rnd(self.k, hv, d.dk, d.dv, scale=0.05)
        self.t = rnd(self.k, hv, d.dk, d.dk, scale=0.002)
        self.t += (torch.eye(d.dk, device=device) * 0.98).to(dtype)
        self.last = self.z[-1].float().view(ng, 1, d.gdn_vh, d.dk, d.dv)
        conv_ch = 2 * d.gdn_kh * d.dk + d.gdn_vh * d.dv     # the last matched chunk's conv windows
        self.conv = rnd(ng, d.conv - 1, conv_ch, scale=0.1)
        self.reused = self._positions(self.chunks)

    def _positions(self, ch):
        import numpy as np

        from pic.engine.selectors.base import positions_of
        return self.torch.from_numpy(positions_of(np.asarray(ch))).to(self.device)

    def recompute_set(self, u):
        t = self.torch
        new = t.cat([t.arange(0, HEAD, device=self.device), t.arange(self.n - TAIL, self.n, device=self.device)])
        return t.sort(t.cat([new, u])).values

    def s_init(self, compose: str):
        from pic.kernels.recurrent import compose_states
        if compose == "single-block":
            return list(zip(self.last, self.conv, strict=True))
        d, ng = self.d, self.d.kinds.count("gdn")
        s = compose_states(self.t, self.z)
        return list(zip(s.float().view(ng, 1, d.gdn_vh, d.dk, d.dv), self.conv, strict=True))

    def full(self):
        x, _ = self.st.forward(self.x, self.pos, None, full=True)
        return self.st.logits_last(x)

    def partial(self, compose: str, selector: str, ratio: float, timer=None):
        """LinearKV TTFT: (CacheBlend selection pass) + S_init + recomputed tokens through every layer + logits."""
        t = self.torch
        from pic.engine.selectors import budget
        b = budget(self.chunks, ratio)
        if selector == "cacheblend":
            k_new = self.st.probe_keys(self.x, self.pos)
            j = self.d.kinds.index("attn")
            cached = self.st.layers[j][1]["k_cache"]
            dev = (k_new[self.reused].float() - cached[self.reused].float()).pow(2).sum((1, 2))
            u = self.reused[t.topk(dev, b).indices] if b else self.reused[:0]
        else:
            from pic.engine.selectors import get
            u = t.from_numpy(get("epic").select(self.chunks, ratio).positions).to(self.device)
        pos = self.recompute_set(u)
        keep = self.reused[~t.isin(self.reused, u)]
        states = self.s_init(compose)
        for kind, L in self.st.layers:
            if kind == "attn":
                self.st.rotate_cached(L, keep, HEAD)
        x, _ = self.st.forward(self.x.index_select(0, pos), pos, states, full=False, timer=timer)
        return self.st.logits_last(x), int(u.numel()), b


# ---- sections ---------------------------------------------------------------------------------------
@section("checks: fla GDN vs float64, composed chunk states, gqa_extend")
def checks(device: str) -> None:
    import torch
    import torch.nn.functional as F

    from pic.kernels._testing import rel_rms
    from pic.kernels.gqa_extend import gqa_extend, gqa_extend_reference
    from pic.kernels.recurrent import (
        compose_states,
        gdn_chunk,
        gdn_chunk_operators,
        gdn_chunk_states,
        gdn_reference,
        have_fla,
    )
    RES["fla"] = have_fla()
    g = torch.Generator(device="cpu").manual_seed(0)
    t_, h, hv, dk = 320, 2, 4, 64
    q, k = torch.randn(1, t_, h, dk, generator=g, dtype=torch.float64), torch.randn(1, t_, h, dk, generator=g,
                                                                                     dtype=torch.float64)
    k = F.normalize(k, dim=-1)
    v = torch.randn(1, t_, hv, dk, generator=g, dtype=torch.float64)
    gg = F.logsigmoid(torch.randn(1, t_, hv, generator=g, dtype=torch.float64) + 2)
    beta = torch.sigmoid(torch.randn(1, t_, hv, generator=g, dtype=torch.float64))
    want_o, want_s = gdn_reference(q, k, v, gg, beta)
    for dt in (torch.float32, torch.bfloat16):
        o, s = gdn_chunk(*(x.to(device, dt) for x in (q, k, v, gg, beta)), output_final_state=True)
        for name, ref, out in (("o", want_o, o), ("state", want_s, s)):
            err = rel_rms(ref, out)
            RES["checks"].append({"name": f"gdn {name} {dt}", "rel": err, "ok": err < 3e-2})
            print(f"   gdn {name} {dt}: rel {err:.2e}", flush=True)
    cu = torch.tensor([0, 64, 100, 256, 257, t_], device=device)
    dev = [x.to(device, torch.float32) for x in (k, v, gg, beta)]
    comp = compose_states(gdn_chunk_operators(dev[0], dev[2], dev[3], cu), gdn_chunk_states(*dev, cu))
    err = rel_rms(want_s, comp)
    RES["checks"].append({"name": "composed chunk states vs full state", "rel": err, "ok": err < 1e-2})
    print(f"   composed (Z, T) vs full state: rel {err:.2e}", flush=True)
    n, m = 1000, 300
    adt = torch.bfloat16 if device == "cuda" else torch.float16   # the interpreter's bf16 dot is garbage
    qq = torch.randn(m, 8, 128, generator=g).to(device, adt)
    kk, vv = (torch.randn(n, 2, 128, generator=g).to(device, adt) for _ in range(2))
    qpos = torch.sort(torch.randperm(n, generator=g)[:m]).values.to(device)
    out = torch.full_like(qq, float("nan"))
    out[:] = gqa_extend(qq, kk, vv, qpos)
    err = rel_rms(gqa_extend_reference(qq.float(), kk.float(), vv.float(), qpos), out)
    RES["checks"].append({"name": f"gqa_extend {adt} vs fp32 reference", "rel": err, "ok": err < 2e-2})
    print(f"   gqa_extend {adt}: rel {err:.2e}", flush=True)


@section("attention tile tuning (causal prefill, one layer's shapes)")
def tune(d, n: int, device: str, dtype, repeats: int) -> dict:
    import torch
    import torch.nn.functional as F

    from pic.kernels.gqa_extend import gqa_extend
    q = torch.randn(n, d.heads, d.head_dim, device=device, dtype=dtype)
    k, v = (torch.randn(n, d.kv_heads, d.head_dim, device=device, dtype=dtype) for _ in range(2))
    pos = torch.arange(n, device=device)
    flops = 4.0 * d.heads * d.head_dim * n * (n + 1) / 2
    best, best_t = None, float("inf")
    for bm, bn, w, s in ((64, 32, 4, 2), (128, 32, 8, 2), (128, 64, 8, 2)):   # the smoke run's best three
        cfg = {"block_m": bm, "block_n": bn, "num_warps": w, "num_stages": s}
        try:
            t, _ = bench(lambda cfg=cfg: gqa_extend(q, k, v, pos, **cfg), repeats)
        except Exception as e:   # noqa: BLE001 - a tile that does not compile (shared memory) is skipped
            RES["tune"].append({**cfg, "error": str(e)[:200]})
            continue
        RES["tune"].append({**cfg, "s": t, "tflops": flops / t / 1e12})
        print(f"   gqa_extend {cfg}: {t * 1e3:.2f} ms, {flops / t / 1e12:.0f} TFLOP/s", flush=True)
        if t < best_t:
            best, best_t = cfg, t
    qt, kt, vt = (x.transpose(0, 1)[None] for x in (q, k, v))
    t, _ = bench(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True), repeats)
    RES["tune"].append({"sdpa": True, "s": t, "tflops": flops / t / 1e12})
    print(f"   torch SDPA causal: {t * 1e3:.2f} ms, {flops / t / 1e12:.0f} TFLOP/s", flush=True)
    RES["attn_block"] = best
    return best


def _split(case, compose: str, selector: str, ratio: float) -> dict:
    """Per-layer-kind time of one instrumented run (events around each layer)."""
    import torch
    acc: dict = {"gdn": 0.0, "attn": 0.0}
    if not torch.cuda.is_available():
        return acc
    marks: list = []

    def timer(kind, start):
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        marks.append((kind, start, e))
    case.partial(compose, selector, ratio, timer) if compose else case.st.forward(case.x, case.pos, None,
                                                                                 full=True, timer=timer)
    torch.cuda.synchronize()
    for (kind, _, e0), (_, _, e1) in zip(marks[0::2], marks[1::2], strict=True):
        acc[kind] += e0.elapsed_time(e1) / 1e3
    return acc


@section("TTFT: full prefill vs LinearKV single-block / exact, EPIC / CacheBlend")
def ttft(d, sizes, device, dtype, ratio, repeats, chunk, block) -> None:
    import torch
    for n in sizes:
        case = Case(d, n, device, dtype, chunk, block)
        rows = []
        for impl in ("triton", "sdpa"):
            case.st.attn_impl = impl
            t, ts = bench(case.full, repeats)
            rows.append({"n": n, "config": f"full-{impl}", "s": t, "all_s": ts})
        case.st.attn_impl = "triton"
        full_t = rows[0]["s"]
        for compose in ("single-block", "exact"):
            for selector in ("epic", "cacheblend"):
                out = {}
                t, ts = bench(lambda c=compose, s=selector, o=out, cs=case: o.update(r=cs.partial(c, s, ratio)),
                              repeats)
                _, num_u, b = out["r"]
                rows.append({"n": n, "config": f"{compose}-{selector}", "compose": compose, "selector": selector,
                             "ratio": ratio, "s": t, "all_s": ts, "fraction": t / full_t, "u": num_u,
                             "recomputed": HEAD + TAIL + num_u, "chunks": case.k,
                             "plan": plan_record(n, case.chunks, b, compose, selector)})
        for r in rows:
            print(f"   N={n:6d} {r['config']:<24} {r['s'] * 1e3:8.1f} ms"
                  + (f"  x{r['fraction']:.3f} of full" if "fraction" in r else ""), flush=True)
        RES["ttft"] += rows
        RES["split"].append({"n": n, "full": _split(case, None, "", 0.0),
                             "single-block-epic": _split(case, "single-block", "epic", ratio)})
        case = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


@section("r sweep: single-block and exact, EPIC")
def sweep(d, sizes, device, dtype, ratios, repeats, chunk, block) -> None:
    import torch
    for n in sizes:
        case = Case(d, n, device, dtype, chunk, block)
        full_t, _ = bench(case.full, repeats)
        RES["sweep"].append({"n": n, "config": "full-triton", "s": full_t})
        for r in ratios:
            for compose in ("single-block", "exact"):
                t, ts = bench(lambda c=compose, r=r, cs=case: cs.partial(c, "epic", r), repeats)
                b = int(round(r * len(case.reused)))
                RES["sweep"].append({"n": n, "config": f"{compose}-epic", "compose": compose, "ratio": r, "s": t,
                                     "all_s": ts, "fraction": t / full_t,
                                     "plan": plan_record(n, case.chunks, b, compose, "epic")})
                print(f"   N={n:6d} r={r:<5} {compose:<13} {t * 1e3:8.1f} ms  x{t / full_t:.3f}", flush=True)
        case = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 8 layers, 2K/4K prompts, 1 repeat")
    ap.add_argument("--tiny", action="store_true", help="CPU test of this script: tiny widths, float32")
    ap.add_argument("--sizes", default="8192,16384,32768")
    ap.add_argument("--ratio", type=float, default=0.2)
    ap.add_argument("--sweep", default="0.03,0.1,0.2,0.4")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--blocks", type=int, default=12, help="(3 GDN + 1 attention) blocks; 12 = Qwen3-Next")
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: checks,tune,ttft,sweep")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    a = ap.parse_args(argv)
    import torch

    from pic.kernels.recurrent.stack import TINY, Dims
    global HEAD, TAIL
    if a.tiny:
        HEAD = TAIL = 32
    t0 = time.time()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    d = TINY if a.tiny else Dims(blocks=2 if a.quick else a.blocks)
    sizes = [256, 512] if a.tiny else ([2048, 4096] if a.quick else [int(s) for s in a.sizes.split(",")])
    chunk = 64 if a.tiny else a.chunk
    repeats = 1 if (a.quick or a.tiny) else a.repeats
    skip = set(a.skip.split(",")) - {""}
    RES["env"] = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                  "dims": d.__dict__, "sizes": sizes, "chunk": chunk, "repeats": repeats, "head": HEAD, "tail": TAIL,
                  "quick": a.quick, "tiny": a.tiny}
    try:
        import triton
        RES["env"]["triton"] = triton.__version__
        import fla
        RES["env"]["fla"] = getattr(fla, "__version__", "?")
    except Exception as e:   # noqa: BLE001
        RES["env"]["fla"] = f"missing ({type(e).__name__})"
    print("env:", json.dumps(RES["env"]), flush=True)
    os.makedirs(a.out, exist_ok=True)

    def save() -> None:   # after every section, so a run cut short still returns what it measured
        RES["wall_s"] = time.time() - t0
        with open(os.path.join(a.out, "linearkv.json"), "w") as f:
            json.dump(RES, f, indent=1, default=str)

    # NOTE: measurements first, correctness checks last: fla-core JIT-compiles (and autotunes) every
    # dtype/varlen variant once, which took ~3 minutes for the checks' fp32 + varlen variants on the H200
    block = None
    if "tune" not in skip and not a.tiny:
        block = tune(d, min(sizes[-1] // 2, 16384), device, dtype, repeats)
        save()
    if "ttft" not in skip:
        ttft(d, sizes, device, dtype, a.ratio, repeats, chunk, block)
        save()
    if "sweep" not in skip:
        sweep(d, sizes, device, dtype, [float(r) for r in a.sweep.split(",")], repeats, chunk, block)
        save()
    if "checks" not in skip:
        checks(device)
    save()
    print(f"wrote {os.path.join(a.out, 'linearkv.json')} after {RES['wall_s']:.0f} s; errors: {len(RES['errors'])}")
    return 1 if RES["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
