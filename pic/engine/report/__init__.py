"""``pic report``: merge replay run dirs, recompute metrics, render tables, PNG plots and HTML/Markdown.

Entry point: :func:`make_report`. Building blocks: :func:`load_runs` (data), :func:`render_plots` /
:func:`write_plots` (figures), :func:`render_html` / :func:`render_markdown` (documents), :func:`headlines`
(the answer in one sentence per scenario).
"""

from pic.engine.report.data import (
    ReportData,
    RunInfo,
    capacity_series,
    load_runs,
    policy_metrics,
    scenario_title,
)
from pic.engine.report.headline import best_prefix, headline, headlines
from pic.engine.report.html import Report, make_report, render_html, to_json
from pic.engine.report.markdown import render_markdown
from pic.engine.report.plots import Plot, render_plots, write_plots
from pic.engine.report.tables import LATENCY_METRICS, TABLE_METRICS, comparison_rows, latency_rows

__all__ = [
    "LATENCY_METRICS", "TABLE_METRICS", "comparison_rows", "latency_rows", "scenario_title", "Plot", "Report",
    "ReportData", "RunInfo", "best_prefix", "capacity_series", "headline", "headlines", "load_runs",
    "make_report", "policy_metrics", "render_html", "render_markdown", "render_plots", "to_json", "write_plots",
]
