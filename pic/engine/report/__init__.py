"""``pic report``: merge replay run dirs, recompute metrics, render tables, PNG plots and HTML/Markdown.

Entry point: :func:`make_report`. Building blocks: :func:`load_runs` (data), :func:`render_plots` /
:func:`write_plots` (figures), :func:`render_html` / :func:`render_markdown` (documents), :func:`headlines`
(the answer in one sentence per scenario).
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the submodule defining it; NOTE (speed): imported on first use, so a module that needs
#: one helper (``pic replay``'s table: pic.cli.settings) does not import html, markdown and plots too
_WHERE = {
    **dict.fromkeys(("ReportData", "RunInfo", "capacity_series", "load_runs", "policy_metrics", "scenario_title"),
                    "data"),
    **dict.fromkeys(("best_prefix", "headline", "headlines"), "headline"),
    **dict.fromkeys(("Report", "make_report", "render_html", "to_json"), "html"),
    "render_markdown": "markdown",
    **dict.fromkeys(("Plot", "render_plots", "write_plots"), "plots"),
    **dict.fromkeys(("LATENCY_METRICS", "TABLE_METRICS", "comparison_rows", "latency_rows"), "tables"),
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "LATENCY_METRICS", "TABLE_METRICS", "comparison_rows", "latency_rows", "scenario_title", "Plot", "Report",
    "ReportData", "RunInfo", "best_prefix", "capacity_series", "headline", "headlines", "load_runs",
    "make_report", "policy_metrics", "render_html", "render_markdown", "render_plots", "to_json", "write_plots",
]
