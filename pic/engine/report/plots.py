"""Report figures as PNG bytes (matplotlib Agg, no pyplot global state).

Per scenario (trace, model, gpu, replicas, capacity): a TTFT CDF per policy on a log time axis, bars of
token hit rate / prefix hit rate / recovery beyond prefix, and prompt tokens by action (in place,
rotated, recomputed). Across capacities: hit rate vs capacity lines when a (trace, model, policy) was
replayed at more than one capacity. PNG metadata carries no software/version stamp, so rerunning the
report on the same run dirs gives byte-identical files.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from pic.engine.report.data import ReportData, fmt_bytes, policy_labels, scenario_title
from pic.traces.outputs import atomic_dir

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
_DASHES = ("-", "--", "-.", (0, (5, 1, 1, 1, 1, 1)))
_DPI = 110
_GIB = 2.0**30
#: file name of the hit-rate-vs-capacity figure (the report shows it first)
CAPACITY_PLOT = "hit_rate_vs_capacity.png"


@dataclass(frozen=True, slots=True)
class Plot:
    """One rendered figure: file ``name`` (``*.png``), a ``title``, a one-line ``caption``, PNG bytes, and
    the ``group`` it belongs to (a scenario title, or ``""`` for figures spanning scenarios)."""

    name: str
    title: str
    caption: str
    png: bytes
    group: str = ""


# ---- Public API -----------------------------------------------------------------------------------

def scenario_slug(key: dict, varying: list[str]) -> str:
    """File-name part naming a scenario by what differs between the report's scenarios, e.g.
    ``rag_cap-8GiB_2rep`` (empty when there is one scenario)."""
    from pic.engine.sweep import capacity_label  # NOTE: lazy; sweep pulls in process pools

    parts = []
    for k in varying:
        v = key[k]
        if k == "trace":
            parts.append(Path(str(v)).stem)
        elif k == "capacity_bytes":
            parts.append(f"cap-{capacity_label(v)}")
        elif k == "replicas":
            parts.append(f"{v}rep")
        else:
            parts.append(str(v))
    return re.sub(r"[^A-Za-z0-9._-]+", "-", "_".join(parts)).strip("-")


def render_plots(data: ReportData) -> list[Plot]:
    """All report figures, in display order: ``hit_rate_vs_capacity.png`` (when capacities were compared),
    then per scenario ``ttft_cdf``, ``hit_rates``, ``tokens_by_action`` — suffixed by what distinguishes the
    scenario (``ttft_cdf_cap-8GiB.png``) when there are several."""
    # colour and dash per policy, the same in every figure; dashes keep coinciding curves visible
    color = {p: {"color": _COLORS[i % len(_COLORS)], "ls": _DASHES[i % len(_DASHES)]}
             for i, p in enumerate(data.policies)}
    scenarios = data.scenarios()
    out: list[Plot] = []
    if not data.capacity_series.is_empty():
        out.append(_capacity_plot(data.capacity_series, color))
    keys = [key for key, _ in scenarios]
    varying = [k for k in ("trace", "model", "gpu", "capacity_bytes", "replicas")
               if len({str(key[k]) for key in keys}) > 1]
    seen: dict[str, int] = {}
    for key, rows in scenarios:
        slug = scenario_slug(key, varying)
        seen[slug] = seen.get(slug, 0) + 1
        sfx = (f"_{slug}" if slug else "") + (f"-{seen[slug]}" if seen[slug] > 1 else "")
        title = scenario_title(key)
        req = data.requests.filter(pl.col("run").is_in(rows["run"].unique().to_list()), *[
            pl.col(k) == v for k, v in key.items()])
        figs = [_ttft_cdf(req, rows, color, f"ttft_cdf{sfx}.png", title),
                _hit_bars(rows, f"hit_rates{sfx}.png", title),
                _action_stack(rows, f"tokens_by_action{sfx}.png", title)]
        pareto = _pareto(rows, color, f"recovery_vs_entries{sfx}.png", title)
        for p in figs + ([pareto] if pareto is not None else []):
            out.append(replace(p, group=title))
    return out


def write_plots(plots: list[Plot], directory: str | Path, *, force: bool = False) -> list[Path]:
    """Write each plot's PNG into ``directory`` (``traces.outputs.atomic_dir`` of kind ``plots``: a new
    folder, or one pic wrote before, or any folder under ``force``; only pic's PNGs are touched)."""
    d = Path(directory)
    with atomic_dir(d, kind="plots", force=force, last=()) as tmp:
        for p in plots:
            (tmp / p.name).write_bytes(p.png)
    return [d / p.name for p in plots]


