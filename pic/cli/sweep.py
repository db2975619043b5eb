"""`pic sweep`: replay traces x models x capacities in parallel (thin wrapper over ``engine.sweep``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pic.cli.choices import Backend, Gpu, GpuOption, Router, RouterOption, parser
from pic.cli.errors import (
    ClosedLoopOption,
    LimitOption,
    ReplicasOption,
    SeedOption,
    TokenBudgetOption,
    console,
    err_console,
    print_error,
    split_list,
    user_errors,
)
from pic.cli.settings import (
    CLI_KEYS,
    ConfigOption,
    PercentilesOption,
    RateOption,
    SloOption,
    TimeScaleOption,
    given_options,
)
from pic.engine.config import parse_size
from pic.engine.runconfig import file_settings, normalize, read_config_file, replay_config
from pic.engine.sweep import CellResult, SweepConfig, SweepResult, capacity_label, hit_rate_grid, run_sweep


def command(
    ctx: typer.Context,
    traces: Annotated[list[Path] | None, typer.Argument(
        help="Canonical traces (.parquet from `pic ingest`/`pic synth`) or raw logs any reader accepts; may come "
             "from --config (traces = [...]) instead.", show_default=False)] = None,
    *,
    output: Annotated[Path, typer.Option("--output", "-o", help="Sweep directory to write.", show_default=False)],
    config: ConfigOption = None,
    policy: Annotated[str, typer.Option(help="Comma-separated policies, replayed together in every cell.")]
    = "prefix",
    capacity: Annotated[str, typer.Option(help="Comma-separated capacities per replica: 1GiB,4GiB,16GiB,inf.")]
    = "inf",
    model: Annotated[str, typer.Option(help="Comma-separated model presets (see `pic models`) or config.json.")]
    = "deepseek-v2-lite",
    gpu: GpuOption = Gpu.h200,
    replicas: ReplicasOption = 1,
    router: RouterOption = Router.round_robin,
    token_budget: TokenBudgetOption = 8192,
    closed_loop: ClosedLoopOption = False,
    time_scale: TimeScaleOption = 1.0,
    rate: RateOption = None,
    percentiles: PercentilesOption = "50,90,99",
    slo: SloOption = None,
    sets: Annotated[list[str] | None, typer.Option(
        "--set", help="Policy option POLICY.KEY=VALUE or cost.KEY=VALUE (repeatable), as in `pic replay`.")]
    = None,
    seed: SeedOption = 0,
    limit: LimitOption = None,
    jobs: Annotated[int | None, typer.Option(
        "--jobs", "-j", help="Local worker processes (default: the number of CPUs).", show_default=False)] = None,
    backend: Annotated[Backend, typer.Option(
        parser=parser(Backend), help="Where cells run: local (worker processes) or ray.")] = Backend.local,
    address: Annotated[str | None, typer.Option(
        help="Ray cluster address (implies --backend ray), e.g. ray://head:10001 or auto.")] = None,
    force: Annotated[bool, typer.Option("--force", help=(
        "Redo cells whose run dir is already complete; write into a folder pic did not create (only pic's "
        "files are written there, nothing else is touched)."))] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print sweep.json to stdout.")] = False,
) -> None:
    """Replay every (TRACE, model, capacity) cell with all policies, each cell in its own worker, into
    SWEEP_DIR/<trace>/<model>/cap-<size>/ (normal run dirs) plus SWEEP_DIR/sweep.json. Re-running skips
    complete cells; `pic report SWEEP_DIR` draws hit rate vs capacity.

    Examples:

      pic sweep trace.parquet --policy prefix,fixed-chunk,irminsul --capacity 1GiB,4GiB,16GiB,inf -o sweeps/s1

      pic sweep a.parquet b.parquet --model deepseek-v2-lite,llama-3.1-8b --capacity 10GiB,inf -j 4 -o sweeps/s2

      pic sweep trace.parquet --capacity 1GiB,inf --address auto -o sweeps/s3

      pic sweep --config sweep.yaml -o sweeps/s4      # traces, models, capacities + any replay setting
    """
    with user_errors():
        axes, file_values, cli_values = _settings(config, ctx)
        base = replay_config(file_values, cli_values)
        given = given_options(ctx, {"model": "model", "capacity": "capacity", "jobs": "jobs",
                                    "backend": "backend", "address": "address"})
        trace_list = [str(t) for t in traces] if traces else axes.get("traces")
        if not trace_list:
            raise ValueError("TRACES: missing (give trace files, or a --config with traces = [...])")
        models = given.get("model", axes.get("models", model))
        caps = given.get("capacity", axes.get("capacities", capacity))
        address = given.get("address", axes.get("address"))
        config_obj = SweepConfig(
            traces=tuple(trace_list), models=_names(models),
            capacities=tuple(parse_size(str(c)) for c in _names(caps)), replay=base,
            num_jobs=given.get("jobs", axes.get("jobs")),
            backend="ray" if address else str(given.get("backend", axes.get("backend", "local"))),
            address=address, force=force)
        with Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}", markup=False), console=err_console, transient=True) as bar:
            task = bar.add_task("", total=None)

            def tick(res: CellResult, done: int, total: int) -> None:
                bar.update(task, completed=done, total=total, description=f"{res.cell.run_dir} {res.status}")

            result = run_sweep(config_obj, output, progress=tick)
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


_AXES = {"traces": "traces", "trace": "traces", "models": "models", "model": "models", "capacities": "capacities",
         "capacity": "capacities", "jobs": "jobs", "backend": "backend", "address": "address"}


def _settings(config: Path | None, ctx: typer.Context) -> tuple[dict, dict, dict]:
    """(sweep axes from the file, replay settings from the file, replay settings from the command line)."""
    axes: dict = {}
    file_values: dict = {}
    if config is not None:
        raw = read_config_file(config)
        for key in list(raw):
            k = str(key).replace("-", "_")
            if k in _AXES:
                v = raw.pop(key)
                axes[_AXES[k]] = [str(x) for x in v] if isinstance(v, list) and k != "jobs" else v
        if isinstance(axes.get("traces"), str):
            axes["traces"] = [axes["traces"]]
        file_values, _ = file_settings(raw, str(config))
    keys = {k: v for k, v in CLI_KEYS.items() if k not in ("model", "capacity")}
    return axes, file_values, normalize(given_options(ctx, keys), "")


def _names(v) -> tuple[str, ...]:
    return tuple(str(x).strip() for x in v if str(x).strip()) if isinstance(v, list | tuple) else split_list(str(v))


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
        table.add_column("exact-prefix baseline", justify="right", style="dim")
        for cap in sorted(dict.fromkeys(r["capacity_bytes"] for r in grp)):
            at = {r["policy"]: r for r in grp if r["capacity_bytes"] == cap}
            base = next(iter(at.values()))["prefix_hit_rate"]     # the run's best exact-prefix cache
            table.add_row(capacity_label(cap), *[f"{at[p]['token_hit_rate']:.1%}" if p in at else "–"
                                                 for p in policies], f"{base:.1%}")
        console.print(table)
    counts = ", ".join(f"{result.count(s)} {s}" for s in ("done", "skipped", "failed") if result.count(s))
    console.print(f"{len(result.cells)} cells ({counts}) in {result.wall_seconds:.1f} s -> {result.out_dir}",
                  highlight=False)
