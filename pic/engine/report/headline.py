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
from typing import TYPE_CHECKING, Any

from pic.engine.config import EXACT_PREFIX
from pic.engine.report.fmt import fmt_pct, signed_pct
from pic.engine.specs import MODELS

if TYPE_CHECKING:
    import polars as pl

FEATURED = "irminsul"
FEATURED_HYBRID = "linearkv"
#: summary.json fields a headline reads (summary_headline)
_FIELDS = ("token_hit_rate", "prefix_hit_rate", "ttft_p50_s", "prefill_joules", "energy_saved_vs_prefix",
           "oracle_share")


def best_prefix(rows) -> dict[str, Any] | None:
    """The scenario row of the replayed exact-prefix policy reusing the most tokens (None if none). ``rows``: a
    polars frame, or its rows as dicts (``to_dicts()``)."""
    cand = [r for r in _dicts(rows) if r["policy"] in EXACT_PREFIX]
    return _sorted(cand, (("token_hit_rate", True), ("ttft_p50_s", False)))[0] if cand else None


def featured(rows) -> dict[str, Any] | None:
    """``irminsul``'s row (``linearkv``'s on a hybrid model), else the best-reusing non-prefix caching policy's
    row (None if there is none)."""
    rows = _dicts(rows)
    pic = [r for r in rows if r["policy"] == FEATURED_HYBRID] if _hybrid(rows) else []
    if not pic:
        pic = [r for r in rows if r["policy"] == FEATURED]
    if not pic:
        skip = {*EXACT_PREFIX, "none", *(p for p in {r["policy"] for r in rows} if _is_bound(p))}
        pic = _sorted([r for r in rows if r["policy"] not in skip], (("token_hit_rate", True),))
    return pic[0] if pic else None


def _hybrid(rows: list[dict[str, Any]]) -> bool:
    """Whether the scenario's model (a preset name in the ``model`` column) has recurrent layers."""
    if not rows or "model" not in rows[0]:
        return False
    m = MODELS.get(str(rows[0]["model"]))
    return bool(m is not None and m.is_hybrid)


def _dicts(rows) -> list[dict[str, Any]]:
    return rows if isinstance(rows, list) else rows.to_dicts()


def _sorted(rows: list[dict[str, Any]], keys: tuple[tuple[str, bool], ...]) -> list[dict[str, Any]]:
    """``rows`` sorted as polars sorts a frame by ``keys`` ((column, descending) pairs) with ``nulls_last``: stably,
    NaN above every number, nulls last either way."""
    def key(r: dict[str, Any]) -> tuple:
        out: list = []
        for col, desc in keys:
            x = r.get(col)
            if x is None:
                out += (1, 0, 0.0)
            elif isinstance(x, float) and math.isnan(x):
                out += (0, 0 if desc else 1, 0.0)
            else:
                out += (0, 1 if desc else 0, -x if desc else x)
        return tuple(out)
    return sorted(rows, key=key)


def with_speedup(table: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Add ``best_prefix`` (policy name) and ``ttft_speedup`` (best prefix's TTFT p50 / this row's) per ``by``
    group; null where no exact-prefix policy was replayed."""
    import polars as pl

    best = (table.filter(pl.col("policy").is_in(EXACT_PREFIX))
            .sort(["token_hit_rate", "ttft_p50_s"], descending=[True, False], nulls_last=True)
            .unique(subset=by, keep="first", maintain_order=True)
            .select(*by, pl.col("policy").alias("best_prefix"), pl.col("ttft_p50_s").alias("_best_ttft")))
    out = table.join(best, on=by, how="left", nulls_equal=True)
    speed = pl.when(pl.col("ttft_p50_s") > 0).then(pl.col("_best_ttft") / pl.col("ttft_p50_s")).otherwise(None)
    return out.with_columns(speed.alias("ttft_speedup")).drop("_best_ttft")


def headline(rows) -> str | None:
    """One sentence for one scenario's rows (a polars frame, or its rows as dicts), e.g. ``irminsul reuses 90.0% of
    prompt tokens vs 0.1% for the best prefix cache (prefix); TTFT p50 −82.2% (14.9 ms vs 83.7 ms); prefill
    energy −82.0%``."""
    rows = _dicts(rows)
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


def summary_headline(s: dict[str, Any]) -> str | None:
    """The headline of one run's summary.json (``pic replay``'s line under its table), without polars."""
    rows = [{"policy": n, **{c: float(p[c]) if p.get(c) is not None else float("nan") for c in _FIELDS},
             "baseline": p.get("baseline"), "model": str(s.get("model", ""))} for n, p in s["policies"].items()]
    return headline(rows) if rows else None


def headlines(data: Any) -> list[tuple[str, str]]:
    """``(scenario title, headline)`` for every scenario of a ReportData that has one."""
    from pic.engine.report.data import scenario_title

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
