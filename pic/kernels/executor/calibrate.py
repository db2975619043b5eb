"""``calibrate``: measured prefill/extend and decode step times of the built model over a grid, as the
calibration profile the cost model reads (``pic.engine.calibration``).

Prefill point (n, c): one sequence of n new tokens after c cached tokens (extend over the cache; c = 0 is a
plain prefill). Decode point (B, C): B sequences of C/B cached tokens each generate one token (split-KV
decode kernel). Rotated point (n, c): the same prefill with every cached page read through the δ-rotation
path (δ != 0), as a Plan's REUSE_ROTATED pages are. Each point is one forward through every built layer,
embedding to logits, timed as the median of CUDA-graph replays, and scaled to the model's full depth when
only ``--layers`` were built. The profile also records the attention layout (extend tile, SM count, the
executor's switch to the decode kernel) that ``pic.engine.attn_waves`` fits a Plan's attention makespan with.
Board power: the idle floor and a sustained prefill, metered on NVML's energy counter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from pic.engine.attn_waves import ExtendShape
from pic.engine.calibration import CalibrationProfile
from pic.kernels.energy import EnergyMeter
from pic.kernels.executor.device import DECODE_MAX_NEW, Runner, median, to_device
from pic.kernels.executor.layout import HostBatch
from pic.kernels.model import Model

QUICK_NEW = (1, 16, 64, 512, 2048)
QUICK_CACHED = (0, 4096)
QUICK_ROTATED = ((16, 4096), (64, 4096), (512, 4096))
ROTATION_DELTA = 197   # δ of the rotated points' cached pages (any non-zero shift; the cost does not depend on it)


@dataclass(frozen=True, slots=True)
class CalibrationGrid:
    """Grid of measured points (token counts; cached counts are rounded up to whole pages)."""

    # 32 / 33: both sides of the executor's switch to the decode kernel (DECODE_MAX_NEW)
    new_tokens: tuple[int, ...] = field(default=(1, 16, 32, 33, 64, 128, 256, 512, 1024, 2048, 4096, 8192))
    cached_tokens: tuple[int, ...] = field(default=(0, 2048, 8192, 16384))
    extra_prefill: tuple[tuple[int, int], ...] = field(default=((16384, 0),))   # (new, cached) beyond the grid
    rotated: tuple[tuple[int, int], ...] = field(default=tuple((n, c) for c in (2048, 8192, 16384)
                                                               for n in (16, 64, 256, 1024)))
    # (new, cached) prefills metered for board power (>= power_seconds each): power by forward size
    power: tuple[tuple[int, int], ...] = field(default=((1, 4096), (16, 4096), (64, 4096), (256, 4096), (1024, 4096),
                                                        (4096, 0), (8192, 0)))
    power_seconds: float = 1.0
    decode_seqs: tuple[int, ...] = field(default=(1, 8, 32, 64))
    decode_context: tuple[int, ...] = field(default=(1024, 4096))   # per sequence
    repeats: int = 5

    def __post_init__(self) -> None:
        for name in ("new_tokens", "decode_seqs", "decode_context"):
            if not getattr(self, name) or min(getattr(self, name)) < 1:
                raise ValueError(f"calibration grid: {name} needs values >= 1")
        if not self.cached_tokens or min(self.cached_tokens) < 0:
            raise ValueError("calibration grid: cached_tokens needs values >= 0")
        if any(n < 1 or c < 1 for n, c in self.rotated):
            raise ValueError("calibration grid: rotated points need new >= 1 and cached >= 1")
        if len(set(self.decode_context)) < 2:
            raise ValueError("calibration grid: decode_context needs >= 2 distinct values (a line per batch)")

    def prefill_points(self) -> list[tuple[int, int]]:
        """(new, cached) points: the grid, then the extra points."""
        pts = [(n, c) for c in self.cached_tokens for n in self.new_tokens]
        return pts + [p for p in self.extra_prefill if p not in pts]

    def max_pages(self, page: int) -> int:
        pre = max(-(-(c + n) // page) for n, c in self.prefill_points() + list(self.rotated) + list(self.power))
        dec = max(self.decode_seqs) * (-(-(max(self.decode_context) + 1) // page))
        return max(pre, dec)


def calibrate(model: Model, gpu: str, model_name: str, grid: CalibrationGrid | None = None, page: int = 64,
              meter: EnergyMeter | None = None, energy_seconds: float = 2.0,
              progress: Callable[[int, int, str], None] | None = None) -> tuple[CalibrationProfile, dict]:
    """Measure the grid; returns (profile, details) where details holds every point's samples."""
    grid = grid or CalibrationGrid()
    spec, dev = model.spec, model.device
    num_pages = grid.max_pages(page)
    cache = model.alloc_cache(num_pages, page)
    cache.normal_(0.0, 1.0)                          # any finite latents: times do not depend on values
    gen = np.random.default_rng(0)
    points = [("prefill", n, c) for n, c in grid.prefill_points()] + [("rotated", n, c) for n, c in grid.rotated] + \
             [("decode", b, ctx) for b in grid.decode_seqs for ctx in grid.decode_context]
    prefill, rotated, decode, details = [], [], [], []
    scale = spec.depth_scale
    busy_hb = None
    for k, (kind, x, y) in enumerate(points):
        if progress is not None:
            progress(k, len(points), f"{kind} {x} x {y}")
        hb = _decode_batch(x, y, page, spec.vocab_size, gen) if kind == "decode" else \
            _prefill_batch(x, y, page, spec.vocab_size, gen, ROTATION_DELTA if kind == "rotated" else 0)
        b = to_device(hb, spec, dev)
        run = Runner(lambda b=b: model.forward(b, cache), dev, graphs=dev.type == "cuda")
        times = run.time(grid.repeats, warmup=1)
        del run
        s = median(times) * scale
        details.append({"kind": kind, "x": x, "y": y, "seconds": s, "samples": [t * scale for t in times]})
        if kind == "prefill":
            prefill.append((x, y, s))
            if (x, y) == _busy_point(grid):
                busy_hb = hb
        elif kind == "rotated":
            rotated.append((x, y, s))
        else:
            decode.append((x, x * y, s))
    if progress is not None:
        progress(len(points), len(points), "power")
    idle_w, busy_w = _power(model, cache, busy_hb, meter, energy_seconds)
    power = []
    for n, c in grid.power if meter is not None else ():
        b = to_device(_prefill_batch(n, c, page, spec.vocab_size, gen), spec, dev)
        run = Runner(lambda b=b: model.forward(b, cache), dev, graphs=dev.type == "cuda")
        power.append((n, c, meter.measure(run, grid.power_seconds).watts))
        del run
    profile = CalibrationProfile(gpu=gpu, model=model_name, prefill=tuple(prefill), decode=tuple(decode),
                                 watts_busy=busy_w, watts_idle=idle_w, source="<calibrate>",
                                 prefill_rotated=tuple(rotated), extend=extend_shape(model), power=tuple(power))
    fit = profile.fit.to_dict() if profile.fit is not None else None
    return profile, {"points": details, "layers_built": spec.num_layers, "full_layers": spec.full_layers,
                     "page_size": page, "idle_watts": idle_w, "busy_watts": busy_w, "extend_fit": fit}


