"""The request -> segment-row index a Trace builds when it is validated (``Trace._csr``): references looked up
in sorted order must land on the same rows as a plain dictionary, and an unknown id names its own request."""

from __future__ import annotations

import numpy as np
import pytest

from pic.traces.io import read_trace, write_trace
from pic.traces.schema import SegmentTable, Trace, TraceError, requests_frame


def _trace(rng: np.random.Generator, num_segments: int, num_requests: int, extra: int | None = None) -> Trace:
    """Segments with random (unsorted) ids; requests referencing them in random order, with repeats; with
    ``extra``, request ``extra`` also references one id no segment has."""
    table = SegmentTable()
    ids = [table.add(rng.integers(0, 50_000, int(rng.integers(1, 9)), dtype=np.int32), "user")
           for _ in range(num_segments)]
    rows = {"request_id": [], "session_id": [], "agent_id": [], "arrival_us": [], "output_tokens": [],
            "segment_ids": []}
    for i in range(num_requests):
        sids = [ids[j] for j in rng.integers(0, len(ids), int(rng.integers(1, 12)))]
        if i == extra:
            sids.insert(1, 12345)
        for c, v in zip(rows, (i, f"s{i % 5}", "a", 10 * i, 1, sids), strict=True):
            rows[c].append(v)
    return Trace(table.build(), requests_frame(rows), source="<test>")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_reference_lands_on_its_segment(seed: int, tmp_path) -> None:
    t = _trace(np.random.default_rng(seed), 300, 200)
    row_of = {int(s): r for r, s in enumerate(t.segments.ids)}
    for back in (t, read_trace(write_trace(t, tmp_path / "t.parquet"))):
        ids = back.segments.ids
        for i, refs in enumerate(back.requests["segment_ids"].to_list()):
            got = back.request_segments(i)
            assert [int(ids[r]) for r in got] == refs
            if back is t:
                assert got.tolist() == [row_of[s] for s in refs]


def test_unknown_segment_names_the_first_request_holding_one() -> None:
    """The sorted lookup meets the references out of row order; the error still names the right request."""
    with pytest.raises(TraceError, match="request row 37 references unknown segment 12345"):
        _trace(np.random.default_rng(3), 50, 80, extra=37)
