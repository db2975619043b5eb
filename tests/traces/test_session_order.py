"""A trace whose arrivals go backwards within a session is refused (schema.validate), naming the first such
row; the numpy check equals polars' window expression it replaced, null sessions one session."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from pic.traces.schema import SegmentTable, Trace, TraceError, _backwards_in_session, requests_frame


def _reference(req: pl.DataFrame) -> int | None:
    bad = (req.with_row_index("_row")
           .with_columns(_prev=pl.col("arrival_us").shift(1).over("session_id", order_by="_row"))
           .filter(pl.col("_prev") > pl.col("arrival_us")))
    return int(bad["_row"][0]) if bad.height else None


@pytest.mark.parametrize("seed", range(40))
def test_first_backwards_row_equals_the_window_expression(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    sessions = [None if rng.random() < 0.15 else f"s{int(rng.integers(0, 6))}" for _ in range(n)]
    arrival = np.sort(rng.integers(0, 50, n))
    if seed % 2:
        arrival = rng.integers(0, 50, n)      # (often backwards somewhere)
    req = pl.DataFrame({"session_id": pl.Series(sessions, dtype=pl.String), "arrival_us": arrival.astype(np.int64)})
    assert _backwards_in_session(req) == _reference(req)


def test_trace_refused_at_the_first_backwards_row():
    table = SegmentTable()
    seg = table.add(np.arange(1, 9), "user")
    rows = {"request_id": [1, 2, 3, 4], "session_id": ["a", "b", "a", "b"], "agent_id": ["x"] * 4,
            "arrival_us": [10, 5, 20, 4], "output_tokens": [1] * 4, "segment_ids": [[seg]] * 4}
    with pytest.raises(TraceError, match="arrival goes backwards within its session") as e:
        Trace(table.build(), requests_frame(rows), source="t")
    assert e.value.line == 3
    rows["arrival_us"] = [10, 5, 20, 6]           # across sessions any order is fine
    Trace(table.build(), requests_frame(rows), source="t")
