"""Compile the ADA / dense decode kernels for the H200 (sm_90) on a machine without a GPU and report
registers, spills and shared memory (ptxas) and the SASS instruction count of the tile loop
(cuobjdump) — the kernel-cost check that needs no device time.

Usage (CPU, repo root, TRITON_INTERPRET unset): ``python benchmarks/ada_regs_offline.py [--tiers 0 8 4 3 2]
[--block-n 64] [--warps 4] [--stages 2] [--dump DIR]``. The launcher runs on a small CPU cache with a
capturing stand-in for the kernel (so the arguments, constexprs and specialization are exactly the
launcher's), then ``triton.compile`` targets ``GPUTarget("cuda", 90, 32)`` and ptxas (bundled with
Triton) assembles the cubin. ``--dump`` writes the TTGIR / PTX per kernel. The local Triton (3.9) is not
the GPU machine's (3.6): counts are indicative, not identical.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("ada_regs_offline: unset TRITON_INTERPRET (the real compiler is needed)")

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pic.kernels.ada import allocate  # noqa: E402
from pic.kernels.ada import kernel as K  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)


class _Capture:
    """Stands in for a JITFunction: ``[grid](*args, **kw)`` records the call instead of launching."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __getitem__(self, grid):
        def call(*args, **kw):
            self.calls.append((args, kw))
        return call


def capture(tier: int, cfg: dict, T: int = 2048, B: int = 2, H: int = 8, G: int = 4, D: int = 128) -> tuple:
    """The (args, kwargs) the launcher passes to the decode kernel for a one-tier cache (0 = dense), and
    those of the query-rotation kernel (None for dense)."""
    cache = allocate([T] * B, H, 64, D, torch.bfloat16, tier, "cpu")
    q = torch.zeros(B, H * G, D, dtype=torch.bfloat16)
    real, real_rot = K.ada_decode_kernel, getattr(K, "ada_rotate_q_kernel", None)   # (older kernels: none)
    K.ada_decode_kernel, K.ada_rotate_q_kernel = cap, cap_rot = _Capture(real), _Capture(real_rot)
    try:
        (K.dense_decode if tier == 0 else K.ada_decode)(q, cache, config=cfg)
    except Exception:  # noqa: BLE001 - the combine launch after the capture fails on the CPU
        pass
    finally:
        K.ada_decode_kernel, K.ada_rotate_q_kernel = real, real_rot
    return cap.calls[0], (cap_rot.calls or [None])[0]


def compile_offline(fn, args: tuple, kw: dict):
    """triton.compile for sm_90 with the JIT's own specialization of ``args``."""
    backend = make_backend(TARGET)
    opts = {k: kw[k] for k in ("num_warps", "num_stages", "maxnreg") if k in kw}
    call_kw = {k: v for k, v in kw.items() if k not in opts}
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, spec, _ = binder(*args, **call_kw)
    options, signature, constexprs, attrs = fn._pack_args(backend, opts, bound, spec, backend.parse_options(opts))
    src = ASTSource(fn, signature, constexprs, attrs)
    return triton.compile(src, target=TARGET, options=options.__dict__)


def ptxas_usage(ptx: str, arch: str = "sm_90a") -> dict:
    """Registers / spill stores / spill loads / stack from ``ptxas -v`` on the kernel's PTX."""
    import subprocess
    import tempfile

    from triton.backends.nvidia.compiler import get_ptxas
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "k.ptx")
        with open(p, "w") as f:
            f.write(ptx)
        r = subprocess.run([get_ptxas(90).path, "-v", f"--gpu-name={arch}", p, "-o", os.path.join(d, "k.cubin")],
                           capture_output=True, text=True)
    txt = r.stdout + r.stderr

    def num(pat):
        m = re.search(pat, txt)
        return int(m.group(1)) if m else None
    return {"regs": num(r"Used (\d+) registers"), "spill_stores": num(r"(\d+) bytes spill stores"),
            "spill_loads": num(r"(\d+) bytes spill loads"), "stack": num(r"(\d+) bytes stack frame"),
            "raw": txt.strip()}


def loop_instructions(cubin: bytes) -> int | None:
    """SASS instructions in the kernel's longest loop body (the tile loop), from cuobjdump -sass."""
    import subprocess
    import tempfile
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True).stdout
    ins = [(int(m.group(1), 16), m.group(2)) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    best = None
    for a, text in ins:
        m = re.search(r"BRA (0x[0-9a-f]+)", text)
        if m and int(m.group(1), 16) < a:
            n = sum(1 for b, _ in ins if int(m.group(1), 16) <= b <= a)
            best = max(best or 0, n)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiers", type=int, nargs="+", default=[0, 8, 4, 3, 2], help="0 = dense kernel")
    ap.add_argument("--block-n", type=int, default=64)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--maxnreg", type=int, help="register cap per thread (ptx .maxnreg; the kernel's config key)")
    ap.add_argument("--dump", help="write <kernel>.ttgir / .ptx here")
    ap.add_argument("--set", nargs="*", default=[], metavar="NAME=INT",
                    help="override kernel constexprs / options (experiments), e.g. Q_ROT=0")
    args = ap.parse_args()
    cfg = {"BLOCK_N": args.block_n, "num_warps": args.warps, "num_stages": args.stages, "ctas_per_sm": 2}
    if args.maxnreg:
        cfg["maxnreg"] = args.maxnreg
    print(f"triton {triton.__version__}, target sm_90, {cfg}")
    print(f"{'kernel':8s} {'regs':>5s} {'spill st':>9s} {'spill ld':>9s} {'shared':>7s} {'loop instr':>10s} "
          f"{'CTAs/SM':>7s} {'compile s':>9s}")
    jobs, rot = [], None
    for t in args.tiers:
        (a, kw), r = capture(t, cfg)
        rot = rot or r
        kw = {**kw, **{k: int(v) for k, v in (x.split("=", 1) for x in args.set)}}
        jobs.append(("dense" if t == 0 else f"ada-b{t}", K.ada_decode_kernel, a, kw))
    if rot is not None:
        jobs.append(("rotate-q", K.ada_rotate_q_kernel, *rot))
    for name, fn, a, kw in jobs:
        t0 = time.process_time()
        ck = compile_offline(fn, a, kw)
        secs = time.process_time() - t0
        u = ptxas_usage(ck.asm["ptx"])
        print(f"{name:8s} {u['regs']!s:>5s} {u['spill_stores']!s:>9s} {u['spill_loads']!s:>9s} "
              f"{ck.metadata.shared:>7d} {loop_instructions(ck.asm['cubin'])!s:>10s} "
              f"{K.resident_ctas(u['regs'] or 255, ck.metadata.shared, kw.get('num_warps', 4)):>7d} {secs:9.1f}")
        if args.dump:
            os.makedirs(args.dump, exist_ok=True)
            for ext in ("ttgir", "ptx"):
                with open(os.path.join(args.dump, f"{name}.{ext}"), "w") as f:
                    f.write(ck.asm[ext])
    return 0


if __name__ == "__main__":
    sys.exit(main())
