"""``pic report``: merge replay run dirs, recompute metrics, render tables, PNG plots and HTML/Markdown.

Entry point: :func:`make_report`. Building blocks: :func:`load_runs` (data), :func:`render_plots` /
:func:`write_plots` (figures), :func:`render_html` / :func:`render_markdown` (documents).
"""

from pic.engine.report.data import (
    ReportData,
    RunInfo,
    capacity_series,
    load_runs,
    policy_metrics,
    scenario_title,
)
from pic.engine.report.html import (
    TABLE_METRICS,
    Report,
    comparison_rows,
    make_report,
    render_html,
    render_markdown,
    to_json,
)
from pic.engine.report.plots import Plot, render_plots, write_plots

__all__ = [
    "TABLE_METRICS", "comparison_rows", "scenario_title", "Plot", "Report", "ReportData", "RunInfo", "capacity_series", "load_runs", "make_report", "policy_metrics",
    "render_html", "render_markdown", "render_plots", "to_json", "write_plots",
]
