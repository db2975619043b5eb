"""Measured beside predicted: the table of a folder holding ``measurements.parquet`` (``pic execute -o`` or
``pic replay --execute``), shared by the terminal, the HTML and the Markdown report.

One table per measured folder (each executes one policy's Plans): metric | measured | predicted | error,
where "predicted" is the cost model's price of the same Plan executed alone (roofline, or the calibration
profile the Plans were recorded with) and error = (predicted − measured) / measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: (folder, rows of measurements.parquet, execute.json)
Measured = tuple[Path, list[dict[str, Any]], dict[str, Any]]

MEASURED_DEFINITIONS: list[tuple[str, str]] = [
    ("measured", "on the GPU by pic execute --gpu: TTFT = median of CUDA-graph replays of the whole forward "
                 "(embedding to logits), joules = NVML board energy per forward, HBM bytes = counted from the "
                 "kernels' access pattern (docs/execute.md)"),
    ("predicted", "the cost model's price of the same Plan executed alone (no queueing), with the profile named in "
                  "the table's title or the roofline"),
    ("error", "(predicted − measured) / measured of the row's figures; 'predicted TTFT error' rows are the median "
              "and p90 over requests of |predicted − measured| / measured"),
    ("energy saved per hit", "1 − Σ joules(Plan) / Σ joules(full prefill) over the requests that reused anything"),
]


def measured_title(where: Path | str, s: dict[str, Any]) -> str:
    scaled = s.get("depth_scale", 1.0) not in (1.0, None)
    return (f"{where}: {s.get('policy')} on {s.get('model')} · {s.get('gpu')} · {s.get('requests')} executed"
            + (f" ({s.get('layers_built')} of {s.get('full_layers')} layers, scaled)" if scaled else "")
            + (f" · predicted with {s['priced_with']}" if s.get("priced_with") else ""))


def measured_rows(rows: Sequence[dict[str, Any]], s: dict[str, Any]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(heads, body) of the measured-vs-predicted table: ``body`` rows are (metric, [measured, predicted, error])."""
    def col(name: str) -> list[float]:
        return [_f(r.get(name)) for r in rows]

    body: list[tuple[str, list[str]]] = []

    def row(label: str, meas: float, pred: float, fmt: str, unit: float = 1.0) -> None:
        err = (pred - meas) / meas if math.isfinite(meas) and meas and math.isfinite(pred) else math.nan
        body.append((label, [_num(meas * unit, fmt), _num(pred * unit, fmt), _num(err, "+.1%")]))

    def div(a: list[float], b: list[float]) -> list[float]:
        return [x / y if y else math.nan for x, y in zip(a, b, strict=True)]

    t, tf, pt, ptf = col("ttft_s"), col("ttft_full_s"), col("predicted_ttft_s"), col("predicted_full_s")
    row("TTFT p50, ms", _q(t, 50), _q(pt, 50), ".2f", 1e3)
    row("TTFT p90, ms", _q(t, 90), _q(pt, 90), ".2f", 1e3)
    row("full-prefill TTFT p50, ms", _q(tf, 50), _q(ptf, 50), ".2f", 1e3)
    row("TTFT / full prefill p50", _q(div(t, tf), 50), _q(div(pt, ptf), 50), ".3f")
    row("TTFT / full prefill p90", _q(div(t, tf), 90), _q(div(pt, ptf), 90), ".3f")
    hb, hbf, phb, phbf = col("hbm_bytes"), col("hbm_bytes_full"), col("predicted_hbm_bytes"), col("predicted_full_hbm_bytes")
    row("HBM bytes per request, GB", _mean(hb), _mean(phb), ".2f", 1e-9)
    row("HBM bytes per full prefill, GB", _mean(hbf), _mean(phbf), ".2f", 1e-9)
    row("HBM bytes / full prefill", _ratio(hb, hbf), _ratio(phb, phbf), ".3f")
    j, jf, pj, pjf = col("joules"), col("joules_full"), col("predicted_joules"), col("predicted_full_joules")
    row("joules per request", _mean(j), _mean(pj), ".2f")
    row("joules per full prefill", _mean(jf), _mean(pjf), ".2f")
    hit = [_f(r.get("reused_tokens")) > 0 for r in rows]
    row("energy saved per hit", _f(s.get("energy_saved_hits_total")),
        1 - _ratio([x for x, h in zip(pj, hit, strict=True) if h], [x for x, h in zip(pjf, hit, strict=True) if h]),
        ".1%")
    err = [abs(p - m) / m if m > 0 else math.nan for p, m in zip(pt, t, strict=True)]
    errf = [abs(p - m) / m if m > 0 else math.nan for p, m in zip(ptf, tf, strict=True)]
    body.append(("predicted TTFT error, median / p90 |rel|", ["", "", f"{_num(_q(err, 50), '.1%')} / "
                                                             f"{_num(_q(err, 90), '.1%')}"]))
    body.append(("predicted full-prefill TTFT error, median |rel|", ["", "", _num(_q(errf, 50), ".1%")]))
    body.append(("reuse (tokens)", [_num(_f(s.get("reuse")), ".1%"), "", ""]))
    dev = s.get("deviation") or {}
    if dev:
        body.append(("output deviation vs full prefill, p50 (rel. L2)", [_num(_f(dev.get("out_dev_p50")), ".1e"), "", ""]))
        body.append(("first token equal to the full prefill's", [_num(_f(dev.get("top1_agreement")), ".0%"), "", ""]))
    return ["measured", "predicted", "error"], body


# ---- Internal helpers -----------------------------------------------------------------------------
def _f(v: Any) -> float:
    try:
        return float(v) if v is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def _num(v: float | None, fmt: str) -> str:
    return "" if v is None or not math.isfinite(v) else format(v, fmt)


def _q(xs: list[float], q: float) -> float:
    """Linear-interpolated percentile of the finite values (NaN when none)."""
    v = sorted(x for x in xs if math.isfinite(x))
    if not v:
        return math.nan
    k = (len(v) - 1) * q / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def _mean(xs: list[float]) -> float:
    v = [x for x in xs if math.isfinite(x)]
    return sum(v) / len(v) if v else math.nan


def _ratio(a: list[float], b: list[float]) -> float:
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if math.isfinite(x) and math.isfinite(y)]
    den = sum(y for _, y in pairs)
    return sum(x for x, _ in pairs) / den if pairs and den else math.nan
