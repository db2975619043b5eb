"""Per-request rows and the per-policy summary of a replay (definitions in docs/metrics.md).

``request_frame`` turns finished Request entities into the ``requests.parquet`` columns;
``summarize`` reduces one policy's rows (plus cache-wide counters) to its ``summary.json`` entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from pic.engine.request import Labels, Request, RequestTable
from pic.engine.rows import REQUEST_TYPES, RequestRows, polars_sum

if TYPE_CHECKING:
    import polars as pl

#: summary.json format version: written by engine.replay, checked by engine.report
SUMMARY_VERSION = 1

#: REQUEST_SCHEMA (dict[str, pl.DataType]): the requests.parquet columns, in order, and their polars types (the
#: report code depends on these exact names and dtypes); made on first use (module ``__getattr__``): a replay
#: builds its rows without polars (:class:`engine.rows.RequestRows`)

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

#: numpy dtype of each numeric column type (request_rows)
_NUMPY = {"i8": np.int64, "i4": np.int32, "f8": np.float64, "b": np.bool_}


def request_rows(policy: str, requests: Sequence[Request] | RequestTable) -> RequestRows:
    """One row per request (sorted by request_id) with the ``REQUEST_SCHEMA`` columns, as numpy columns.

    NOTE (memory): built one column at a time, from a :class:`RequestTable`'s numpy columns or straight
    from Request attributes (``np.fromiter``), never as per-request tuples (10^6 requests x 27 attributes
    as tuples and lists cost ~0.5 GB more at peak); rows are put in request_id order column by column.
    NOTE (speed): numpy only (the derived columns too: the same float operations polars did), no polars frame
    (its import and expressions were ~0.1 CPU s of every ``pic replay``)."""
    n = len(requests)
    table = requests if isinstance(requests, RequestTable) else None

    def values(attr: str, dtype) -> np.ndarray:
        if table is not None:
            return table.column(attr)
        return np.fromiter(map(attrgetter(attr), requests), dtype, n)

    rid = values("request_id", np.int64)
    order = None if n < 2 or bool((rid[1:] > rid[:-1]).all()) else np.argsort(rid, kind="stable")
    cols: dict[str, np.ndarray] = {}
    session: Labels | list
    for col, attr in _ATTRS.items():
        typ = REQUEST_TYPES[col]
        if typ == "str":
            s = table.session_ids if table is not None else [getattr(r, attr) for r in requests]
            if isinstance(s, Labels):
                session = Labels(s.codes if order is None else s.codes[order], s.names)
            else:
                s = list(s)
                session = s if order is None else [s[i] for i in order.tolist()]
        else:
            v = values(attr, _NUMPY[typ])
            cols[col] = (v if order is None else v[order]).astype(_NUMPY[typ], copy=False)
    rows = RequestRows(policy, session, cols)
    rows.add_latencies()
    return rows


def request_frame(policy: str, requests: Sequence[Request] | RequestTable) -> pl.DataFrame:
    """:func:`request_rows` as a polars frame (the :data:`REQUEST_SCHEMA` columns)."""
    return request_rows(policy, requests).to_polars()


def __getattr__(name: str):
    if name == "REQUEST_SCHEMA":
        from pic.engine.rows import polars_schema

        globals()[name] = got = polars_schema()
        return got
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _ratio(num: float, den: float) -> float:
    return float(num / den) if den else 0.0


def _saved(work: float, baseline: float) -> float | None:
    """1 - work / baseline; None (JSON null) when the baseline did no such work (no layers of the kind)."""
    return 1.0 - work / baseline if baseline else None


def summarize(rows: RequestRows | pl.DataFrame, *, peak_resident_bytes: int, evictions: int, collisions: int,
              num_events: int, wall_seconds: float) -> dict[str, Any]:
    """One policy's summary.json entry from its request rows (:class:`engine.rows.RequestRows`, or a polars frame
    of them) and cache-wide counters. Float columns are summed as polars sums them (:func:`engine.rows.polars_sum`)."""
    col = rows.__getitem__ if isinstance(rows, RequestRows) else (lambda c: rows[c].to_numpy())
    height = len(rows) if isinstance(rows, RequestRows) else rows.height

    def total(a: np.ndarray) -> float:
        return polars_sum(a) if a.dtype.kind == "f" else float(int(a.sum()))

    s = {c: total(col(c)) for c in ("prompt_tokens", "reused_tokens", "rotated_tokens",
                                    "prefix_reused_tokens", "prefill_joules",
                                    "nocache_prefill_joules", "prefix_prefill_joules", "recurrent_tokens",
                                    "attn_layer_s", "recurrent_layer_s", "nocache_attn_layer_s",
                                    "nocache_recurrent_layer_s")}
    ttft = col("ttft_s")
    queue = col("queue_s")
    def pct(a: np.ndarray, q: float) -> float:
        return float(np.percentile(a, q)) if a.size else 0.0

    n, reused, pref = s["prompt_tokens"], s["reused_tokens"], s["prefix_reused_tokens"]
    orc = total(col("oracle_reused_tokens"))
    rec, orc_rec = _ratio(reused - pref, n - pref), _ratio(orc - pref, n - pref)
    hit = col("reused_tokens") > 0
    hit_j, hit_full = polars_sum(col("prefill_joules")[hit]), polars_sum(col("nocache_prefill_joules")[hit])
    span = (int(col("finish_us").max()) - int(col("arrival_us").min())) / 1e6 if height else 0.0
    return {
        "requests": height,
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
        "prefill_joules_per_request": _ratio(s["prefill_joules"], height),
        "hit_requests": int(hit.sum()),
        "hit_energy_saved": _saved(hit_j, hit_full),
        "energy_saved_vs_none": 1.0 - _ratio(s["prefill_joules"], s["nocache_prefill_joules"]),
        "energy_saved_vs_prefix": 1.0 - _ratio(s["prefill_joules"], s["prefix_prefill_joules"]),
        "recurrent_tokens": int(s["recurrent_tokens"]),
        "attn_layer_saved_vs_none": _saved(s["attn_layer_s"], s["nocache_attn_layer_s"]),
        "recurrent_layer_saved_vs_none": _saved(s["recurrent_layer_s"], s["nocache_recurrent_layer_s"]),
        "peak_resident_bytes": int(peak_resident_bytes),
        "evictions": int(evictions),
        "collisions": int(collisions),
        "uncached": int(col("uncached").sum()),
        "events": int(num_events),
        "sim_seconds": span,
        "wall_seconds": float(wall_seconds),
    }
