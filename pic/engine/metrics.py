"""Per-request rows and the per-policy summary of a replay (definitions in docs/metrics.md).

``request_frame`` turns finished Request entities into the ``requests.parquet`` columns;
``summarize`` reduces one policy's rows (plus cache-wide counters) to its ``summary.json`` entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import polars as pl

from pic.engine.latency import request_latencies
from pic.engine.request import Labels, Request, RequestTable

#: summary.json format version: written by engine.replay, checked by engine.report
SUMMARY_VERSION = 1

#: requests.parquet columns, in order (the report code depends on these exact names and dtypes)
REQUEST_SCHEMA: dict[str, pl.DataType] = {
    "policy": pl.String(), "request_id": pl.Int64(), "session_id": pl.String(), "replica": pl.Int32(),
    "arrival_us": pl.Int64(), "start_us": pl.Int64(), "first_token_us": pl.Int64(), "finish_us": pl.Int64(),
    "prompt_tokens": pl.Int64(), "reused_tokens": pl.Int64(), "rotated_tokens": pl.Int64(),
    "recomputed_tokens": pl.Int64(), "prefix_reused_tokens": pl.Int64(), "output_tokens": pl.Int32(),
    "ttft_s": pl.Float64(), "queue_s": pl.Float64(), "e2el_s": pl.Float64(), "tpot_s": pl.Float64(),
    "prefill_flops": pl.Float64(),
    "prefill_hbm_bytes": pl.Float64(), "cache_read_bytes": pl.Float64(), "prefill_joules": pl.Float64(),
    "nocache_prefill_joules": pl.Float64(), "prefix_prefill_joules": pl.Float64(), "evictions": pl.Int64(),
    "uncached": pl.Boolean(), "recurrent_tokens": pl.Int64(), "attn_layer_s": pl.Float64(),
    "recurrent_layer_s": pl.Float64(), "nocache_attn_layer_s": pl.Float64(),
    "nocache_recurrent_layer_s": pl.Float64(), "oracle_reused_tokens": pl.Int64(),
}

#: columns computed from the timestamps (e2el_s, tpot_s: engine.latency.request_latencies)
_DERIVED = ("ttft_s", "queue_s", "e2el_s", "tpot_s")

_ATTRS = {  # column -> Request attribute
    "request_id": "request_id", "session_id": "session_id", "replica": "replica", "arrival_us": "arrival_us",
    "start_us": "start_us", "first_token_us": "first_token_us", "finish_us": "finish_us",
    "prompt_tokens": "num_prompt_tokens", "reused_tokens": "num_reused", "rotated_tokens": "num_rotated",
    "recomputed_tokens": "num_recomputed", "prefix_reused_tokens": "num_prefix_reused",
    "output_tokens": "num_output_tokens", "prefill_flops": "prefill_flops",
    "prefill_hbm_bytes": "prefill_hbm_bytes", "cache_read_bytes": "cache_read_bytes",
    "prefill_joules": "prefill_joules", "nocache_prefill_joules": "nocache_prefill_joules",
    "prefix_prefill_joules": "prefix_prefill_joules", "evictions": "num_evictions", "uncached": "uncached",
    "recurrent_tokens": "num_recurrent_tokens", "attn_layer_s": "attn_layer_s",
    "recurrent_layer_s": "recurrent_layer_s", "nocache_attn_layer_s": "nocache_attn_layer_s",
    "nocache_recurrent_layer_s": "nocache_recurrent_layer_s", "oracle_reused_tokens": "num_oracle_reused",
}


#: numpy dtype of each numeric column dtype (request_frame)
_NUMPY = {pl.Int64(): np.int64, pl.Int32(): np.int32, pl.Float64(): np.float64, pl.Boolean(): np.bool_}


def request_frame(policy: str, requests: Sequence[Request] | RequestTable) -> pl.DataFrame:
    """One row per request (sorted by request_id) with the :data:`REQUEST_SCHEMA` columns.

    NOTE (memory): built one column at a time, from a :class:`RequestTable`'s numpy columns or straight
    from Request attributes (``np.fromiter``), never as per-request tuples (10^6 requests x 27 attributes
    as tuples and lists cost ~0.5 GB more at peak); rows are put in request_id order column by column."""
    n = len(requests)
    table = requests if isinstance(requests, RequestTable) else None

    def values(attr: str, dtype) -> np.ndarray:
        if table is not None:
            return table.column(attr)
        return np.fromiter(map(attrgetter(attr), requests), dtype, n)

    rid = values("request_id", np.int64)
    order = None if n < 2 or bool((rid[1:] > rid[:-1]).all()) else np.argsort(rid, kind="stable")
    cols: dict[str, pl.Series] = {"policy": pl.Series("policy", [policy] * n, pl.String())}
    for col, attr in _ATTRS.items():
        dtype = REQUEST_SCHEMA[col]
        if dtype == pl.String():
            s = table.session_ids if table is not None else [getattr(r, attr) for r in requests]
            s = pl.Series(col, s.names, dtype).gather(s.codes) if isinstance(s, Labels) else pl.Series(col, s, dtype)
            cols[col] = s if order is None else s.gather(order)
        else:
            v = values(attr, _NUMPY[dtype])
            cols[col] = pl.Series(col, v if order is None else v[order]).cast(dtype)
    df = pl.DataFrame(cols)
    df = request_latencies(df.with_columns(
        ttft_s=(pl.col("first_token_us") - pl.col("arrival_us")).cast(pl.Float64) / 1e6,
        queue_s=(pl.col("start_us") - pl.col("arrival_us")).cast(pl.Float64) / 1e6,
    ))
    return df.select(list(REQUEST_SCHEMA))


def _ratio(num: float, den: float) -> float:
    return float(num / den) if den else 0.0


def _saved(work: float, baseline: float) -> float | None:
    """1 - work / baseline; None (JSON null) when the baseline did no such work (no layers of the kind)."""
    return 1.0 - work / baseline if baseline else None


def summarize(rows: pl.DataFrame, *, peak_resident_bytes: int, evictions: int, collisions: int,
              num_events: int, wall_seconds: float) -> dict[str, Any]:
    """One policy's summary.json entry from its request rows and cache-wide counters."""
    s = {c: float(rows[c].sum()) for c in ("prompt_tokens", "reused_tokens", "rotated_tokens",
                                            "prefix_reused_tokens", "prefill_joules",
                                            "nocache_prefill_joules", "prefix_prefill_joules", "recurrent_tokens",
                                            "attn_layer_s", "recurrent_layer_s", "nocache_attn_layer_s",
                                            "nocache_recurrent_layer_s")}
    ttft = rows["ttft_s"].to_numpy()
    queue = rows["queue_s"].to_numpy()
    def pct(a: np.ndarray, q: float) -> float:
        return float(np.percentile(a, q)) if a.size else 0.0

    n, reused, pref = s["prompt_tokens"], s["reused_tokens"], s["prefix_reused_tokens"]
    orc = float(rows["oracle_reused_tokens"].sum())
    rec, orc_rec = _ratio(reused - pref, n - pref), _ratio(orc - pref, n - pref)
    hit = rows.filter(pl.col("reused_tokens") > 0)
    hit_j, hit_full = float(hit["prefill_joules"].sum()), float(hit["nocache_prefill_joules"].sum())
    span = (int(rows["finish_us"].max()) - int(rows["arrival_us"].min())) / 1e6 if rows.height else 0.0
    return {
        "requests": rows.height,
        "prompt_tokens": int(n),
        "reused_tokens": int(reused),
        "rotated_tokens": int(s["rotated_tokens"]),
        "token_hit_rate": _ratio(reused, n),
        "prefix_hit_rate": _ratio(pref, n),
        "recovery_beyond_prefix": rec,
        "oracle_hit_rate": _ratio(orc, n),
        "oracle_recovery": orc_rec,
        "oracle_share": rec / orc_rec if orc_rec > 0 else None,
        "ttft_p50_s": pct(ttft, 50), "ttft_p90_s": pct(ttft, 90), "ttft_p99_s": pct(ttft, 99),
        "queue_p50_s": pct(queue, 50),
        "prefill_joules": s["prefill_joules"],
        "prefill_joules_per_request": _ratio(s["prefill_joules"], rows.height),
        "hit_requests": hit.height,
        "hit_energy_saved": _saved(hit_j, hit_full),
        "energy_saved_vs_none": 1.0 - _ratio(s["prefill_joules"], s["nocache_prefill_joules"]),
        "energy_saved_vs_prefix": 1.0 - _ratio(s["prefill_joules"], s["prefix_prefill_joules"]),
        "recurrent_tokens": int(s["recurrent_tokens"]),
        "attn_layer_saved_vs_none": _saved(s["attn_layer_s"], s["nocache_attn_layer_s"]),
        "recurrent_layer_saved_vs_none": _saved(s["recurrent_layer_s"], s["nocache_recurrent_layer_s"]),
        "peak_resident_bytes": int(peak_resident_bytes),
        "evictions": int(evictions),
        "collisions": int(collisions),
        "uncached": int(rows["uncached"].sum()),
        "events": int(num_events),
        "sim_seconds": span,
        "wall_seconds": float(wall_seconds),
    }
