"""The one script run on the GPU: ceilings, bf16 correctness vs float64 references, precision probe, timings.

Usage (device machine, repo root): ``PYTHONPATH=. python benchmarks/gpu_check.py [--tune] [--quick]``.
Prints a final table and writes gpu_check.json under $OUT (or ./out). Exit code 1 if any check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_mla as bm  # noqa: E402

from pic.kernels._mla import num_sms
from pic.kernels._testing import random_delta, random_paged_cache, rel_rms
from pic.kernels.mla_decode import mla_decode, mla_decode_reference
from pic.kernels.mla_decode.kernel import default_config, pick_num_splits
from pic.kernels.mla_extend import mla_extend, mla_extend_reference
from pic.kernels.rope import RopeConfig, rope, rope_reference
from pic.kernels.rotate import rotate, rotate_reference

BEST: dict = {}
BURST = 10  # decode times: median over groups of 10 back-to-back graph replays (host launch latency excluded)
RES: dict = {"checks": [], "precision": {}, "decode": [], "overhead": [], "extend": [], "tune": []}
DELTAS = (0, 7, -5000, 40000, 100000)


def check(name: str, ref: torch.Tensor, out: torch.Tensor, limit: float) -> None:
    err = rel_rms(ref, out)
    ok = err <= limit
    RES["checks"].append({"name": name, "rel": err, "limit": limit, "ok": ok})
    print(f"  {'ok ' if ok else 'BAD'} {name}: rel {err:.2e} (limit {limit:.0e})", flush=True)


def ceilings() -> tuple[float, float]:
    x = torch.empty(2**29, dtype=torch.bfloat16, device="cuda").normal_()
    y = torch.empty_like(x)
    ms = bm.bench_median(lambda: y.copy_(x))
    bw = 2 * x.numel() * 2 / ms * 1e3
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = bm.bench_median(lambda: a @ b)
    fl = 2 * 8192**3 / ms * 1e3
    RES["ceilings"] = {"copy_TBps": bw / 1e12, "matmul_TFLOPs": fl / 1e12}
    print(f"ceilings: copy {bw / 1e12:.2f} TB/s, bf16 matmul {fl / 1e12:.0f} TFLOP/s", flush=True)
    return bw, fl


def correctness() -> None:
    print("correctness (bf16, NaN-poisoned outputs, float64 references):", flush=True)
    dt = torch.bfloat16
    yarn = RopeConfig(layout="neox", factor=40.0, mscale=0.707, mscale_all_dim=1.0)
    cases = [("B3-H16-inter-rot", [1, 129, 1000], 16, RopeConfig(), False, True),
             ("B2-H128-inter-rot", [64, 2000], 128, RopeConfig(), False, True),
             ("B3-H16-neox-yarn-pre", [5, 700, 1500], 16, yarn, True, True),
             ("B2-H128-inter-pre", [300, 1200], 128, RopeConfig(), True, True),
             ("B2-H16-inter-rot-nosplit", [100, 900], 16, RopeConfig(), False, False)]
    for i, (name, lens, H, rope_cfg, pre, split) in enumerate(cases):
        cache, bt, lt = random_paged_cache(lens, 64, 512, 64, dt, "cuda", seed=10 + i)
        delta = random_delta(bt, 20 + i, DELTAS)
        qn = torch.randn(len(lens), H, 512, device="cuda").to(dt)
        qr = torch.randn(len(lens), H, 64, device="cuda").to(dt)
        ref = mla_decode_reference(qn, qr, cache, bt, lt, delta, rope=rope_cfg, pre_rope=pre, dtype=torch.float64)
        for side in ("q", "k") if not pre else ("k",):
            out = torch.full_like(qn, float("nan"))
            mla_decode(qn, qr, cache, bt, lt, delta, rope=rope_cfg, pre_rope=pre, split_kr=split, out=out,
                       rot_side=side)
            check(f"decode {name} {side}-side", ref, out, 1e-2)
        wrong = mla_decode_reference(qn, qr, cache, bt, lt, None, rope=rope_cfg, pre_rope=pre, dtype=torch.float64)
        RES["checks"].append({"name": f"decode {name} vs δ-ignored ref (must differ)", "rel": rel_rms(wrong, out)})
        new = [max(1, n // 3) for n in lens]
        cu = torch.tensor([0, *torch.tensor(new).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        qn = torch.randn(sum(new), H, 512, device="cuda").to(dt)
        qr = torch.randn(sum(new), H, 64, device="cuda").to(dt)
        ref = mla_extend_reference(qn, qr, cache, bt, lt, cu, delta, rope=rope_cfg, pre_rope=pre, dtype=torch.float64)
        out = torch.full_like(qn, float("nan"))
        mla_extend(qn, qr, cache, bt, lt, cu, delta, rope=rope_cfg, pre_rope=pre, split_kr=split, out=out)
        check(f"extend {name}", ref, out, 1e-2)
    cache, bt, lt = random_paged_cache([100, 1000], 64, 512, 64, dt, "cuda", seed=5)
    delta = random_delta(bt, 6, DELTAS)
    ref = rotate_reference(cache, bt, lt, delta)
    out = rotate(cache.clone(), bt, lt, delta)
    check("rotate in-place", torch.nan_to_num(ref.float()), torch.nan_to_num(out.float().cpu()), 1e-2)
    x = torch.randn(4096, 64, device="cuda")
    p = torch.randint(-100000, 100000, (4096,), device="cuda")
    for cfg in (RopeConfig(), RopeConfig(layout="neox", factor=40.0, mscale=0.707, mscale_all_dim=1.0)):
        check(f"rope fp32 {cfg.layout}", rope_reference(x.cpu(), p.cpu(), cfg.inv_freq(), cfg.layout, cfg.k_scale()),
              rope(x, p, cfg), 1e-5)


def precision(n_tokens: int = 65536) -> None:
    """rel L2 of the k_r fed to q·k_r vs float64 R(p_target)·k, for both cache designs."""
    print("precision of the fed k_r (bf16 cache):", flush=True)
    cfg = RopeConfig()
    g = torch.Generator().manual_seed(3)
    k64 = torch.randn(n_tokens, 64, generator=g, dtype=torch.float64)
    target = torch.arange(n_tokens)
    nb = n_tokens // bm.PAGE
    bt = torch.arange(nb, dtype=torch.int32).view(1, nb).cuda()
    lens = torch.tensor([n_tokens], dtype=torch.int32, device="cuda")
    truth = rope_reference(k64, target, cfg.inv_freq(), cfg.layout)
    delta = random_delta(bt, 4, (-40000, -3, 5, 33000, 70000)).cuda()
    p0 = target.cuda() - delta.view(-1).repeat_interleave(bm.PAGE).long()
    cache = torch.empty(nb, bm.PAGE, 576, dtype=torch.bfloat16, device="cuda").normal_()
    fresh = rope(k64.float().cuda(), target.cuda(), cfg).to(torch.bfloat16)  # fresh RoPE, one rounding
    stored = rope(k64.float().cuda(), p0, cfg).to(torch.bfloat16)  # RoPE'd at the old position
    out = {"fresh_rope_bf16": rel_rms(truth, fresh.float())}
    cache.view(-1, 576)[:, 512:] = stored
    for feed, name in (("bf16", "kside_bf16"), ("split", "kside_split"), ("fp32", "qside_fused")):
        fed = rotate(cache, bt, lens, delta, feed=feed)[0]
        out[f"stored_rotated+delta_{name}"] = rel_rms(truth, fed)
    twice = rotate(cache.clone(), bt, lens, delta)  # un-fused: rotate in place, stored again in bf16
    out["stored_rotated+delta_unfused_inplace"] = rel_rms(truth, twice.view(-1, 576)[:, 512:].float())
    cache.view(-1, 576)[:, 512:] = k64.cuda().to(torch.bfloat16)
    zero = torch.zeros_like(delta)
    for feed in ("bf16", "split"):
        fed = rotate(cache, bt, lens, zero, pre_rope=True, feed=feed)[0]
        out[f"pre_rope_kside_{feed}"] = rel_rms(truth, fed)
    RES["precision"] = out
    for k, v in out.items():
        print(f"  {k:40s} {v:.3e}", flush=True)


def decode_sweep(bw: float, fl: float, quick: bool) -> None:
    print("decode (graph replay median):", flush=True)
    batches, ctxs = ((32, 128), (8192, 65536)) if quick else ((32, 64, 128), (8192, 32768, 65536))
    for H in (16, 128):
        for B in batches:
            for L in ctxs:
                inp = bm.decode_inputs(B, L, H)
                cfgs = [BEST.get(H) or default_config(H, L, B)]
                if H <= 16:  # also the launcher's other 16-head tile (short-and-small vs the rest)
                    cfgs += [c for c in (default_config(H, 8192, 1), default_config(H))
                             if c["BLOCK_N"] != cfgs[0]["BLOCK_N"]]
                times = {(i, S): bm.time_decode(inp, config=c, num_splits=S, burst=BURST)
                         for i, c in enumerate(cfgs) for S in split_candidates(B, L, H, c)}
                i, S = min(times, key=times.get)
                c, ms = cfgs[i], times[(i, S)]
                f = bm.decode_floor(B, L, H, bw, fl)
                row = {"H": H, "B": B, "L": L, "S": S, "cfg": c, "ms": ms, "TBps": f["bytes"] / ms / 1e9,
                       "TFLOPs": f["flop"] / ms / 1e9, **f, "default_S": default_splits(B, L, H, c),
                       "ms_single_replay": bm.time_decode(inp, config=c, num_splits=S, burst=1)}
                if L in (8192, 32768) and B == 64 or (quick and B == 32):
                    kw = {"config": c, "num_splits": S, "burst": BURST}
                    variants = {"again": {}, "delta0": {"delta_mode": "zero"}, "norot": {"rotate_on": False},
                                "prerope": {"pre_rope": True, "delta_mode": "zero"}, "nosplit": {"split_kr": False},
                                "kside": {"rot_side": "k"}, "pagedelta": {"delta_mode": "page"}}
                    for name, extra in variants.items():
                        try:
                            row[f"ms_{name}"] = bm.time_decode(inp, **kw, **extra)
                        except Exception as e:  # noqa: BLE001 - e.g. out of shared memory for one variant
                            row[f"ms_{name}"] = None
                            print(f"  variant {name} failed: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
                    row["ms_rotate_pass_half"] = bm.time_rotate_pass(inp)
                    if H == 16 or L == 8192:
                        row["ms_sdpa_decompressed"] = bm.time_sdpa_decompressed(min(B, 32), L, H)
                RES["decode"].append(row)
                print(f"  H={H:3d} B={B:3d} L={L:5d} S={S:2d} BN={c['BLOCK_N']}: {ms:.3f} ms  {row['TBps']:.2f} TB/s  "
                      f"{row['TFLOPs']:.0f} TFLOP/s  floor {max(f['mem_floor_ms'], f['flop_floor_ms']):.3f} ms"
                      + "".join(f"  {k[3:]}={v:.3f}" for k, v in row.items()
                                if k.startswith("ms_") and v is not None), flush=True)
                del inp
                torch.cuda.empty_cache()


def extend_sweep(fl: float) -> None:
    print("extend (do_bench median), T=8192 new tokens, H=128:", flush=True)
    for C in (0, 8192, 32768):
        inp = bm.extend_inputs(C, 8192, 128)
        c = BEST.get("ext")
        ms = bm.time_extend(inp, config=c)
        ms0 = bm.time_extend(inp, delta_zero=True, config=c)
        msn = bm.time_extend(inp, rotate_on=False, config=c)
        msk = bm.time_extend(inp, rot_side="k", config=c)
        tf = bm.extend_flop(C, 8192, 128) / ms / 1e9
        RES["extend"].append({"C": C, "T": 8192, "H": 128, "cfg": c, "ms": ms, "ms_delta0": ms0, "ms_norot": msn,
                              "ms_kside": msk, "TFLOPs": tf})
        print(f"  C={C:5d}: {ms:.2f} ms ({tf:.0f} TFLOP/s, {tf * 1e12 / fl:.0%} of matmul), δ=0 {ms0:.2f} ms, "
              f"rotation compiled out {msn:.2f} ms, k-side {msk:.2f} ms", flush=True)


def tune() -> None:
    """Pick the decode tile config per head count (B=64, L=32K) and the extend config (C=8K); store in BEST."""
    print("tune:", flush=True)
    dec = {16: [(16, 64, 8, 2), (16, 64, 4, 2), (16, 64, 8, 3), (16, 32, 4, 3)],
           128: [(64, 64, 8, 2), (64, 64, 8, 1), (64, 32, 8, 2)]}
    for H, cfgs in dec.items():
        inp = bm.decode_inputs(64, 32768, H)
        ref = mla_decode(*inp[:5], inp[5], max_seq_len=32768)
        for h, n, w, st in cfgs:
            c = {"BLOCK_H": h, "BLOCK_N": n, "num_warps": w, "num_stages": st}
            try:
                o = mla_decode(*inp[:5], inp[5], config=c, max_seq_len=32768)
                err = rel_rms(ref.float(), o.float())
                ms = min(bm.time_decode(inp, config=c, num_splits=S, burst=BURST)
                         for S in split_candidates(64, 32768, H, c))
            except Exception as e:  # noqa: BLE001 - report and go on (smem overflow, compile error)
                err, ms = None, None
                print(f"  H={H} {c}: failed {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            RES["tune"].append({"op": "decode", "H": H, "cfg": c, "ms": ms, "err": err})
            if ms:
                print(f"  decode H={H} {c}: {ms:.3f} ms (vs default err {err:.1e})", flush=True)
                if ms < BEST.get(("ms", H), 1e9) and err < 1e-2:
                    BEST[("ms", H)], BEST[H] = ms, c
        del inp
    inp = bm.extend_inputs(8192, 8192, 128)
    for bt_, bh, n, st in ((4, 16, 64, 2), (2, 32, 64, 2), (4, 16, 64, 3), (4, 16, 32, 2)):
        c = {"BLOCK_T": bt_, "BLOCK_HH": bh, "BLOCK_N": n, "num_warps": 8, "num_stages": st}
        try:
            ms = bm.time_extend(inp, config=c)
        except Exception as e:  # noqa: BLE001
            ms = None
            print(f"  extend {c}: failed {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        RES["tune"].append({"op": "extend", "cfg": c, "ms": ms})
        if ms:
            print(f"  extend {c}: {ms:.2f} ms", flush=True)
            if ms < BEST.get(("ms", "ext"), 1e9):
                BEST[("ms", "ext")], BEST["ext"] = ms, c
    RES["best"] = {str(k): v for k, v in BEST.items()}


def default_splits(B: int, L: int, H: int, cfg: dict) -> int:
    """The launcher's split count for this shape and tile config."""
    return pick_num_splits(B, L, triton.cdiv(H, cfg["BLOCK_H"]), cfg["BLOCK_N"], num_sms(torch.device("cuda", 0)),
                           cfg.get("ctas_per_sm", 1))


