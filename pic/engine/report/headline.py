"""The answer at a glance: per scenario, how much the featured PIC policy saves over the best exact-prefix cache.

The *best prefix cache* of a scenario is the replayed exact-prefix policy (``prefix``, ``block-hash``) with
the highest token hit rate (DESIGN.md §8); when none was replayed, the run's exact-prefix baseline (replayed
beside the policies, named in summary.json) stands in (its reuse and energy are in every row). The *featured*
policy is ``irminsul`` when replayed (``linearkv`` on a hybrid model, when replayed: the policy built for
recurrent layers), else the non-prefix caching policy with the highest token hit rate; upper bounds that no
deployment reaches (``oracle``: infinite capacity) are never featured.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from pic.engine.config import EXACT_PREFIX
from pic.engine.report.data import fmt_pct, scenario_title
from pic.engine.specs import MODELS

FEATURED = "irminsul"
FEATURED_HYBRID = "linearkv"
_MINUS = "\u2212"


def signed_pct(x: float | None) -> str:
    """``−82.0%`` / ``+3.1%`` (a real minus sign; never ``−0.0%``); ``–`` for missing."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    v = round(100 * x, 1)
    if v == 0:
        return "±0.0%"
    return f"{_MINUS if v < 0 else '+'}{abs(v):.1f}%"


def best_prefix(rows: pl.DataFrame) -> dict[str, Any] | None:
    """The scenario row of the replayed exact-prefix policy reusing the most tokens (None if none)."""
    cand = rows.filter(pl.col("policy").is_in(EXACT_PREFIX))
    if cand.is_empty():
        return None
    return cand.sort(["token_hit_rate", "ttft_p50_s"], descending=[True, False], nulls_last=True).row(0, named=True)


def featured(rows: pl.DataFrame) -> dict[str, Any] | None:
    """``irminsul``'s row (``linearkv``'s on a hybrid model), else the best-reusing non-prefix caching policy's
    row (None if there is none)."""
    pic = rows.filter(pl.col("policy") == FEATURED_HYBRID) if _hybrid(rows) else rows.clear()
    if pic.is_empty():
        pic = rows.filter(pl.col("policy") == FEATURED)
    if pic.is_empty():
        skip = [*EXACT_PREFIX, "none", *(p for p in rows["policy"].unique().to_list() if _is_bound(p))]
        pic = rows.filter(~pl.col("policy").is_in(skip)).sort("token_hit_rate", descending=True, nulls_last=True)
    return None if pic.is_empty() else pic.row(0, named=True)


def _hybrid(rows: pl.DataFrame) -> bool:
    """Whether the scenario's model (a preset name in the ``model`` column) has recurrent layers."""
    if "model" not in rows.columns or rows.is_empty():
        return False
    m = MODELS.get(str(rows["model"][0]))
    return bool(m is not None and m.is_hybrid)


def with_speedup(table: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Add ``best_prefix`` (policy name) and ``ttft_speedup`` (best prefix's TTFT p50 / this row's) per ``by``
    group; null where no exact-prefix policy was replayed."""
    best = (table.filter(pl.col("policy").is_in(EXACT_PREFIX))
            .sort(["token_hit_rate", "ttft_p50_s"], descending=[True, False], nulls_last=True)
            .unique(subset=by, keep="first", maintain_order=True)
            .select(*by, pl.col("policy").alias("best_prefix"), pl.col("ttft_p50_s").alias("_best_ttft")))
    out = table.join(best, on=by, how="left", nulls_equal=True)
    speed = pl.when(pl.col("ttft_p50_s") > 0).then(pl.col("_best_ttft") / pl.col("ttft_p50_s")).otherwise(None)
    return out.with_columns(speed.alias("ttft_speedup")).drop("_best_ttft")


def headline(rows: pl.DataFrame) -> str | None:
    """One sentence for one scenario's rows, e.g. ``irminsul reuses 90.0% of prompt tokens vs 0.1% for the
    best prefix cache (prefix); TTFT p50 −82.2% (14.9 ms vs 83.7 ms); prefill energy −82.0%``."""
    f = featured(rows)
    if f is None:
        return None
    b = best_prefix(rows)
    name = f["policy"]
    if b is None:
        base = f.get("baseline") or "prefix"
        return (f"{name} reuses {fmt_pct(f['token_hit_rate'])} of prompt tokens vs "
                f"{fmt_pct(f['prefix_hit_rate'])} for the exact-prefix baseline ({base}); prefill energy "
                f"{signed_pct(-f['energy_saved_vs_prefix'])} (replay {base} too for a TTFT comparison)")
    energy = _ratio(f["prefill_joules"], b["prefill_joules"])
    ttft = _ratio(f["ttft_p50_s"], b["ttft_p50_s"])
    share = f.get("oracle_share")
    oracle = "" if share is None or math.isnan(share) else f" ({fmt_pct(share)} of the oracle's recovery)"
    return (f"{name} reuses {fmt_pct(f['token_hit_rate'])} of prompt tokens vs {fmt_pct(b['token_hit_rate'])} "
            f"for the best prefix cache ({b['policy']}){oracle}; TTFT p50 {signed_pct(ttft - 1)} "
            f"({_ms(f['ttft_p50_s'])} vs {_ms(b['ttft_p50_s'])}); prefill energy {signed_pct(energy - 1)}")


def headlines(data: Any) -> list[tuple[str, str]]:
    """``(scenario title, headline)`` for every scenario of a ReportData that has one."""
    out = []
    for key, rows in data.scenarios():
        line = headline(rows)
        if line is not None:
            out.append((scenario_title(key), line))
    return out


def _is_bound(name: str) -> bool:
    """True for a registered policy that is an upper bound (``bounded = False``), not a cache to deploy."""
    from pic.engine import policies as registry

    try:
        return not getattr(registry.get(name), "bounded", True)
    except ValueError:   # a policy this pic does not know (an older or newer run dir)
        return False


def _ratio(a: float | None, b: float | None) -> float:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return math.nan
    return a / b


def _ms(x: float | None) -> str:
    return "–" if x is None or math.isnan(x) else f"{x * 1e3:,.1f} ms"
