"""Parquet I/O for canonical traces: one file, two record families, schema version in metadata.

Layout (documented in docs/trace-format.md): column ``record`` is ``"segment"`` or ``"request"``.
Segment rows fill ``segment_id, kind, tokens``; request rows fill ``request_id, session_id, agent_id,
arrival_us, output_tokens, segment_ids``. Segment rows come first, in their own row groups.
Writes go to a temporary name in the same folder and are renamed into place only when complete
(``traces.outputs``, re-exported here as ``atomic_path``/``atomic_dir``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pic.traces.outputs import atomic_dir, atomic_path, is_stream  # noqa: F401 - atomic_*: re-exported
from pic.traces.schema import KINDS, SCHEMA_KEY, SCHEMA_VERSION, Segments, Trace, TraceError

_KIND_TYPE = pa.dictionary(pa.int8(), pa.string())
ARROW_SCHEMA = pa.schema([
    ("record", pa.dictionary(pa.int8(), pa.string())),
    ("segment_id", pa.uint64()),
    ("kind", _KIND_TYPE),
    ("tokens", pa.large_list(pa.int32())),
    ("request_id", pa.int64()),
    ("session_id", pa.string()),
    ("agent_id", pa.string()),
    ("arrival_us", pa.int64()),
    ("output_tokens", pa.int32()),
    ("segment_ids", pa.list_(pa.uint64())),
])
SEGMENT_FIELDS = ("segment_id", "kind", "tokens")
REQUEST_FIELDS = ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")


def _nulls(n: int, names, exclude) -> dict[str, pa.Array]:
    return {f: pa.nulls(n, ARROW_SCHEMA.field(f).type) for f in names if f not in exclude}


def _segment_table(seg: Segments) -> pa.Table:
    n = len(seg)
    tokens = pa.LargeListArray.from_arrays(pa.array(seg.offsets, pa.int64()), pa.array(seg.tokens, pa.int32()))
    kinds = pa.DictionaryArray.from_arrays(pa.array(seg.kinds.astype(np.int8), pa.int8()), pa.array(KINDS))
    cols = {
        "record": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array(["segment", "request"])),
        "segment_id": pa.array(seg.ids, pa.uint64()),
        "kind": kinds,
        "tokens": tokens,
        **_nulls(n, REQUEST_FIELDS, ()),
    }
    return pa.table({f.name: cols[f.name] for f in ARROW_SCHEMA}, schema=ARROW_SCHEMA)


def _request_table(df: pl.DataFrame) -> pa.Table:
    n = df.height
    arrow = df.select(REQUEST_FIELDS).to_arrow()
    cols = {
        "record": pa.DictionaryArray.from_arrays(pa.array(np.ones(n, np.int8)), pa.array(["segment", "request"])),
        **_nulls(n, SEGMENT_FIELDS, ()),
        **{f: arrow.column(f).cast(ARROW_SCHEMA.field(f).type) for f in REQUEST_FIELDS},
    }
    return pa.table({f.name: cols[f.name] for f in ARROW_SCHEMA}, schema=ARROW_SCHEMA)


def write_trace(trace: Trace, path: str | os.PathLike, *, extra_meta: dict[str, str] | None = None) -> Path:
    """Write ``trace`` to ``path`` atomically (temp file + rename). Returns the final path."""
    meta = {SCHEMA_KEY: str(SCHEMA_VERSION).encode()}
    for k, v in {**trace.meta, **(extra_meta or {})}.items():
        meta[f"pic.{k}".encode()] = str(v).encode()
    schema = ARROW_SCHEMA.with_metadata(meta)
    with atomic_path(path) as tmp:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as w:
            seg = trace.segments
            step = 4096
            for lo in range(0, max(len(seg), 1), step):
                hi = min(lo + step, len(seg))
                if hi <= lo:
                    break
                part = Segments(seg.ids[lo:hi], seg.kinds[lo:hi], seg.offsets[lo:hi + 1] - seg.offsets[lo],
                                seg.tokens[seg.offsets[lo]:seg.offsets[hi]])
                w.write_table(_segment_table(part).replace_schema_metadata(meta))
            if trace.requests.height:
                w.write_table(_request_table(trace.requests).replace_schema_metadata(meta), row_group_size=65536)
    return Path(path)


def read_trace(path: str | os.PathLike) -> Trace:
    """Read and validate a canonical trace; raises :class:`TraceError` naming the file and field."""
    path = Path(path)
    if not path.exists():
        raise TraceError(str(path), None, "path", "no such file")
    if path.is_dir():
        raise TraceError(str(path), None, "path", "is a folder, not a trace file")
    if is_stream(path):
        raise TraceError(str(path), None, "path", "is a pipe, not a file: save the trace to a file first")
    try:
        fh = open(path, "rb")   # NOTE: pyarrow gets a file object, so any file name works (not UTF-8 too)
    except OSError as e:
        raise TraceError(str(path), None, "file", f"cannot read: {(e.strerror or str(e)).lower()}") from None
    with fh:
        try:
            return _read_open(path, fh)
        except TraceError:
            raise
        except (pa.ArrowException, pl.exceptions.PolarsError, OverflowError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise TraceError(str(path), None, "file", f"cannot read as a pic trace: {first[:200]}") from None


def _read_open(path: Path, fh) -> Trace:
    try:
        pf = pq.ParquetFile(fh)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types
        raise TraceError(str(path), None, "file", f"not a Parquet file ({e.__class__.__name__})") from None
    meta = pf.schema_arrow.metadata or {}
    if SCHEMA_KEY not in meta:
        raise TraceError(str(path), None, "metadata", "not a pic trace (no pic.schema_version)")
    try:
        ver = meta[SCHEMA_KEY].decode()
    except UnicodeDecodeError:
        raise TraceError(str(path), None, "metadata", "schema version is not UTF-8 text") from None
    if ver != str(SCHEMA_VERSION):
        raise TraceError(str(path), None, "metadata", f"schema version {ver}, this pic reads {SCHEMA_VERSION}")
    names = set(pf.schema_arrow.names)
    for f in ARROW_SCHEMA:
        if f.name not in names:
            raise TraceError(str(path), None, f.name, "missing column")
    table = pf.read()
    rec = table.column("record").cast(pa.string())
    is_seg = pa.compute.equal(rec, "segment")
    segt = table.filter(is_seg)
    reqt = table.filter(pa.compute.invert(is_seg))
    tok = segt.column("tokens").combine_chunks()
    if isinstance(tok, pa.ChunkedArray):
        tok = tok.chunk(0) if tok.num_chunks else pa.array([], pa.large_list(pa.int32()))
    offsets = np.asarray(tok.offsets, dtype=np.int64)
    offsets = offsets - offsets[0] if offsets.size else np.zeros(1, np.int64)
    flat = np.asarray(tok.flatten(), dtype=np.int32) if len(tok) else np.zeros(0, np.int32)
    kind_str = segt.column("kind").cast(pa.string()).to_pylist()
    try:
        kinds = np.asarray([KINDS.index(k) for k in kind_str], dtype=np.uint8)
    except ValueError as e:
        raise TraceError(str(path), None, "kind", str(e)) from None
    segments = Segments(
        ids=np.asarray(segt.column("segment_id"), dtype=np.uint64),
        kinds=kinds,
        offsets=offsets if offsets.size else np.zeros(1, np.int64),
        tokens=flat,
    )
    requests = pl.from_arrow(reqt.select(list(REQUEST_FIELDS)))
    requests = requests.cast({"output_tokens": pl.Int32, "segment_ids": pl.List(pl.UInt64)})
    user_meta = {k.decode(errors="replace")[4:]: v.decode(errors="replace") for k, v in meta.items()
                 if k.startswith(b"pic.") and k != SCHEMA_KEY}
    return Trace(segments=segments, requests=requests, source=str(path), meta=user_meta)
