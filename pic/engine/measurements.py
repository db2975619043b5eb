"""``measurements.parquet``: what ``pic execute --gpu`` measured per request, beside what the replay predicted.

One row per executed request (columns in :data:`COLUMNS`, units in the names: seconds, bytes, joules).
``summarize`` reduces the rows to the headline figures (TTFT ratio to full prefill, energy saved per hit,
prediction error of the cost model). Written and read with pyarrow only, so the GPU machine needs no polars.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

FILE = "measurements.parquet"
SUMMARY = "execute.json"
PLANS = "plans.parquet"
VERSION = 1

#: column -> (pyarrow type name, meaning); the executor may add more columns (kept as they come)
COLUMNS: dict[str, tuple[str, str]] = {
    "request_id": ("int64", "trace request id"),
    "order": ("int64", "admission order in the replay"),
    "prompt_tokens": ("int64", "prompt length N"),
    "reused_tokens": ("int64", "tokens the Plan reuses (in place + rotated)"),
    "rotated_tokens": ("int64", "tokens reused at another position (k_r rotated by δ)"),
    "recomputed_tokens": ("int64", "tokens the Plan recomputes"),
    "executed_tokens": ("int64", "tokens run through the layers (the last prompt token always is)"),
    "inplace_tokens": ("int64", "reused tokens read in place from their provider's pages"),
    "copied_tokens": ("int64", "reused tokens of partial pages copied (k_r rotated) into the request's pages"),
    "sequences": ("int64", "attention sequences of the forward (one per RECOMPUTE span)"),
    "ttft_s": ("float64", "measured TTFT of the Plan (median of repeats)"),
    "ttft_full_s": ("float64", "measured TTFT of the full prefill of the same prompt"),
    "hbm_bytes": ("float64", "HBM bytes of the Plan's forward (kernel access counts, distinct rows)"),
    "hbm_bytes_full": ("float64", "HBM bytes of the full prefill"),
    "joules": ("float64", "board energy of the Plan's forward (NVML, idle tail removed)"),
    "joules_full": ("float64", "board energy of the full prefill"),
    "joules_dyn": ("float64", "joules above the idle floor"),
    "joules_dyn_full": ("float64", "joules above the idle floor, full prefill"),
    "predicted_ttft_s": ("float64", "cost model: the same Plan executed alone (profile if calibrated)"),
    "predicted_full_s": ("float64", "cost model: full prefill executed alone"),
    "predicted_joules": ("float64", "cost model joules of the Plan"),
    "predicted_full_joules": ("float64", "cost model joules of the full prefill"),
    "predicted_hbm_bytes": ("float64", "cost model HBM bytes of the Plan"),
    "predicted_full_hbm_bytes": ("float64", "cost model HBM bytes of the full prefill"),
    "sim_ttft_s": ("float64", "the replay's TTFT of the request (with queueing)"),
    "out_dev": ("float64", "rel. L2 of the final hidden state, Plan vs full prefill"),
    "top1_match": ("bool", "first output token equal, Plan vs full prefill"),
    "kv_dev": ("float64", "rel. RMS of reused KV vs the request's own full-prefill KV (all layers)"),
}


# ---- Public API -----------------------------------------------------------------------------------
def summarize(rows: list[dict[str, Any]], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Headline figures of executed requests (see docs/bench-execute.md for the definitions)."""
    def col(name: str) -> np.ndarray:
        return np.array([float(r.get(name, math.nan)) for r in rows], dtype=np.float64)

    n = len(rows)
    if not n:
        return {"version": VERSION, "requests": 0, **(meta or {})}
    N, reused = col("prompt_tokens"), col("reused_tokens")
    t, tf = col("ttft_s"), col("ttft_full_s")
    ratio = t / tf
    hit = reused > 0
    out: dict[str, Any] = {
        "version": VERSION, "requests": n, "prompt_tokens": int(N.sum()), "reused_tokens": int(reused.sum()),
        "reuse": float(reused.sum() / N.sum()), "hits": int(hit.sum()),
        "ttft_s_p50": _q(t, 50), "ttft_full_s_p50": _q(tf, 50),
        "ttft_ratio_p50": _q(ratio, 50), "ttft_ratio_p90": _q(ratio, 90), "ttft_ratio_mean": _mean(ratio),
        "ttft_ratio_total": float(t.sum() / tf.sum()),
        "hbm_ratio_total": float(col("hbm_bytes").sum() / col("hbm_bytes_full").sum()),
    }
    j, jf = col("joules"), col("joules_full")
    if np.isfinite(j).any():
        jd, jdf = col("joules_dyn"), col("joules_dyn_full")
        out.update(
            joules_per_request=_mean(j), joules_full_per_request=_mean(jf),
            joules_per_hit=_mean(j[hit]), joules_saved_per_hit=_mean(jf[hit] - j[hit]),
            energy_saved_per_hit_p50=_q(1 - j[hit] / jf[hit], 50),
            energy_saved_hits_total=float(1 - j[hit].sum() / jf[hit].sum()) if hit.any() else math.nan,
            energy_saved_dyn_hits_total=float(1 - jd[hit].sum() / jdf[hit].sum()) if hit.any() else math.nan,
            watts_p50=_q(col("watts"), 50), watts_full_p50=_q(col("watts_full"), 50))
    out["fidelity"] = {
        "ttft_mare": _mare(col("predicted_ttft_s"), t), "ttft_full_mare": _mare(col("predicted_full_s"), tf),
        "ttft_p90_are": _q(np.abs(col("predicted_ttft_s") - t) / t, 90),
        "hbm_bytes_mare": _mare(col("predicted_hbm_bytes"), col("hbm_bytes")),
        "joules_mare": _mare(col("predicted_joules"), j), "joules_full_mare": _mare(col("predicted_full_joules"), jf),
        "ttft_bias": _bias(col("predicted_ttft_s"), t), "ttft_full_bias": _bias(col("predicted_full_s"), tf)}
    if "out_dev" in rows[0]:
        out["deviation"] = {"out_dev_p50": _q(col("out_dev"), 50), "out_dev_max": float(np.nanmax(col("out_dev"))),
                            "top1_agreement": _mean(col("top1_match")), "kv_dev_p50": _q(col("kv_dev"), 50),
                            "kv_dev_last_p50": _q(col("kv_dev_last"), 50)}
    return {**out, **(meta or {})}


