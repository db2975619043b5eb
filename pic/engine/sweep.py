"""Sweeps: the cartesian product trace x model x capacity of replays, fanned out to processes or Ray.

Each cell is one :func:`engine.replay.replay` (every policy of the sweep inside it, as ``pic replay``
does) written by :func:`engine.replay.write_run` as a normal run dir
``SWEEP_DIR/<trace-stem>/<model>/cap-<size>/``. ``SWEEP_DIR/sweep.json`` lists the cells and their
status and is rewritten (atomically) as cells finish. Cells whose run dir already has a
``summary.json`` are skipped unless ``force``. Everything is validated before any work starts.
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pic.engine.config import ReplayConfig
from pic.engine.replay import _json, check_config, read_trace_file, replay, write_run
from pic.engine.specs import model_from_name
from pic.traces.outputs import atomic_path, check_output, claim_dir, is_parquet, is_stream
from pic.traces.schema import SCHEMA_KEY, Trace

SWEEP_VERSION = 1
BACKENDS = ("local", "ray")
#: done = replayed now; skipped = its run dir already had summary.json; failed = the replay raised
STATUSES = ("pending", "done", "skipped", "failed")
RAY_HINT = "the ray backend needs Ray: pip install 'pic[dist]'"
#: attempts per cell on the ray backend (a failed or lost task is submitted once more)
RAY_TRIES = 2


def _h(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True, slots=True)
class SweepConfig:
    """A sweep: every (trace, model, capacity) cell replays ``replay.policies`` with ``replay``'s settings."""

    traces: tuple[str, ...] = field(metadata=_h("trace files (canonical .parquet or raw logs)"))
    models: tuple[str, ...] = field(default=("deepseek-v2-lite",), metadata=_h("model presets or config.json"))
    capacities: tuple[float, ...] = field(default=(math.inf,), metadata=_h("cache bytes per replica (inf ok)"))
    replay: ReplayConfig = field(default_factory=ReplayConfig, metadata=_h(
        "settings shared by every cell; its model and capacity_bytes are replaced per cell"))
    num_jobs: int | None = field(default=None, metadata=_h("local worker processes (None: os.cpu_count())"))
    backend: str = field(default="local", metadata=_h(f"where cells run: {', '.join(BACKENDS)}"))
    address: str | None = field(default=None, metadata=_h("Ray cluster address (ray backend; None: local Ray)"))
    force: bool = field(default=False, metadata=_h(
        "redo cells whose run dir already has summary.json; write into folders pic did not create"))

    def __post_init__(self) -> None:
        for name in ("traces", "models", "capacities"):
            values = getattr(self, name)
            if not values:
                raise ValueError(f"{name}: at least one is needed")
            if len(set(values)) != len(values):
                raise ValueError(f"{name}: duplicate value in {', '.join(map(str, values))}")
        if any(not c > 0 for c in self.capacities):
            raise ValueError(f"capacities: must be > 0, got {', '.join(map(str, self.capacities))}")
        if self.num_jobs is not None and self.num_jobs < 1:
            raise ValueError(f"jobs: must be >= 1, got {self.num_jobs}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: unknown {self.backend!r}; known: {', '.join(BACKENDS)}")
        if self.address is not None and self.backend != "ray":
            raise ValueError("address: only meaningful with the ray backend")


@dataclass(frozen=True, slots=True)
class Cell:
    """One replay of the sweep; ``run_dir`` is relative to the sweep dir."""

    trace: str
    model: str
    capacity_bytes: float
    run_dir: str

    def config(self, base: ReplayConfig) -> ReplayConfig:
        """``base`` with this cell's model and capacity."""
        return dataclasses.replace(base, model=self.model, capacity_bytes=self.capacity_bytes)


@dataclass(frozen=True, slots=True)
class CellResult:
    """What happened to a cell: status (one of STATUSES), error message when failed, seconds spent."""

    cell: Cell
    status: str
    error: str | None = None
    wall_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class SweepResult:
    """Every cell's outcome in plan order (trace, model, capacity)."""

    out_dir: Path
    cells: tuple[CellResult, ...]
    wall_seconds: float

    def count(self, status: str) -> int:
        """Number of cells with ``status``."""
        return sum(r.status == status for r in self.cells)


# ---- Public API -----------------------------------------------------------------------------------

