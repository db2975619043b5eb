"""Timing sweeps for the MLA kernels on a CUDA GPU (called by benchmarks/gpu_check.py).

Decode: CUDA-graph replay median (kernel + split combine; groups of 10 back-to-back replays by default) at batch × context × heads, against the floors
bytes / copy-bandwidth and FLOPs / matmul-rate; fused-rotation overhead (δ ≠ 0 vs δ = 0, same launch;
and vs the rotation compiled out); pre-RoPE cache; un-fused rotate pass; torch SDPA on the decompressed
form. Extend: 8K new tokens over 0/8K/32K cached, TFLOP/s.
Run: ``PYTHONPATH=. python benchmarks/gpu_check.py`` (this module has no CLI of its own).
"""

from __future__ import annotations

import statistics

import torch
import triton

from pic.kernels.mla_decode import mla_decode
from pic.kernels.mla_extend import mla_extend
from pic.kernels.paged_cache import delta_runs
from pic.kernels.rotate import rotate

D_C, D_R, PAGE = 512, 64, 64
ROW_BYTES = (D_C + D_R) * 2


def graph_median(fn, reps: int = 30, burst: int = 1) -> float:
    """Median milliseconds of one CUDA-graph replay of ``fn`` (warmed up, captured once).

    ``burst`` > 1 times that many back-to-back replays between two events and divides: the GPU then
    never waits for the host to submit the next replay (as when a model's layers run one after
    another), so the host's launch latency drops out of small timings.
    """
    fn()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(burst):
            g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / burst)
    return statistics.median(times)


def bench_median(fn, rep_ms: int = 400) -> float:
    """Median milliseconds via triton.testing.do_bench."""
    return triton.testing.do_bench(fn, warmup=50, rep=rep_ms, return_mode="median")


