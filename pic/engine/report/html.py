"""Report documents: one self-contained HTML file, a Markdown file, a JSON dict, and :func:`make_report`.

The HTML has inline CSS and its PNGs embedded as ``data:image/png;base64`` URIs: no external asset,
so it can be mailed or attached to an issue as is. Tables put policies side by side, one table per
scenario (trace, model, gpu, replicas, capacity).
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

from pic.engine.report.data import (
    ReportData,
    expand_run_dirs,
    fmt_bytes,
    fmt_num,
    fmt_pct,
    load_runs,
    policy_labels,
    scenario_title,
)
from pic.engine.report.plots import Plot, render_plots, write_plots
from pic.traces.outputs import atomic_path, check_distinct, check_output, is_pic_report


def fmt_seconds(x: float | None) -> str:
    """``850 ms`` / ``1.23 s`` / ``–``."""
    if x is None or math.isnan(x):
        return "–"
    return f"{x * 1e3:.3g} ms" if abs(x) < 1 else f"{x:.3g} s"


def fmt_joules(x: float | None) -> str:
    """``12.3 J`` / ``4.56 kJ`` / ``–``."""
    if x is None or math.isnan(x):
        return "–"
    return f"{x:.3g} J" if abs(x) < 1e3 else (f"{x / 1e3:.3g} kJ" if abs(x) < 1e6 else f"{x / 1e6:.3g} MJ")


#: (column of ReportData.table, row label, formatter) — the order of rows in every comparison table
TABLE_METRICS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("requests", "requests", fmt_num),
    ("prompt_tokens", "prompt tokens", fmt_num),
    ("token_hit_rate", "token hit rate", fmt_pct),
    ("prefix_hit_rate", "prefix hit rate (shadow)", fmt_pct),
    ("recovery_beyond_prefix", "recovery beyond prefix", fmt_pct),
    ("ttft_p50_s", "TTFT p50", fmt_seconds),
    ("ttft_p90_s", "TTFT p90", fmt_seconds),
    ("ttft_p99_s", "TTFT p99", fmt_seconds),
    ("queue_p50_s", "queueing p50", fmt_seconds),
    ("prefill_joules", "prefill energy", fmt_joules),
    ("energy_saved_vs_none", "energy saved vs no cache", fmt_pct),
    ("energy_saved_vs_prefix", "energy saved vs prefix", fmt_pct),
    ("attn_layer_saved_vs_none", "attention layers: time/energy saved vs no cache", fmt_pct),
    ("recurrent_layer_saved_vs_none", "recurrent layers: time/energy saved vs no cache", fmt_pct),
    ("peak_resident_bytes", "peak resident KV", fmt_bytes),
    ("evictions", "evictions", fmt_num),
    ("uncached", "uncached requests", fmt_num),
)

DEFINITIONS: tuple[tuple[str, str], ...] = (
    ("token hit rate", "Σ reused tokens / Σ prompt tokens N (in place + rotated reuse)."),
    ("prefix hit rate", "the same for the shadow exact-prefix cache of equal capacity run beside each policy."),
    ("recovery beyond prefix", "(Σ reused − Σ prefix_reused) / (Σ N − Σ prefix_reused): the share of what "
     "an exact-prefix cache misses that the policy recovers (negative when it reuses less than prefix)."),
    ("TTFT pXX", "percentile of time to first token (arrival → first output token), linear interpolation."),
    ("energy saved vs no cache / vs prefix", "1 − Σ prefill joules / Σ prefill joules of the same requests "
     "with no cache / with the shadow prefix cache."),
    ("attention / recurrent layers saved", "1 − Σ prefill time spent in that kind of layer / the same with no "
     "cache (each request's plan priced alone; energy follows time). Recurrent: hybrid models only (Gated "
     "DeltaNet, Mamba-2); reuse that is not an exact prefix saves nothing there unless the policy starts the "
     "recurrent state itself (linearkv)."),
    ("peak resident KV", "largest KV bytes resident in the policy's cache during the replay (from summary.json)."),
)


@dataclass(frozen=True, slots=True)
class Report:
    """What :func:`make_report` produced: the data, the figures and the paths it wrote."""

    data: ReportData
    plots: tuple[Plot, ...]
    written: tuple[Path, ...] = field(default=())


# ---- Public API -----------------------------------------------------------------------------------

def make_report(run_dirs, *, html_path: str | Path | None = None, md_path: str | Path | None = None,
                plots_dir: str | Path | None = None, force: bool = False) -> Report:
    """Load ``run_dirs`` and write the requested outputs (each atomically). Figures are rendered only
    when an output needs them.

    Outputs are checked before anything is read (``traces.outputs.check_output``): never a run dir or a
    file of one; an existing file that is not a pic report, or a non-empty plots folder pic did not
    write, only with ``force`` (and then only pic's PNGs are written into the folder).
    """
    check_report_outputs(run_dirs, html_path=html_path, md_path=md_path, plots_dir=plots_dir, force=force)
    data = load_runs(list(run_dirs))
    plots = render_plots(data) if (html_path or plots_dir) else []
    written: list[Path] = []
    png_paths: list[Path] = []
    if plots_dir:
        png_paths = write_plots(plots, plots_dir, force=force)
        written += png_paths
    if html_path:
        written.append(_write_text(html_path, render_html(data, plots)))
    if md_path:
        # PNG links only when the plots were written to disk (--plots); --html alone embeds them
        links = [(p.title, Path(os.path.relpath(pp, Path(md_path).resolve().parent)).as_posix())
                 for p, pp in zip(plots, [x.resolve() for x in png_paths], strict=True)] if png_paths else []
        written.append(_write_text(md_path, render_markdown(data, links)))
    return Report(data, tuple(plots), tuple(written))


def check_report_outputs(run_dirs, *, html_path=None, md_path=None, plots_dir=None, force: bool = False) -> None:
    """The output rules of :func:`make_report`, checked before any work (raises ``OutputError``)."""
    dirs, _ = expand_run_dirs(list(run_dirs))
    inputs = [*map(Path, run_dirs), *dirs, *(d / f for d in dirs for f in ("summary.json", "config.json",
                                                                          "requests.parquet"))]
    check_distinct({"--html": html_path, "--md": md_path, "--plots": plots_dir})
    for option, path in (("--html", html_path), ("--md", md_path)):
        if path is not None:
            check_output(path, inputs=inputs, force=force, kind="file", own=is_pic_report, option=option)
    if plots_dir is not None:
        check_output(plots_dir, inputs=inputs, force=force, kind="plots", option="--plots")


def comparison_rows(rows) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(column headers, [(metric label, formatted values...)]) for one scenario's table rows."""
    return policy_labels(rows), [(label, [f(v) for v in rows[col].to_list()]) for col, label, f in TABLE_METRICS]


def render_html(data: ReportData, plots: list[Plot]) -> str:
    """The whole report as one HTML string (inline CSS, base64 PNGs, no external references)."""
    e = html.escape
    parts = [f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
             '<meta name="generator" content="pic report"><title>pic report</title>'
             f"<style>{_CSS}</style></head><body>",
             f"<h1>pic report</h1><p class='sub'>{len(data.runs)} run dir(s), policies: "
             f"{e(', '.join(data.policies))}</p>"]
    if data.warnings:
        parts.append("<div class='warn'><b>Warnings</b><ul>" + "".join(f"<li>{e(w)}</li>" for w in data.warnings)
                     + "</ul></div>")
    parts.append("<h2>Runs</h2><table><tr><th>run</th><th>trace</th><th>model</th><th>gpu</th><th>capacity</th>"
                 "<th>replicas</th><th>policies</th></tr>")
    for r in data.runs:
        parts.append(f"<tr><td>{e(r.label)}</td><td>{e(r.trace)}</td><td>{e(r.model)}</td><td>{e(r.gpu)}</td>"
                     f"<td>{fmt_bytes(r.capacity_bytes)}</td><td>{r.replicas}</td>"
                     f"<td>{e(', '.join(r.summary['policies']))}</td></tr>")
    parts.append("</table>")
    for r in data.runs:
        parts.append(f"<details><summary>config.json of {e(r.label)} ({e(str(r.path))})</summary><pre>"
                     f"{e(json.dumps(r.config, indent=2, sort_keys=True, default=str))}</pre></details>")
    parts.append("<h2>Policy comparison</h2>")
    scenarios = data.scenarios()
    if len(scenarios) > 1:
        parts.append(_overview(scenarios))
    for key, rows in scenarios:
        heads, body = comparison_rows(rows)
        parts.append(f"<h3>{e(scenario_title(key))}</h3><table class='cmp'><tr><th></th>"
                     + "".join(f"<th>{e(h)}</th>" for h in heads) + "</tr>")
        parts += [f"<tr><td class='m'>{e(label)}</td>" + "".join(f"<td>{e(v)}</td>" for v in vals) + "</tr>"
                  for label, vals in body]
        parts.append("</table>")
    if plots:
        parts.append("<h2>Plots</h2>")
    for group, members in groupby(plots, key=lambda p: p.group):
        parts.append((f"<h3>{e(group)}</h3>" if group else "") + "<div class='plots'>")
        for p in members:
            b64 = base64.b64encode(p.png).decode("ascii")
            parts.append(f"<figure><img alt='{e(p.title)}' src='data:image/png;base64,{b64}'>"
                         f"<figcaption><b>{e(p.title)}.</b> {e(p.caption)}</figcaption></figure>")
        parts.append("</div>")
    parts.append("<h2>Metric definitions</h2><dl class='defs'>"
                 + "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in DEFINITIONS)
                 + "</dl><p class='sub'>Metrics are recomputed from requests.parquet (DESIGN.md §8); peak resident"
                 " KV comes from summary.json.</p></body></html>\n")
    return "\n".join(parts)


def render_markdown(data: ReportData, plot_links: list[tuple[str, str]] | None = None) -> str:
    """The comparison tables (and links to written PNGs) as Markdown."""
    out = ["<!-- generated by pic report -->", "# pic report", "", f"Runs: {', '.join(f'`{r.path}`' for r in data.runs)}", ""]
    for key, rows in data.scenarios():
        heads, body = comparison_rows(rows)
        out += [f"## {scenario_title(key)}", "", "| metric | " + " | ".join(heads) + " |",
                "|---|" + "---:|" * len(heads)]
        out += [f"| {label} | " + " | ".join(vals) + " |" for label, vals in body]
        out.append("")
    if plot_links:
        out += ["## Plots", ""] + [f"![{t}]({p})" for t, p in plot_links] + [""]
    if data.warnings:
        out += ["## Warnings", ""] + [f"- {w}" for w in data.warnings] + [""]
    out += ["## Definitions", ""] + [f"- **{k}**: {v}" for k, v in DEFINITIONS]
    return "\n".join(out) + "\n"


def to_json(data: ReportData) -> dict[str, Any]:
    """JSON-safe dict: runs, one row per (run, policy) with every metric, capacity series, warnings.
    NaN becomes null and infinite capacity becomes null (as in summary.json)."""
    def clean(v):
        return None if isinstance(v, float) and not math.isfinite(v) else v
    drop = [c for c in data.table.columns if c.endswith(("_lo", "_hi"))]
    return {
        "runs": [{"run": r.label, "path": str(r.path), "trace": r.trace, "model": r.model, "gpu": r.gpu,
                  "capacity_bytes": clean(r.capacity_bytes), "replicas": r.replicas} for r in data.runs],
        "policies": [{k: clean(v) for k, v in row.items()} for row in data.table.drop(drop).iter_rows(named=True)],
        "capacity_series": [{k: clean(v) for k, v in row.items()}
                            for row in data.capacity_series.iter_rows(named=True)],
        "warnings": list(data.warnings),
    }


# ---- Internal helpers -----------------------------------------------------------------------------

_OVERVIEW = ("token_hit_rate", "prefix_hit_rate", "recovery_beyond_prefix", "ttft_p50_s", "ttft_p99_s",
             "energy_saved_vs_prefix", "peak_resident_bytes")


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
                       + "".join(f"<td>{e(fmt[c][1](row[c]))}</td>" for c in _OVERVIEW) + "</tr>")
    return "".join(out) + "</table>"


def _write_text(path: str | Path, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:1100px;margin:24px auto;
padding:0 16px;color:#222}
h1{margin-bottom:0}h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}h3{font-size:15px}
.sub{color:#666;margin-top:4px}
table{border-collapse:collapse;margin:8px 0 16px;font-variant-numeric:tabular-nums}
th,td{border:1px solid #ddd;padding:4px 10px;text-align:right}th{background:#f4f6f8}
td:first-child,th:first-child{text-align:left}td.m{color:#444;white-space:nowrap}
.warn{background:#fff8e1;border:1px solid #f0d98a;padding:8px 12px;border-radius:4px}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:8px 20px}
td[rowspan]{text-align:left;vertical-align:top;max-width:260px}td.p{text-align:left;white-space:nowrap}figure{margin:8px 0}img{max-width:100%;border:1px solid #eee}figcaption{color:#555;font-size:13px}
pre{background:#f7f7f7;padding:8px;overflow:auto;font-size:12px}
dl.defs dt{font-weight:600;margin-top:6px}dl.defs dd{margin-left:16px;color:#444}
"""