def capacity_label(capacity_bytes: float) -> str:
    """Folder-safe size: ``inf``, ``4GiB``, ``512MiB``, ``1500B`` (largest binary unit that divides)."""
    if math.isinf(capacity_bytes):
        return "inf"
    for unit, mult in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if capacity_bytes >= mult and capacity_bytes % mult == 0:
            return f"{int(capacity_bytes // mult)}{unit}"
    return f"{capacity_bytes:.0f}B" if capacity_bytes == int(capacity_bytes) else f"{capacity_bytes:g}B"


def plan_cells(config: SweepConfig) -> list[Cell]:
    """Cells in (trace, model, capacity) order; raises when two traces/models/capacities map to one folder."""
    stems = [_slug(_stem(Path(t))) for t in config.traces]
    models = [_slug(model_from_name(m).name) for m in config.models]
    caps = [f"cap-{capacity_label(c)}" for c in config.capacities]
    for what, given, names in (("traces", config.traces, stems), ("models", config.models, models),
                               ("capacities", config.capacities, caps)):
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            same = [str(g) for g, n in zip(given, names, strict=True) if n == dup]
            raise ValueError(f"{what}: {' and '.join(same)} would share the folder {dup!r}")
    return [Cell(t, m, c, f"{s}/{ms}/{cl}")
            for t, s in zip(config.traces, stems, strict=True)
            for m, ms in zip(config.models, models, strict=True)
            for c, cl in zip(config.capacities, caps, strict=True)]


def check_sweep(config: SweepConfig, out_dir: str | os.PathLike) -> list[CellResult]:
    """Validate everything before any work: traces, every cell's ReplayConfig, existing run dirs.

    Returns the cells with status ``pending`` (to run) or ``skipped`` (run dir complete, same config).
    """
    out_dir = Path(out_dir)
    check_output(out_dir, inputs=[*config.traces, *config.models], force=config.force, kind="sweep-dir",
                 option="--output")
    for t in config.traces:
        _check_trace(Path(t))
    cells = plan_cells(config)
    checked: set[tuple[str, float]] = set()
    out = []
    for cell in cells:
        cfg = cell.config(config.replay)
        if (cell.model, cell.capacity_bytes) not in checked:
            try:
                check_config(cfg)
            except ValueError as e:
                raise ValueError(f"model {cell.model}, capacity {capacity_label(cell.capacity_bytes)}: {e}") from None
            checked.add((cell.model, cell.capacity_bytes))
        run_dir = out_dir / cell.run_dir
        check_output(run_dir, inputs=[*config.traces, *config.models], force=config.force, kind="run-dir",
                     option="cell")
        if config.force or not (run_dir / "summary.json").is_file():
            out.append(CellResult(cell, "pending"))
            continue
        _check_same_config(run_dir, cfg)
        out.append(CellResult(cell, "skipped"))
    if config.backend == "ray":
        _import_ray()
    return out


def run_sweep(config: SweepConfig, out_dir: str | os.PathLike,
              progress: Callable[[CellResult, int, int], None] | None = None) -> SweepResult:
    """Run every pending cell; ``progress(result, num_finished, num_cells)`` after each (skipped ones first).

    A cell that raises is recorded as ``failed`` (its message in sweep.json) and the others go on.
    """
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    results = check_sweep(config, out_dir)
    index = {r.cell: i for i, r in enumerate(results)}
    finished = 0

    def record(res: CellResult) -> None:
        nonlocal finished
        results[index[res.cell]] = res
        finished += 1
        if res.status != "skipped":
            write_sweep_json(config, out_dir, results)
        if progress is not None:
            progress(res, finished, len(results))

    claim_dir(out_dir, "sweep-dir", ["sweep.json"])
    write_sweep_json(config, out_dir, results)
    for r in [r for r in results if r.status == "skipped"]:
        record(r)
    todo = [r.cell for r in results if r.status == "pending"]
    try:
        if todo and config.backend == "ray":
            _run_ray(config, out_dir, todo, record)
        elif todo:
            _run_local(config, out_dir, todo, record)
    finally:
        write_sweep_json(config, out_dir, results)
    return SweepResult(out_dir, tuple(results), time.perf_counter() - t0)


