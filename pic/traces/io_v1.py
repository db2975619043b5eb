"""Reader of schema version 1 trace files (pic before the compact layout; docs/trace-format.md).

Version 1: one Parquet file, columns ``record, segment_id, kind, tokens, request_id, session_id, agent_id,
arrival_us, output_tokens, segment_ids``, the other family's columns null, every segment's tokens stored.
Read whole and split by ``record``; ``pic ingest``/``pic synth`` now write version 2.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pic.traces.content import narrow_tokens
from pic.traces.schema import KINDS, Segments, Trace, TraceError

V1_COLUMNS = ("record", "segment_id", "kind", "tokens", "request_id", "session_id", "agent_id", "arrival_us",
              "output_tokens", "segment_ids")
_REQUEST_FIELDS = ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")


def read_v1(path: Path, pf: pq.ParquetFile, meta: dict[bytes, bytes]) -> Trace:
    """The trace in a version 1 file (``pf`` already opened, ``meta`` its key/value metadata)."""
    from pic.traces.io import user_meta

    names = set(pf.schema_arrow.names)
    for f in V1_COLUMNS:
        if f not in names:
            raise TraceError(str(path), None, f, "missing column")
    table = pf.read(columns=list(V1_COLUMNS))
    is_seg = pc.equal(table.column("record").cast(pa.string()), "segment")
    segt = table.filter(is_seg)
    reqt = table.filter(pc.invert(is_seg))
    tok = segt.column("tokens").combine_chunks()
    offsets = np.asarray(tok.offsets, dtype=np.int64)
    offsets = offsets - offsets[0] if offsets.size else np.zeros(1, np.int64)
    flat = narrow_tokens(np.asarray(tok.flatten(), dtype=np.int32) if len(tok) else np.zeros(0, np.int32))
    kind_str = segt.column("kind").cast(pa.string()).to_pylist()
    try:
        kinds = np.asarray([KINDS.index(k) for k in kind_str], dtype=np.uint8)
    except ValueError as e:
        raise TraceError(str(path), None, "kind", str(e)) from None
    segments = Segments(ids=np.asarray(segt.column("segment_id"), dtype=np.uint64), kinds=kinds,
                        offsets=offsets if offsets.size else np.zeros(1, np.int64), tokens=flat)
    requests = pl.from_arrow(reqt.select(list(_REQUEST_FIELDS)))
    requests = requests.cast({"output_tokens": pl.Int32, "segment_ids": pl.List(pl.UInt64)})
    return Trace(segments=segments, requests=requests, source=str(path), meta=user_meta(meta))
