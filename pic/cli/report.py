"""`pic report`: compare replay run dirs side by side; write HTML / Markdown / PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pic.cli.errors import console, err_console, print_warning, styled, user_errors
from pic.engine.report import (
    Report,
    comparison_rows,
    headlines,
    latency_rows,
    make_report,
    scenario_title,
    to_json,
)


def command(
    run_dirs: Annotated[list[Path], typer.Argument(
        help="Run dirs written by `pic replay -o` (several: merged; different policies, capacities, traces), "
             "a `pic sweep -o` dir (every run dir below it), or a `pic execute -o` folder (measured beside "
             "predicted).",
        show_default=False)],
    *,
    html: Annotated[Path | None, typer.Option(
        "--html", help="Write one self-contained HTML report (tables, plots, definitions).")] = None,
    md: Annotated[Path | None, typer.Option("--md", help="Write the comparison tables as Markdown.")] = None,
    plots: Annotated[Path | None, typer.Option(
        "--plots", help="Write the PNG plots into this folder.")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print every metric per (run, policy) as JSON on stdout instead of tables.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace existing --html/--md files pic did not write; write PNGs into a --plots "
             "folder pic did not create (nothing else in it is touched). Never a run dir's files.")] = False,
) -> None:
    """Policies side by side: hit rates, recovery beyond prefix, TTFT, prefill energy, resident bytes.

    Metrics are recomputed from each run's requests.parquet and checked against its summary.json (a disagreement is printed as a warning). Run dirs of the same trace and policies at several --capacity values also give a hit-rate-vs-capacity plot.

    Examples:

      pic report runs/mooncake-inf

      pic report runs/mooncake-inf --html report.html --plots plots/

      pic report runs/cap-10g runs/cap-40g runs/cap-inf --html sweep.html --md sweep.md

      pic report runs/mooncake-inf --json | jq '.policies[] | {policy, token_hit_rate}'

      pic report runs/ev-exec   (a `pic execute` folder: measured TTFT / joules beside the cost model's)
    """
    with user_errors():
        from pic.engine.measurements import has_measurements, read_measurements

        measured = [(d, *read_measurements(d)) for d in run_dirs if has_measurements(d)]
        replays = [d for d in run_dirs if not has_measurements(d) or (d / "requests.parquet").exists()]
        if not replays and plots:
            raise ValueError("--plots: needs at least one replay run dir (a measured-only folder has no plots; "
                             "--html/--md show its measured table)")
        rep = make_report(replays, html_path=html, md_path=md, plots_dir=plots, force=force, measured=measured) \
            if replays or html or md else None
    if as_json:
        doc = to_json(rep.data) if rep is not None and rep.data is not None else {}
        if measured:
            doc["measured"] = {str(d): s for d, _, s in measured}
        typer.echo(json.dumps(doc, indent=2, default=str))
    else:
        if rep is not None and rep.data is not None:
            _print_tables(rep)
        from pic.cli.execute import print_comparison

        for d, rows, s in measured:
            print_comparison(rows, s, d)
    if rep is None:
        return
    for w in rep.data.warnings if rep.data is not None else []:
        print_warning(w)
    out = err_console if as_json else console
    if plots:
        out.print(f"wrote {sum(p.suffix == '.png' for p in rep.written)} plots to {plots}", highlight=False)
    for p in rep.written:
        if p.suffix != ".png":
            out.print(f"wrote {p}", highlight=False)


def _print_tables(rep: Report) -> None:
    """Per scenario: the comparison table and the serving-benchmark table; then the answer and the notes."""
    for key, rows in rep.data.scenarios():
        for title, (heads, body) in ((scenario_title(key), comparison_rows(rows)),
                                     ("latency and throughput (ms; as vLLM benchmark_serving)", latency_rows(rows))):
            table = Table(title=title, title_justify="left")
            table.add_column("metric", justify="left", style="dim")
            for h in heads:
                table.add_column(h, justify="right")
            for label, vals in body:
                table.add_row(label, *vals)
            console.print(table)
    for title, line in headlines(rep.data):
        console.print(styled((line, "bold"), ("  (" + title + ")", "dim")), soft_wrap=True)
    for note in rep.data.notes:
        console.print(styled("note: " + note), soft_wrap=True)