def run_cell(cell: Cell, base: ReplayConfig, out_dir: str, force: bool = False) -> CellResult:
    """Replay one cell and write its run dir (what a local worker runs); errors become a failed result."""
    t0 = time.perf_counter()
    try:
        write_run(replay(load_trace(cell.trace), cell.config(base)), Path(out_dir) / cell.run_dir, force=force)
    except Exception as e:  # noqa: BLE001 - any failure is recorded, the sweep goes on
        return CellResult(cell, "failed", f"{type(e).__name__}: {e}", time.perf_counter() - t0)
    return CellResult(cell, "done", None, time.perf_counter() - t0)


def load_trace(path: str) -> Trace:
    """Read a canonical ``.parquet`` trace, or any raw log the ingest readers accept (cached per process)."""
    if path not in _TRACES:
        _TRACES.clear()   # cells come in trace order: keep one trace per process
        _TRACES[path] = read_trace_file(path)
    return _TRACES[path]


def write_sweep_json(config: SweepConfig, out_dir: Path, results: list[CellResult]) -> Path:
    """Write SWEEP_DIR/sweep.json: the sweep's settings and one entry per cell (atomic)."""
    base = config.replay.to_dict()
    for k in ("model", "capacity_bytes"):
        base.pop(k)
    doc = {"version": SWEEP_VERSION, "traces": list(config.traces), "models": list(config.models),
           "capacities": [None if math.isinf(c) else c for c in config.capacities],
           "policies": list(config.replay.policies), "replay": base, "backend": config.backend,
           "counts": {s: sum(r.status == s for r in results) for s in STATUSES},
           "cells": [{"trace": r.cell.trace, "model": r.cell.model,
                      "capacity_bytes": None if math.isinf(r.cell.capacity_bytes) else r.cell.capacity_bytes,
                      "run_dir": r.cell.run_dir, "status": r.status, "error": r.error,
                      "wall_seconds": round(r.wall_seconds, 3)} for r in results]}
    with atomic_path(out_dir / "sweep.json") as tmp:
        tmp.write_text(json.dumps(doc, indent=2, default=_json) + "\n")
    return out_dir / "sweep.json"


def hit_rate_grid(result: SweepResult) -> list[dict[str, Any]]:
    """One row per (cell with a run dir, policy): trace, model, capacity_bytes, policy, token/prefix hit rate."""
    rows = []
    for r in result.cells:
        path = result.out_dir / r.cell.run_dir / "summary.json"
        if r.status not in ("done", "skipped") or not path.is_file():
            continue
        for policy, s in json.loads(path.read_text())["policies"].items():
            rows.append({"trace": r.cell.trace, "model": r.cell.model, "capacity_bytes": r.cell.capacity_bytes,
                         "policy": policy, "token_hit_rate": s["token_hit_rate"],
                         "prefix_hit_rate": s["prefix_hit_rate"]})
    return rows


# ---- Internal helpers -----------------------------------------------------------------------------
_TRACES: dict[str, Trace] = {}


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".zst", ".bz2", ".xz"):
        name = name.removesuffix(suffix)
    return name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-.") or "x"


def _check_trace(path: Path) -> None:
    if not path.exists():
        raise ValueError(f"{path}: no such trace file")
    if is_stream(path):
        raise ValueError(f"{path}: is a pipe, not a file: a sweep reads each trace in several workers")
    if path.suffix.lower() == ".parquet" or is_parquet(path):
        try:
            meta = pq.read_schema(path).metadata or {}
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types
            raise ValueError(f"{path}: not a Parquet file ({type(e).__name__})") from None
        if SCHEMA_KEY not in meta:
            raise ValueError(f"{path}: metadata: not a pic trace (no pic.schema_version)")


def _check_same_config(run_dir: Path, cfg: ReplayConfig) -> None:
    """A complete run dir is reused only if it replayed exactly this cell's config."""
    try:
        old = json.loads((run_dir / "config.json").read_text(encoding="utf-8")).get("replay")
    except (OSError, ValueError, RecursionError, AttributeError):
        old = None
    want = json.loads(json.dumps(cfg.to_dict(), default=_json))
    if old != want:
        diff = sorted(k for k in want if not isinstance(old, dict) or old.get(k) != want[k]) or ["config.json"]
        raise ValueError(f"{run_dir}: holds a run with other settings ({', '.join(diff)}); "
                         "pass --force to redo it, or write the sweep elsewhere")


