"""`pic execute`: run a policy's Plans on real kernels on the GPU; measured TTFT, HBM bytes, joules."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pic.cli.errors import SeedOption, console, err_console, parse_sets, user_errors
from pic.engine.config import ReplayConfig, parse_size

GpuFlag = Annotated[bool, typer.Option("--gpu", help="Run on the CUDA GPU (required unless --plans-only).")]
LayersOption = Annotated[int | None, typer.Option(
    "--layers", min=1, help="Build only the first N layers; times and joules are scaled to the full depth.")]
WeightsOption = Annotated[Path | None, typer.Option(
    "--weights", help="Folder of Hugging Face safetensors (DeepSeek-V2 layout, with config.json); "
         "default: random bf16 weights of the real shapes.")]
NoEnergyOption = Annotated[bool, typer.Option(
    "--no-energy", help="Skip the NVML energy meter (no nvidia-ml-py needed; joules columns are NaN).")]


def command(
    source: Annotated[Path, typer.Argument(
        help="A trace (.parquet or a raw log), a `pic replay` run dir, or a plans.parquet from --plans-only.",
        show_default=False)],
    *,
    gpu: GpuFlag = False,
    plans_only: Annotated[bool, typer.Option(
        "--plans-only", help="Only record the policy's Plans into OUT (a plans.parquet); no GPU needed.")] = False,
    policy: Annotated[str | None, typer.Option(
        help="Policy whose Plans run (default: irminsul, or the run dir's irminsul/first policy).")] = None,
    model: Annotated[str, typer.Option(help="Model preset or config.json (an MLA model).")] = "deepseek-v2-lite",
    capacity: Annotated[str, typer.Option(help="Cache capacity of the replay: 40GiB, inf.")] = "inf",
    sets: Annotated[list[str] | None, typer.Option(
        "--set", help="Policy option POLICY.KEY=VALUE (repeatable), as in `pic replay`.")] = None,
    profile: Annotated[str | None, typer.Option(
        help="Calibration profile pricing the predicted columns (path or bundled name); default: roofline.")]
    = None,
    requests: Annotated[int | None, typer.Option(
        "--requests", "-k", min=1, help="Execute a seeded sample of K requests (default 16; all: 0).")] = 16,
    max_tokens: Annotated[int | None, typer.Option(
        min=1, help="Sample only among prompts of at most this many tokens.")] = None,
    seed: SeedOption = 0,
    layers: LayersOption = None,
    weights: WeightsOption = None,
    repeats: Annotated[int, typer.Option(min=1, help="Timed runs per forward (median reported).")] = 5,
    energy_seconds: Annotated[float, typer.Option(
        min=0.1, help="Repeat each forward at least this long for the energy counter.")] = 1.0,
    no_energy: NoEnergyOption = False,
    no_graphs: Annotated[bool, typer.Option(
        "--no-graphs", help="Time eager forwards (with host launch overhead) instead of CUDA-graph replays.")]
    = False,
    page_size: Annotated[int, typer.Option(help="Latent cache page, tokens.")] = 64,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Folder to write (measurements.parquet, execute.json, plans.parquet); "
             "with --plans-only the plans.parquet file.")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Write into an existing folder/file pic did not create (only pic's files).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print execute.json to stdout.")] = False,
) -> None:
    """Execute a cache policy's Plans on real DeepSeek-V2-style layers and measure them.

    The trace is replayed through the policy (the same simulation as `pic replay`); for a sample of its requests, in order, each Plan runs against a real paged latent cache filled by earlier requests: reused spans are read in place (rotated ones through the fused-δ kernels), RECOMPUTE spans run through the layers, and the full prefill of the same prompt runs too. Measured TTFT (CUDA events), HBM bytes (kernel access counts) and joules (NVML) land in OUT/measurements.parquet beside the replay's predictions.

    Examples:

      pic execute ev.parquet --gpu --policy irminsul -k 16 -o runs/ev-exec

      pic execute runs/rag --gpu --layers 4 -o runs/rag-exec   (a replay run dir; times scaled to 27 layers)

      pic execute miniswe.parquet --plans-only -o miniswe-plans.parquet   (on a CPU box, then:)
      pic execute miniswe-plans.parquet --gpu -o runs/miniswe-exec

      pic report runs/ev-exec
    """
    with user_errors():
        from pic.engine.planlog import is_plan_log
        from pic.traces.outputs import check_output

        if output is None:
            raise ValueError("--output/-o: missing (a folder; with --plans-only a .parquet file)")
        if not source.exists():
            raise ValueError(f"{source}: no such file or folder")
        if plans_only and gpu:
            raise ValueError("--plans-only records Plans without a GPU; drop --gpu (or --plans-only)")
        if not plans_only and not gpu:
            raise ValueError("pass --gpu to execute on the GPU (or --plans-only to record the Plans only)")
        inputs = [source, weights, model, profile]
        if plans_only:
            check_output(output, inputs=inputs, force=force, kind="file", own=is_plan_log, option="--output")
        else:
            check_output(output, inputs=inputs, force=force, kind="run-dir", option="--output",
                         names=("measurements.parquet", "execute.json", "plans.parquet"))
        device, meter = (None, None) if plans_only else _open_gpu(not no_energy)
        log = _plan_log(source, policy, model, capacity, sets, profile, seed)
        if plans_only:
            log.write(output)
            err_console.print(f"wrote {len(log)} plans ({log.meta.get('policy')}) -> {output}", highlight=False)
            return
        from pic.engine.measurements import summarize, write_measurements
        from pic.engine.specs import model_from_name
        from pic.kernels.executor import ExecConfig
        from pic.kernels.executor.api import build_model, execute

        spec = model_from_name(log.meta.get("model", model))
        indices = log.sample(requests or None, seed=seed, max_tokens=max_tokens)
        if not indices:
            raise ValueError(f"{source}: no request to execute (--max-tokens {max_tokens} leaves none)")
        err_console.print(f"building {spec.name} ({'weights ' + str(weights) if weights else 'random bf16 weights'}"
                          f"{f', {layers} of {spec.num_layers} layers' if layers else ''}) ...", highlight=False)
        built = build_model(spec, layers=layers, weights=str(weights) if weights else None, device=device, seed=seed)
        cfg = ExecConfig(page_size=page_size, repeats=repeats, graphs=not no_graphs,
                         energy_seconds=0.0 if no_energy else energy_seconds)
        with Progress(TextColumn("[bold]execute"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                      TimeElapsedColumn(), console=err_console, transient=True) as bar:
            task = bar.add_task("", total=len(indices))
            rows, meta = execute(log, built, indices, cfg, meter,
                                 progress=lambda k, n, what: bar.update(task, completed=k, description=what))
        summary = summarize(rows, meta)
        write_measurements(output, rows, summary, plans=log, force=force, inputs=inputs)
        if as_json:
            typer.echo(json.dumps(summary, indent=2, default=str))
        else:
            print_measurements(rows, summary, output)


def _open_gpu(energy: bool) -> tuple[Any, Any]:
    """The CUDA device and the energy meter, or a one-line error (no torch, no GPU, no Triton backend, no NVML)."""
    try:
        from pic.kernels.executor.api import check_gpu, open_meter
    except ImportError as e:
        raise ValueError(f"pic execute needs torch and triton (pip install 'pic[gpu]'): {e}") from None
    from pic.kernels.energy import EnergyUnavailable
    from pic.kernels.executor.device import GpuUnavailable

    try:
        device = check_gpu()
        return device, open_meter(energy, device)
    except (GpuUnavailable, EnergyUnavailable) as e:
        hint = " (or --no-energy)" if isinstance(e, EnergyUnavailable) else ""
        raise ValueError(f"{e}{hint}") from None


def _plan_log(source: Path, policy: str | None, model: str, capacity: str, sets: list[str] | None,
              profile: str | None, seed: int) -> Any:
    """The PlanLog of SOURCE: read (plans.parquet) or recorded by replaying the trace / run dir's trace."""
    from pic.engine.planlog import is_plan_log, read_plan_log, record_plans, run_dir_config

    if source.is_file() and is_plan_log(source):
        log = read_plan_log(source)
        if policy and policy != log.meta.get("policy"):
            raise ValueError(f"{source}: holds {log.meta.get('policy')!r} plans, not {policy!r}")
        return log
    if source.is_dir():
        trace_path, config = run_dir_config(source)
        name = policy or ("irminsul" if "irminsul" in config.policies else config.policies[0])
        if name not in config.policies:
            raise ValueError(f"{source}: replayed {', '.join(config.policies)}, not {name!r}")
        if profile:
            config = _replace(config, profile=profile)
    else:
        trace_path, name = source, policy or "irminsul"
        options = parse_sets(sets)
        cost = options.pop("cost", {})
        config = ReplayConfig(policies=(name,), policy_options=options, cost=cost, model=model,
                              capacity_bytes=parse_size(capacity), seed=seed, profile=profile)
    from pic.engine.replay import check_config, read_trace_file

    _, _, cost_model, _ = check_config(_replace(config, policies=(name,), policy_options={
        k: v for k, v in config.policy_options.items() if k == name}))
    trace = read_trace_file(trace_path)
    with Progress(TextColumn("[bold]replay"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True) as bar:
        task = bar.add_task("replay", total=None)
        return record_plans(trace, config, name, progress=lambda d, n: bar.update(task, completed=d, total=n),
                            cost=cost_model)


def _replace(config: ReplayConfig, **kw: Any) -> ReplayConfig:
    import dataclasses

    return dataclasses.replace(config, **kw)


def print_measurements(rows: list[dict[str, Any]], s: dict[str, Any], out: Path | None = None) -> None:
    """Per-request table (measured beside predicted) and the headline figures."""
    scaled = s.get("depth_scale", 1.0) != 1.0
    title = (f"{s.get('policy')} on {s.get('model')} · {s.get('gpu')} · {s.get('requests')} requests"
             + (f" · {s.get('layers_built')} of {s.get('full_layers')} layers built, scaled x{s['depth_scale']:.2f}"
                if scaled else "") + (f" -> {out}" if out else ""))
    t = Table(title=title, title_justify="left")
    for col in ("request", "tokens", "reused", "rotated", "TTFT ms", "full ms", "ratio", "predicted ms", "error",
                "J", "J full", "saved", "out dev"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        err = (r["predicted_ttft_s"] - r["ttft_s"]) / r["ttft_s"]
        saved = 1 - r["joules"] / r["joules_full"] if _finite(r.get("joules")) else math.nan
        t.add_row(str(r["request_id"]), f"{r['prompt_tokens']:,}", f"{r['reused_tokens'] / r['prompt_tokens']:.0%}",
                  f"{r['rotated_tokens']:,}", f"{r['ttft_s'] * 1e3:.1f}", f"{r['ttft_full_s'] * 1e3:.1f}",
                  f"{r['ttft_s'] / r['ttft_full_s']:.3f}", f"{r['predicted_ttft_s'] * 1e3:.1f}", f"{err:+.0%}",
                  _num(r.get("joules"), ".2f"), _num(r.get("joules_full"), ".2f"), _num(saved, ".0%"),
                  _num(r.get("out_dev"), ".1e"))
    Console(width=max(console.width, 140)).print(t)
    f = s.get("fidelity", {})
    lines = [f"reuse {s['reuse']:.1%} · TTFT ratio p50 {s['ttft_ratio_p50']:.3f} p90 {s['ttft_ratio_p90']:.3f}"
             f" · predicted TTFT error (median |rel|) {f.get('ttft_mare', math.nan):.1%}"
             f" · full prefill {f.get('ttft_full_mare', math.nan):.1%}"]
    if _finite(s.get("energy_saved_hits_total")):
        lines.append(f"energy saved per hit {s['energy_saved_hits_total']:.1%} (board) · "
                     f"{s['energy_saved_dyn_hits_total']:.1%} above idle · {s['joules_per_hit']:.2f} J per hit")
    for line in lines:
        console.print(line, highlight=False)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _num(x: Any, fmt: str) -> str:
    return format(x, fmt) if _finite(x) else "-"


def execute_into_run_dir(trace: Any, config: ReplayConfig, run_dir: Path, gpu_ctx: tuple[Any, Any],
                         requests: int, seed: int) -> None:
    """`pic replay --execute`: execute a sample of one replayed policy's Plans, add the measurements."""
    from pic.engine.measurements import summarize, write_measurements
    from pic.engine.planlog import record_plans
    from pic.engine.replay import check_config
    from pic.engine.specs import model_from_name
    from pic.kernels.executor import ExecConfig
    from pic.kernels.executor.api import build_model, execute

    name = "irminsul" if "irminsul" in config.policies else config.policies[0]
    _, _, cost_model, _ = check_config(config)
    log = record_plans(trace, config, name, cost=cost_model)
    device, meter = gpu_ctx
    built = build_model(model_from_name(config.model), device=device, seed=seed)
    indices = log.sample(requests, seed=seed)
    with Progress(TextColumn("[bold]execute"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=err_console, transient=True) as bar:
        task = bar.add_task("", total=len(indices))
        rows, meta = execute(log, built, indices, ExecConfig(), meter,
                             progress=lambda k, n, what: bar.update(task, completed=k, description=what))
    summary = summarize(rows, meta)
    write_measurements(run_dir, rows, summary, plans=log, into_run_dir=True)
    print_measurements(rows, summary, run_dir)


def print_comparison(rows: list[dict[str, Any]], s: dict[str, Any], where: Path) -> None:
    """`pic report` on a folder with measurements.parquet: measured beside predicted, per metric."""
    from pic.engine.report.measured import measured_rows, measured_title

    t = Table(title=measured_title(where, s), title_justify="left")
    heads, body = measured_rows(rows, s)
    for c in ("metric", *heads):
        t.add_column(c, justify="left" if c == "metric" else "right")
    for label, vals in body:
        t.add_row(label, *vals)
    console.print(t)
