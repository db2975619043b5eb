"""`pic replay`: replay a trace through cache policies (thin wrapper over ``engine.replay.replay``)."""

from __future__ import annotations

import json
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
    SafeConsole,
    SeedOption,
    TokenBudgetOption,
    console,
    err_console,
    parse_sets,
    split_list,
    styled,
    user_errors,
)
from pic.engine import policies as registry
from pic.engine.config import ReplayConfig, parse_size
from pic.engine.replay import RunResult, check_config, read_trace_file, replay, write_run
from pic.traces.outputs import check_output


def command(
    trace: Annotated[Path | None, typer.Argument(
        help="Canonical trace (.parquet from `pic ingest`/`pic synth`), or a raw log any reader accepts.")] = None,
    *,
    policy: Annotated[str, typer.Option(help="Comma-separated policies (see --list-policies).")] = "prefix",
    model: Annotated[str, typer.Option(help="Model preset (see `pic models`) or a config.json path.")]
    = "deepseek-v2-lite",
    gpu: GpuOption = "h200",
    capacity: Annotated[str, typer.Option(help="Cache capacity per replica: 40GiB, 512MiB, 1e9, inf.")] = "inf",
    replicas: ReplicasOption = 1,
    router: RouterOption = "round-robin",
    token_budget: TokenBudgetOption = 8192,
    closed_loop: ClosedLoopOption = False,
    sets: Annotated[list[str] | None, typer.Option(
        "--set", help="Policy option POLICY.KEY=VALUE (repeatable), e.g. prefix.page_size=16; cost.KEY=VALUE "
             "sets a cost-model factor (cost.mfu=0.5).")] = None,
    seed: SeedOption = 0,
    verify: Annotated[bool, typer.Option(
        "--verify", help="Compare tokens on every hit and check cache invariants after every event.")] = False,
    limit: LimitOption = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Run directory to write.")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Write into an existing folder pic did not create (only pic's files are written; "
             "nothing else in it is touched).")] = False,
    profile: Annotated[str | None, typer.Option(
        help="Calibration profile from `pic calibrate` (path, or a bundled name such as h200-deepseek-v2-lite) "
             "replacing the roofline's efficiency factors.")] = None,
    execute: Annotated[bool, typer.Option(
        "--execute", help="Also run a sample of one policy's Plans on the GPU (as `pic execute --gpu`) and add "
             "measurements.parquet to RUN_DIR.")] = False,
    execute_requests: Annotated[int, typer.Option(
        min=1, help="Requests sampled for --execute (the policy: irminsul if replayed, else the first).")] = 16,
    as_json: Annotated[bool, typer.Option("--json", help="Print summary.json to stdout.")] = False,
    list_policies: Annotated[bool, typer.Option("--list-policies", help="List policies and options, exit.")]
    = False,
) -> None:
    """Replay TRACE through each policy (one independent simulation per policy, same seed) and write
    RUN_DIR with requests.parquet, summary.json and config.json.

    Examples:

      pic replay mooncake.parquet --policy prefix,fixed-chunk --capacity 40GiB -o runs/mc

      pic replay trace.parquet --policy irminsul --set irminsul.avg_chunk=128 --replicas 4 --router cache-aware -o runs/x
    """
    with user_errors():
        if list_policies:
            _print_policies()
            return
        if trace is None:
            raise ValueError("TRACE: missing (give a trace file, or --list-policies)")
        if output is None:
            raise ValueError("--output/-o: missing run directory")
        options = parse_sets(sets)
        cost = options.pop("cost", {})
        config = ReplayConfig(
            policies=split_list(policy), policy_options=options, cost=cost,
            model=model, gpu=gpu, capacity_bytes=parse_size(capacity), replicas=replicas, router=router,
            token_budget=token_budget, closed_loop=closed_loop, seed=seed, verify=verify,
            check_invariants=verify, max_requests=limit, profile=profile)
        check_output(output, inputs=[trace, model], force=force, kind="run-dir", option="--output")
        check_config(config)                       # every impossible setting fails before any work
        gpu_ctx = None
        if execute:
            from pic.cli.execute import _open_gpu
            gpu_ctx = _open_gpu(True)              # no GPU / NVML / Triton backend: one line, before any work
        loaded = read_trace_file(trace)
        with Progress(TextColumn("[bold]replay"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err_console, transient=True) as bar:
            task = bar.add_task("replay", total=None)
            result = replay(loaded, config, progress=lambda done, total: bar.update(task, completed=done,
                                                                                    total=total))
        write_run(result, output, force=force, inputs=(trace,))
        if gpu_ctx is not None:
            from pic.cli.execute import execute_into_run_dir
            execute_into_run_dir(loaded, config, output, gpu_ctx, execute_requests, seed)
        if as_json:
            typer.echo(json.dumps(result.summary, indent=2))
        else:
            _print_table(result, output)


def _print_policies() -> None:
    table = Table(title="policies (pic replay --policy NAME --set NAME.OPTION=VALUE)")
    table.add_column("policy", style="bold")
    table.add_column("option")
    table.add_column("default")
    table.add_column("help")
    for name in registry.names():
        doc = (registry.get(name).__doc__ or "").strip().splitlines()
        opts = registry.option_help(name)
        cfg = registry.make_config(name) if opts else None
        defaults = {opt: getattr(cfg, opt) for opt in opts} if cfg is not None else {}
        if not opts:
            table.add_row(name, "", "", doc[0] if doc else "")
        for i, (opt, text) in enumerate(opts.items()):
            table.add_row(name if i == 0 else "", opt, repr(defaults.get(opt, "")), text)
    console.print(table)


def _print_table(result: RunResult, out: Path) -> None:
    s = result.summary
    cap = "inf" if s["capacity_bytes"] is None else f"{s['capacity_bytes'] / 2**30:,.2f} GiB"
    table = Table(title=f"{s['trace']} · {s['model']} on {s['gpu']} · capacity {cap} · "
                        f"{s['replicas']} replica(s) -> {out}")
    for col in ("policy", "requests", "hit rate", "prefix hit", "beyond prefix", "TTFT p50", "TTFT p99",
                "saved vs none", "vs prefix", "peak GiB", "evictions", "wall s"):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for name, p in s["policies"].items():
        table.add_row(name, f"{p['requests']:,}", f"{p['token_hit_rate']:.1%}", f"{p['prefix_hit_rate']:.1%}",
                      f"{p['recovery_beyond_prefix']:.1%}", f"{p['ttft_p50_s']:.3f}", f"{p['ttft_p99_s']:.3f}",
                      f"{p['energy_saved_vs_none']:.1%}", f"{p['energy_saved_vs_prefix']:+.1%}",
                      f"{p['peak_resident_bytes'] / 2**30:,.2f}", f"{p['evictions']:,}", f"{p['wall_seconds']:.2f}")
    SafeConsole(width=max(console.width, 170)).print(table)
    if result.config.verify:
        lines = [f"{name}: {p['collisions']} hash collision(s)" for name, p in s["policies"].items()]
        bad = any(p["collisions"] for p in s["policies"].values())
        console.print(styled(("--verify: every hit compared token by token; " + "; ".join(lines),
                               "bold red" if bad else "green")))