def _run_local(config: SweepConfig, out_dir: Path, todo: list[Cell], record: Callable) -> None:
    num_jobs = min(config.num_jobs or os.cpu_count() or 1, len(todo))
    if num_jobs == 1:
        for cell in todo:
            record(run_cell(cell, config.replay, str(out_dir), config.force))
        return
    # spawn, not fork: polars' thread pool does not survive a fork
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(num_jobs, mp_context=ctx) as pool:
        futures = {pool.submit(run_cell, cell, config.replay, str(out_dir), config.force): cell for cell in todo}
        try:
            for fut in as_completed(futures):
                try:
                    res = fut.result()
                except Exception as e:  # noqa: BLE001 - a worker died (killed, out of memory)
                    res = CellResult(futures[fut], "failed", f"{type(e).__name__}: {e}")
                record(res)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ValueError(RAY_HINT) from None
    return ray


def _ray_cell(trace: Trace, cell: Cell, base: ReplayConfig) -> tuple[Any, float]:
    t0 = time.perf_counter()
    return replay(trace, cell.config(base)), time.perf_counter() - t0


def ray_init_args(config: SweepConfig) -> dict[str, Any]:
    """``ray.init`` keywords for a sweep: the cluster at ``address``, else a local Ray of ``num_jobs`` CPUs
    (default: all) without the dashboard, whose workers import the same ``pic`` as this process."""
    if config.address:
        return {"address": config.address}
    root = str(Path(__file__).resolve().parents[2])     # the folder holding this pic package
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return {"num_cpus": config.num_jobs or os.cpu_count(), "include_dashboard": False,
            "logging_level": "warning", "runtime_env": {"env_vars": {"PYTHONPATH": path}}}


def _ray_error(e: BaseException) -> str:
    """``Type: message`` of the task's own exception (Ray wraps it with the remote traceback)."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        e = cause
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def _run_ray(config: SweepConfig, out_dir: Path, todo: list[Cell], record: Callable) -> None:
    """Traces go through Ray's object store and results come back here, so workers need no shared disk.

    A Ray already started in this process (``ray.init`` by the caller) is used as it is and left running;
    otherwise one is started from :func:`ray_init_args` and shut down at the end. Each finished cell is
    written (run dir, then sweep.json) as soon as it comes back, so an interrupted sweep keeps every
    finished cell. A cell whose task fails (it raised, or its worker died) is submitted once more; only a
    second failure is recorded as ``failed``, with ``(after 2 tries)``. Ray's own retries are off
    (``max_retries=0``) so that a cell runs at most ``RAY_TRIES`` times."""
    ray = _import_ray()
    owned = not ray.is_initialized()
    handlers = _signal_handlers()
    if owned:
        ray.init(**ray_init_args(config))
    pending: dict[Any, Cell] = {}
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_ray_cell)
        refs = {t: ray.put(load_trace(t)) for t in dict.fromkeys(c.trace for c in todo)}
        pending = {remote.remote(refs[c.trace], c, config.replay): c for c in todo}
        tries = dict.fromkeys(todo, 1)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                cell = pending.pop(ref)
                t0 = time.perf_counter()
                try:
                    result, wall = ray.get(ref)
                    write_run(result, out_dir / cell.run_dir, force=config.force)
                except Exception as e:  # noqa: BLE001 - retried once, then recorded; the sweep goes on
                    if tries[cell] < RAY_TRIES:
                        tries[cell] += 1
                        pending[remote.remote(refs[cell.trace], cell, config.replay)] = cell
                        continue
                    record(CellResult(cell, "failed", f"{_ray_error(e)} (after {tries[cell]} tries)"))
                    continue
                record(CellResult(cell, "done", None, wall + time.perf_counter() - t0))
    finally:
        if owned:
            ray.shutdown()
            _restore_signal_handlers(handlers)     # (ray.init installs its own SIGTERM handler)
        else:   # interrupted: do not leave this sweep's tasks running in the caller's Ray
            for ref in pending:
                ray.cancel(ref, force=True)


def _signal_handlers() -> dict:
    """SIGINT/SIGTERM handlers now (empty off the main thread, where they cannot be set)."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}


def _restore_signal_handlers(handlers: dict) -> None:
    import signal
    for s, h in handlers.items():
        if h is not None:
            signal.signal(s, h)
