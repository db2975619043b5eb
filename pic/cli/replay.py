"""`pic replay`: replay a trace through cache policies (thin wrapper over ``engine.replay.replay``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pic.cli import errors
from pic.cli.choices import Gpu, GpuOption, Router, RouterOption
from pic.cli.errors import (
    ClosedLoopOption,
    LimitOption,
    ReplicasOption,
    SeedOption,
    TokenBudgetOption,
    print_line,
    print_warning,
    styled,
    user_errors,
)
from pic.cli.invocation import command_line
from pic.cli.plain_table import plain
from pic.cli.settings import (
    ConfigOption,
    PercentilesOption,
    RateOption,
    SloOption,
    TimeScaleOption,
    load_settings,
    summary_cells,
    summary_headline,
    summary_table,
    warning_lines,
)
from pic.cli.startup import imports_without_gc
from pic.traces.outputs import check_output, derived_outputs

if TYPE_CHECKING:
    from pic.engine.replay import RunResult

# NOTE (speed): the engine (numpy, polars, pyarrow) and rich's progress bar and tables are imported in the
# command's body: `pic replay --help` and `--list-policies` need none of them (~0.25 CPU s); rich's consoles
# (errors.console, errors.err_console) on first use: `--json` into a file or pipe uses none (~22 ms)


def _list_policies(value: bool) -> None:
    if value:
        _print_policies()
        raise typer.Exit()


def command(
    ctx: typer.Context,
    trace: Annotated[Path | None, typer.Argument(
        help="Canonical trace (.parquet from `pic ingest`/`pic synth`), or a raw log any reader accepts; may "
             "come from --config instead.", show_default=False)] = None,
    *,
    output: Annotated[Path, typer.Option("--output", "-o", help="Run directory to write.", show_default=False)],
    config: ConfigOption = None,
    policy: Annotated[str, typer.Option(help="Comma-separated policies (see --list-policies).")] = "prefix",
    model: Annotated[str, typer.Option(help="Model preset (see `pic models`) or a config.json path.")]
    = "deepseek-v2-lite",
    gpu: GpuOption = Gpu.h200,
    capacity: Annotated[str, typer.Option(help="Cache capacity per replica: 40GiB, 512MiB, 1e9, inf.")] = "inf",
    replicas: ReplicasOption = 1,
    router: RouterOption = Router.round_robin,
    token_budget: TokenBudgetOption = 8192,
    closed_loop: ClosedLoopOption = False,
    time_scale: TimeScaleOption = 1.0,
    rate: RateOption = None,
    percentiles: PercentilesOption = "50,90,99",
    slo: SloOption = None,
    sets: Annotated[list[str] | None, typer.Option(
        "--set", help="Policy option POLICY.KEY=VALUE (repeatable), e.g. prefix.page_size=16; cost.KEY=VALUE "
             "sets a cost-model factor (cost.mfu=0.5).")] = None,
    baseline: Annotated[str, typer.Option(
        help="Exact-prefix caches replayed beside the policies (comma-separated); each policy is compared with "
             "whichever reuses more. One of them (prefix: SGLang's radix cache; block-hash: vLLM's prefix "
             "caching) compares with that engine alone and skips the other's simulation.")]
    = "prefix,block-hash",
    seed: SeedOption = 0,
    verify: Annotated[bool, typer.Option(
        "--verify", help="Compare tokens on every hit and check cache invariants after every event.")] = False,
    limit: LimitOption = None,
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
    list_policies: Annotated[bool, typer.Option(
        "--list-policies", is_eager=True, callback=_list_policies, help="List policies and options, exit.")]
    = False,
) -> None:
    """Replay TRACE through each policy (one independent simulation per policy, same seed) and write
    RUN_DIR with requests.parquet, summary.json and config.json (which records the pic version, the trace's
    content digest and this command: `pic replay --config RUN_DIR/config.json -o NEW` replays it again).

    Examples:

      pic replay mooncake.parquet --policy prefix,fixed-chunk --capacity 40GiB -o runs/mc

      pic replay trace.parquet --policy irminsul --set irminsul.avg_chunk=256 --replicas 4 --router cache-aware -o runs/x

      pic replay trace.parquet --policy prefix,irminsul --rate 8 --slo ttft=200ms,tpot=40ms --percentiles 50,99,99.9 -o runs/load

      pic replay vllm-trace.parquet --policy irminsul --baseline block-hash -o runs/vs-vllm

      pic replay --config run.toml --capacity 8GiB -o runs/8g

      pic replay --config runs/x/config.json -o runs/x-again
    """
    with imports_without_gc():
        from pic.engine.memory import free_cycles
        from pic.engine.replay import check_config, read_trace_file, replay, write_run
        from pic.engine.runconfig import replay_config, trace_sha256
    with user_errors():
        file_values, cli_values, extras = load_settings(config, ctx)
        cfg = replay_config(file_values, cli_values)
        trace_path = trace if trace is not None else (Path(extras["trace"]) if extras["trace"] else None)
        if trace_path is None:
            raise ValueError("TRACE: missing (give a trace file, or a --config that names one)")
        check_output(output, inputs=[trace_path, cfg.model, *([config] if config else [])], force=force,
                     kind="run-dir", option="--output")
        check_config(cfg)                          # every impossible setting fails before any work
        gpu_ctx = None
        if execute:
            from pic.cli.execute import _open_gpu
            gpu_ctx = _open_gpu(True)              # no GPU / NVML / Triton backend: one line, before any work
        loaded = read_trace_file(trace_path)
        if trace is None and extras.get("trace_sha256") and trace_sha256(loaded) != extras["trace_sha256"]:
            raise ValueError(f"{trace_path}: the trace changed since {config} was written (content sha256 "
                             f"{trace_sha256(loaded)[:12]}…, recorded {str(extras['trace_sha256'])[:12]}…); "
                             "give TRACE to replay it anyway")
        with _progress_bar() as tick:
            result = replay(loaded, cfg, progress=tick, command=command_line(ctx))
        if gpu_ctx is None:
            del loaded     # NOTE (memory): the trace (2.2 GB at chat 10^6) is not held through the writes
            free_cycles(result.resolved["num_requests"])
        stale = derived_outputs(output)            # pic report's files in the folder: made from the old run
        write_run(result, output, force=force, inputs=(trace_path,))
        if gpu_ctx is not None:
            from pic.cli.execute import execute_into_run_dir
            execute_into_run_dir(loaded, cfg, output, gpu_ctx, execute_requests, cfg.seed)
        if as_json:
            typer.echo(json.dumps(result.summary, indent=2))
        else:
            _print_table(result, output)
        for line in warning_lines(result.summary):
            print_warning(line)
        if stale:
            _note_stale(output, stale)


@contextmanager
def _progress_bar() -> Iterator[Callable[[int, int], None] | None]:
    """The replay's progress callback: a transient bar on stderr where one is shown (an interactive terminal);
    elsewhere none (rich drew only a blank line there, and ran its refresh thread through the replay)."""
    if errors.plain_stderr() or not errors.err_console.is_interactive:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]replay"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=errors.err_console, transient=True) as bar:
        task = bar.add_task("replay", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _print_policies() -> None:
    from rich.table import Table

    from pic.engine import policies as registry

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
    errors.console.print(table)


def _print_table(result: RunResult, out: Path) -> None:
    s = result.summary
    if not result.config.verify and errors.plain_stderr(sys.stdout):
        # NOTE (speed): to a pipe or file, the text rich prints there, without rich (cli.plain_table: ~22 ms CPU)
        title, columns, rows = summary_cells(s, out)
        text = plain(errors.shown(title), columns, [tuple(map(errors.shown, r)) for r in rows], 190)
        if text is not None:
            line = summary_headline(s)
            sys.stdout.write(text + (errors.shown(line) + "\n" if line else ""))
            sys.stdout.flush()
            return
    console = errors.console
    errors.SafeConsole(width=max(console.width, 190)).print(summary_table(s, out))
    line = summary_headline(s)
    if line:
        console.print(styled((line, "bold")), soft_wrap=True)
    if result.config.verify:
        lines = [f"{name}: {p['collisions']} hash collision(s)" for name, p in s["policies"].items()]
        bad = any(p["collisions"] for p in s["policies"].values())
        console.print(styled(("--verify: every hit compared token by token; " + "; ".join(lines),
                              "bold red" if bad else "green")))


def _note_stale(out: Path, stale: list[Path]) -> None:
    """One line on stderr: the reports ``pic report`` wrote inside the run dir describe the run this replay
    replaced (kept: pic report wrote them on request), and the command that rewrites them from this run."""
    opts = {".html": "--html", ".htm": "--html", ".md": "--md"}
    args, seen = [], set()
    for p in sorted(stale, key=lambda p: (p.is_dir(), p.suffix.lower() == ".md")):   # --html, --md, --plots
        opt = "--plots" if p.is_dir() else opts[p.suffix.lower()]
        if opt not in seen:
            seen.add(opt)
            args += [opt, str(out / p.name)]
    names = ", ".join(str(out / p.name) + ("/" if p.is_dir() else "") for p in stale)
    print_line(("note:", "cyan"), f" {names} {'was' if len(stale) == 1 else 'were'} made by "
               "`pic report` from the run this replay replaced (kept); to refresh: ",
               (" ".join(["pic report", str(out), *args]), "bold"))
