"""`pic sweep`: replay traces x models x capacities in parallel (thin wrapper over ``engine.sweep``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pic.cli.errors import (
    ClosedLoopOption,
    GpuOption,
    LimitOption,
    ReplicasOption,
    RouterOption,
    SeedOption,
    TokenBudgetOption,
    console,
    err_console,
    parse_sets,
    print_error,
    split_list,
    user_errors,
)
from pic.engine.config import ReplayConfig, parse_size
from pic.engine.sweep import CellResult, SweepConfig, SweepResult, capacity_label, hit_rate_grid, run_sweep


def command(
    traces: Annotated[list[Path], typer.Argument(
        help="Canonical traces (.parquet from `pic ingest`/`pic synth`) or raw logs any reader accepts.",
        show_default=False)],
    *,
    policy: Annotated[str, typer.Option(help="Comma-separated policies, replayed together in every cell.")]
    = "prefix",
    capacity: Annotated[str, typer.Option(help="Comma-separated capacities per replica: 1GiB,4GiB,16GiB,inf.")]
    = "inf",
    model: Annotated[str, typer.Option(help="Comma-separated model presets (see `pic models`) or config.json.")]
    = "deepseek-v2-lite",
    gpu: GpuOption = "h200",
    replicas: ReplicasOption = 1,
    router: RouterOption = "round-robin",
    token_budget: TokenBudgetOption = 8192,
    closed_loop: ClosedLoopOption = False,
    sets: Annotated[list[str] | None, typer.Option(
        "--set", help="Policy option POLICY.KEY=VALUE or cost.KEY=VALUE (repeatable), as in `pic replay`.")]
    = None,
    seed: SeedOption = 0,
    limit: LimitOption = None,
    jobs: Annotated[int | None, typer.Option(
        "--jobs", "-j", help="Local worker processes (default: the number of CPUs).", show_default=False)] = None,
    backend: Annotated[str, typer.Option(help="local (worker processes) | ray.")] = "local",
    address: Annotated[str | None, typer.Option(
        help="Ray cluster address (implies --backend ray), e.g. ray://head:10001 or auto.")] = None,
    force: Annotated[bool, typer.Option("--force", help=(
        "Redo cells whose run dir is already complete; write into a folder pic did not create (only pic's "
        "files are written there, nothing else is touched)."))] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Sweep directory to write.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print sweep.json to stdout.")] = False,
) -> None:
    """Replay every (TRACE, model, capacity) cell with all policies, each cell in its own worker, into
    SWEEP_DIR/<trace>/<model>/cap-<size>/ (normal run dirs) plus SWEEP_DIR/sweep.json. Re-running skips
    complete cells; `pic report SWEEP_DIR` draws hit rate vs capacity.

    Examples:

      pic sweep trace.parquet --policy prefix,fixed-chunk,irminsul --capacity 1GiB,4GiB,16GiB,inf -o sweeps/s1

      pic sweep a.parquet b.parquet --model deepseek-v2-lite,llama-3.1-8b --capacity 10GiB,inf -j 4 -o sweeps/s2

      pic sweep trace.parquet --capacity 1GiB,inf --address auto -o sweeps/s3
    """
    with user_errors():
        if output is None:
            raise ValueError("--output/-o: missing sweep directory")
        options = parse_sets(sets)
        cost = options.pop("cost", {})
        base = ReplayConfig(
            policies=split_list(policy), policy_options=options, cost=cost, gpu=gpu, replicas=replicas,
            router=router, token_budget=token_budget, closed_loop=closed_loop, seed=seed, max_requests=limit)
        config = SweepConfig(
            traces=tuple(str(t) for t in traces), models=split_list(model),
            capacities=tuple(parse_size(c) for c in split_list(capacity)), replay=base, num_jobs=jobs,
            backend="ray" if address else backend, address=address, force=force)
        with Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}", markup=False), console=err_console, transient=True) as bar:
            task = bar.add_task("", total=None)

            def tick(res: CellResult, done: int, total: int) -> None:
                bar.update(task, completed=done, total=total, description=f"{res.cell.run_dir} {res.status}")

            result = run_sweep(config, output, progress=tick)
    if as_json:
        typer.echo((output / "sweep.json").read_text(), nl=False)
    else:
        _print_grid(result)
    for r in result.cells:
        if r.status == "failed":
            print_error(f"{r.cell.run_dir}: {r.error}", "failed:")
    if result.count("failed"):
        print_error(f"{result.count('failed')} of {len(result.cells)} cells failed (see {output / 'sweep.json'}); "
                    "re-run to retry them")
        raise typer.Exit(code=1)


def _print_grid(result: SweepResult) -> None:
    """One table per (trace, model): capacities as rows, each policy's token hit rate as columns."""
    rows = hit_rate_grid(result)
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["trace"], r["model"]), []).append(r)
    for (trace, model), grp in groups.items():
        policies = list(dict.fromkeys(r["policy"] for r in grp))
        table = Table(title=f"{trace} · {model} · token hit rate", title_justify="left")
        table.add_column("capacity", justify="right")
        for p in policies:
            table.add_column(p, justify="right")
        table.add_column("prefix (shadow)", justify="right", style="dim")
        for cap in sorted(dict.fromkeys(r["capacity_bytes"] for r in grp)):
            at = {r["policy"]: r for r in grp if r["capacity_bytes"] == cap}
            shadow = at.get("prefix", next(iter(at.values())))["prefix_hit_rate"]
            table.add_row(capacity_label(cap), *[f"{at[p]['token_hit_rate']:.1%}" if p in at else "–"
                                                 for p in policies], f"{shadow:.1%}")
        console.print(table)
    counts = ", ".join(f"{result.count(s)} {s}" for s in ("done", "skipped", "failed") if result.count(s))
    console.print(f"{len(result.cells)} cells ({counts}) in {result.wall_seconds:.1f} s -> {result.out_dir}",
                  highlight=False)
