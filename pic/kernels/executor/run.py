"""``Executor``: replay a PlanLog's Plans on real layers over a real paged latent cache, and measure.

For each executed request (log order): the providers its reused spans read from are made resident first
(an untimed full prefill of each provider that was not executed itself — "the cache filled by earlier
requests"); then its full-prefill baseline runs into its own pages (timed; those pages then serve later
requests as their provider KV); then its Plan runs (timed): reused pages read in place with their δ, partial
pages copied+rotated, RECOMPUTE spans through the layers. Outputs of the Plan are compared with the baseline
(final hidden state, top-1 token) and the reused KV with the request's own full-prefill KV, layer by layer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pic.engine.planlog import PlanLog, Source
from pic.kernels.energy import EnergyMeter
from pic.kernels.executor.accounting import forward_bytes, issued_bytes
from pic.kernels.executor.device import Runner, median, to_device
from pic.kernels.executor.layout import PagePool, full_layout, owned_rows_needed, plan_layout
from pic.kernels.model import Model


@dataclass(frozen=True, slots=True)
class ExecConfig:
    """How requests are executed and measured."""

    page_size: int = 64          # tokens per cache page (a multiple of the kernel tile)
    repeats: int = 5             # timed runs per forward (median reported)
    warmup: int = 1              # untimed runs before timing
    graphs: bool = True          # time CUDA-graph replays (no host launch overhead); eager otherwise
    eager: bool = False          # also time eager runs (host launch overhead included)
    energy_seconds: float = 1.0  # meter each forward repeated >= this long (0: no energy)
    memory_fraction: float = 0.9 # of free GPU memory the cache may take (it takes only what it needs)
    deviation: bool = True       # compare Plan vs full prefill outputs and KV
    decode_max_new: int = 32     # forwards of <= this many new tokens use the split-KV decode kernel
    timing: bool = True          # False: run each forward once (outputs, deviation, bytes), no timing

    def __post_init__(self) -> None:
        if self.page_size < 16 or self.page_size & (self.page_size - 1):
            raise ValueError(f"page_size: must be a power of two >= 16, got {self.page_size}")
        if self.repeats < 1 or self.warmup < 0 or self.energy_seconds < 0:
            raise ValueError("repeats must be >= 1, warmup and energy_seconds >= 0")


class Executor:
    """Executes Plans of ``log`` with ``model``; ``meter`` meters energy (None: no energy columns)."""

    def __init__(self, model: Model, log: PlanLog, config: ExecConfig | None = None,
                 meter: EnergyMeter | None = None) -> None:
        self.model, self.log = model, log
        self.cfg = config or ExecConfig()
        self.meter = meter if self.cfg.energy_seconds > 0 else None
        self.device = model.device
        self.spec = model.spec
        self.own: dict[int, np.ndarray] = {}
        self.num_fills = 0
        self.pool: PagePool | None = None
        self.cache: torch.Tensor | None = None

    # ---- Public API -------------------------------------------------------------------------------
    def plan_pages(self, indices: list[int]) -> tuple[dict[int, list[Source]], int]:
        """Sources of each executed request and the cache pages the whole run needs (own + scratch)."""
        page = self.cfg.page_size
        sources = {i: self.log.resolve_sources(i) for i in indices}
        resident = set(indices) | {s.provider for srcs in sources.values() for s in srcs}
        pages = sum(-(-self.log.requests[j].num_tokens // page) for j in resident)
        scratch = max(-(-owned_rows_needed(self.log.requests[i].plan, sources[i], page) // page) for i in indices)
        return sources, pages + scratch

    def run(self, indices: list[int], progress: Callable[[int, int, str], None] | None = None) -> list[dict[str, Any]]:
        """Execute the log requests ``indices`` (in order) and return one measurement row per request."""
        if not indices:
            return []
        sources, need = self.plan_pages(indices)
        self._alloc_cache(need)
        rows = []
        for k, i in enumerate(indices):
            if progress is not None:
                progress(k, len(indices), f"request {self.log.requests[i].request_id}")
            rows.append(self._execute(i, sources[i]))
        if progress is not None:
            progress(len(indices), len(indices), "done")
        return rows

    def release(self) -> None:
        """Drop the cache (GPU memory back) and the resident-request table."""
        self.cache, self.pool, self.own = None, None, {}
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ---- Internal helpers -------------------------------------------------------------------------
    def _alloc_cache(self, pages: int) -> None:
        per_page = self.spec.num_layers * self.cfg.page_size * self.spec.row * self.model.w["embed"].element_size()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            free, _ = torch.cuda.mem_get_info(self.device)
            room = int(free * self.cfg.memory_fraction) - 4 * 2**30   # activations + graph pools
            if pages * per_page > room:
                raise MemoryError(f"the run needs {pages * per_page / 2**30:.1f} GiB of latent cache, "
                                  f"{max(room, 0) / 2**30:.1f} GiB are free (fewer --requests, --max-tokens, or --layers)")
        self.cache = self.model.alloc_cache(pages, self.cfg.page_size)
        self.pool = PagePool(pages)
        self.own = {}

    def _forward(self, hb: Any) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
        b = to_device(hb, self.spec, self.device, self.cfg.decode_max_new)
        return lambda: self.model.forward(b, self.cache)

    def _ensure_kv(self, j: int) -> None:
        """Provider j's full-prefill KV resident in its own pages (untimed fill)."""
        if j in self.own:
            return
        r = self.log.requests[j]
        pages = self.pool.alloc(-(-r.num_tokens // self.cfg.page_size))
        self._forward(full_layout(r.tokens, pages, self.cfg.page_size, self.spec.vocab_size))()
        self.own[j] = pages
        self.num_fills += 1

    def _measure(self, fn: Callable, hb: Any) -> dict[str, Any]:
        self.model.touched = [] if self.spec.num_experts else None
        out = fn()
        touched, self.model.touched = self.model.touched, None
        cfg = self.cfg
        if not cfg.timing:
            return {"out": out, "times": [math.nan], "bytes": self._bytes(hb, touched)}
        run = Runner(fn, self.device, cfg.graphs, out=tuple(t.clone() for t in out))
        m: dict[str, Any] = {"out": run.out, "times": run.time(cfg.repeats, cfg.warmup)}
        if cfg.eager:
            m["eager"] = run.time(cfg.repeats, 0, eager=True)
        if self.meter is not None:
            m["energy"] = self.meter.measure(run, cfg.energy_seconds)
        m["bytes"] = self._bytes(hb, touched)
        del run
        return m

    def _bytes(self, hb: Any, touched: list[int] | None) -> dict[str, float]:
        tile = self.model.tile or {}
        out = forward_bytes(self.spec, hb, touched, block_t=tile.get("BLOCK_T", 2),
                            block_hh=tile.get("BLOCK_HH", 32), block_n=tile.get("BLOCK_N", 64))
        out["access_bytes"] = issued_bytes(self.spec, hb, self.model.dtype, self.model.tile, self.cfg.decode_max_new)
        return out

    def _execute(self, i: int, srcs: list[Source]) -> dict[str, Any]:
        r, page, V = self.log.requests[i], self.cfg.page_size, self.spec.vocab_size
        for p in sorted({s.provider for s in srcs}):
            self._ensure_kv(p)
        fresh = i not in self.own
        pages = self.own[i] if not fresh else self.pool.alloc(-(-r.num_tokens // page))
        hb_full = full_layout(r.tokens, pages, page, V)
        full = self._measure(self._forward(hb_full), hb_full)
        self.own[i] = pages
        scratch = self.pool.alloc(max(1, -(-owned_rows_needed(r.plan, srcs, page) // page)))
        hb_plan = plan_layout(r.tokens, r.plan, srcs, self.own, scratch, page, V)
        plan = self._measure(self._forward(hb_plan), hb_plan)
        self.pool.free(scratch)
        scale = self.spec.depth_scale
        row: dict[str, Any] = {
            "request_id": r.request_id, "order": r.order, "prompt_tokens": r.num_tokens,
            "reused_tokens": r.plan.num_reused, "rotated_tokens": r.plan.num_rotated,
            "recomputed_tokens": r.plan.num_recomputed, "executed_tokens": hb_plan.num_new,
            "inplace_tokens": hb_plan.num_inplace_rows, "copied_tokens": int(hb_plan.copy_src.shape[0]),
            "sequences": hb_plan.num_seqs,
            "ttft_s": median(plan["times"]) * scale, "ttft_full_s": median(full["times"]) * scale,
            "ttft_min_s": min(plan["times"]) * scale, "ttft_full_min_s": min(full["times"]) * scale,
            "hbm_bytes": plan["bytes"]["hbm_bytes"], "hbm_bytes_full": full["bytes"]["hbm_bytes"],
            "access_bytes": plan["bytes"]["access_bytes"], "access_bytes_full": full["bytes"]["access_bytes"],
            "predicted_ttft_s": r.predicted_s, "predicted_full_s": r.predicted_full_s, "roofline_ttft_s": r.roofline_s,
            "predicted_joules": r.predicted_joules, "predicted_full_joules": r.predicted_full_joules,
            "sim_ttft_s": r.sim_ttft_s,
            "predicted_hbm_bytes": r.predicted_hbm_bytes, "predicted_full_hbm_bytes": r.predicted_full_hbm_bytes,
        }
        if self.cfg.eager:
            row["ttft_eager_s"] = median(plan["eager"]) * scale
            row["ttft_full_eager_s"] = median(full["eager"]) * scale
        for key, m in (("", plan), ("_full", full)):
            e = m.get("energy")
            row["joules" + key] = e.per_call * scale if e else math.nan
            row["joules_dyn" + key] = e.dynamic_per_call * scale if e else math.nan
            row["watts" + key] = e.watts if e else math.nan
        if self.cfg.deviation:
            row.update(self._deviation(i, srcs, plan["out"], full["out"]))
        return row

    def _deviation(self, i: int, srcs: list[Source], plan_out: tuple, full_out: tuple) -> dict[str, Any]:
        """Plan vs full prefill: final hidden (rel. L2), top-1 token, and reused KV vs own KV per layer."""
        (hp, lp), (hf, lf) = plan_out, full_out
        out = {"out_dev": _rel(hp.float(), hf.float()), "top1_match": bool(lp.argmax(-1).eq(lf.argmax(-1)).all())}
        reused = [s for s in srcs if s.end > s.start]
        if not reused:
            return {**out, "kv_dev": 0.0, "kv_dev_first": 0.0, "kv_dev_last": 0.0}
        page, spec = self.cfg.page_size, self.spec
        tgt = np.concatenate([np.arange(s.start, s.end) for s in reused])
        src_pos = np.concatenate([np.arange(s.provider_pos, s.provider_pos + s.end - s.start) for s in reused])
        prov = np.concatenate([np.full(s.end - s.start, s.provider) for s in reused])
        delta = tgt - src_pos
        src_rows = np.empty(tgt.shape[0], np.int64)
        for p in np.unique(prov):
            m = prov == p
            pp = self.own[int(p)]
            src_rows[m] = pp[src_pos[m] // page].astype(np.int64) * page + src_pos[m] % page
        own = self.own[i]
        dst_rows = own[tgt // page].astype(np.int64) * page + tgt % page
        flat = self.cache.view(self.cache.shape[0], -1, spec.row)
        dev = self.device
        a = flat.index_select(1, torch.from_numpy(src_rows).to(dev)).float()
        b = flat.index_select(1, torch.from_numpy(dst_rows).to(dev)).float()
        ang = torch.from_numpy(delta[:, None] * spec.rope.inv_freq().numpy()[None, :]).to(dev)
        cos, sin = ang.cos().float(), ang.sin().float()
        k = a[..., spec.kv_lora_rank:]
        if spec.rope.layout == "interleaved":
            x, y = k[..., 0::2], k[..., 1::2]
            k_rot = torch.stack([x * cos - y * sin, x * sin + y * cos], dim=-1).flatten(-2)
        else:
            x, y = k.chunk(2, dim=-1)
            k_rot = torch.cat([x * cos - y * sin, x * sin + y * cos], dim=-1)
        a = torch.cat([a[..., :spec.kv_lora_rank], k_rot], dim=-1)
        per_layer = ((a - b).pow(2).sum((1, 2)) / b.pow(2).sum((1, 2)).clamp_min(1e-30)).sqrt().cpu().tolist()
        return {**out, "kv_dev": _rel(a, b), "kv_dev_first": per_layer[0], "kv_dev_last": per_layer[-1],
                "kv_dev_layers": per_layer}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))

