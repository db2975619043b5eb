"""Load replay run dirs, recompute the headline metrics from ``requests.parquet`` and merge them.

A run dir (written by ``pic replay``) holds ``requests.parquet`` (one row per request x policy),
``summary.json`` and ``config.json``. :func:`load_runs` reads several of them, checks columns and
versions, recomputes every metric it can from the per-request rows (DESIGN.md §8) and compares them with
``summary.json``; disagreements become warnings, the recomputed values win. Metrics only the summary
knows (peak resident bytes, collisions, simulated/wall seconds) are taken from it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from pic.engine.latency import request_latencies
from pic.engine.metrics import REQUEST_SCHEMA, SUMMARY_VERSION
from pic.engine.report.fmt import fmt_pct  # noqa: F401 - re-exported (report modules, cli.settings)

FILES = ("requests.parquet", "summary.json", "config.json")

#: requests.parquet columns and the dtypes they are cast to (safe numeric casts are accepted);
#: the replay writer's schema is the single source of truth
REQUEST_COLUMNS: dict[str, pl.DataType] = REQUEST_SCHEMA
SUMMARY_KEYS = ("trace", "model", "gpu", "capacity_bytes", "replicas", "policies")
#: scenario = everything but the policy; one row of the tidy table per (scenario, policy)
SCENARIO = ("trace", "model", "gpu", "replicas", "capacity_bytes")
#: metrics that only summary.json knows (ITL needs the replay's step series; goodput its SLO)
SUMMARY_ONLY = ("peak_resident_bytes", "collisions", "sim_seconds", "wall_seconds", "itl_mean_s",
                "itl_median_s", "itl_p99_s", "goodput_rps", "slo_attainment", "kv_bytes_per_token",
                "capacity_tokens", "rdr_distortion", "gpu_joules", "gpu_energy_saved_vs_baseline", "registry_entries",
                "stored_tokens", "duplicate_stored_tokens")
#: text fields only summary.json knows (the exact-prefix baseline each policy was measured against)
SUMMARY_TEXT = ("baseline",)
#: per-layer-kind sums (hybrid models); run dirs written before they existed read them as missing
_LAYER_SUMS = ("recurrent_tokens", "attn_layer_s", "recurrent_layer_s", "nocache_attn_layer_s",
               "nocache_recurrent_layer_s")
OPTIONAL_COLUMNS = frozenset((*_LAYER_SUMS, "oracle_reused_tokens"))
#: requests.parquet columns derived from its timestamps (absent in run dirs from before they existed)
_DERIVED = ("e2el_s", "tpot_s")
_COUNTS = ("requests", "prompt_tokens", "reused_tokens", "rotated_tokens", "evictions", "uncached")
_RATES = ("token_hit_rate", "prefix_hit_rate", "recovery_beyond_prefix", "prefill_joules",
          "attn_layer_saved_vs_none", "recurrent_layer_saved_vs_none", "oracle_hit_rate", "oracle_recovery",
          "oracle_share", "prefill_joules_per_request", "hit_energy_saved")
_QUANTILES = {"ttft_p50_s": ("ttft_s", 0.5), "ttft_p90_s": ("ttft_s", 0.9), "ttft_p99_s": ("ttft_s", 0.99),
              "queue_p50_s": ("queue_s", 0.5),
              "tpot_p50_s": ("tpot_s", 0.5), "tpot_p99_s": ("tpot_s", 0.99),
              "e2el_p50_s": ("e2el_s", 0.5), "e2el_p99_s": ("e2el_s", 0.99)}
_MEANS = {"ttft_mean_s": "ttft_s", "tpot_mean_s": "tpot_s", "e2el_mean_s": "e2el_s"}


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run dir: where it is, its short label, what it replayed, and its raw JSON files."""

    path: Path
    label: str
    trace: str
    model: str
    gpu: str
    capacity_bytes: float  # math.inf when the summary says null
    replicas: int
    summary: dict[str, Any] = field(repr=False)
    config: dict[str, Any] = field(repr=False)


