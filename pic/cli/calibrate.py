"""`pic calibrate`: measured prefill/extend/decode step times on the GPU -> a calibration profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pic.cli.choices import Gpu, parser
from pic.cli.errors import console, err_console, split_list, user_errors
from pic.cli.execute import LayersOption, NoEnergyOption, WeightsOption, _open_gpu


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(v) for v in split_list(text))
    except ValueError:
        raise ValueError(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not vals:
        raise ValueError(f"{what}: needs at least one value")
    return vals


def command(
    *,
    gpu: Annotated[bool, typer.Option("--gpu", help="Run on the CUDA GPU (required).")] = False,
    model: Annotated[str, typer.Option(help="Model preset or config.json (an MLA model).")] = "deepseek-v2-lite",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Profile JSON to write.")] = None,
    layers: LayersOption = None,
    weights: WeightsOption = None,
    new_tokens: Annotated[str, typer.Option(help="Prefill grid: new tokens per forward.")]
    = "1,16,32,33,64,128,256,512,1024,2048,4096,8192",
    cached_tokens: Annotated[str, typer.Option(help="Prefill grid: tokens already cached.")] = "0,2048,8192,16384",
    extra: Annotated[str, typer.Option(
        help="Extra prefill points NEW:CACHED beyond the grid (long full prefills).")] = "16384:0",
    rotated: Annotated[str, typer.Option(
        help="Prefill points NEW:CACHED whose cached pages are read rotated (the cost of REUSE_ROTATED keys).")]
    = "16:2048,64:2048,256:2048,1024:2048,16:8192,64:8192,256:8192,1024:8192,16:16384,64:16384,256:16384,1024:16384",
    decode_seqs: Annotated[str, typer.Option(help="Decode grid: sequences per step (batch).")] = "1,8,32,64",
    decode_context: Annotated[str, typer.Option(help="Decode grid: context tokens per sequence (>= 2 values).")]
    = "1024,4096",
    quick: Annotated[bool, typer.Option("--quick", help="A small grid (about a minute).")] = False,
    repeats: Annotated[int, typer.Option(min=1, help="Timed graph replays per point (median).")] = 5,
    gpu_name: Annotated[Gpu | None, typer.Option(parser=parser(Gpu),
        help="GPU preset the profile is for (default: detected, e.g. h200).")] = None,
    no_energy: NoEnergyOption = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file pic did not write.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the profile to stdout.")] = False,
) -> None:
    """Measure prefill/extend and decode step times of MODEL on this GPU over a grid (new tokens x cached tokens, batch x context) and write them as the calibration profile `pic replay --profile` reads.

    Each point is one forward through every layer (embedding to logits), the median of CUDA-graph replays; with --layers the times are scaled to the full depth. Board power (idle, busy) comes from NVML. The profile also records the attention layout (extend tile, SM count); `pic replay --profile` fits a Plan's attention makespan to the grid with it (docs/execute.md).

    Examples:

      pic calibrate --gpu -o h200-v2-lite.json

      pic calibrate --gpu --quick --layers 4 -o quick.json

      pic replay trace.parquet --policy irminsul --profile h200-v2-lite.json -o runs/cal
    """
    with user_errors():
        from pic.engine.calibration import write_profile
        from pic.engine.specs import gpu_from_name, model_from_name
        from pic.traces.outputs import check_output

        if output is None:
            raise ValueError("--output/-o: missing (the profile JSON to write)")
        if not gpu:
            raise ValueError("pass --gpu: calibration measures the GPU")
        spec = model_from_name(model)
        check_output(output, inputs=[model, weights], force=force, kind="file", option="--output",
                     own=_is_profile)
        if quick:
            new_tokens, cached_tokens, decode_seqs, decode_context = "1,16,64,512,2048", "0,4096", "1,16", "1024,4096"
            extra, rotated = "", "16:4096,64:4096,512:4096"
        extra_pts = _pairs(extra, "--extra", min_cached=0)
        rotated_pts = _pairs(rotated, "--rotated", min_cached=1)
        device, meter = _open_gpu(not no_energy)
        from pic.kernels.executor.api import build_model, gpu_preset
        from pic.kernels.executor.calibrate import CalibrationGrid, calibrate

        grid = CalibrationGrid(new_tokens=_ints(new_tokens, "--new-tokens"),
                               cached_tokens=_ints(cached_tokens, "--cached-tokens"),
                               decode_seqs=_ints(decode_seqs, "--decode-seqs"),
                               decode_context=_ints(decode_context, "--decode-context"), extra_prefill=extra_pts,
                               rotated=rotated_pts, repeats=repeats)
        label = gpu_from_name(gpu_name.value).name if gpu_name else gpu_preset(device)
        err_console.print(f"building {spec.name} on {label} ...", highlight=False)
        built = build_model(spec, layers=layers, weights=str(weights) if weights else None, device=device)
        with Progress(TextColumn("[bold]calibrate"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.description}"), TimeElapsedColumn(), console=err_console,
                      transient=True) as bar:
            task = bar.add_task("", total=None)
            profile, details = calibrate(built, label, spec.name, grid, meter=meter,
                                         progress=lambda k, n, what: bar.update(task, completed=k, total=n,
                                                                                description=what))
        write_profile(profile, output)
        if as_json:
            typer.echo(json.dumps(profile.to_dict(), indent=1))
            return
        t = Table(title=f"{spec.name} on {label}: prefill seconds (rows: new tokens, columns: cached) -> {output}",
                  title_justify="left")
        cached = sorted({c for _, c, _ in profile.prefill})
        t.add_column("new \\ cached", justify="right")
        for c in cached:
            t.add_column(f"{c:,}", justify="right")
        for n in sorted({n for n, _, _ in profile.prefill}):
            vals = {c: s for nn, c, s in profile.prefill if nn == n}
            t.add_row(f"{n:,}", *(f"{vals[c] * 1e3:.2f} ms" if c in vals else "" for c in cached))
        console.print(t)
        console.print(f"decode: {len(profile.decode)} points; rotated: {len(profile.prefill_rotated)} points; "
                      f"board power idle {profile.watts_idle:.0f} W, busy {profile.watts_busy:.0f} W; layers built "
                      f"{details['layers_built']} of {details['full_layers']}", highlight=False)
        f = profile.fit
        if f is not None:
            console.print(f"attention makespan fit: {f.slots} concurrent extend programs, "
                          f"{f.seconds_per_key * 1e9:.1f} ns per key read (whole forward), rotated keys "
                          f"x{f.rotated_factor:.2f} (decode kernel x{f.decode_rotated_factor:.2f}); grid error "
                          f"median {f.grid_error:.1%}", highlight=False)


def _pairs(text: str, option: str, min_cached: int) -> tuple[tuple[int, int], ...]:
    try:
        pts = tuple(tuple(int(v) for v in p.split(":")) for p in split_list(text))
    except ValueError:
        raise ValueError(f"{option}: expected NEW:CACHED pairs, got {text!r}") from None
    if any(len(p) != 2 or p[0] < 1 or p[1] < min_cached for p in pts):
        raise ValueError(f"{option}: expected NEW:CACHED pairs (NEW >= 1, CACHED >= {min_cached}), got {text!r}")
    return pts


def _is_profile(path: Path) -> bool:
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("format", "").startswith("pic-calibration/")
    except (OSError, ValueError, AttributeError):
        return False