def split_candidates(B: int, L: int, H: int, cfg: dict) -> list[int]:
    """Split counts tried per shape: the launcher's, half and double it."""
    base = default_splits(B, L, H, cfg)
    return sorted({max(1, base // 2), base, min(2 * base, max(1, L // 256))})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tune", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip", default="", help="comma list of sections to skip: check,precision,decode,extend")
    args = ap.parse_args()
    skip = set(args.skip.split(","))
    t0 = time.time()
    RES["env"] = {"torch": torch.__version__, "triton": triton.__version__, "gpu": torch.cuda.get_device_name()}
    print(RES["env"], flush=True)
    bw, fl = ceilings()
    steps = [("check", correctness), ("precision", precision), ("tune", tune if args.tune else None),
             ("decode", lambda: decode_sweep(bw, fl, args.quick)), ("extend", lambda: extend_sweep(fl))]
    for name, fn in steps:
        if fn is None or name in skip:
            continue
        try:
            fn()
        except Exception:  # noqa: BLE001 - keep the other sections' results
            traceback.print_exc()
            RES["checks"].append({"name": f"section {name} crashed", "ok": False})
        torch.cuda.empty_cache()
    out_dir = os.environ.get("OUT", "out")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "gpu_check.json"), "w") as f:
        json.dump(RES, f, indent=1, default=str)
    bad = [c for c in RES["checks"] if c.get("ok") is False]
    print(f"\n== summary ({time.time() - t0:.0f} s) == checks: {len(RES['checks']) - len(bad)} ok, {len(bad)} bad")
    for k, v in RES["precision"].items():
        print(f"precision {k}: {v:.3e}")
    print("H   B    L     S   ms      1-replay TB/s  TFLOP/s  %copy  floor/ms  again  δ/δ0   δ/norot pre/norot")
    for r in RES["decode"]:
        extra = ""
        if all(r.get(k) for k in ("ms_again", "ms_delta0", "ms_norot", "ms_prerope")):
            extra = f"  {r['ms_again'] / r['ms'] - 1:+.1%}  {r['ms'] / r['ms_delta0'] - 1:+.1%}  " \
                    f"{r['ms'] / r['ms_norot'] - 1:+.1%}  {r['ms_prerope'] / r['ms_norot'] - 1:+.1%}"
        floor = max(r["mem_floor_ms"], r["flop_floor_ms"])
        print(f"{r['H']:<3d} {r['B']:<4d} {r['L']:<5d} {r['S']:<3d} {r['ms']:7.3f} {r['ms_single_replay']:7.3f}  "
              f"{r['TBps']:5.2f} {r['TFLOPs']:7.0f}  {r['TBps'] * 1e12 / bw:5.0%}  {floor / r['ms']:6.0%}{extra}")
    for r in RES["extend"]:
        print(f"extend C={r['C']} T=8192 H=128: {r['ms']:.2f} ms {r['TFLOPs']:.0f} TFLOP/s "
              f"(δ=0: {r['ms_delta0']:.2f} ms, rotation compiled out: {r['ms_norot']:.2f} ms)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
