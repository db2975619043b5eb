"""The answer at a glance: headline sentence, best prefix cache, TTFT speed-up, signs."""

from __future__ import annotations

import polars as pl
import pytest

from pic.engine.report.headline import best_prefix, featured, headline, signed_pct, with_speedup


def _rows(*policies):
    base = {"prefill_joules": 100.0, "energy_saved_vs_prefix": 0.0, "prefix_hit_rate": 0.10}
    data = [{**base, "policy": p, "token_hit_rate": h, "ttft_p50_s": t, "prefill_joules": j,
             "energy_saved_vs_prefix": e} for p, h, t, j, e in policies]
    return pl.DataFrame(data)


ROWS = _rows(("prefix", 0.10, 0.080, 100.0, 0.0), ("block-hash", 0.12, 0.078, 98.0, 0.02),
             ("fixed-chunk", 0.70, 0.030, 40.0, 0.6), ("irminsul", 0.85, 0.020, 25.0, 0.75))


def test_headline_compares_irminsul_with_the_best_prefix_cache():
    """X% vs Y% for the best of prefix/block-hash; TTFT p50 and prefill energy as signed changes."""
    assert best_prefix(ROWS)["policy"] == "block-hash"
    assert headline(ROWS) == ("irminsul reuses 85.0% of prompt tokens vs 12.0% for the best prefix cache "
                              "(block-hash); TTFT p50 \u221274.4% (20.0 ms vs 78.0 ms); prefill energy \u221274.5%")


def test_speedup_column_per_scenario():
    """TTFT speed-up = best prefix TTFT p50 / the policy's, within each group only."""
    t = pl.concat([ROWS.with_columns(run=pl.lit("a")), ROWS.with_columns(run=pl.lit("b"), ttft_p50_s=pl.col(
        "ttft_p50_s") * 2)])
    out = with_speedup(t, ["run"])
    got = dict(zip(out["policy"] + "@" + out["run"], out["ttft_speedup"], strict=True))
    assert got["irminsul@a"] == pytest.approx(0.078 / 0.020) and got["irminsul@b"] == pytest.approx(0.078 / 0.020)
    assert got["block-hash@a"] == pytest.approx(1.0)
    assert with_speedup(ROWS.filter(pl.col("policy") == "irminsul").with_columns(run=pl.lit("x")),
                        ["run"])["ttft_speedup"].to_list() == [None]


def test_without_a_replayed_prefix_policy_the_baseline_stands_in():
    """No prefix/block-hash in the run: reuse and energy vs the run's exact-prefix baseline, no TTFT claim."""
    line = headline(ROWS.filter(pl.col("policy").is_in(["fixed-chunk", "irminsul"])))
    assert line.startswith("irminsul reuses 85.0% of prompt tokens vs 10.0% for the exact-prefix baseline (prefix)")
    assert "prefill energy \u221275.0%" in line and "TTFT" in line and "replay prefix too" in line


def test_featured_falls_back_to_the_best_caching_policy_and_never_the_oracle():
    """Without irminsul the best non-prefix policy is featured; the oracle (an upper bound) never is."""
    rows = pl.concat([ROWS.filter(pl.col("policy") != "irminsul"), _rows(("oracle", 0.99, 0.01, 5.0, 0.95))])
    assert featured(rows)["policy"] == "fixed-chunk"
    assert featured(ROWS.filter(pl.col("policy").is_in(["prefix", "block-hash"]))) is None
    assert headline(ROWS.filter(pl.col("policy") == "prefix")) is None


@pytest.mark.parametrize(("x", "want"), [(-0.0004, "±0.0%"), (0.0004, "±0.0%"), (-0.5, "\u221250.0%"),
                                         (0.031, "+3.1%"), (float("nan"), "–"), (None, "–")])
def test_signed_pct_never_prints_minus_zero(x, want):
    assert signed_pct(x) == want


