"""`pic models`: list model and GPU presets (and any Hugging Face config.json you point it at)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pic.cli.errors import console, user_errors
from pic.engine.specs import catalog, model_from_hf_config


def _si(x: float, unit: str = "") -> str:
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.2f} {suffix}{unit}"
    return f"{x:g} {unit}".rstrip()


def _model_table(models: list[dict]) -> Table:
    t = Table(title="Model presets (use the name with --model)", title_justify="left")
    for col, just in (("name", "left"), ("attention", "left"), ("layers (attn/recurrent)", "right"),
                      ("KV B/token", "right"), ("RoPE-key B/token", "right"), ("state B/seq", "right"),
                      ("active params", "right"), ("total params", "right")):
        t.add_column(col, justify=just)
    for m in models:
        kinds = sorted({k for k in m["layer_kinds"] if k != "attn"})
        attn = m["attention"].upper() + (f" + {'/'.join(kinds)}" if kinds else "")
        t.add_row(m["name"], attn, f"{m['num_layers']} ({m['num_attn_layers']}/{m['num_recurrent_layers']})",
                  f"{m['kv_bytes_per_token']:,}", f"{m['rope_key_bytes_per_token']:,}",
                  f"{m['state_bytes']:,}" if m["state_bytes"] else "-",
                  f"{m['active_params'] / 1e9:.2f}B", f"{m['total_params'] / 1e9:.2f}B")
    return t


def _gpu_table(gpus: list[dict]) -> Table:
    t = Table(title="GPU presets (use the name with --gpu)", title_justify="left")
    for col in ("name", "bf16 FLOP/s", "HBM B/s", "busy W", "idle W", "HBM"):
        t.add_column(col, justify="left" if col == "name" else "right")
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
    """List the model presets (KV bytes per token, recurrent state, active parameters) and GPU presets."""
    with user_errors():
        extra = [model_from_hf_config(p) for p in config or []]
        cat = catalog(extra)
    if as_json:
        typer.echo(json.dumps(cat, indent=1))
        return
    console.print(_model_table(cat["models"]))
    console.print(_gpu_table(cat["gpus"]))
