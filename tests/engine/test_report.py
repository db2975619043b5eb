"""pic.engine.report: metric recomputation, run-dir validation, capacity series, plots, HTML/Markdown."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pic.engine.report import load_runs, make_report, policy_metrics, render_html, render_plots, to_json

GIB = 2**30


def make_run(d: Path, *, policies=("none", "prefix", "fixed-chunk"), n: int = 40, capacity=None,
             trace: str = "trace.parquet", model: str = "deepseek-v2-lite", seed: int = 0,
             summary_patch: dict | None = None) -> Path:
    """Write a run dir shaped like `pic replay -o` output; its summary is computed with numpy."""
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    frames, summ = [], {}
    for p in policies:
        N = rng.integers(64, 4096, n)
        pref = (N * rng.uniform(0, 0.6, n)).astype(np.int64)
        extra = {"none": 0.0, "prefix": 0.0}.get(p, 0.3)
        reused = np.zeros(n, np.int64) if p == "none" else np.minimum(N, pref + (N * extra).astype(np.int64))
        rot = np.where(reused > pref, reused - pref, 0)
        ttft = rng.lognormal(-2.0, 1.0, n)
        joules, none_j, pref_j = (N - reused) * 1e-3, N * 1e-3, (N - pref) * 1e-3
        t0 = np.arange(n, dtype=np.int64) * 1000
        frames.append(pl.DataFrame({
            "policy": [p] * n, "request_id": np.arange(n), "session_id": [f"s{i % 5}" for i in range(n)],
            "replica": np.zeros(n, np.int32), "arrival_us": t0, "start_us": t0, "first_token_us": t0 + 10,
            "finish_us": t0 + 99, "prompt_tokens": N, "reused_tokens": reused, "rotated_tokens": rot,
            "recomputed_tokens": N - reused, "prefix_reused_tokens": pref,
            "output_tokens": np.full(n, 32, np.int32), "ttft_s": ttft, "queue_s": ttft / 10,
            "prefill_flops": (N - reused) * 1e9, "prefill_hbm_bytes": N * 1e3, "cache_read_bytes": reused * 3e4,
            "prefill_joules": joules, "nocache_prefill_joules": none_j, "prefix_prefill_joules": pref_j,
            "evictions": np.zeros(n, np.int64), "uncached": np.zeros(n, bool)}))
        summ[p] = {
            "requests": n, "prompt_tokens": int(N.sum()), "reused_tokens": int(reused.sum()),
            "rotated_tokens": int(rot.sum()), "token_hit_rate": reused.sum() / N.sum(),
            "prefix_hit_rate": pref.sum() / N.sum(),
            "recovery_beyond_prefix": (reused.sum() - pref.sum()) / (N.sum() - pref.sum()),
            "ttft_p50_s": float(np.percentile(ttft, 50)), "ttft_p90_s": float(np.percentile(ttft, 90)),
            "ttft_p99_s": float(np.percentile(ttft, 99)), "queue_p50_s": float(np.median(ttft / 10)),
            "prefill_joules": float(joules.sum()), "energy_saved_vs_none": 1 - joules.sum() / none_j.sum(),
            "energy_saved_vs_prefix": 1 - joules.sum() / pref_j.sum(),
            "peak_resident_bytes": int(reused.sum()) * 31104, "evictions": 0, "collisions": 0, "uncached": 0,
            "sim_seconds": 1.0, "wall_seconds": 0.01}
    for (p, k), v in (summary_patch or {}).items():
        summ[p][k] = v
    pl.concat(frames).write_parquet(d / "requests.parquet")
    (d / "summary.json").write_text(json.dumps({
        "version": 1, "trace": trace, "model": model, "gpu": "h200", "capacity_bytes": capacity,
        "replicas": 1, "policies": summ}))
    (d / "config.json").write_text(json.dumps({"trace": trace, "policies": list(policies), "seed": seed}))
    return d


def _frame(**cols) -> pl.DataFrame:
    n = len(cols["prompt_tokens"])
    base = {"policy": ["x"] * n, "rotated_tokens": [0] * n, "recomputed_tokens": [0] * n, "evictions": [0] * n,
            "uncached": [False] * n, "queue_s": [0.0] * n, "prefill_joules": [1.0] * n,
            "nocache_prefill_joules": [1.0] * n, "prefix_prefill_joules": [1.0] * n}
    return pl.DataFrame({**base, **cols})


# ---- metric recomputation -------------------------------------------------------------------------

def test_metrics_two_requests_hand_computed():
    """Two requests: token hit 250/400, prefix 100/400, recovery (250-100)/(400-100), TTFT p50 = 2 s."""
    df = _frame(prompt_tokens=[100, 300], reused_tokens=[50, 200], prefix_reused_tokens=[50, 50],
                ttft_s=[1.0, 3.0], prefill_joules=[1.0, 2.0], nocache_prefill_joules=[4.0, 4.0],
                prefix_prefill_joules=[2.0, 4.0])
    row = policy_metrics(df, by=[]).row(0, named=True)
    assert row["token_hit_rate"] == pytest.approx(0.625)
    assert row["prefix_hit_rate"] == pytest.approx(0.25)
    assert row["recovery_beyond_prefix"] == pytest.approx(0.5)
    assert row["ttft_p50_s"] == pytest.approx(2.0)
    assert row["energy_saved_vs_none"] == pytest.approx(1 - 3 / 8)
    assert row["energy_saved_vs_prefix"] == pytest.approx(0.5)
    assert row["joules_saved_vs_none"] == pytest.approx(5.0)


def test_metrics_rotated_split_and_negative_recovery():
    """In-place = reused − rotated; a policy reusing less than prefix has negative recovery."""
    df = _frame(prompt_tokens=[200], reused_tokens=[60], rotated_tokens=[40], prefix_reused_tokens=[100],
                ttft_s=[0.5])
    row = policy_metrics(df, by=[]).row(0, named=True)
    assert row["inplace_tokens"] == 20
    assert row["recovery_beyond_prefix"] == pytest.approx((60 - 100) / (200 - 100))


def test_recovery_undefined_when_prefix_reuses_all():
    """Recovery beyond prefix is NaN (not a division error) when prefix already reuses every token."""
    df = _frame(prompt_tokens=[10], reused_tokens=[10], prefix_reused_tokens=[10], ttft_s=[0.1])
    assert math.isnan(policy_metrics(df, by=[]).row(0, named=True)["recovery_beyond_prefix"])


def test_metrics_grouped_per_policy():
    """Rows of different policies are aggregated separately."""
    df = pl.concat([
        _frame(prompt_tokens=[10, 10], reused_tokens=[0, 0], prefix_reused_tokens=[0, 0], ttft_s=[1.0, 1.0]),
        _frame(prompt_tokens=[10], reused_tokens=[5], prefix_reused_tokens=[0], ttft_s=[1.0])
        .with_columns(pl.lit("y").alias("policy"))])
    m = {r["policy"]: r for r in policy_metrics(df, by=[]).iter_rows(named=True)}
    assert (m["x"]["requests"], m["x"]["token_hit_rate"]) == (2, 0.0)
    assert (m["y"]["requests"], m["y"]["token_hit_rate"]) == (1, 0.5)


# ---- loading, merging, validation -----------------------------------------------------------------

def test_consistent_summary_gives_no_warning(tmp_path):
    """A summary that matches requests.parquet (numpy percentiles) raises no warning."""
    data = load_runs([make_run(tmp_path / "a")])
    assert data.warnings == ()
    assert data.policies == ("none", "prefix", "fixed-chunk")
    assert data.table["policy"].to_list() == ["none", "prefix", "fixed-chunk"]


def test_summary_disagreement_is_a_warning(tmp_path):
    """A summary hit rate that disagrees with the per-request rows is named in a warning."""
    d = make_run(tmp_path / "a", summary_patch={("prefix", "token_hit_rate"): 0.99})
    data = load_runs([d])
    assert len(data.warnings) == 1
    assert "prefix" in data.warnings[0] and "token_hit_rate" in data.warnings[0]
    assert data.table.filter(pl.col("policy") == "prefix")["token_hit_rate"][0] < 0.99


def test_quantile_other_interpolation_accepted(tmp_path):
    """A TTFT p99 computed with another interpolation (an order statistic) is not flagged."""
    d = make_run(tmp_path / "a")
    t = pl.read_parquet(d / "requests.parquet").filter(pl.col("policy") == "none")["ttft_s"].to_numpy()
    d = make_run(tmp_path / "a", summary_patch={("none", "ttft_p99_s"): float(np.percentile(t, 99, method="higher"))})
    assert load_runs([d]).warnings == ()


def test_policy_order_follows_summary(tmp_path):
    """Policies are shown in summary.json order (the --policy order), not the row order of the Parquet."""
    d = make_run(tmp_path / "a", policies=("prefix", "fixed-chunk", "none"))
    pl.read_parquet(d / "requests.parquet").sort("policy").write_parquet(d / "requests.parquet")
    data = load_runs([d])
    assert data.policies == ("prefix", "fixed-chunk", "none")
    assert data.table["policy"].to_list() == ["prefix", "fixed-chunk", "none"]


def test_undefined_ratio_not_flagged(tmp_path):
    """When prefix reuses every token, a summary recovery of 0 (writer's convention) is no disagreement."""
    d = make_run(tmp_path / "a", policies=("prefix",), n=3)
    df = pl.read_parquet(d / "requests.parquet")
    df.with_columns(pl.col("prompt_tokens").alias("reused_tokens"), pl.col("prompt_tokens").alias(
        "prefix_reused_tokens")).write_parquet(d / "requests.parquet")
    s = json.loads((d / "summary.json").read_text())
    n = int(df["prompt_tokens"].sum())
    s["policies"]["prefix"].update(reused_tokens=n, token_hit_rate=1.0, prefix_hit_rate=1.0,
                                   recovery_beyond_prefix=0.0, prefill_joules=float(df["prefill_joules"].sum()))
    (d / "summary.json").write_text(json.dumps(s))
    data = load_runs([d])
    assert not any("recovery_beyond_prefix" in w for w in data.warnings)
    assert math.isnan(data.table["recovery_beyond_prefix"][0])


def test_several_capacities_give_series(tmp_path):
    """Three capacities of one trace give a 3-point hit-rate-vs-capacity series per policy, inf last."""
    dirs = [make_run(tmp_path / f"c{i}", capacity=c, seed=i) for i, c in enumerate([4 * GIB, None, GIB])]
    data = load_runs(dirs)
    s = data.capacity_series
    assert s.height == 9
    pre = s.filter(pl.col("policy") == "prefix")
    assert pre["capacity_bytes"].to_list() == [GIB, 4 * GIB, math.inf]
    rows = data.table.filter(pl.col("policy") == "prefix").sort("capacity_bytes")
    assert pre["token_hit_rate"].to_list() == rows["token_hit_rate"].to_list()
    assert "hit_rate_vs_capacity.png" in [p.name for p in render_plots(data)]


def test_single_capacity_no_series(tmp_path):
    """One capacity: empty series and no capacity plot."""
    data = load_runs([make_run(tmp_path / "a", capacity=GIB)])
    assert data.capacity_series.is_empty()
    assert "hit_rate_vs_capacity.png" not in [p.name for p in render_plots(data)]


def test_merge_traces_and_split_policies(tmp_path):
    """Different traces are separate scenarios; policies split across dirs of one scenario merge."""
    a = make_run(tmp_path / "a", policies=("prefix",), trace="t1.parquet")
    b = make_run(tmp_path / "b", policies=("fixed-chunk",), trace="t1.parquet", seed=1)
    c = make_run(tmp_path / "c", policies=("prefix",), trace="t2.parquet", seed=2)
    sc = load_runs([a, b, c]).scenarios()
    assert [k["trace"] for k, _ in sc] == ["t1.parquet", "t2.parquet"]
    assert sc[0][1]["policy"].to_list() == ["prefix", "fixed-chunk"]


def test_duplicate_policy_warns(tmp_path):
    """The same policy + scenario in two dirs is shown twice and warned about."""
    data = load_runs([make_run(tmp_path / "x" / "run"), make_run(tmp_path / "y" / "run", seed=3)])
    assert data.table.height == 6
    assert any("several runs" in w for w in data.warnings)
    assert sorted(set(data.table["run"])) == ["run#1", "run#2"]


@pytest.mark.parametrize("missing", ["requests.parquet", "summary.json", "config.json"])
def test_missing_file_error(tmp_path, missing):
    """A run dir lacking a file is rejected with the dir and file named."""
    d = make_run(tmp_path / "a")
    (d / missing).unlink()
    with pytest.raises(ValueError, match=re.escape(f"{d}: not a complete run dir: missing {missing}")):
        load_runs([d])


def test_missing_dir_error(tmp_path):
    """A path that does not exist is named in the error."""
    with pytest.raises(ValueError, match="nope: not a run dir"):
        load_runs([tmp_path / "nope"])


def test_missing_column_error(tmp_path):
    """A requests.parquet without ttft_s is rejected naming the file and column."""
    d = make_run(tmp_path / "a")
    pl.read_parquet(d / "requests.parquet").drop("ttft_s").write_parquet(d / "requests.parquet")
    with pytest.raises(ValueError, match=r"requests\.parquet: missing columns: ttft_s"):
        load_runs([d])


def test_wrong_column_type_error(tmp_path):
    """A string column where a number belongs is rejected naming the column."""
    d = make_run(tmp_path / "a")
    df = pl.read_parquet(d / "requests.parquet").with_columns(pl.col("prompt_tokens").cast(pl.String))
    df.write_parquet(d / "requests.parquet")
    with pytest.raises(ValueError, match="prompt_tokens: expected Int64, got String"):
        load_runs([d])


def test_corrupt_parquet_error(tmp_path):
    """Garbage bytes in requests.parquet give a one-line error, not a polars traceback."""
    d = make_run(tmp_path / "a")
    (d / "requests.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match="not a readable Parquet file"):
        load_runs([d])


def test_bad_version_and_json_errors(tmp_path):
    """Unknown summary version and invalid JSON are named with file (and line)."""
    d = make_run(tmp_path / "a")
    s = json.loads((d / "summary.json").read_text())
    (d / "summary.json").write_text(json.dumps({**s, "version": 7}))
    with pytest.raises(ValueError, match=r"summary\.json: version: unsupported 7"):
        load_runs([d])
    (d / "summary.json").write_text('{\n"version": 1,\n oops}')
    with pytest.raises(ValueError, match=r"summary\.json:3: invalid JSON"):
        load_runs([d])


def test_bad_summary_fields(tmp_path):
    """Impossible replicas/capacity are errors; a non-numeric metric is a warning, not a crash."""
    d = make_run(tmp_path / "a")
    good = json.loads((d / "summary.json").read_text())
    for patch, msg in (({"replicas": "two"}, "replicas: expected an integer"),
                       ({"capacity_bytes": -1}, "capacity_bytes: expected a positive number")):
        (d / "summary.json").write_text(json.dumps({**good, **patch}))
        with pytest.raises(ValueError, match=msg):
            load_runs([d])
    good["policies"]["prefix"]["ttft_p50_s"] = "fast"
    (d / "summary.json").write_text(json.dumps(good))
    assert any("ttft_p50_s" in w for w in load_runs([d]).warnings)


# ---- outputs --------------------------------------------------------------------------------------

def test_plots_are_deterministic_pngs(tmp_path):
    """Rendering twice gives byte-identical PNGs (no timestamp/version metadata)."""
    data = load_runs([make_run(tmp_path / "a")])
    one, two = render_plots(data), render_plots(data)
    assert [p.name for p in one] == ["ttft_cdf.png", "hit_rates.png", "tokens_by_action.png"]
    assert all(p.png.startswith(b"\x89PNG") for p in one)
    assert [p.png for p in one] == [p.png for p in two]
    assert all(b"Software" not in p.png and b"matplotlib" not in p.png for p in one)


def test_html_is_self_contained(tmp_path):
    """The HTML embeds every plot as a base64 data URI and references nothing external."""
    data = load_runs([make_run(tmp_path / "a", capacity=GIB), make_run(tmp_path / "b", seed=1)])
    plots = render_plots(data)
    doc = render_html(data, plots)
    assert doc.count("data:image/png;base64,") == len(plots) == 7
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:)?//""", doc)
    assert "<link" not in doc and "<script" not in doc
    assert "recovery vs baseline" in doc and "fixed-chunk" in doc


def test_make_report_writes_outputs(tmp_path):
    """make_report writes HTML, Markdown (linking the PNGs) and the PNG folder."""
    d = make_run(tmp_path / "a")
    rep = make_report([d], html_path=tmp_path / "o" / "r.html", md_path=tmp_path / "o" / "r.md",
                      plots_dir=tmp_path / "o" / "plots")
    assert {p.name for p in rep.written} == {"r.html", "r.md", "ttft_cdf.png", "hit_rates.png",
                                             "tokens_by_action.png"}
    md = (tmp_path / "o" / "r.md").read_text()
    assert "| metric | none | prefix | fixed-chunk |" in md
    assert "](plots/ttft_cdf.png)" in md
    assert not list((tmp_path / "o").glob(".*.tmp"))


def test_to_json_is_strict_json(tmp_path):
    """to_json has no NaN/inf (infinite capacity -> null) and one row per policy."""
    data = load_runs([make_run(tmp_path / "a")])
    obj = json.loads(json.dumps(to_json(data), allow_nan=False))
    assert [r["policy"] for r in obj["policies"]] == ["none", "prefix", "fixed-chunk"]
    assert obj["runs"][0]["capacity_bytes"] is None


def test_real_replay_run_dir_loads_without_warnings(tmp_path):
    """A run dir written by engine.replay loads, and its summary agrees with the recomputed metrics."""
    replay = pytest.importorskip("pic.engine.replay")
    from pic.engine.config import ReplayConfig
    from pic.traces.io import read_trace

    sample = Path(__file__).resolve().parents[2] / "traces" / "samples" / "rag-reorder.parquet"
    if not sample.exists():
        pytest.skip(f"sample trace missing: {sample}")
    cfg = ReplayConfig(policies=("prefix", "fixed-chunk"), capacity_bytes=2**30, max_requests=40)
    d = replay.write_run(replay.replay(read_trace(sample), cfg), tmp_path / "run")
    data = load_runs([d])
    assert data.warnings == ()
    assert data.policies == ("prefix", "fixed-chunk")
    pre = data.table.row(0, named=True)
    # the baseline is the best exact-prefix cache of the run (here block-hash: 16-token blocks keep a
    # finer working set than the radix tree's whole leaves at 1 GiB), so prefix's own recovery is <= 0
    assert pre["baseline"] in ("prefix", "block-hash")
    assert pre["prefix_hit_rate"] >= pre["token_hit_rate"] - 1e-12
    for row in data.table.iter_rows(named=True):
        assert row["oracle_recovery"] > 0
        assert row["oracle_share"] == pytest.approx(row["recovery_beyond_prefix"] / row["oracle_recovery"])


def test_html_and_md_without_plots_dir(tmp_path):
    """--html with --md but no --plots writes both; the Markdown has no PNG links (regression)."""
    d = make_run(tmp_path / "a")
    rep = make_report([d], html_path=tmp_path / "r.html", md_path=tmp_path / "r.md")
    assert {p.name for p in rep.written} == {"r.html", "r.md"}
    assert ".png)" not in (tmp_path / "r.md").read_text()


def test_joules_keep_three_significant_digits() -> None:
    from pic.engine.report.tables import fmt_joules
    # trailing zeros are significant ("2 kJ" read as one digit of precision); rounding never shows 1e+03
    assert [fmt_joules(v) for v in (2000.4, 999.7, 56.9, 123.4, 1.5e6)] == [
        "2.00 kJ", "1.00 kJ", "56.9 J", "123 J", "1.50 MJ"]
    assert fmt_joules(None) == "–" and fmt_joules(float("nan")) == "–"
