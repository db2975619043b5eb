"""Replay settings shared by `pic replay` and `pic sweep`: the serving-benchmark options (--time-scale,
--rate, --percentiles, --slo), --config files under command-line options, and the run summary printed
after a replay (table in ms, the headline, the replay's warnings)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pic.cli.invocation import typed

if TYPE_CHECKING:
    from rich.table import Table

# NOTE (speed): the engine (runconfig: numpy), polars, rich's tables and the report's formatting are imported
# where they are used: `--help` needs none of them, and a `--json` replay prints no table (~10 ms CPU)

ConfigOption = Annotated[Path | None, typer.Option(
    "--config", "-c", help="Settings file (TOML or YAML; or a run's config.json to replay it again). Options "
    "given on the command line win; policy options and cost factors merge key by key.", show_default=False)]
TimeScaleOption = Annotated[float, typer.Option(
    min=1e-9, help="Multiply every arrival gap by this: 0.5 = the same traffic twice as fast (Vidur "
    "time_scale_factor).")]
RateOption = Annotated[str | None, typer.Option(
    help="Re-time arrivals to this mean rate, requests/s, keeping their pattern; inf = all at once (vLLM "
    "--request-rate).", show_default=False)]
PercentilesOption = Annotated[str, typer.Option(
    help="Percentiles reported for TTFT/TPOT/ITL/E2EL (vLLM --metric-percentiles).")]
SloOption = Annotated[str | None, typer.Option(
    help="Goodput SLO, e.g. ttft=500ms,tpot=50ms (plain numbers are ms; keys ttft, tpot, e2el; vLLM --goodput).",
    show_default=False)]

#: CLI parameter name -> settings key understood by engine.runconfig.normalize
CLI_KEYS = {"policy": "policy", "model": "model", "gpu": "gpu", "capacity": "capacity", "replicas": "replicas",
            "router": "router", "token_budget": "token_budget", "closed_loop": "closed_loop", "sets": "set",
            "seed": "seed", "verify": "verify", "limit": "limit", "profile": "profile",
            "time_scale": "time_scale", "rate": "rate", "percentiles": "percentiles", "slo": "slo",
            "baseline": "baseline"}


def given_options(ctx: typer.Context, keys: dict[str, str] = CLI_KEYS) -> dict[str, Any]:
    """The options the user typed (not defaults), as settings (enum members as their text)."""
    out: dict[str, Any] = {}
    for name, key in keys.items():
        if name in ctx.params and typed(ctx, name):
            v = ctx.params[name]
            out[key] = getattr(v, "value", v)
    if "verify" in out:
        out["check_invariants"] = out["verify"]
    return out


def load_settings(config: Path | None, ctx: typer.Context, keys: dict[str, str] = CLI_KEYS
                  ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(file settings, command-line settings, file extras)`` — both settings :func:`normalize`\\ d."""
    from pic.engine.runconfig import file_settings, normalize, read_config_file

    file_values: dict[str, Any] = {}
    extras: dict[str, Any] = {"trace": None, "trace_sha256": None}
    if config is not None:
        file_values, extras = file_settings(read_config_file(config), str(config))
        if file_values.get("verify") and "check_invariants" not in file_values:
            file_values["check_invariants"] = True
    return file_values, normalize(given_options(ctx, keys), ""), extras


def summary_table(s: dict[str, Any], out: Path) -> Table:
    """The per-policy table printed after a replay (times in ms; capacity per replica; peak over replicas)."""
    from rich.table import Table

    title, columns, rows = summary_cells(s, out)
    table = Table(title=title)
    for col, justify in columns:
        table.add_column(col, justify=justify, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def summary_cells(s: dict[str, Any], out: Path) -> tuple[str, list[tuple[str, str]], list[tuple[str, ...]]]:
    """:func:`summary_table`'s title, columns (header, justify) and rows, as strings (no rich)."""
    from pic.engine.report.fmt import fmt_ms, fmt_pct, fmt_speedup, signed_pct

    cap = "unbounded" if s["capacity_bytes"] is None else f"{s['capacity_bytes'] / 2**30:,.2f} GiB"
    r = s["replicas"]
    title = (f"{s['trace']} · {s['model']} on {s['gpu']} · capacity {cap}"
             f"{' per replica' if r != 1 else ''} · {r} replica{'s' if r != 1 else ''} -> {out}")
    best = _best_prefix_ttft(s)
    cols = ("policy", "requests", "hit rate", "prefix hit", "beyond prefix", "TTFT p50", "TTFT p99", "speed-up",
            "TPOT p50", "saved vs none", "vs prefix", "peak GiB (all replicas)", "evictions", "wall s")
    rows = []
    for name, p in s["policies"].items():
        speed = best / p["ttft_p50_s"] if best is not None and p["ttft_p50_s"] > 0 else None
        rows.append((name, f"{p['requests']:,}", fmt_pct(p["token_hit_rate"]), fmt_pct(p["prefix_hit_rate"]),
                     fmt_pct(p["recovery_beyond_prefix"]), fmt_ms(p["ttft_p50_s"]), fmt_ms(p["ttft_p99_s"]),
                     fmt_speedup(speed), fmt_ms(p.get("tpot_p50_s")), fmt_pct(p["energy_saved_vs_none"]),
                     signed_pct(p["energy_saved_vs_prefix"]), f"{p['peak_resident_bytes'] / 2**30:,.2f}",
                     f"{p['evictions']:,}", f"{p['wall_seconds']:.2f}"))
    return title, [(c, "left" if c == "policy" else "right") for c in cols], rows


def summary_headline(s: dict[str, Any]) -> str | None:
    """The report's headline sentence for one run's summary.json (engine.report.headline; no polars)."""
    from pic.engine.report.headline import summary_headline as headline

    return headline(s)


def warning_lines(s: dict[str, Any]) -> list[str]:
    """The replay's own warnings (saturation, does not fit), one line each."""
    return [w["message"] for w in s.get("warnings") or [] if isinstance(w, dict) and "message" in w]


def _best_prefix_ttft(s: dict[str, Any]) -> float | None:
    from pic.engine.config import EXACT_PREFIX

    cand = [(p["token_hit_rate"], -p["ttft_p50_s"], p["ttft_p50_s"]) for n, p in s["policies"].items()
            if n in EXACT_PREFIX and not math.isnan(p["ttft_p50_s"])]
    return max(cand)[2] if cand else None
