"""`pic inspect`: print a trace's shape (thin wrapper over ``traces.stats.trace_stats``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pic.cli.errors import console, user_errors
from pic.traces.io import read_trace
from pic.traces.stats import trace_stats


def command(
    trace: Annotated[Path, typer.Argument(help="A pic trace (.parquet) written by `pic ingest` or `pic synth`.")],
    *,
    as_json: Annotated[bool, typer.Option("--json", help="Print the statistics as one JSON object.")] = False,
) -> None:
    """Print requests, sessions, tokens, dedup ratio, prompt-length percentiles and arrival rate of a trace.

    Examples:

      pic inspect miniswe.parquet

      pic inspect miniswe.parquet --json | jq .dedup_ratio
    """
    with user_errors():
        stats = trace_stats(read_trace(trace))
    if as_json:
        typer.echo(json.dumps(stats, indent=2))
        return
    _print_table(trace, stats)


def _print_table(path: Path, s: dict) -> None:
    table = Table(title=str(path), show_header=False)
    table.add_column(justify="left")
    table.add_column(justify="right")
    table.add_row("requests / sessions / agents", f"{s['requests']:,} / {s['sessions']:,} / {s['agents']:,}")
    table.add_row("prompt tokens (total)", f"{s['prompt_tokens']:,}")
    pl = s["prompt_len"]
    table.add_row("prompt length p50 / p90 / p99 / max",
                  f"{pl['p50']:,.0f} / {pl['p90']:,.0f} / {pl['p99']:,.0f} / {pl['max']:,}")
    table.add_row("distinct segment tokens", f"{s['segment_tokens_distinct']:,} ({s['distinct_segments']:,} segments)")
    ratio = s["dedup_ratio"]
    table.add_row("dedup ratio (total / distinct)", f"{ratio:.2f}x" if ratio is not None else "-")
    table.add_row("output tokens (total)", f"{s['output_tokens']:,}")
    rate = s["arrival_rate_rps"]
    table.add_row("duration / arrival rate",
                  f"{s['duration_s']:,.1f} s / " + (f"{rate:,.2f} req/s" if rate is not None else "all at t=0"))
    for kind, v in s["segments_by_kind"].items():
        table.add_row(f"  {kind} segments / tokens", f"{v['segments']:,} / {v['tokens']:,}")
    meta = s.get("meta", {})
    for key, label in (("empty_prompts_skipped", "rows with empty prompts skipped at ingest"),
                       ("bad_rows_skipped", "bad rows skipped at ingest (--skip-bad)")):
        if key in meta:
            table.add_row(label, meta[key])
    console.print(table)
