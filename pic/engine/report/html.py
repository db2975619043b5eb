"""Report documents: one self-contained HTML file, a JSON dict, and :func:`make_report` (Markdown: markdown.py).

The HTML opens with the answer — one headline per scenario, then the hit-rate-vs-capacity plot — and a
table of contents; then the policy comparison, the serving-benchmark table, per-scenario plots, the runs
and the metric definitions. Inline CSS, PNGs embedded as ``data:image/png;base64`` URIs: no external
asset, so it can be mailed or attached to an issue as is. Every table puts policies side by side, one table
per scenario (trace, model, gpu, replicas, capacity).
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

from pic.engine.report.data import (
    ReportData,
    expand_run_dirs,
    fmt_bytes,
    load_runs,
    policy_labels,
    scenario_title,
)
from pic.engine.report.headline import headlines
from pic.engine.report.markdown import render_markdown
from pic.engine.report.measured import MEASURED_DEFINITIONS, Measured, measured_rows, measured_title
from pic.engine.report.plots import CAPACITY_PLOT, Plot, render_plots, write_plots
from pic.engine.report.tables import (
    DEFINITIONS,
    TABLE_METRICS,
    comparison_rows,
    fmt_joules,
    fmt_seconds,
    latency_rows,
)
from pic.traces.outputs import atomic_path, check_distinct, check_output, is_pic_report

__all__ = ["TABLE_METRICS", "Report", "check_report_outputs", "comparison_rows", "fmt_joules", "fmt_seconds",
           "make_report", "render_html", "to_json"]


@dataclass(frozen=True, slots=True)
class Report:
    """What :func:`make_report` produced: the data, the figures and the paths it wrote."""

    data: ReportData | None   # None: a report of measured folders only
    plots: tuple[Plot, ...]
    written: tuple[Path, ...] = field(default=())


# ---- Public API -----------------------------------------------------------------------------------

def make_report(run_dirs, *, html_path: str | Path | None = None, md_path: str | Path | None = None,
                plots_dir: str | Path | None = None, force: bool = False,
                measured: list[Measured] | None = None) -> Report:
    """Load ``run_dirs`` and write the requested outputs (each atomically). Figures are rendered only
    when an output needs them. ``measured``: (folder, rows, execute.json) of folders with
    measurements.parquet, shown as measured-beside-predicted tables; with no ``run_dirs`` the documents
    hold those tables only (``data`` is then None and there are no plots).

    Outputs are checked before anything is read (``traces.outputs.check_output``): never a run dir or a
    file of one; an existing file that is not a pic report, or a non-empty plots folder pic did not
    write, only with ``force`` (and then only pic's PNGs are written into the folder).
    """
    measured = measured or []
    check_report_outputs([*run_dirs, *(m[0] for m in measured)], html_path=html_path, md_path=md_path,
                         plots_dir=plots_dir, force=force)
    if not run_dirs and plots_dir:
        raise ValueError("--plots: needs at least one replay run dir (a measured-only folder has no plots)")
    data = load_runs(list(run_dirs)) if run_dirs else None
    plots = render_plots(data) if data is not None and (html_path or plots_dir) else []
    written: list[Path] = []
    png_paths: list[Path] = []
    if plots_dir:
        png_paths = write_plots(plots, plots_dir, force=force)
        written += png_paths
    if html_path:
        written.append(_write_text(html_path, render_html(data, plots, measured)))
    if md_path:
        # PNG links only when the plots were written to disk (--plots); --html alone embeds them
        links = [(p.title, Path(os.path.relpath(pp, Path(md_path).resolve().parent)).as_posix(), p.name)
                 for p, pp in zip(plots, [x.resolve() for x in png_paths], strict=True)] if png_paths else []
        written.append(_write_text(md_path, render_markdown(data, links, measured)))
    return Report(data, tuple(plots), tuple(written))


def check_report_outputs(run_dirs, *, html_path=None, md_path=None, plots_dir=None, force: bool = False) -> None:
    """The output rules of :func:`make_report`, checked before any work (raises ``OutputError``)."""
    dirs, _ = expand_run_dirs(list(run_dirs))
    inputs = [*map(Path, run_dirs), *dirs, *(d / f for d in dirs for f in ("summary.json", "config.json",
                                                                          "requests.parquet", "measurements.parquet",
                                                                          "execute.json", "plans.parquet"))]
    check_distinct({"--html": html_path, "--md": md_path, "--plots": plots_dir})
    for option, path in (("--html", html_path), ("--md", md_path)):
        if path is not None:
            check_output(path, inputs=inputs, force=force, kind="file", own=is_pic_report, option=option)
    if plots_dir is not None:
        check_output(plots_dir, inputs=inputs, force=force, kind="plots", option="--plots")


def render_html(data: ReportData | None, plots: list[Plot], measured: list[Measured] | None = None) -> str:
    """The whole report as one HTML string (inline CSS, base64 PNGs, no external references); ``measured``
    adds the measured-beside-predicted tables (``data`` None: a document of those tables only)."""
    e = html.escape
    measured = measured or []
    if data is None:
        return "\n".join([
            _HEAD, f"<h1>pic report</h1><p class='sub'>{len(measured)} measured folder(s): Plans executed on the "
            f"GPU beside the cost model's prediction</p>", _measured_html(measured), _measured_defs(), "</body></html>\n"])
    scenarios = data.scenarios()
    capacity = [p for p in plots if p.name == CAPACITY_PLOT]
    per_scenario = [p for p in plots if p.name != CAPACITY_PLOT]
    toc = [("headline", "The answer")]
    toc += [("warnings", "Warnings")] if data.warnings else []
    toc += [("capacity", "Hit rate vs capacity")] if capacity or data.notes else []
    toc += [("comparison", "Policy comparison"), ("latency", "Latency and throughput")]
    toc += [("measured", "Measured on the GPU")] if measured else []
    toc += [("plots", "Plots")] if per_scenario else []
    toc += [("runs", "Runs"), ("definitions", "Metric definitions")]
    parts = [_HEAD,
             f"<h1>pic report</h1><p class='sub'>{len(data.runs)} run dir(s), policies: "
             f"{e(', '.join(data.policies))}</p>",
             "<section id='headline' class='headline'><h2>The answer</h2>"]
    lines = headlines(data)
    if lines:
        parts.append("<ul>" + "".join(f"<li><b class='hl'>{e(text)}</b><br><span class='sub'>{e(title)}</span></li>"
                                      for title, text in lines) + "</ul>")
    else:
        parts.append("<p>No caching policy beyond exact prefix was replayed: nothing to compare.</p>")
    parts.append("</section><nav class='toc'><b>Contents:</b> "
                 + " · ".join(f"<a href='#{a}'>{e(t)}</a>" for a, t in toc) + "</nav>")
    if data.warnings:
        parts.append("<section id='warnings' class='warn'><b>Warnings</b><ul>"
                     + "".join(f"<li>{e(w)}</li>" for w in data.warnings) + "</ul></section>")
    if capacity or data.notes:
        parts.append("<section id='capacity'><h2>Hit rate vs capacity</h2>")
        parts += [f"<p class='note'>{e(n)}</p>" for n in data.notes]
        parts += [_figure(p) for p in capacity]
        parts.append("</section>")
    parts.append("<section id='comparison'><h2>Policy comparison</h2>")
    if len(scenarios) > 1:
        parts.append(_overview(scenarios))
    for key, rows in scenarios:
        parts.append(_table(scenario_title(key), *comparison_rows(rows)))
    parts.append("</section><section id='latency'><h2>Latency and throughput</h2><p class='sub'>As vLLM's "
                 "benchmark_serving reports them (simulated; definitions below).</p>")
    for key, rows in scenarios:
        parts.append(_table(scenario_title(key), *latency_rows(rows)))
    parts.append("</section>")
    if measured:
        parts.append(_measured_html(measured))
    if per_scenario:
        parts.append("<section id='plots'><h2>Plots</h2>")
        for group, members in groupby(per_scenario, key=lambda p: p.group):
            parts.append((f"<h3>{e(group)}</h3>" if group else "") + "<div class='plots'>"
                         + "".join(_figure(p) for p in members) + "</div>")
        parts.append("</section>")
    parts.append(_runs(data))
    parts.append("<section id='definitions'><h2>Metric definitions</h2><dl class='defs'>"
                 + "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in
                           [*DEFINITIONS, *(MEASURED_DEFINITIONS if measured else [])])
                 + "</dl><p class='sub'>Metrics are recomputed from requests.parquet (DESIGN.md §8); peak resident"
                 " KV, ITL and goodput come from summary.json.</p></section></body></html>\n")
    return "\n".join(parts)


def to_json(data: ReportData) -> dict[str, Any]:
    """JSON-safe dict: headlines, runs, one row per (run, policy) with every metric, capacity series,
    warnings and notes. NaN becomes null and infinite capacity becomes null (as in summary.json)."""
    def clean(v):
        return None if isinstance(v, float) and not math.isfinite(v) else v
    drop = [c for c in data.table.columns if c.endswith(("_lo", "_hi"))]
    return {
        "headlines": [{"scenario": t, "headline": h} for t, h in headlines(data)],
        "runs": [{"run": r.label, "path": str(r.path), "trace": r.trace, "model": r.model, "gpu": r.gpu,
                  "capacity_bytes": clean(r.capacity_bytes), "replicas": r.replicas} for r in data.runs],
        "policies": [{k: clean(v) for k, v in row.items()} for row in data.table.drop(drop).iter_rows(named=True)],
        "capacity_series": [{k: clean(v) for k, v in row.items()}
                            for row in data.capacity_series.iter_rows(named=True)],
        "warnings": list(data.warnings),
        "notes": list(data.notes),
    }


# ---- Internal helpers -----------------------------------------------------------------------------

_OVERVIEW = ("token_hit_rate", "prefix_hit_rate", "recovery_beyond_prefix", "ttft_p50_s", "ttft_speedup",
             "ttft_p99_s", "energy_saved_vs_prefix", "peak_resident_bytes")


def _measured_html(measured: list[Measured]) -> str:
    """One measured-vs-predicted table per measured folder (policy, model, GPU in its title)."""
    return ("<section id='measured'><h2>Measured on the GPU</h2><p class='sub'>Plans executed by pic execute "
            "--gpu beside the cost model's price of the same Plan (definitions below).</p>"
            + "".join(_table(measured_title(d, s), *measured_rows(rows, s)) for d, rows, s in measured)
            + "</section>")


def _measured_defs() -> str:
    e = html.escape
    return ("<section id='definitions'><h2>Metric definitions</h2><dl class='defs'>"
            + "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in MEASURED_DEFINITIONS) + "</dl></section>")


def _figure(p: Plot) -> str:
    e = html.escape
    b64 = base64.b64encode(p.png).decode("ascii")
    return (f"<figure id='fig-{e(p.name.removesuffix('.png'))}'><img alt='{e(p.title)}' "
            f"src='data:image/png;base64,{b64}'><figcaption><b>{e(p.title)}.</b> {e(p.caption)} "
            f"<span class='file'>{e(p.name)}</span></figcaption></figure>")


def _table(title: str, heads: list[str], body: list[tuple[str, list[str]]]) -> str:
    e = html.escape
    out = [f"<h3>{e(title)}</h3><table class='cmp'><tr><th></th>" + "".join(f"<th>{e(h)}</th>" for h in heads)
           + "</tr>"]
    out += [f"<tr><td class='m'>{e(label)}</td>" + "".join(f"<td>{e(v)}</td>" for v in vals) + "</tr>"
            for label, vals in body]
    return "".join(out) + "</table>"


def _overview(scenarios) -> str:
    """One row per (scenario, policy) with the headline metrics, for reports spanning several scenarios."""
    e = html.escape
    fmt = {col: (label, f) for col, label, f in TABLE_METRICS}
    out = ["<h3>Overview</h3><table><tr><th>scenario</th><th>policy</th>"
           + "".join(f"<th>{e(fmt[c][0])}</th>" for c in _OVERVIEW) + "</tr>"]
    for key, rows in scenarios:
        for i, (label, row) in enumerate(zip(policy_labels(rows), rows.iter_rows(named=True), strict=True)):
            head = f"<td rowspan='{rows.height}'>{e(scenario_title(key))}</td>" if i == 0 else ""
            out.append(f"<tr>{head}<td class='p'>{e(label)}</td>"
                       + "".join(f"<td>{e(fmt[c][1](row.get(c)))}</td>" for c in _OVERVIEW) + "</tr>")
    return "".join(out) + "</table>"


def _runs(data: ReportData) -> str:
    e = html.escape
    out = ["<section id='runs'><h2>Runs</h2><table><tr><th>run</th><th>trace</th><th>model</th><th>gpu</th>"
           "<th>capacity per replica</th><th>replicas</th><th>policies</th></tr>"]
    for r in data.runs:
        out.append(f"<tr><td>{e(r.label)}</td><td>{e(r.trace)}</td><td>{e(r.model)}</td><td>{e(r.gpu)}</td>"
                   f"<td>{fmt_bytes(r.capacity_bytes)}</td><td>{r.replicas}</td>"
                   f"<td>{e(', '.join(r.summary['policies']))}</td></tr>")
    out.append("</table>")
    for r in data.runs:
        out.append(f"<details><summary>config.json of {e(r.label)} ({e(str(r.path))})</summary><pre>"
                   f"{e(json.dumps(r.config, indent=2, sort_keys=True, default=str))}</pre></details>")
    return "".join(out) + "</section>"


def _write_text(path: str | Path, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


_HEAD_TEMPLATE = ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
                  '<meta name="generator" content="pic report"><title>pic report</title>'
                  "<style>{css}</style></head><body>")

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:1100px;margin:24px auto;
padding:0 16px;color:#222}
h1{margin-bottom:0}h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}h3{font-size:15px}
.sub{color:#666;margin-top:4px}
.headline{background:#eef6ee;border:1px solid #b9dcb9;border-radius:6px;padding:4px 16px 8px;margin-top:16px}
.headline h2{border:0;margin:8px 0 4px;font-size:16px}.headline ul{margin:4px 0;padding-left:18px}
.headline li{margin:6px 0}b.hl{font-size:15px}
nav.toc{margin:12px 0}
.note{background:#f3f6fb;border-left:3px solid #8aa9d6;padding:6px 10px}
table{border-collapse:collapse;margin:8px 0 16px;font-variant-numeric:tabular-nums}
th,td{border:1px solid #ddd;padding:4px 10px;text-align:right}th{background:#f4f6f8}td{white-space:nowrap}
td:first-child,th:first-child{text-align:left}td.m{color:#444;white-space:nowrap}
.warn{background:#fff8e1;border:1px solid #f0d98a;padding:8px 12px;border-radius:4px;margin-top:12px}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:8px 20px}
td[rowspan]{text-align:left;vertical-align:top;max-width:260px;white-space:normal}td.p{text-align:left;white-space:nowrap}
figure{margin:8px 0}img{max-width:100%;border:1px solid #eee}figcaption{color:#555;font-size:13px}
.file{color:#999;font-family:monospace;font-size:12px}
pre{background:#f7f7f7;padding:8px;overflow:auto;font-size:12px}
dl.defs dt{font-weight:600;margin-top:6px}dl.defs dd{margin-left:16px;color:#444}
"""

_HEAD = _HEAD_TEMPLATE.format(css=_CSS)
