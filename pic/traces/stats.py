"""Summary statistics of a canonical trace (what ``pic inspect`` prints)."""

from __future__ import annotations

import numpy as np

from pic.traces.schema import KINDS, Trace


def trace_stats(trace: Trace) -> dict:
    """Plain-JSON dict of a trace's shape.

    Keys: requests, sessions, agents, prompt_tokens (total), segment_tokens_total (sum over requests of
    their segments' tokens = prompt_tokens), segment_tokens_distinct (tokens of the stored segments),
    dedup_ratio (total / distinct), distinct_segments, prompt_len {p50, p90, p99, max, mean},
    output_tokens (total), duration_s (last - first arrival), arrival_rate_rps ((requests - 1) / duration_s,
    that span; null when all requests arrive at once), segments_by_kind {kind: {segments, tokens}}
    (distinct segments and their tokens), and meta (the file's ``pic.*`` metadata).
    """
    req = trace.requests
    seg = trace.segments
    lens = trace.prompt_lengths
    total = int(lens.sum())
    distinct = int(seg.offsets[-1]) if len(seg) else 0
    arrival = req["arrival_us"].to_numpy() if req.height else np.zeros(0, np.int64)
    duration_us = int(arrival.max() - arrival.min()) if arrival.size else 0
    seg_len = seg.lengths
    by_kind = {}
    for code, name in enumerate(KINDS):
        mask = seg.kinds == code
        if mask.any():
            by_kind[name] = {"segments": int(mask.sum()), "tokens": int(seg_len[mask].sum())}
    pct = (lambda q: float(np.percentile(lens, q))) if lens.size else (lambda q: 0.0)
    return {
        "requests": int(req.height),
        "sessions": int(req["session_id"].n_unique()) if req.height else 0,
        "agents": int(req["agent_id"].n_unique()) if req.height else 0,
        "prompt_tokens": total,
        "segment_tokens_total": total,
        "segment_tokens_distinct": distinct,
        "dedup_ratio": (total / distinct) if distinct else None,
        "distinct_segments": len(seg),
        "prompt_len": {"p50": pct(50), "p90": pct(90), "p99": pct(99),
                       "max": int(lens.max()) if lens.size else 0,
                       "mean": float(lens.mean()) if lens.size else 0.0},
        "output_tokens": int(req["output_tokens"].sum()) if req.height else 0,
        "duration_s": duration_us / 1e6,
        "arrival_rate_rps": ((req.height - 1) / (duration_us / 1e6)) if duration_us > 0 else None,
        "segments_by_kind": by_kind,
        "meta": dict(trace.meta),
    }
