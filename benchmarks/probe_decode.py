"""Decode-kernel probes on the GPU: compile stats, timing method, fixed cost per step, tile/split sweeps.

Usage (device machine, repo root): ``PYTHONUNBUFFERED=1 PYTHONPATH=. python benchmarks/probe_decode.py
[--sections stats,method,sweep16,sweep128,fixed]``. Prints tables and writes probe_decode.json under $OUT.
This is the exploration script behind the decode defaults; benchmarks/gpu_check.py is the report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_mla as bm  # noqa: E402

from pic.kernels._mla import LAUNCHED  # noqa: E402
from pic.kernels.mla_decode import mla_decode  # noqa: E402

RES: dict = {}
BW = 4.2e12


def cfg(h, n, w, s):
    return {"BLOCK_H": h, "BLOCK_N": n, "num_warps": w, "num_stages": s}


CFG16 = [cfg(16, 16, 4, 4), cfg(16, 16, 4, 3), cfg(16, 32, 4, 2), cfg(16, 32, 4, 3), cfg(16, 32, 4, 4),
         cfg(16, 64, 4, 2), cfg(16, 64, 8, 2)]
CFG128 = [cfg(64, 64, 8, 2), cfg(64, 32, 8, 3), cfg(64, 32, 8, 2), cfg(64, 128, 8, 1), cfg(64, 64, 8, 1)]


def stats() -> None:
    print("compile stats (registers/thread, spills, shared bytes):", flush=True)
    out = []
    for H, cfgs in ((16, CFG16), (128, CFG128)):
        inp = bm.decode_inputs(2, 1024, H)
        for c in cfgs:
            for kw in ({}, {"rotate": False}):
                try:
                    mla_decode(*inp, config=c, max_seq_len=1024, **kw)
                    k = LAUNCHED["decode"]
                    row = {"H": H, "cfg": c, **kw, "regs": k.n_regs, "spills": k.n_spills,
                           "shared": k.metadata.shared}
                except Exception as e:  # noqa: BLE001
                    row = {"H": H, "cfg": c, **kw, "error": str(e).splitlines()[0][:120]}
                out.append(row)
                print("  ", row, flush=True)
    RES["stats"] = out



def method() -> None:
    print("timing method: single replay vs burst of 10", flush=True)
    out = []
    for H, B, L in ((16, 32, 8192), (16, 64, 8192), (16, 32, 32768), (128, 64, 8192)):
        inp = bm.decode_inputs(B, L, H)
        row = {"H": H, "B": B, "L": L}
        for burst in (1, 10):
            row[f"b{burst}"] = bm.time_decode(inp, burst=burst)
        row["empty_graph_b1"] = bm.graph_median(lambda: None)
        out.append(row)
        print("  ", {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
        del inp
        torch.cuda.empty_cache()
    RES["method"] = out


def sweep(H: int, shapes, cfgs, splits_for) -> list:
    out = []
    for B, L in shapes:
        inp = bm.decode_inputs(B, L, H)
        f = bm.decode_floor(B, L, H, BW, 790e12)
        rows = []
        for c in cfgs:
            for S in splits_for(B, L):
                try:
                    ms = bm.time_decode(inp, config=c, num_splits=S, burst=10, reps=15)
                except Exception as e:  # noqa: BLE001
                    print(f"   H={H} B={B} L={L} {c} S={S}: {type(e).__name__} {str(e).splitlines()[0][:80]}")
                    break
                rows.append({"H": H, "B": B, "L": L, "cfg": c, "S": S, "ms": ms,
                             "floor_ratio": max(f["mem_floor_ms"], f["flop_floor_ms"]) / ms,
                             "TBps": f["bytes"] / ms / 1e9, "TFLOPs": f["flop"] / ms / 1e9})
        rows.sort(key=lambda r: r["ms"])
        for r in rows[:4]:
            c = r["cfg"]
            print(f"  H={H} B={B:3d} L={L:5d} BH{c['BLOCK_H']} BN{c['BLOCK_N']} w{c['num_warps']} st{c['num_stages']} "
                  f"S={r['S']:2d}: {r['ms']:.4f} ms {r['TBps']:.2f} TB/s {r['TFLOPs']:.0f} TFLOP/s "
                  f"floor/ms {r['floor_ratio']:.0%}", flush=True)
        out += rows
        del inp
        torch.cuda.empty_cache()
    return out


def sweep16() -> None:
    print("16 heads: config x splits (burst 10)", flush=True)
    sp = {32: (2, 3, 4, 5, 6, 8, 12, 16), 64: (1, 2, 3, 4, 6, 8), 128: (1, 2, 3, 4)}
    RES["sweep16"] = sweep(16, [(32, 8192), (64, 8192), (128, 8192)], CFG16, lambda B, L: sp[B])
    RES["sweep16_long"] = sweep(16, [(32, 32768), (32, 65536)], CFG16[2:], lambda B, L: (4, 8, 16))


def sweep128() -> None:
    print("128 heads: config x splits (burst 10), then rotation variants", flush=True)
    RES["sweep128"] = sweep(128, [(64, 8192), (64, 32768)], CFG128, lambda B, L: (1, 2, 3, 4))
    out = []
    for L in (8192, 32768):
        inp = bm.decode_inputs(64, L, 128)
        best = min((r for r in RES["sweep128"] if r["L"] == L), key=lambda r: r["ms"])
        kw = {"config": best["cfg"], "num_splits": best["S"], "burst": 10, "reps": 15}
        row = {"L": L, "cfg": best["cfg"], "S": best["S"]}
        for name, extra in {"delta": {}, "delta0": {"delta_mode": "zero"}, "norot": {"rotate_on": False},
                            "nosplit": {"split_kr": False}, "again": {}}.items():
            row[name] = bm.time_decode(inp, **kw, **extra)
        out.append(row)
        print("  ", {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    RES["rot128"] = out


def fixed() -> None:
    print("16 heads B=32, S=8: time vs context (intercept = fixed cost per step)", flush=True)
    out = []
    for L in (2048, 4096, 8192, 16384):
        inp = bm.decode_inputs(32, L, 16)
        ms = bm.time_decode(inp, num_splits=8, burst=10)
        out.append({"L": L, "ms": ms})
        print(f"  L={L:5d}: {ms:.4f} ms", flush=True)
    RES["fixed"] = out



def warps16() -> None:
    print("128 heads with 16 warps per 64-head tile (4 warpgroups: N split four ways): B=64", flush=True)
    RES["warps16"] = sweep(128, [(64, 8192)], [cfg(64, 64, 16, 2), cfg(64, 32, 16, 3), cfg(64, 64, 8, 2)],
                           lambda B, L: (1, 2))


def heads32() -> None:
    print("128 heads with 32-head tiles (mma v2, 4 warps): B=64", flush=True)
    RES["heads32"] = sweep(128, [(64, 8192)], [cfg(32, 64, 4, 2), cfg(32, 32, 4, 3), cfg(32, 64, 8, 2)],
                           lambda B, L: (1, 2))




def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sections", default="stats,method,fixed,sweep16,sweep128,heads32")
    args = ap.parse_args()
    t0 = time.time()
    for name in args.sections.split(","):
        try:
            globals()[name]()
        except Exception:  # noqa: BLE001
            import traceback
            traceback.print_exc()
        print(f"[{name} done at {time.time() - t0:.0f} s]", flush=True)
    out_dir = os.environ.get("OUT", "out")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "probe_decode.json"), "w") as f:
        json.dump(RES, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
