"""`pic models`: list model and GPU presets (and any Hugging Face config.json you point it at)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from pic.cli.errors import console, user_errors
from pic.engine.specs import catalog, model_from_hf_config


def _si(x: float, unit: str = "") -> str:
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.2f} {suffix}{unit}"
    return f"{x:g} {unit}".rstrip()


def _bytes(n: int) -> str:
    """Compact byte count: ``31,104`` below 1 MB, else ``39.5 MB``."""
    return f"{n:,}" if n < 1_000_000 else f"{n / 1e6:,.1f} MB"


def _model_table(models: list[dict]) -> Table:
    # NOTE: fits 80 columns: compact values, no outer box; the name is what users copy, so it never wraps
    t = Table(title="Model presets (use the name with --model)", title_justify="left", box=box.SIMPLE_HEAD,
              pad_edge=False, padding=(0, 0), show_edge=False, caption="layers: attention+recurrent; KV and RoPE-key (k_r) bytes per token over all "
              "layers; state: recurrent bytes per sequence; params: active/total", caption_justify="left")
    t.add_column("name", justify="left", no_wrap=True, min_width=max((len(m["name"]) for m in models), default=4))
    for col, just in (("attention", "left"), ("layers", "right"), ("KV B/tok", "right"), ("k_r B/tok", "right"),
                      ("state", "right"), ("params", "right")):
        t.add_column(col, justify=just, no_wrap=True)
    for m in models:
        kinds = sorted({k for k in m["layer_kinds"] if k != "attn"})
        attn = m["attention"].upper() + (f"+{'/'.join(kinds)}" if kinds else "")
        layers = str(m["num_layers"]) if not m["num_recurrent_layers"] else \
            f"{m['num_attn_layers']}+{m['num_recurrent_layers']}"
        t.add_row(m["name"], attn, layers, f"{m['kv_bytes_per_token']:,}", f"{m['rope_key_bytes_per_token']:,}",
                  _bytes(m["state_bytes"]) if m["state_bytes"] else "-",
                  f"{m['active_params'] / 1e9:.3g}/{m['total_params'] / 1e9:.3g}B")
    return t


def _gpu_table(gpus: list[dict]) -> Table:
    t = Table(title="GPU presets (use the name with --gpu)", title_justify="left", box=box.SIMPLE_HEAD,
              pad_edge=False)
    t.add_column("name", justify="left", no_wrap=True, min_width=max((len(g["name"]) for g in gpus), default=4))
    for col in ("bf16 FLOP/s", "HBM B/s", "busy W", "idle W", "HBM"):
        t.add_column(col, justify="right", overflow="fold")
    for g in gpus:
        t.add_row(g["name"], _si(g["bf16_flops"]), _si(g["hbm_bytes_per_s"]), f"{g['busy_watts']:g}",
                  f"{g['idle_watts']:g}", _si(g["hbm_capacity_bytes"], "B"))
    return t


def command(
    *,
    config: Annotated[list[Path] | None, typer.Option(
        "--config", help="Also show a model read from this Hugging Face config.json (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the catalog as JSON instead of tables.")] = False,
) -> None:
    """List the model presets (KV bytes per token, recurrent state, active parameters) and GPU presets.

    Use a name with `pic replay --model NAME --gpu NAME`; any Hugging Face config.json works as a model too.

    Examples:

      pic models

      pic models --config ~/models/Qwen3-8B/config.json

      pic models --json | jq '.models[] | {name, kv_bytes_per_token}'
    """
    with user_errors():
        extra = [model_from_hf_config(p) for p in config or []]
        cat = catalog(extra)
    if as_json:
        typer.echo(json.dumps(cat, indent=1))
        return
    console.print(_model_table(cat["models"]))
    console.print(_gpu_table(cat["gpus"]))
