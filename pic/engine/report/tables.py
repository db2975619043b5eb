"""What the report tables show, in which order and units (shared by HTML, Markdown and the terminal).

Times are milliseconds everywhere; capacities are per replica, peak resident KV is summed over replicas
(each label says so); percentages never print as ``-0.0%``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from pic.engine.report.data import fmt_bytes, fmt_num, fmt_pct, policy_labels
from pic.engine.report.fmt import fmt_ms, fmt_speedup  # noqa: F401 - (fmt_speedup re-exported)
from pic.engine.report.fmt import missing as _missing


def fmt_seconds(x: float | None) -> str:
    """Kept for callers of the old name: the same as :func:`fmt_ms`."""
    return fmt_ms(x)


def _sig3(v: float) -> str | None:
    """Three significant digits with their trailing zeros (``2.00``, ``56.9``, ``123``); None when the
    value rounds up to four integer digits."""
    s = f"{v:#.3g}"
    return None if "e" in s else s.rstrip(".")


def fmt_joules(x: float | None) -> str:
    """``12.3 J`` / ``4.56 kJ`` / ``2.00 MJ`` / ``–`` (three significant digits)."""
    if _missing(x):
        return "–"
    for scale, unit in ((1.0, "J"), (1e3, "kJ"), (1e6, "MJ")):
        s = _sig3(x / scale)
        if s is not None:
            return f"{s} {unit}"
    return f"{x / 1e6:,.0f} MJ"


def fmt_text(x: Any) -> str:
    """A name as is; ``–`` for missing."""
    return "–" if _missing(x) else str(x)


def fmt_rate(unit: str) -> Callable[[float | None], str]:
    def f(x: float | None) -> str:
        return "–" if _missing(x) else f"{x:,.3g} {unit}" if abs(x) < 1000 else f"{x:,.0f} {unit}"
    return f


#: (column of ReportData.table, row label, formatter) — the rows of every policy comparison table
TABLE_METRICS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("requests", "requests", fmt_num),
    ("prompt_tokens", "prompt tokens", fmt_num),
    ("token_hit_rate", "token hit rate", fmt_pct),
    ("baseline", "exact-prefix baseline (best of the run)", fmt_text),
    ("prefix_hit_rate", "baseline hit rate", fmt_pct),
    ("recovery_beyond_prefix", "recovery vs baseline", fmt_pct),
    ("oracle_share", "oracle share (recovery / oracle's)", fmt_pct),
    ("ttft_p50_s", "TTFT p50", fmt_ms),
    ("ttft_p99_s", "TTFT p99", fmt_ms),
    ("ttft_speedup", "TTFT p50 speed-up vs best prefix", fmt_speedup),
    ("queue_p50_s", "queueing p50", fmt_ms),
    ("prefill_joules", "prefill energy", fmt_joules),
    ("prefill_joules_per_request", "prefill energy per request", fmt_joules),
    ("hit_energy_saved", "prefill energy saved per hit (vs its full prefill)", fmt_pct),
    ("energy_saved_vs_none", "energy saved vs no cache", fmt_pct),
    ("energy_saved_vs_prefix", "prefill energy saved vs baseline", fmt_pct),
    ("gpu_energy_saved_vs_baseline", "whole-GPU energy saved vs baseline", fmt_pct),
    ("attn_layer_saved_vs_none", "attention layers: time/energy saved vs no cache", fmt_pct),
    ("recurrent_layer_saved_vs_none", "recurrent layers: time/energy saved vs no cache", fmt_pct),
    ("peak_resident_bytes", "peak resident KV (all replicas)", fmt_bytes),
    ("kv_bytes_per_token", "KV bytes/token", fmt_bytes),
    ("capacity_tokens", "capacity (tokens per replica)", fmt_num),
    ("tpot_p50_s", "decode step p50 (TPOT)", fmt_ms),
    ("rdr_distortion", "KV distortion (rdr)", fmt_num),
    ("registry_entries", "registry entries", fmt_num),
    ("stored_tokens", "stored tokens (end)", fmt_num),
    ("duplicate_stored_tokens", "duplicate stored tokens", fmt_num),
    ("evictions", "evictions", fmt_num),
    ("uncached", "uncached requests", fmt_num),
)

#: (label, [columns], formatter): the serving-benchmark table, one "mean / p50 / p99" cell per policy
LATENCY_METRICS: tuple[tuple[str, tuple[str, ...], Callable[[Any], str]], ...] = (
    ("TTFT mean / p50 / p99", ("ttft_mean_s", "ttft_p50_s", "ttft_p99_s"), fmt_ms),
    ("TPOT mean / p50 / p99", ("tpot_mean_s", "tpot_p50_s", "tpot_p99_s"), fmt_ms),
    ("ITL mean / p50 / p99", ("itl_mean_s", "itl_median_s", "itl_p99_s"), fmt_ms),
    ("E2E latency mean / p50 / p99", ("e2el_mean_s", "e2el_p50_s", "e2el_p99_s"), fmt_ms),
    ("request throughput", ("request_throughput_rps",), fmt_rate("req/s")),
    ("output token throughput", ("output_throughput_tps",), fmt_rate("tok/s")),
    ("goodput (requests meeting the SLO)", ("goodput_rps", "slo_attainment"), None),
)

DEFINITIONS: tuple[tuple[str, str], ...] = (
    ("KV bytes/token", "bytes one cached token occupies and decode attention reads: dense KV, or the rdr "
     "charge (compressed KV, docs/policies.md)."),
    ("capacity (tokens per replica)", "cache capacity / KV bytes per token (blank when unbounded)."),
    ("KV distortion (rdr)", "Σ w·ε(b)² / Σ w over the KV states rdr allocated: 0 = lossless, 1 = all evicted."),
    ("token hit rate", "Σ reused tokens / Σ prompt tokens N (in place + rotated reuse)."),
    ("exact-prefix baseline", "prefix (SGLang radix) or block-hash (vLLM automatic prefix caching), whichever "
     "reuses more in its own replay of the same trace, capacity and serving setup; its per-request reuse and "
     "joules are the baseline columns of every policy (so eviction granularity never counts as PIC gain)."),
    ("baseline hit rate", "the token hit rate of that baseline."),
    ("recovery vs baseline", "(Σ reused − Σ baseline reused) / (Σ N − Σ baseline reused): the share of what "
     "the best exact-prefix cache misses that the policy recovers (negative when it reuses less)."),
    ("oracle share", "recovery / the oracle's recovery against the same baseline; the oracle reuses every "
     "token inside a run of >= 64 tokens seen in an earlier request, at any position, plus any exact prefix "
     "(infinite capacity, computed once per trace)."),
    ("prefill energy per request / saved per hit", "each request pays its token share of every batch step it "
     "ran in (weights and MoE experts streamed once per step, shared by its tokens; attention by each "
     "sequence's own work); per hit: 1 − Σ J / Σ J of a full prefill of the same requests in the same "
     "batches, over requests that reused >= 1 token (the Irminsul paper's 63 % figure)."),
    ("whole-GPU energy saved", "1 − GPU joules (busy power × busy time + idle power × idle time, all "
     "replicas, decode included) / the baseline's, over the same window (first arrival → last finish of "
     "any replay of the run)."),
    ("registry entries, stored and duplicate tokens", "hash-keyed entries (blocks, chunks, S1 windows; a "
     "radix tree's nodes), tokens resident at the end, and those of them whose content (a run of >= 64 "
     "tokens) is stored elsewhere in the same cache too (– when the policy keeps no tokens: block-hash "
     "outside --verify)."),
    ("best prefix cache", "the replayed exact-prefix policy (prefix, block-hash) with the highest token hit "
     "rate in the same scenario; without one, the headline compares with the run's exact-prefix baseline."),
    ("TTFT p50 speed-up", "TTFT p50 of the best prefix cache / TTFT p50 of the policy (2.00× = half the time)."),
    ("TTFT / TPOT / ITL / E2E latency", "as vLLM's benchmark_serving: time to first token; time per output "
     "token after the first = (E2E − TTFT)/(output − 1); every gap between two output tokens, pooled; "
     "arrival → last token. Percentiles interpolate linearly (numpy)."),
    ("throughput, goodput", "requests (or generated tokens) / replay duration (first arrival → last finish); "
     "goodput counts only requests meeting every --slo bound."),
    ("energy saved vs no cache / vs baseline", "1 − Σ prefill joules / Σ prefill joules of the same requests "
     "with no cache (same batches) / in the baseline's own replay."),
    ("attention / recurrent layers saved", "1 − Σ prefill time spent in that kind of layer / the same with no "
     "cache (each request's plan priced alone; energy follows time). Recurrent: hybrid models only (Gated "
     "DeltaNet, Mamba-2); reuse that is not an exact prefix saves nothing there unless the policy starts the "
     "recurrent state itself (linearkv)."),
    ("peak resident KV", "largest KV bytes resident in the policy's caches during the replay, summed over "
     "replicas (capacity is per replica)."),
)


def comparison_rows(rows: pl.DataFrame) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(column headers, [(metric label, formatted values...)]) for one scenario's table rows."""
    return policy_labels(rows), [(label, [f(v) for v in _col(rows, col)]) for col, label, f in TABLE_METRICS]


def latency_rows(rows: pl.DataFrame) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The serving-benchmark table for one scenario (goodput only when some run set an SLO)."""
    body = []
    for label, cols, f in LATENCY_METRICS:
        vals = [_col(rows, c) for c in cols]
        if f is None:   # goodput: "0.51 req/s (73.0%)"
            if all(_missing(v) for v in vals[0]):
                continue
            cells = [("–" if _missing(g) else f"{g:,.3g} req/s ({fmt_pct(a)})") for g, a in zip(*vals, strict=True)]
        else:   # "16.7 / 14.9 / 44.8 ms": one unit per cell
            cells = []
            for per in zip(*vals, strict=True):
                parts = [f(v) for v in per]
                unit = next((p.rsplit(" ", 1)[1] for p in parts if " " in p), "")
                cells.append(" / ".join(p.removesuffix(f" {unit}") for p in parts) + (f" {unit}" if unit else ""))
        body.append((label, cells))
    return policy_labels(rows), body


def _col(rows: pl.DataFrame, col: str) -> list[Any]:
    return rows[col].to_list() if col in rows.columns else [None] * rows.height