# ---- Internal helpers -----------------------------------------------------------------------------

def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None})
    return buf.getvalue()


def _figure(w: float = 7.5, h: float = 4.2) -> Figure:
    from matplotlib.figure import Figure  # NOTE: lazy, keeps `pic` start-up free of matplotlib

    return Figure(figsize=(w, h), layout="constrained")


def _ttft_cdf(req: pl.DataFrame, rows: pl.DataFrame, color, name: str, title: str) -> Plot:
    fig = _figure()
    ax = fig.add_subplot()
    for (run, pol), label in zip(rows.select("run", "policy").iter_rows(), policy_labels(rows), strict=True):
        t = np.sort(req.filter((pl.col("run") == run) & (pl.col("policy") == pol))["ttft_s"]
                    .drop_nulls().to_numpy())
        if t.size == 0:
            continue
        y = np.arange(1, t.size + 1) / t.size
        ax.plot(np.maximum(t, 1e-6) * 1e3, y, drawstyle="steps-post", lw=1.6, label=label, **color.get(pol, {}))
    for q in (0.5, 0.99):
        ax.axhline(q, color="#999", lw=0.7, ls=":")
        ax.annotate(f"p{round(q * 100)}", (1.0, q), xycoords=("axes fraction", "data"), fontsize=8,
                    color="#666", ha="right", va="bottom")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.005)
    ax.set_xlabel("time to first token (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8, frameon=False, bbox_to_anchor=(1.0, 0.08))
    fig.suptitle(title, fontsize=9)
    return Plot(name, "TTFT CDF", "Cumulative distribution of time to first token, per policy "
                "(further left = faster).", _png(fig))


def _hit_bars(rows: pl.DataFrame, name: str, title: str) -> Plot:
    fig = _figure()
    ax = fig.add_subplot()
    labels = policy_labels(rows)
    x = np.arange(len(labels))
    series = (("token_hit_rate", "token hit rate", "#1f77b4"), ("prefix_hit_rate", "exact-prefix baseline hit rate",
              "#bbbbbb"), ("recovery_beyond_prefix", "recovery beyond prefix", "#2ca02c"))
    w = 0.8 / len(series)
    for i, (col, lab, c) in enumerate(series):
        v = np.nan_to_num(rows[col].cast(pl.Float64).to_numpy() * 100, nan=0.0)
        bars = ax.bar(x + (i - 1) * w, v, w, label=lab, color=c)
        ax.bar_label(bars, labels=[f"{b:.1f}" for b in v], fontsize=7, padding=1)
    ax.axhline(0, color="#444", lw=0.8)
    ax.set_xticks(x, labels, fontsize=8, rotation=15 if len(labels) > 5 else 0)
    ax.set_ylabel("percent")
    top = max(5.0, float(np.nanmax(rows.select(["token_hit_rate", "prefix_hit_rate"]).to_numpy() * 100,
                                   initial=0.0)))
    ax.set_ylim(top=min(110.0, top * 1.18))
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    return Plot(name, "Hit rates", "Token hit rate = Σreused/ΣN; baseline hit rate = the best exact-prefix "
                "cache's; recovery beyond prefix = (Σreused − Σprefix_reused)/(ΣN − Σprefix_reused).", _png(fig))


def _pareto(rows: pl.DataFrame, color, name: str, title: str) -> Plot | None:
    """Oracle share vs registry entries, one point per (run, policy) that keeps a registry; the Pareto
    frontier (fewer entries, more recovery) joined. None when fewer than two points."""
    if "registry_entries" not in rows.columns:
        return None
    y_col = "oracle_share" if rows["oracle_share"].is_not_nan().any() else "recovery_beyond_prefix"
    pts = [(e, y, lab, pol) for e, y, lab, pol in zip(rows["registry_entries"].to_list(), rows[y_col].to_list(),
                                                      policy_labels(rows), rows["policy"].to_list(), strict=True)
           if e is not None and y is not None and e > 0 and math.isfinite(e) and math.isfinite(y)]
    if len(pts) < 2:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    for e, y, lab, pol in pts:
        ax.scatter([e], [y * 100], s=36, color=color.get(pol, {}).get("color", "#333"), zorder=3)
        ax.annotate(lab, (e, y * 100), fontsize=7, xytext=(4, 3), textcoords="offset points")
    front, best = [], -math.inf
    for e, y, *_ in sorted(pts, key=lambda p: (p[0], -p[1])):
        if y > best:
            front.append((e, y))
            best = y
    ax.plot([e for e, _ in front], [y * 100 for _, y in front], color="#888", lw=1.0, ls="--", zorder=2,
            label="Pareto frontier")
    ax.set_xscale("log")
    ax.set_xlabel("registry entries at the end of the replay (log scale)")
    ax.set_ylabel("oracle share (%)" if y_col == "oracle_share" else "recovery vs baseline (%)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, frameon=False, loc="lower right")
    fig.suptitle(title, fontsize=9)
    what = "oracle share (recovery / the oracle's)" if y_col == "oracle_share" else "recovery vs baseline"
    return Plot(name, "Recovery vs registry entries", f"{what} against the number of registry entries each "
                "policy keeps (hash-keyed blocks, chunks, S1 windows; a radix tree's nodes); dashed: the Pareto "
                "frontier (up and left is better).", _png(fig))


def _action_stack(rows: pl.DataFrame, name: str, title: str) -> Plot:
    fig = _figure()
    ax = fig.add_subplot()
    labels = policy_labels(rows)
    n = rows["prompt_tokens"].cast(pl.Float64).to_numpy()
    n = np.where(n > 0, n, np.nan)
    bottom = np.zeros(len(labels))
    for col, lab, c in (("inplace_tokens", "reused in place", "#1f77b4"), ("rotated_tokens",
                        "reused rotated (RoPE δ)", "#17becf"), ("recomputed_tokens", "recomputed", "#d9d9d9")):
        v = np.nan_to_num(rows[col].cast(pl.Float64).to_numpy() / n * 100)
        ax.bar(labels, v, 0.6, bottom=bottom, label=lab, color=c, edgecolor="white", lw=0.5)
        bottom += v
    ax.set_ylabel("percent of prompt tokens")
    ax.set_ylim(0, max(100.0, float(bottom.max(initial=0.0))) * 1.15)
    ax.tick_params(axis="x", labelsize=8, rotation=15 if len(labels) > 5 else 0)
    ax.legend(fontsize=8, frameon=False, loc="upper right", ncols=3)
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    return Plot(name, "Prompt tokens by action", "How each policy obtained the KV of the prompt tokens; "
                "recomputed includes quality recompute on top of reused spans, so bars can pass 100%.",
                _png(fig))


def _capacity_plot(series: pl.DataFrame, color) -> Plot:
    groups = list(series.group_by(["trace", "model", "replicas"], maintain_order=True))
    fig = _figure(7.5, 3.6 * len(groups))
    finite = series.filter(pl.col("capacity_bytes").is_finite())["capacity_bytes"]
    inf_x = (finite.max() * 4 / _GIB) if finite.len() else 1.0
    for gi, ((trace, model, replicas), g) in enumerate(groups, start=1):
        ax = fig.add_subplot(len(groups), 1, gi)
        prefix = None
        for (pol,), pg in g.group_by(["policy"], maintain_order=True):
            cap = pg["capacity_bytes"].to_numpy()
            x = np.where(np.isinf(cap), inf_x, cap / _GIB)
            ax.plot(x, pg["token_hit_rate"].to_numpy() * 100, marker="o", label=pol, **color.get(pol, {}))
            if prefix is None:
                prefix = (x, pg["prefix_hit_rate"].to_numpy() * 100)
        if prefix is not None:
            ax.plot(*prefix, ls=":", color="#888", lw=1.4, label="exact-prefix baseline")
        ticks = sorted(set(np.where(np.isinf(g["capacity_bytes"].to_numpy()), inf_x,
                                    g["capacity_bytes"].to_numpy() / _GIB).tolist()))
        ax.set_xscale("log")
        ax.set_xticks(ticks, ["∞" if math.isclose(t, inf_x) and g["capacity_bytes"].is_infinite().any()
                              else fmt_bytes(t * _GIB) for t in ticks], fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("cache capacity")
        ax.set_ylabel("token hit rate (%)")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{Path(str(trace)).name} · {model} · {replicas} replica{'s' if replicas != 1 else ''}"
                     + (" (capacity per replica)" if replicas != 1 else ""), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, frameon=False, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return Plot(CAPACITY_PLOT, "Hit rate vs capacity", "Token hit rate of each policy at each "
                "cache capacity (dotted grey: the best exact-prefix baseline).", _png(fig))