def write_measurements(out: str | os.PathLike, rows: list[dict[str, Any]], summary: dict[str, Any], *,
                       plans: Any = None, force: bool = False, inputs: Iterable[Any] = (),
                       into_run_dir: bool = False) -> Path:
    """Write ``measurements.parquet`` + ``execute.json`` (+ ``plans.parquet``, the executed plan log) into
    folder ``out``: a new folder atomically, or (``into_run_dir``) added to the run dir ``pic replay`` just
    wrote, each file atomically."""
    from pic.traces.outputs import atomic_dir, atomic_path, claim_dir

    out = Path(out)
    if into_run_dir:
        names = [FILE, SUMMARY] + ([PLANS] if plans is not None else [])
        claim_dir(out, "run-dir", names)
        _write_files(out, rows, summary, plans, atomic_path)
        return out
    with atomic_dir(out, kind="run-dir", force=force, inputs=inputs, last=(SUMMARY,)) as tmp:
        _write_files(tmp, rows, summary, plans, None)
    return out


def read_measurements(folder: str | os.PathLike) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(rows, execute.json) of a folder holding ``measurements.parquet``; errors name the file."""
    import pyarrow.parquet as pq

    folder = Path(folder)
    try:
        rows = pq.read_table(folder / FILE).to_pylist()
    except (OSError, ValueError) as e:
        raise ValueError(f"{folder / FILE}: cannot read measurements: {e}") from None
    try:
        summary = json.loads((folder / SUMMARY).read_text(encoding="utf-8"))
    except FileNotFoundError:
        summary = {}
    except (OSError, ValueError) as e:
        raise ValueError(f"{folder / SUMMARY}: cannot read: {e}") from None
    except RecursionError:
        raise ValueError(f"{folder / SUMMARY}: cannot read: JSON nested too deeply") from None
    missing = [c for c in ("request_id", "ttft_s", "ttft_full_s", "predicted_ttft_s") if rows and c not in rows[0]]
    if missing:
        raise ValueError(f"{folder / FILE}: missing column(s) {', '.join(missing)}")
    return rows, summary


def has_measurements(folder: str | os.PathLike) -> bool:
    return (Path(folder) / FILE).is_file()


# ---- Internal helpers -----------------------------------------------------------------------------
def _write_files(folder: Path, rows: list[dict[str, Any]], summary: dict[str, Any], plans: Any, atomic: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    flat = [{k: v for k, v in r.items() if not isinstance(v, (list, tuple, dict))} for r in rows]
    table = pa.Table.from_pylist(flat) if flat else pa.table({c: pa.array([], t) for c, (t, _) in COLUMNS.items()})
    text = json.dumps(summary, indent=2, default=_json, allow_nan=True) + "\n"

    def put(name: str, write) -> None:
        if atomic is None:
            write(folder / name)
        else:
            with atomic(folder / name) as tmp:
                write(tmp)

    put(FILE, lambda p: pq.write_table(table, p, compression="zstd"))
    if plans is not None:
        put(PLANS, lambda p: plans.write_to(p))
    put(SUMMARY, lambda p: p.write_text(text, encoding="utf-8"))


def _json(o: Any) -> Any:
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _q(a: np.ndarray, q: float) -> float:
    a = a[np.isfinite(a)]
    return float(np.percentile(a, q)) if a.size else math.nan


def _mean(a: np.ndarray) -> float:
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else math.nan


def _mare(pred: np.ndarray, meas: np.ndarray) -> float:
    """Median absolute relative error |pred − meas| / meas over rows where both are known."""
    ok = np.isfinite(pred) & np.isfinite(meas) & (meas > 0)
    return float(np.median(np.abs(pred[ok] - meas[ok]) / meas[ok])) if ok.any() else math.nan


def _bias(pred: np.ndarray, meas: np.ndarray) -> float:
    """Median signed relative error (pred − meas) / meas: > 0 the model predicts too slow."""
    ok = np.isfinite(pred) & np.isfinite(meas) & (meas > 0)
    return float(np.median((pred[ok] - meas[ok]) / meas[ok])) if ok.any() else math.nan
