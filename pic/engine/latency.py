"""Serving-benchmark metrics as vLLM's ``benchmark_serving`` reports them (definitions in docs/metrics.md).

Per request: TTFT (arrival → first token), E2EL (arrival → last token), TPOT = (E2EL − TTFT)/(output − 1)
for requests with more than one output token. ITL pools every inter-token gap of every request; the
simulator never makes a per-token event, so ITLs come as weighted arithmetic series (one per decode phase
or prefill step, ``Replica.itl``) and their mean, std and percentiles are computed from the series in
closed form (percentiles by bisection on the count function). Throughput and goodput divide by the
replay's duration (first arrival → last finish). Times are seconds here; tables show milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import polars as pl

    from pic.engine.rows import RequestRows

#: latency metrics with per-request values (in requests.parquet) and the pooled ITL
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
#: metrics a goodput SLO may bound (vLLM --goodput keys), all in seconds
SLO_METRICS = ("ttft", "tpot", "e2el")


def pct_key(q: float) -> str:
    """``99`` -> ``p99``; ``99.9`` -> ``p99.9`` (the percentile part of a summary key)."""
    return f"p{q:g}"


def stat_keys(metric: str, percentiles: Sequence[float]) -> list[str]:
    """Summary keys of one metric: ``{metric}_mean_s``, ``_median_s``, ``_std_s``, ``_p{q}_s``..."""
    return [f"{metric}_{s}_s" for s in ("mean", "median", "std", *(pct_key(q) for q in percentiles))]


def describe(values: np.ndarray, metric: str, percentiles: Sequence[float]) -> dict[str, float | None]:
    """mean / median / std (population, as numpy) / linear-interpolated percentiles; None when empty."""
    keys = stat_keys(metric, percentiles)
    if values.size == 0:
        return dict.fromkeys(keys)
    stats = [float(values.mean()), float(np.percentile(values, 50)), float(values.std()),
             *(float(np.percentile(values, q)) for q in percentiles)]
    return dict(zip(keys, stats, strict=True))


def describe_series(segments: Iterable[Sequence[float]], metric: str,
                    percentiles: Sequence[float]) -> dict[str, float | None]:
    """:func:`describe` of the multiset in which segment ``(d0, step, n, w)`` holds the ``n`` values
    ``d0 + step*j`` (j = 0..n-1), each ``w`` times — without materializing it."""
    if isinstance(segments, np.ndarray):                  # (float64 [k, 4], e.g. ItlLog.array())
        seg = segments.reshape(-1, 4)
        seg = seg[(seg[:, 2] > 0) & (seg[:, 3] > 0)]
    else:
        seg = np.asarray([s for s in segments if s[2] > 0 and s[3] > 0], dtype=np.float64).reshape(-1, 4)
    keys = stat_keys(metric, percentiles)
    if seg.shape[0] == 0:
        return dict.fromkeys(keys)
    d0, step, n, w = seg.T
    total = float((w * n).sum())
    s1 = n * (n - 1) / 2                       # sum of j
    s2 = (n - 1) * n * (2 * n - 1) / 6         # sum of j^2
    mean = float((w * (n * d0 + step * s1)).sum() / total)
    a = d0 - mean                              # NOTE: centred first, so the variance does not cancel
    var = float((w * (n * a * a + 2 * a * step * s1 + step * step * s2)).sum() / total)
    lo, hi = float(d0.min()), float((d0 + step * (n - 1)).max())
    prune = total < 2.0**53 and bool((w == np.floor(w)).all() and (n == np.floor(n)).all())

    def counts(x: float, d0: np.ndarray, step: tuple[np.ndarray, np.ndarray], n: np.ndarray) -> np.ndarray:
        """How many of each segment's values are <= x (float64, clipped to [0, n]; monotone in x).
        ``step``: :func:`_steps` of the segments' steps.

        NOTE (speed): in place on one array (floor((x - d0) / step) + 1, the constant segments' n or 0
        written over), the same floats as the ``np.where`` of both cases; ~60 calls per percentile set"""
        safe, flat = step
        k = x - d0
        k /= safe
        np.floor(k, out=k)
        k += 1
        if flat.shape[0]:
            k[flat] = np.where(x >= d0[flat], n[flat], 0)
        return np.clip(k, 0, n, out=k)

    def order_stat(k: float) -> float:
        """The k-th smallest value (0-based): the smallest x with count_le(x) > k (bisection).

        NOTE (speed): every 8 halvings the segments whose count is the same at both ends of the bracket
        (all below it, all above it, or no value inside it) leave the search, their count summed once into
        ``base``: counts are monotone in x, so each count_le(x) inside the bracket is the same sum as over
        all segments, and exact (integer-valued float64 terms, totals < 2**53: checked, else no pruning), so the
        same halvings; the
        ~10^5 segments of a large replay shrink to a handful after a few rounds."""
        a_, b_ = lo, hi
        sd0, sstep, sn, sw = d0, steps, n, w            # (sstep: _steps of the live segments' steps)
        raw = step
        at_lo = below.get(a_)
        if at_lo is None:
            at_lo = below[a_] = float((sw * counts(a_, sd0, sstep, sn)).sum())
        if at_lo > k:
            return a_
        base = 0.0
        for it in range(200):
            if prune and it % 8 == 7:
                ka, kb = counts(a_, sd0, sstep, sn), counts(b_, sd0, sstep, sn)
                fixed = ka == kb
                if fixed.any():
                    base += float((sw[fixed] * ka[fixed]).sum())
                    live = ~fixed
                    sd0, sn, sw, raw = sd0[live], sn[live], sw[live], raw[live]
                    sstep = _steps(raw)
            mid = (a_ + b_) / 2
            if mid <= a_ or mid >= b_:
                break
            c = below.get(mid)
            if c is None:
                c = below[mid] = base + float((sw * counts(mid, sd0, sstep, sn)).sum())
            if c > k:
                b_ = mid
            else:
                a_ = mid
        return b_

    # NOTE (speed): count_le(x) of every x met, shared by the order statistics: every bisection starts from
    # [lo, hi], so theirs share their first halvings, and ranks f and f + 1 of a percentile (and the median,
    # asked twice as median and p50) most or all of them (~2x fewer count passes). The value is the one a
    # search would compute itself: with pruning the counts are exact integers (base + live = the full sum);
    # without it, each is the same sum over all segments
    below: dict[float, float] = {}
    steps = _steps(step)

    def percentile(q: float) -> float:
        h = (total - 1) * q / 100          # numpy's "linear" method
        f = math.floor(h)
        x0 = order_stat(f)
        return x0 if h == f else x0 + (h - f) * (order_stat(f + 1) - x0)

    stats = [mean, percentile(50), math.sqrt(max(var, 0.0)), *(percentile(q) for q in percentiles)]
    return dict(zip(keys, stats, strict=True))


def _steps(step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(step where > 0 else 1.0, indices of the constant segments)`` for ``counts``."""
    pos = step > 0
    return np.where(pos, step, 1.0), np.flatnonzero(~pos)


