"""`pic synth`: write a seeded synthetic agentic trace (thin wrapper over ``traces.synth.synth``)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pic.cli.choices import Scenario, parser
from pic.cli.errors import console, styled, user_errors
from pic.traces import synth as synth_lib
from pic.traces.io import write_trace
from pic.traces.outputs import check_output, is_pic_trace

ScenarioName = Scenario   # kept for callers of the old name


def _range_knobs(value: str | None, option: str, stem: str) -> dict[str, str]:
    if value is None:
        return {}
    lo, sep, hi = value.partition(":")
    if not sep or not lo.strip() or not hi.strip():
        raise ValueError(f"{option}: expected MIN:MAX, got {value!r}")
    return {f"{stem}_min": lo.strip(), f"{stem}_max": hi.strip()}


def _parse_knobs(sets: list[str] | None, scenario: str) -> dict[str, str]:
    """``--set [SCENARIO.]KNOB=VALUE``: the same SCOPE.KEY=VALUE form as `pic replay --set POLICY.KEY=VALUE`,
    the scope optional (it can only be the scenario being generated)."""
    out: dict[str, str] = {}
    for item in sets or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {item!r}: expected [{scenario}.]KNOB=VALUE")
        scope, dot, name = key.strip().rpartition(".")
        if dot and scope != scenario:
            raise ValueError(f"--set {item!r}: the scope must be the scenario being generated ({scenario}), "
                             f"got {scope!r}")
        out[name.replace("-", "_")] = value.strip()
    return out


def _knob_table(scenario: str) -> Table:
    cfg = synth_lib.scenario_config(scenario)
    table = Table(title=f"knobs of {scenario} (--set KNOB=VALUE or --set {scenario}.KNOB=VALUE)")
    for col in ("knob", "default", "help"):
        table.add_column(col)
    for f in fields(cfg):
        table.add_row(f.name, str(getattr(cfg, f.name)), f.metadata.get("help", ""))
    return table


def command(
    scenario: Annotated[Scenario, typer.Option("--scenario", "-s", parser=parser(Scenario),
                                               help="Traffic shape to generate (docs/scenarios.md).")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Trace to write (.parquet); required unless --list-knobs.")] = None,
    *,
    requests: Annotated[int, typer.Option("--requests", "-n", min=1, max=10_000_000, help="Number of requests.")] = 200,
    seed: Annotated[int, typer.Option(min=0, help="Random seed (same seed = same bytes).")] = 0,
    markers: Annotated[bool, typer.Option(
        "--markers", help="S2: wrap each shared region in 64-token boundary markers.")] = False,
    rate: Annotated[float | None, typer.Option(help="Mean arrival rate, requests/s.")] = None,
    header_len: Annotated[str | None, typer.Option(
        help="Metadata header tokens MIN:MAX (early-variation).")] = None,
    pool_size: Annotated[int | None, typer.Option(help="Shared document / tool-output pool size.")] = None,
    docs: Annotated[str | None, typer.Option(help="Documents per request MIN:MAX.")] = None,
    sets: Annotated[list[str] | None, typer.Option(
        "--set", help="Any scenario knob: [SCENARIO.]KNOB=VALUE, e.g. docs_max=8 or rag-reorder.docs_max=8 "
                      "(repeatable; see --list-knobs).")] = None,
    list_knobs: Annotated[bool, typer.Option("--list-knobs", help="Print the scenario's knobs and exit.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing OUTPUT that pic did not write.")] = False,
) -> None:
    """Generate a seeded synthetic agentic trace.

    Examples:

      pic synth --scenario early-variation --requests 200 --seed 0 -o ev.parquet

      pic synth -s early-variation -n 200 --markers -o ev-markers.parquet

      pic synth -s rag-reorder -n 500 --rate 4 --set docs_min=4 --set docs_max=8 -o rag.parquet

      pic synth -s chat --list-knobs
    """
    name = scenario.value
    with user_errors():
        if list_knobs:
            console.print(_knob_table(name))
            return
        if output is None:
            raise ValueError("--output: required (where to write the trace)")
        check_output(output, force=force, kind="file", own=is_pic_trace, option="--output")
        knobs = {**_range_knobs(header_len, "--header-len", "header"), **_range_knobs(docs, "--docs", "docs"), **_parse_knobs(sets, name)}
        if rate is not None:
            knobs["rate"] = rate
        if pool_size is not None:
            knobs["pool_size"] = pool_size
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=True) as bar:
            task = bar.add_task(f"{name} (seed {seed})", total=requests)
            trace = synth_lib.synth(name, requests, seed, markers=markers,
                                    progress=lambda n: bar.update(task, completed=n), **knobs)
        with console.status(styled(f"writing {output}...")):
            write_trace(trace, output)
        _print_summary(name, output, synth_lib.summarize(trace))


def _print_summary(name: str, output: Path, s: dict[str, float]) -> None:
    table = Table(title=f"{name} -> {output}", show_header=False)
    table.add_column(justify="left")
    table.add_column(justify="right")
    table.add_row("requests / sessions / agents", f"{s['requests']:,} / {s['sessions']:,} / {s['agents']:,}")
    table.add_row("prompt tokens (total)", f"{s['prompt_tokens']:,}")
    table.add_row("prompt tokens p50 / p99", f"{s['prompt_p50']:,.0f} / {s['prompt_p99']:,.0f}")
    table.add_row("distinct segment tokens", f"{s['distinct_tokens']:,} ({s['segments']:,} segments)")
    table.add_row("dedup ratio (total / distinct)", f"{s['dedup_ratio']:.2f}x")
    table.add_row("arrival span / rate", f"{s['span_s']:,.1f} s / {s['rate_rps']:.2f} req/s")
    table.add_row("file size", f"{output.stat().st_size / 1024:,.1f} KiB")
    console.print(table)