@dataclass(frozen=True, slots=True)
class ReportData:
    """Everything a report shows.

    ``requests``: all request rows with ``run`` and scenario columns added. ``table``: tidy, one row per
    (run, policy) sorted by trace, model, gpu, replicas, capacity, policy order. ``capacity_series``: token
    hit, prefix hit and recovery rates vs capacity for each (trace, model, replicas, policy) replayed at
    more than one capacity (empty when none). ``warnings``: summary/recomputation disagreements and the
    replays' own warnings (saturation, does not fit). ``notes``: what the report could not show, and why.
    ``runs`` are ordered like the table (capacity numerically).
    """

    runs: tuple[RunInfo, ...]
    requests: pl.DataFrame
    table: pl.DataFrame
    capacity_series: pl.DataFrame
    policies: tuple[str, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def scenarios(self) -> list[tuple[dict[str, Any], pl.DataFrame]]:
        """(scenario key dict, its rows of ``table``) in table order."""
        out = []
        for key, rows in self.table.group_by(list(SCENARIO), maintain_order=True):
            out.append((dict(zip(SCENARIO, key, strict=True)), rows))
        return out


# ---- Public API -----------------------------------------------------------------------------------

def load_runs(run_dirs: list[str | Path] | tuple[str | Path, ...]) -> ReportData:
    """Read and merge run dirs; raise ``ValueError`` naming the dir/file when one is missing or malformed."""
    if not run_dirs:
        raise ValueError("no run dirs given")
    runs, frames, warnings = [], [], []
    run_dirs, hints = expand_run_dirs(run_dirs)
    labels = _labels([Path(d) for d in run_dirs], hints)
    for d, label in zip(run_dirs, labels, strict=True):
        run, df = _load_one(Path(d), label)
        runs.append(run)
        frames.append(df.with_columns(pl.lit(label).alias("run"), *[
            pl.lit(getattr(run, k)).alias(k) for k in SCENARIO]))
    requests = pl.concat(frames, how="vertical_relaxed")
    # order: as listed in the summaries (the --policy order), then any policy only the rows know
    policies = tuple(dict.fromkeys([p for r in runs for p in r.summary["policies"]]
                                   + requests["policy"].unique(maintain_order=True).to_list()))
    table = policy_metrics(requests, by=["run", *SCENARIO])
    table = _attach_summary(table, runs, warnings)
    order = {p: i for i, p in enumerate(policies)}
    table = (table.with_columns(pl.col("policy").replace_strict(order, return_dtype=pl.Int64).alias("_o"))
             .sort([*SCENARIO, "_o", "run"]).drop("_o"))
    from pic.engine.report.headline import with_speedup  # NOTE: headline formats with this module's helpers

    table = with_speedup(table, ["run", *SCENARIO])
    _warn_duplicates(table, warnings)
    for r in runs:
        for w in r.summary.get("warnings") or []:
            if isinstance(w, dict) and "message" in w:
                warnings.append(f"{r.label}: {w['message']}")
    series = capacity_series(table)
    series = (series.with_columns(pl.col("policy").replace_strict(order, return_dtype=pl.Int64).alias("_o"))
              .sort(["trace", "model", "replicas", "_o", "capacity_bytes"]).drop("_o"))
    runs.sort(key=lambda r: (r.trace, r.model, r.gpu, r.replicas, r.capacity_bytes, r.label))
    return ReportData(tuple(runs), requests, table, series, policies, tuple(warnings),
                      tuple(_capacity_notes(runs, series)))


def expand_run_dirs(dirs) -> tuple[list[Path], list[str | None]]:
    """A dir without summary.json that has run dirs below it (a ``pic sweep`` dir) becomes those run dirs,
    sorted, labelled by their path below it; hidden (temporary) folders are ignored. Others stay as given."""
    out, hints = [], []
    for d in map(Path, dirs):
        found = [] if (d / "summary.json").is_file() or not d.is_dir() else sorted(
            p.parent for p in d.rglob("summary.json")
            if not any(part.startswith(".") for part in p.relative_to(d).parts))
        out += found or [d]
        hints += [p.relative_to(d).as_posix() for p in found] or [None]
    return out, hints


def policy_metrics(requests: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """DESIGN.md §8 trace-level metrics per (``by`` + policy) group, vectorized with polars.

    token_hit_rate = Σreused/ΣN; prefix_hit_rate = Σprefix_reused/ΣN (the best exact-prefix baseline of
    the run); recovery_beyond_prefix = (Σreused − Σprefix_reused)/(ΣN − Σprefix_reused) (NaN when the
    baseline already reuses all); oracle_hit_rate / oracle_recovery the same for the trace's oracle and
    oracle_share = recovery / oracle recovery (NaN when the oracle recovers nothing);
    energy_saved_vs_none/_prefix = 1 − ΣJ/ΣJ_baseline (fractions) and joules_saved_* in joules;
    prefill_joules_per_request = ΣJ / requests; hit_energy_saved = 1 − ΣJ/ΣJ_nocache over requests that
    reused at least one token.
    TTFT/queue quantiles interpolate linearly; ``*_lo``/``*_hi`` columns are the bracketing order stats.
    """
    requests = _with_optional(requests)
    s = {c: pl.col(c).sum() for c in ("prompt_tokens", "reused_tokens", "rotated_tokens", "recomputed_tokens",
                                      "prefix_reused_tokens", "prefill_joules", "nocache_prefill_joules",
                                      "prefix_prefill_joules", "evictions", "uncached", *_LAYER_SUMS,
                                      "oracle_reused_tokens")}
    hit = pl.col("reused_tokens") > 0
    aggs = [pl.len().cast(pl.Int64).alias("requests"), *[e.alias(c) for c, e in s.items()],
            pl.col("oracle_reused_tokens").null_count().alias("_no_oracle"),
            hit.sum().cast(pl.Int64).alias("hit_requests"),
            pl.col("prefill_joules").filter(hit).sum().alias("_hit_j"),
            pl.col("nocache_prefill_joules").filter(hit).sum().alias("_hit_full_j")]
    have = set(requests.columns)
    for name, (col, q) in _QUANTILES.items():
        if col in have:   # latency columns are optional here (hand-made frames in tests, older run dirs)
            aggs += [pl.col(col).quantile(q, interpolation="linear").alias(name),
                     pl.col(col).quantile(q, interpolation="lower").alias(f"{name}_lo"),
                     pl.col(col).quantile(q, interpolation="higher").alias(f"{name}_hi")]
    aggs += [pl.col(col).mean().alias(name) for name, col in _MEANS.items() if col in have]
    timed = {"finish_us", "arrival_us", "output_tokens"} <= have
    if timed:
        aggs += [((pl.col("finish_us").max() - pl.col("arrival_us").min()).cast(pl.Float64) / 1e6).alias("duration_s"),
                 pl.col("output_tokens").cast(pl.Int64).clip(lower_bound=1).sum().alias("generated_tokens")]
    g = requests.group_by([*by, "policy"], maintain_order=True).agg(aggs)
    if timed:
        g = g.with_columns(_ratio(pl.col("requests"), pl.col("duration_s")).alias("request_throughput_rps"),
                           _ratio(pl.col("generated_tokens"), pl.col("duration_s")).alias("output_throughput_tps"))
    n, r, p = pl.col("prompt_tokens"), pl.col("reused_tokens"), pl.col("prefix_reused_tokens")
    j = pl.col("prefill_joules")
    o = pl.when(pl.col("_no_oracle") == 0).then(pl.col("oracle_reused_tokens")).otherwise(None)
    rec, orec = _ratio(r - p, n - p), _ratio(o - p, n - p)
    g = g.with_columns(
        _ratio(o, n).alias("oracle_hit_rate"),
        orec.alias("oracle_recovery"),
        pl.when(orec > 0).then(rec / orec).otherwise(float("nan")).alias("oracle_share"),
        _ratio(j, pl.col("requests")).alias("prefill_joules_per_request"),
        (1 - _ratio(pl.col("_hit_j"), pl.col("_hit_full_j"))).alias("hit_energy_saved"),
    ).drop("_no_oracle", "_hit_j", "_hit_full_j")
    return g.with_columns(
        pl.col("uncached").cast(pl.Int64),
        (r - pl.col("rotated_tokens")).alias("inplace_tokens"),
        _ratio(r, n).alias("token_hit_rate"),
        _ratio(p, n).alias("prefix_hit_rate"),
        _ratio(r - p, n - p).alias("recovery_beyond_prefix"),
        (1 - _ratio(j, pl.col("nocache_prefill_joules"))).alias("energy_saved_vs_none"),
        (1 - _ratio(j, pl.col("prefix_prefill_joules"))).alias("energy_saved_vs_prefix"),
        (pl.col("nocache_prefill_joules") - j).alias("joules_saved_vs_none"),
        (pl.col("prefix_prefill_joules") - j).alias("joules_saved_vs_prefix"),
        (1 - _ratio(pl.col("attn_layer_s"), pl.col("nocache_attn_layer_s"))).alias("attn_layer_saved_vs_none"),
        (1 - _ratio(pl.col("recurrent_layer_s"), pl.col("nocache_recurrent_layer_s")))
        .alias("recurrent_layer_saved_vs_none"),
    )


def capacity_series(table: pl.DataFrame) -> pl.DataFrame:
    """Hit rates vs capacity for (trace, model, replicas, policy) groups seen at > 1 capacity."""
    key = ["trace", "model", "replicas", "policy"]
    cols = [*key, "capacity_bytes", "token_hit_rate", "prefix_hit_rate", "recovery_beyond_prefix"]
    t = table.select(cols).unique(subset=[*key, "capacity_bytes"], keep="first", maintain_order=True)
    multi = t.group_by(key).agg(pl.col("capacity_bytes").n_unique().alias("_n")).filter(pl.col("_n") > 1)
    return t.join(multi.select(key), on=key, how="semi").sort([*key[:3], "policy", "capacity_bytes"])


# ---- Internal helpers -----------------------------------------------------------------------------

def _with_optional(df: pl.DataFrame) -> pl.DataFrame:
    """Add the optional columns a frame lacks, as nulls (run dirs from before they existed)."""
    return df.with_columns([pl.lit(None, REQUEST_COLUMNS[c]).alias(c) for c in sorted(OPTIONAL_COLUMNS)
                            if c not in df.columns])


def _ratio(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    return pl.when(b != 0).then(a.cast(pl.Float64) / b.cast(pl.Float64)).otherwise(float("nan"))


def _labels(paths: list[Path], hints: list[str | None]) -> list[str]:
    names = [h or p.resolve().name or str(p) for p, h in zip(paths, hints, strict=True)]
    out = []
    for i, n in enumerate(names):
        out.append(n if names.count(n) == 1 else f"{n}#{names[:i].count(n) + 1}")
    return out


def _read_json(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    except RecursionError:
        raise ValueError(f"{path}: invalid JSON: nested too deeply to read") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except ValueError as e:   # e.g. an integer of more than 4300 digits
        raise ValueError(f"{path}: invalid JSON: {str(e)[:80]}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _load_one(d: Path, label: str) -> tuple[RunInfo, pl.DataFrame]:
    if not d.is_dir():
        raise ValueError(f"{d}: not a run dir (no such directory)")
    missing = [f for f in FILES if not (d / f).is_file()]
    if missing:
        raise ValueError(f"{d}: not a complete run dir: missing {', '.join(missing)}")
    summary, config = _read_json(d / "summary.json"), _read_json(d / "config.json")
    sp = d / "summary.json"
    if summary.get("version") != SUMMARY_VERSION:
        raise ValueError(f"{sp}: version: unsupported {summary.get('version')!r} (expected {SUMMARY_VERSION})")
    for k in SUMMARY_KEYS:
        if k not in summary:
            raise ValueError(f"{sp}: {k}: missing")
    if not isinstance(summary["policies"], dict):
        raise ValueError(f"{sp}: policies: expected an object keyed by policy name")
    cap = summary["capacity_bytes"]
    if cap is not None and not (isinstance(cap, int | float) and cap > 0):
        raise ValueError(f"{sp}: capacity_bytes: expected a positive number or null, got {cap!r}")
    if not (isinstance(summary["replicas"], int) and summary["replicas"] >= 1):
        raise ValueError(f"{sp}: replicas: expected an integer >= 1, got {summary['replicas']!r}")
    run = RunInfo(d, label, str(summary["trace"]), str(summary["model"]), str(summary["gpu"]),
                  math.inf if cap is None else float(cap), int(summary["replicas"]), summary, config)
    return run, _read_requests(d / "requests.parquet")


def _read_requests(path: Path) -> pl.DataFrame:
    try:
        df = pl.read_parquet(path, glob=False)   # NOTE: a "[" in a folder name is not a glob pattern
    except Exception as e:  # polars raises several kinds on corrupt files
        raise ValueError(f"{path}: not a readable Parquet file ({type(e).__name__})") from None
    if any(c not in df.columns for c in _DERIVED) and {"finish_us", "first_token_us", "arrival_us",
                                                        "output_tokens"} <= set(df.columns):
        try:
            df = request_latencies(df.drop([c for c in _DERIVED if c in df.columns]))
        except pl.exceptions.PolarsError as e:
            raise ValueError(f"{path}: cannot derive e2el_s/tpot_s: {str(e).splitlines()[0]}") from None
    missing = [c for c in REQUEST_COLUMNS if c not in df.columns and c not in OPTIONAL_COLUMNS]
    if missing:
        raise ValueError(f"{path}: missing columns: {', '.join(missing)}")
    df = _with_optional(df)
    casts = []
    for c, dt in REQUEST_COLUMNS.items():
        if df.schema[c] != dt:
            ok = (df.schema[c].is_numeric() and dt.is_numeric()) or df.schema[c] == pl.Null
            if not ok:
                raise ValueError(f"{path}: {c}: expected {dt}, got {df.schema[c]}")
            casts.append(pl.col(c).cast(dt, strict=True))
    try:
        return df.with_columns(casts).select(list(REQUEST_COLUMNS))
    except pl.exceptions.PolarsError as e:
        raise ValueError(f"{path}: cannot cast columns to the run schema: {str(e).splitlines()[0]}") from None


def _close(a: float, b: float, rel: float = 1e-6, abs_: float = 1e-9) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def _check(name: str, got: Any, row: dict[str, Any]) -> bool:
    """Does summary value ``got`` agree with the recomputed row?"""
    if got is None:  # NaN written as null
        v = row[name]
        return v is None or (isinstance(v, float) and math.isnan(v))
    try:
        got = float(got)
    except (TypeError, ValueError):
        return False
    v = row[name]
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return True  # undefined here (zero denominator): a writer may put 0, 1 or null; nothing to compare
    if name in _QUANTILES:
        lo, hi = row[f"{name}_lo"], row[f"{name}_hi"]
        return lo is not None and lo - 1e-9 <= got <= hi + 1e-9
    if name.startswith("energy_saved_vs_"):  # fraction or joules: both readings are accepted
        return _close(got, row[name]) or _close(got, row[name.replace("energy", "joules")])
    return _close(got, float(row[name]))


def _attach_summary(table: pl.DataFrame, runs: list[RunInfo], warnings: list[str]) -> pl.DataFrame:
    extra: dict[str, list[Any]] = {k: [] for k in SUMMARY_ONLY}
    text: dict[str, list[Any]] = {k: [] for k in SUMMARY_TEXT}
    by_label = {r.label: r for r in runs}
    for r in runs:
        seen = set(table.filter(pl.col("run") == r.label)["policy"].to_list())
        for p in r.summary["policies"]:
            if p not in seen:
                warnings.append(f"{r.path}/summary.json: policy {p!r} has no rows in requests.parquet")
    for row in table.iter_rows(named=True):
        run = by_label[row["run"]]
        sp = run.summary["policies"].get(row["policy"])
        where = f"{run.path}/summary.json: {row['policy']}"
        if not isinstance(sp, dict):
            warnings.append(f"{where}: policy missing from summary; metrics recomputed from requests.parquet")
            sp = {}
        for k in SUMMARY_ONLY:
            v = sp.get(k)
            extra[k].append(float(v) if isinstance(v, int | float) else float("nan"))
        for k in SUMMARY_TEXT:
            v = sp.get(k)
            text[k].append(str(v) if isinstance(v, str) else None)
        for k in (*_COUNTS, *_RATES, *_QUANTILES, *_MEANS, "energy_saved_vs_none", "energy_saved_vs_prefix"):
            if k in sp and not _check(k, sp[k], row):
                warnings.append(f"{where}: {k}: summary says {sp[k]!r}, requests.parquet gives {row[k]!r}")
    return table.with_columns(*[pl.Series(k, v, pl.Float64) for k, v in extra.items()],
                              *[pl.Series(k, v, pl.String) for k, v in text.items()])


def _capacity_notes(runs: list[RunInfo], series: pl.DataFrame) -> list[str]:
    """Why there is no hit-rate-vs-capacity plot although several capacities were replayed."""
    caps = {r.capacity_bytes for r in runs}
    if not series.is_empty() or len(caps) < 2:
        return []
    differ = [k for k in ("trace", "model", "replicas") if len({getattr(r, k) for r in runs}) > 1]
    what = "; ".join(f"{k}: {' vs '.join(dict.fromkeys(str(getattr(r, k)) for r in runs))}" for k in differ)
    return [f"no hit-rate-vs-capacity plot: the runs at different capacities also differ in {what}. A curve "
            "needs the same trace, model and replicas replayed at two or more capacities."]


def _warn_duplicates(table: pl.DataFrame, warnings: list[str]) -> None:
    dup = table.group_by([*SCENARIO, "policy"], maintain_order=True).agg(pl.col("run")).filter(
        pl.col("run").list.len() > 1)
    for row in dup.iter_rows(named=True):
        warnings.append(f"policy {row['policy']!r} on the same trace/model/gpu/replicas/capacity appears in "
                        f"several runs: {', '.join(row['run'])}; each is shown separately")


# ---- Formatting shared by the writers ---------------------------------------------------------------

def fmt_bytes(n: float | None) -> str:
    """``42.0 GiB``; ``inf`` for unbounded; ``–`` for missing."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "–"
    if math.isinf(n):
        return "inf"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def fmt_num(x: float | None, digits: int = 3) -> str:
    """Compact number (``3.14``, ``1.2e+05``); ``–`` for missing/NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:,.0f}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:.{digits}g}"


def policy_labels(rows: pl.DataFrame) -> list[str]:
    """Policy names of table rows, suffixed `` (run)`` when a policy appears in several runs."""
    pol, run = rows["policy"].to_list(), rows["run"].to_list()
    return [p if pol.count(p) == 1 else f"{p} ({r})" for p, r in zip(pol, run, strict=True)]


def scenario_title(key: dict[str, Any]) -> str:
    """One line naming a scenario: trace · model · gpu · capacity per replica · replicas."""
    r = key["replicas"]
    cap = fmt_bytes(key["capacity_bytes"])
    return (f"{Path(str(key['trace'])).name} · {key['model']} · {key['gpu']} · capacity "
            f"{'unbounded' if cap == 'inf' else cap}{' per replica' if r != 1 else ''} · {r} replica{'s' if r != 1 else ''}")
