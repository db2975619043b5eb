"""Device side of a forward: HostBatch -> torch Batch, timing (CUDA graphs / events), the GPU check."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from pic.kernels.executor.layout import HostBatch, as_decode
from pic.kernels.model.layers import Batch
from pic.kernels.model.spec import ExecSpec
from pic.kernels.paged_cache import delta_runs


class GpuUnavailable(RuntimeError):
    """No CUDA device, or no Triton GPU backend: `pic execute --gpu` cannot run here."""


def check_gpu() -> torch.device:
    """The CUDA device to run on, or GpuUnavailable with a one-line reason."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise GpuUnavailable("TRITON_INTERPRET=1 is set: Triton would run on the CPU interpreter, not the GPU")
    if not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None else f"torch {torch.__version__}"
        raise GpuUnavailable(f"no CUDA GPU visible ({build}); `pic execute --gpu` needs an NVIDIA GPU")
    try:
        from triton.runtime import driver

        backend = driver.active.get_current_target().backend
    except Exception as e:   # noqa: BLE001 - any failure here means "no usable Triton GPU backend"
        raise GpuUnavailable(f"no Triton GPU backend: {type(e).__name__}: {e}") from None
    if backend != "cuda":
        raise GpuUnavailable(f"Triton's active backend is {backend!r}; the kernels are tuned for CUDA")
    return torch.device("cuda", torch.cuda.current_device())


#: forwards of at most this many new tokens run attention through the split-KV decode kernel (as_decode)
DECODE_MAX_NEW = 32


def to_device(hb: HostBatch, spec: ExecSpec, device: torch.device, decode_max_new: int = DECODE_MAX_NEW) -> Batch:
    """Upload a HostBatch (δ runs computed on the device; copy rotations as fp32 cos/sin from float64 angles).
    A forward of at most ``decode_max_new`` new tokens goes through the decode kernel (``as_decode``)."""
    if hb.num_new <= decode_max_new:
        hb = as_decode(hb)
    def t(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dtype)

    bd = t(hb.block_delta, torch.int32)
    copies = None
    if hb.copy_src.shape[0]:
        ang = hb.copy_delta.astype(np.float64)[:, None] * spec.rope.inv_freq().numpy()[None, :]
        copies = (t(hb.copy_src, torch.int64), t(hb.copy_dst, torch.int64), t(np.cos(ang), torch.float32),
                  t(np.sin(ang), torch.float32))
    return Batch(token_ids=t(hb.token_ids, torch.int64), positions=t(hb.positions, torch.int32),
                 dst_rows=t(hb.dst_rows, torch.int64), block_table=t(hb.block_table, torch.int32), block_delta=bd,
                 run_end=delta_runs(bd), seq_lens=t(hb.seq_lens, torch.int32), cu_q=t(hb.cu_q, torch.int32),
                 max_new=hb.max_new, logit_rows=t(hb.logit_rows, torch.int64), copies=copies, decode=hb.decode,
                 max_seq_len=int(hb.seq_lens.max()))


class Runner:
    """One forward made repeatable: captured as a CUDA graph when ``graphs`` (replays are then timed), else
    run eagerly. ``time(repeats)`` returns per-run seconds (CUDA events on the GPU, perf_counter on the CPU).

    NOTE: each graph gets its own private memory pool, freed with the Runner. Runners are made and dropped one
    per forward; a pool handle shared across them is released when its last graph is destroyed, and the next
    capture into it trips torch's allocator assert (``use_count > 0``; seen on the H200 with torch 2.11)."""

    def __init__(self, fn: Callable[[], object], device: torch.device, graphs: bool,
                 out: object | None = None) -> None:
        self.fn, self.device, self.graph = fn, device, None
        self.out = fn() if out is None else out                  # eager run: compiles kernels, gives outputs
        if graphs and device.type == "cuda":
            side = torch.cuda.Stream(device)          # warm-up on a side stream before capture (cuBLAS workspaces)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream(device).wait_stream(side)
            torch.cuda.synchronize(device)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            self.graph = g

    def __call__(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.fn()

    def time(self, repeats: int, warmup: int = 1, eager: bool = False) -> list[float]:
        run = self.fn if eager or self.graph is None else self.graph.replay
        for _ in range(warmup):
            run()
        if self.device.type != "cuda":
            out = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                run()
                out.append(time.perf_counter() - t0)
            return out
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
        torch.cuda.synchronize(self.device)
        for a, b in ev:
            a.record()
            run()
            b.record()
        torch.cuda.synchronize(self.device)
        return [a.elapsed_time(b) / 1000.0 for a, b in ev]


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")