def span_deltas(B: int, nb: int, span_pages: int, g: torch.Generator) -> torch.Tensor:
    """δ table [B, nb] int32: one random non-zero δ in ±[1, 100000) per span of ``span_pages`` pages."""
    ns = -(-nb // span_pages)
    d = torch.randint(1, 100000, (B, ns), device="cuda", generator=g, dtype=torch.int32)
    d = d * (torch.randint(0, 2, (B, ns), device="cuda", generator=g, dtype=torch.int32) * 2 - 1)
    return d.repeat_interleave(span_pages, dim=1)[:, :nb].contiguous()


def decode_inputs(B: int, L: int, H: int, seed: int = 0, span_pages: int = 32):
    """Random bf16 decode inputs: cache with shuffled pages, block table, non-zero δ per 2K-token span."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    nb = L // PAGE
    cache = torch.empty(B * nb, PAGE, D_C + D_R, dtype=torch.bfloat16, device="cuda").normal_(generator=g)
    bt = torch.randperm(B * nb, device="cuda", generator=g).view(B, nb).to(torch.int32)
    delta = span_deltas(B, nb, span_pages, g)
    qn = torch.randn(B, H, D_C, device="cuda", generator=g).to(torch.bfloat16)
    qr = torch.randn(B, H, D_R, device="cuda", generator=g).to(torch.bfloat16)
    lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
    return qn, qr, cache, bt, lens, delta


def decode_floor(B: int, L: int, H: int, bw: float, flops: float) -> dict:
    """Bytes, FLOPs and the two floors (ms) of one decode step."""
    nbytes = B * L * ROW_BYTES + B * H * (D_C + D_R) * 2 + B * H * D_C * 2
    nflop = 2 * B * H * L * (D_C + D_R + D_C)
    return {"bytes": nbytes, "flop": nflop, "mem_floor_ms": nbytes / bw * 1e3, "flop_floor_ms": nflop / flops * 1e3}


def time_decode(inp, *, delta_mode: str = "nonzero", pre_rope: bool = False, rotate_on: bool = True,
                split_kr: bool = True, config: dict | None = None, num_splits: int | None = None,
                rot_side: str = "auto", burst: int = 10, reps: int = 30) -> float:
    """Graph-replay median ms of one decode step for the given variant."""
    qn, qr, cache, bt, lens, delta = inp
    L = bt.shape[1] * PAGE
    d = {"zero": torch.zeros_like(delta), "nonzero": delta,
         "page": span_deltas(delta.shape[0], delta.shape[1], 1, torch.Generator(device="cuda").manual_seed(9))}[delta_mode]
    out = torch.empty_like(qn)
    run_end = delta_runs(d)  # per-request metadata, built with the δ table (not per decode step)

    def fn():
        mla_decode(qn, qr, cache, bt, lens, d, pre_rope=pre_rope, rotate=rotate_on, split_kr=split_kr,
                   config=config, num_splits=num_splits, max_seq_len=L, out=out, rot_side=rot_side,
                   run_end=run_end)
    return graph_median(fn, reps=reps, burst=burst)


def time_rotate_pass(inp, frac: float = 0.5, burst: int = 10) -> float:
    """Median ms of the standalone in-place δ-rotation over ``frac`` of the pages (the un-fused extra pass)."""
    qn, qr, cache, bt, lens, delta = inp
    d = delta.clone()
    d[:, int(d.shape[1] * frac):] = 0
    L = bt.shape[1] * PAGE
    return graph_median(lambda: rotate(cache, bt, lens, d, max_seq_len=L), burst=burst)


def time_sdpa_decompressed(B: int, L: int, H: int, burst: int = 10) -> float | None:
    """Median ms of torch SDPA for one decode token on decompressed K [B,H,L,192], V [B,H,L,128]."""
    try:
        k = torch.randn(B, H, L, 192, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, H, L, 128, device="cuda", dtype=torch.bfloat16)
        q = torch.randn(B, H, 1, 192, device="cuda", dtype=torch.bfloat16)
        f = torch.nn.functional.scaled_dot_product_attention
        ms = graph_median(lambda: f(q, k, v), burst=burst)
        return ms
    except (RuntimeError, torch.OutOfMemoryError) as e:
        print(f"  sdpa B={B} L={L} H={H} failed: {str(e).splitlines()[0]}")
        return None


def extend_inputs(C: int, T: int, H: int, seed: int = 0):
    """One sequence: C cached + T new tokens (already in the cache), δ ≠ 0 on the cached pages."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    L = C + T
    nb = L // PAGE
    cache = torch.empty(nb, PAGE, D_C + D_R, dtype=torch.bfloat16, device="cuda").normal_(generator=g)
    bt = torch.randperm(nb, device="cuda", generator=g).view(1, nb).to(torch.int32)
    delta = torch.zeros(1, nb, dtype=torch.int32, device="cuda")
    delta[:, : C // PAGE] = span_deltas(1, C // PAGE, 32, g)
    qn = torch.randn(T, H, D_C, device="cuda", generator=g).to(torch.bfloat16)
    qr = torch.randn(T, H, D_R, device="cuda", generator=g).to(torch.bfloat16)
    lens = torch.tensor([L], dtype=torch.int32, device="cuda")
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
    return qn, qr, cache, bt, lens, cu, delta


def extend_flop(C: int, T: int, H: int) -> int:
    """Useful FLOPs of absorbed extend: pairs (query, visible key) × heads × 2·(576 + 512)."""
    return (T * C + T * (T + 1) // 2) * H * 2 * (D_C + D_R + D_C)


def time_extend(inp, *, delta_zero: bool = False, config: dict | None = None, rotate_on: bool = True,
                rot_side: str = "auto") -> float:
    """do_bench median ms of one extend call."""
    qn, qr, cache, bt, lens, cu, delta = inp
    d = torch.zeros_like(delta) if delta_zero else delta
    out = torch.empty_like(qn)
    return bench_median(lambda: mla_extend(qn, qr, cache, bt, lens, cu, d, max_new=qn.shape[0],
                                           config=config, rotate=rotate_on, out=out, rot_side=rot_side))