def extend_shape(model: Model) -> ExtendShape:
    """The attention layout facts of ``model`` on its device: extend tile, SM count, decode switch."""
    from pic.kernels.mla_extend.kernel import default_config

    tile = {**default_config(model.spec.num_heads), **(model.tile or {})}
    dev = model.device
    sms = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 1
    return ExtendShape(tokens_per_program=int(tile["BLOCK_T"]),
                       head_groups=-(-model.spec.num_heads // int(tile["BLOCK_HH"])), sm_count=int(sms),
                       decode_max_new=DECODE_MAX_NEW)


def _busy_point(grid: CalibrationGrid) -> tuple[int, int]:
    """The prefill point whose sustained power becomes ``watts_busy``: 1024 new over 8192 cached when the
    grid has it, else the largest grid point with at most 2048 new tokens."""
    pts = grid.prefill_points()
    if (1024, 8192) in pts:
        return 1024, 8192
    return max(pts, key=lambda p: (p[0] <= 2048, p[0], p[1]))


def _power(model: Model, cache: torch.Tensor, hb: HostBatch, meter: EnergyMeter | None,
           seconds: float) -> tuple[float, float]:
    if meter is None:
        from pic.engine.specs import gpu_from_name
        g = gpu_from_name("h200")
        return g.idle_watts, g.busy_watts
    idle = meter.idle_watts(1.0)
    b = to_device(hb, model.spec, model.device)
    run = Runner(lambda: model.forward(b, cache), model.device, graphs=model.device.type == "cuda")
    m = meter.measure(run, seconds)
    return idle, m.watts


def _prefill_batch(n: int, c: int, page: int, vocab: int, gen: np.random.Generator, delta: int = 0) -> HostBatch:
    """n new tokens after c cached (rounded up to whole pages); the cached pages are read with δ = ``delta``."""
    c = -(-c // page) * page
    total = c + n
    pages = np.arange(-(-total // page), dtype=np.int32)
    pos = np.arange(c, total)
    bd = np.zeros((1, pages.shape[0]), np.int32)
    bd[0, :c // page] = delta
    return HostBatch(token_ids=gen.integers(0, vocab, n).astype(np.int64), positions=pos.astype(np.int32),
                     dst_rows=pos.astype(np.int64), block_table=pages[None, :],
                     block_delta=bd, seq_lens=np.array([total], np.int32),
                     cu_q=np.array([0, n], np.int32), logit_rows=np.array([n - 1], np.int64))


def _decode_batch(b: int, ctx: int, page: int, vocab: int, gen: np.random.Generator) -> HostBatch:
    per = -(-(ctx + 1) // page)
    bt = np.arange(b * per, dtype=np.int32).reshape(b, per)
    dst = bt[:, ctx // page].astype(np.int64) * page + ctx % page
    return HostBatch(token_ids=gen.integers(0, vocab, b).astype(np.int64), positions=np.full(b, ctx, np.int32),
                     dst_rows=dst, block_table=bt, block_delta=np.zeros_like(bt),
                     seq_lens=np.full(b, ctx + 1, np.int32), cu_q=np.arange(b + 1, dtype=np.int32),
                     logit_rows=np.arange(b, dtype=np.int64), decode=True)