def test_hybrid_model_features_linearkv():
    """On a hybrid model the sentence is about linearkv (built for recurrent layers) when it was replayed;
    on an attention-only model, or without linearkv, irminsul stays featured."""
    lk = _rows(("linearkv", 0.80, 0.030, 60.0, 0.3))
    both = pl.concat([ROWS, lk])
    assert featured(both.with_columns(model=pl.lit("qwen3-next-80b-a3b")))["policy"] == "linearkv"
    assert featured(both.with_columns(model=pl.lit("deepseek-v2-lite")))["policy"] == "irminsul"
    assert featured(ROWS.with_columns(model=pl.lit("granite-4.0-h-small")))["policy"] == "irminsul"
    assert featured(both)["policy"] == "irminsul"            # no model column: unknown, not hybrid


# ---- the headline without polars (engine.report.headline on dict rows) equals the polars frame's ----------
def _reference_best_prefix(rows: pl.DataFrame):
    from pic.engine.config import EXACT_PREFIX

    cand = rows.filter(pl.col("policy").is_in(EXACT_PREFIX))
    if cand.is_empty():
        return None
    return cand.sort(["token_hit_rate", "ttft_p50_s"], descending=[True, False], nulls_last=True).row(0, named=True)


def _reference_featured(rows: pl.DataFrame):
    from pic.engine.config import EXACT_PREFIX
    from pic.engine.report.headline import FEATURED, FEATURED_HYBRID, _hybrid, _is_bound

    pic = rows.filter(pl.col("policy") == FEATURED_HYBRID) if _hybrid(rows.to_dicts()) else rows.clear()
    if pic.is_empty():
        pic = rows.filter(pl.col("policy") == FEATURED)
    if pic.is_empty():
        skip = [*EXACT_PREFIX, "none", *(p for p in rows["policy"].unique().to_list() if _is_bound(p))]
        pic = rows.filter(~pl.col("policy").is_in(skip)).sort("token_hit_rate", descending=True, nulls_last=True)
    return None if pic.is_empty() else pic.row(0, named=True)


@pytest.mark.parametrize("seed", range(60))
def test_dict_rows_choose_as_the_polars_frame(seed):
    """best_prefix, featured and headline of dict rows (summary_headline's: no polars) equal those of the polars
    frame the report passes, NaN, None and ties included."""
    import random

    from pic.engine.report.headline import summary_headline

    rnd = random.Random(seed)
    names = rnd.sample(["prefix", "block-hash", "fixed-chunk", "irminsul", "linearkv", "none", "oracle", "rdr"],
                       rnd.randint(1, 6))

    def val(choices):
        return rnd.choice(choices)

    policies = {n: {"token_hit_rate": val([0.1, 0.5, 0.5, 0.9, float("nan")]),
                    "prefix_hit_rate": val([0.1, 0.2]), "ttft_p50_s": val([0.02, 0.05, 0.05, float("nan")]),
                    "prefill_joules": val([10.0, 20.0]), "energy_saved_vs_prefix": val([0.0, 0.3]),
                    "oracle_share": val([None, 0.4]), "baseline": val(["prefix", "block-hash"])} for n in names}
    s = {"model": val(["deepseek-v2-lite", "olmo-hybrid-7b"]), "policies": policies}
    cols = ("token_hit_rate", "prefix_hit_rate", "ttft_p50_s", "prefill_joules", "energy_saved_vs_prefix",
            "oracle_share")
    frame = pl.DataFrame([{"policy": n, **{c: float(p[c]) if p.get(c) is not None else float("nan") for c in cols},
                           "baseline": p.get("baseline"), "model": s["model"]} for n, p in policies.items()])

    def same(a, b):
        return (a is None and b is None) or (a is not None and b is not None and a["policy"] == b["policy"])

    assert same(best_prefix(frame), _reference_best_prefix(frame))
    assert same(featured(frame), _reference_featured(frame))
    f, b = _reference_featured(frame), _reference_best_prefix(frame)
    want = None if f is None else headline(frame)
    assert summary_headline(s) == want
    assert (want is None) == (f is None) and (b is None or b["policy"] in ("prefix", "block-hash"))