def request_latencies(rows: pl.DataFrame) -> pl.DataFrame:
    """``e2el_s`` and ``tpot_s`` (null when output ≤ 1 token) from a request frame's µs timestamps (the same
    values as :meth:`engine.rows.RequestRows.add_latencies`)."""
    import polars as pl

    out = pl.col("output_tokens").cast(pl.Int64)
    return rows.with_columns(
        e2el_s=(pl.col("finish_us") - pl.col("arrival_us")).cast(pl.Float64) / 1e6,
        tpot_s=pl.when(out > 1).then((pl.col("finish_us") - pl.col("first_token_us")).cast(pl.Float64)
                                     / 1e6 / (out - 1).cast(pl.Float64)).otherwise(None),
    )


def serving_summary(rows: RequestRows | pl.DataFrame, itl_segments: Iterable[Sequence[float]], *,
                    percentiles: Sequence[float], slo: dict[str, float]) -> dict[str, Any]:
    """One policy's serving metrics: latency statistics, throughput and goodput (keys in docs/metrics.md).

    ``rows`` has the requests.parquet columns (``ttft_s``, ``e2el_s``, ``tpot_s`` included; an
    :class:`engine.rows.RequestRows` or a polars frame); ``slo`` maps ``ttft``/``tpot``/``e2el`` to seconds (a
    request is good when it meets every bound given; TPOT of a one-token request counts as 0, as in vLLM).
    """
    from pic.engine.rows import RequestRows

    if isinstance(rows, RequestRows):
        col, non_null, n = rows.__getitem__, rows.non_null, len(rows)
    else:
        n = rows.height
        col = lambda c: rows[c].to_numpy()               # noqa: E731 - (tpot_s: NaN where null)
        non_null = lambda c: rows[c].drop_nulls().to_numpy()   # noqa: E731
    span = (int(col("finish_us").max()) - int(col("arrival_us").min())) / 1e6 if n else 0.0
    prompt = int(col("prompt_tokens").sum()) if n else 0
    generated = int(np.maximum(col("output_tokens").astype(np.int64), 1).sum()) if n else 0

    def per_s(x: float) -> float | None:
        return x / span if span > 0 else None

    prefill = (col("first_token_us") - col("start_us")).astype(np.float64) / 1e6
    out: dict[str, Any] = {"duration_s": span, "generated_tokens": generated,
                           "prefill_p50_s": float(np.percentile(prefill, 50)) if n else None,
                           "request_throughput_rps": per_s(n),
                           "output_throughput_tps": per_s(generated),
                           "total_token_throughput_tps": per_s(prompt + generated)}
    for m in ("ttft", "tpot", "e2el"):
        out.update(describe(non_null(f"{m}_s"), m, percentiles))
    out.update(describe_series(itl_segments, "itl", percentiles))
    if slo:
        good = np.ones(n, bool)
        for m, bound in slo.items():
            v = col(f"{m}_s")
            good &= np.where(np.isnan(v), 0.0, v) <= bound      # (a null TPOT: 0)
        num_good = int(good.sum()) if n else 0
        out.update(slo={k: float(v) for k, v in slo.items()}, good_requests=num_good,
                   slo_attainment=num_good / n if n else None, goodput_rps=per_s(num_good))
    return out
