"""Parquet I/O for canonical traces: one file, two record families, schema version in metadata.

Layout v2 (docs/trace-format.md): column ``record`` is ``"segment"`` or ``"request"``; segment rows come
first, in their own row groups, then request rows. No integer column is ever null, so pandas, polars,
pyarrow and duckdb all read the ids exactly (an integer column with nulls becomes float64 in pandas):
integer columns of the other family hold ``0`` (unsigned) or ``-1`` (signed); strings, lists and ``kind``
are null there. A segment row stores either its ``tokens`` or, for an opaque segment (Mooncake block,
Azure row), only ``opaque_key``/``opaque_salt`` and ``length`` (tokens null; :mod:`traces.content`).
Version 1 files (one nullable layout, every token stored) are still read.
Writes go to a temporary name in the same folder and are renamed into place only when complete
(``traces.outputs``, re-exported here as ``atomic_path``/``atomic_dir``).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pic.traces import content
from pic.traces.outputs import atomic_dir, atomic_path, is_stream  # noqa: F401 - atomic_*: re-exported
from pic.traces.schema import KINDS, SCHEMA_KEY, SCHEMA_VERSION, Segments, Trace, TraceError

_DICT = pa.dictionary(pa.int8(), pa.string())
ARROW_SCHEMA = pa.schema([
    ("record", _DICT),
    ("segment_id", pa.uint64()),
    ("kind", _DICT),
    ("length", pa.int64()),
    ("opaque_key", pa.uint64()),
    ("opaque_salt", pa.uint64()),
    ("tokens", pa.large_list(pa.int32())),
    ("request_id", pa.int64()),
    ("session_id", pa.string()),
    ("agent_id", pa.string()),
    ("arrival_us", pa.int64()),
    ("output_tokens", pa.int32()),
    ("segment_ids", pa.list_(pa.uint64())),
])
SEGMENT_FIELDS = ("segment_id", "kind", "length", "opaque_key", "opaque_salt", "tokens")
REQUEST_FIELDS = ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")
#: value of an integer column in rows of the other family (never null: see the module docstring)
FILL = {"segment_id": 0, "length": 0, "opaque_key": 0, "opaque_salt": 0,
        "request_id": -1, "arrival_us": -1, "output_tokens": -1}
NUM_SEGMENTS_KEY, NUM_REQUESTS_KEY = b"pic.num_segments", b"pic.num_requests"
STORED_TOKENS_KEY = b"pic.stored_tokens"
_SEGMENT_BATCH_TOKENS = 1 << 22       # stored tokens per segment row group (bounded memory on both sides)
_SEGMENT_BATCH_ROWS = 1 << 16
_REQUEST_BATCH_ROWS = 1 << 16
_RECORD_CODE = {"segment": 0, "request": 1}


@functools.cache
def _dictionary(values: tuple[str, ...]) -> pa.Array:
    """A dictionary's values (made on first write: ``pa.array`` imports pandas when it is installed)."""
    return pa.array(values, pa.string())


def _fill(n: int, names) -> dict[str, pa.Array]:
    out = {}
    for f in names:
        typ = ARROW_SCHEMA.field(f).type
        out[f] = pa.array(np.full(n, FILL[f]), typ) if f in FILL else pa.nulls(n, typ)
    return out


def _record(n: int, code: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(np.full(n, code, np.int8)), _dictionary(("segment", "request")))


def _segment_table(seg: Segments) -> pa.Table:
    n = len(seg)
    t = seg.token_offsets if seg.token_offsets is not None else seg.offsets
    stored = np.diff(t) > 0
    tokens = pa.LargeListArray.from_arrays(pa.array(t - t[0], pa.int64()), pa.array(np.asarray(seg.tokens, np.int32)),
                                           mask=pa.array(~stored))
    cols = {
        "record": _record(n, 0),
        "segment_id": pa.array(seg.ids, pa.uint64()),
        "kind": pa.DictionaryArray.from_arrays(pa.array(seg.kinds.astype(np.int8), pa.int8()), _dictionary(KINDS)),
        "length": pa.array(seg.lengths, pa.int64()),
        "opaque_key": pa.array(seg.keys if seg.keys is not None else np.zeros(n, np.uint64), pa.uint64()),
        "opaque_salt": pa.array(seg.salts if seg.salts is not None else np.zeros(n, np.uint64), pa.uint64()),
        "tokens": tokens,
        **_fill(n, REQUEST_FIELDS),
    }
    return pa.table({f.name: cols[f.name] for f in ARROW_SCHEMA}, schema=ARROW_SCHEMA)


def _request_table(df) -> pa.Table:
    n = df.height
    arrow = df.select(REQUEST_FIELDS).to_arrow()
    cols = {
        "record": _record(n, 1),
        **_fill(n, SEGMENT_FIELDS),
        **{f: arrow.column(f).cast(ARROW_SCHEMA.field(f).type) for f in REQUEST_FIELDS},
    }
    return pa.table({f.name: cols[f.name] for f in ARROW_SCHEMA}, schema=ARROW_SCHEMA)


def _segment_batches(seg: Segments):
    """Row ranges of at most ``_SEGMENT_BATCH_ROWS`` rows / ``_SEGMENT_BATCH_TOKENS`` stored tokens."""
    t = seg.token_offsets if seg.token_offsets is not None else seg.offsets
    lo, n = 0, len(seg)
    while lo < n:
        hi = min(n, lo + _SEGMENT_BATCH_ROWS)
        cut = int(np.searchsorted(t, t[lo] + _SEGMENT_BATCH_TOKENS, side="right")) - 1
        hi = max(lo + 1, min(hi, cut))
        yield lo, hi
        lo = hi


def write_trace(trace: Trace, path: str | os.PathLike, *, extra_meta: dict[str, str] | None = None) -> Path:
    """Write ``trace`` to ``path`` atomically (temp file + rename). Returns the final path.

    Segment rows go first (row groups of bounded size), then request rows; the file metadata holds the
    schema version and the row counts of both families."""
    seg = trace.segments
    meta = {SCHEMA_KEY: str(SCHEMA_VERSION).encode(), NUM_SEGMENTS_KEY: str(len(seg)).encode(),
            NUM_REQUESTS_KEY: str(trace.requests.height).encode(),
            STORED_TOKENS_KEY: str(int(seg.tokens.shape[0])).encode()}
    for k, v in {**trace.meta, **(extra_meta or {})}.items():
        meta[f"pic.{k}".encode()] = str(v).encode()
    schema = ARROW_SCHEMA.with_metadata(meta)
    with atomic_path(path) as tmp:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as w:
            for lo, hi in _segment_batches(seg):
                w.write_table(_segment_table(seg.take(lo, hi)).replace_schema_metadata(meta))
            req = trace.requests
            for lo in range(0, req.height, _REQUEST_BATCH_ROWS):
                part = req.slice(lo, _REQUEST_BATCH_ROWS)
                w.write_table(_request_table(part).replace_schema_metadata(meta), row_group_size=_REQUEST_BATCH_ROWS)
    return Path(path)


def read_trace(path: str | os.PathLike) -> Trace:
    """Read and validate a canonical trace (schema version 2, or 1); raises :class:`TraceError` naming
    the file and field. Segment row groups are read one at a time into one token array."""
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
        except (pa.ArrowException, OverflowError, *_polars_errors()) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise TraceError(str(path), None, "file", f"cannot read as a pic trace: {first[:200]}") from None
        finally:
            # NOTE (memory): the row groups' decoded buffers were freed, but Arrow's pool (mimalloc) keeps
            # the pages for reuse: chat 10^5 137 MB, more than the requests frame; handed back here
            _release_pool(pa.default_memory_pool())


def _polars_errors() -> tuple[type[Exception], ...]:
    """polars' error class where polars is imported (a trace's frame is made with it; else no polars error)."""
    pl = sys.modules.get("polars")
    return (pl.exceptions.PolarsError,) if pl is not None else ()


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
    if ver == "1":
        from pic.traces.io_v1 import read_v1
        return read_v1(path, pf, meta)
    if ver != str(SCHEMA_VERSION):
        raise TraceError(str(path), None, "metadata",
                         f"schema version {ver}, this pic reads 1 and {SCHEMA_VERSION}")
    names = set(pf.schema_arrow.names)
    for f in ARROW_SCHEMA:
        if f.name not in names:
            raise TraceError(str(path), None, f.name, "missing column")
    stored = meta.get(STORED_TOKENS_KEY)
    codes = _record_codes(path, pf)
    segments = _read_segments(path, pf, codes, int(stored) if stored is not None and stored.isdigit() else None)
    parts = list(_family_tables(pf, codes, "request", REQUEST_FIELDS))
    reqt = pa.concat_tables(parts) if parts else ARROW_SCHEMA.empty_table().select(list(REQUEST_FIELDS))
    # NOTE (speed): the table itself (its polars frame made on first use of ``Trace.requests``: traces.arrow_cols)
    return Trace(segments=segments, requests=reqt, source=str(path), meta=user_meta(meta))


def user_meta(meta: dict[bytes, bytes]) -> dict[str, str]:
    """The ``pic.*`` notes of a file's metadata (minus what this module manages)."""
    own = {SCHEMA_KEY, NUM_SEGMENTS_KEY, NUM_REQUESTS_KEY, STORED_TOKENS_KEY}
    return {k.decode(errors="replace")[4:]: v.decode(errors="replace") for k, v in meta.items()
            if k.startswith(b"pic.") and k not in own}


def _np(arr: pa.Array | pa.ChunkedArray, dtype) -> np.ndarray:
    """numpy values of a primitive, null-free Arrow array read from its buffer. NOTE: pyarrow's own
    ``to_numpy``/``np.asarray``/compute functions import pandas when it is installed (~0.6 s CPU per
    process); reading the buffer does not."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    dt = np.dtype(dtype)
    if arr.type.bit_width != 8 * dt.itemsize or pa.types.is_boolean(arr.type):
        raise TypeError(f"{arr.type} is not {dt}")
    buf = arr.buffers()[1]
    if buf is None:
        return np.zeros(len(arr), dt)
    return np.frombuffer(buf, dtype=dt)[arr.offset:arr.offset + len(arr)]


def _valid(arr: pa.Array) -> np.ndarray:
    """bool [n]: the validity bitmap of an Arrow array (all True without one)."""
    bitmap = arr.buffers()[0]
    if bitmap is None or not arr.null_count:
        return np.ones(len(arr), bool)
    bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little")
    return bits[arr.offset:arr.offset + len(arr)].astype(bool)


def _record_codes(path: Path, pf: pq.ParquetFile) -> list[np.ndarray]:
    """int8 [rows] per row group: each row's family (0 segment, 1 request), from the ``record`` column (read
    once for both families)."""
    out = []
    for g in range(pf.num_row_groups):
        rec = pf.read_row_group(g, columns=["record"]).column("record").combine_chunks()
        if rec.null_count:
            raise TraceError(str(path), None, "record", f"null value (row group {g})")
        if pa.types.is_dictionary(rec.type):
            lut = np.array([_RECORD_CODE.get(x, -1) for x in rec.dictionary.to_pylist()] or [-1], np.int8)
            idx = lut[_np(rec.indices, np.int8).astype(np.int64)] if rec.indices.type == pa.int8() else \
                lut[np.asarray(rec.indices.to_pylist(), np.int64)]
        else:
            idx = np.array([_RECORD_CODE.get(x, -1) for x in rec.to_pylist()], np.int8)
        if (idx < 0).any():
            raise TraceError(str(path), None, "record", f"unknown record family (row group {g}); "
                             "expected 'segment' or 'request'")
        out.append(idx)
    return out


def _family_tables(pf: pq.ParquetFile, codes: list[np.ndarray], family: str, fields) -> Iterator[pa.Table]:
    """One table per row group holding rows of ``family`` (columns ``fields``; ``codes``:
    :func:`_record_codes`). pic writes each family in row groups of its own, told apart by the first row's
    ``record`` (a mixed group, as a file rewritten by another tool may have, is filtered)."""
    code = 0 if family == "segment" else 1
    for g, idx in enumerate(codes):
        mine = idx == code
        if not mine.any():
            continue
        t = pf.read_row_group(g, columns=list(fields))
        yield t if mine.all() else t.filter(pa.array(mine))


def _read_segments(path: Path, pf: pq.ParquetFile, codes: list[np.ndarray], stored: int | None) -> Segments:
    """Segment rows, one row group at a time. With ``stored`` (pic.stored_tokens) known, every group's
    tokens are copied into one preallocated array and the group dropped: the tokens are held once."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("segment_id", "length", "opaque_key", "opaque_salt",
                                                          "kind", "has")}
    # NOTE (memory): kept as uint16 while every group's tokens fit (traces.content.narrow_tokens), widened to int32
    # (one copy of those read so far) at the first that does not: chat 10^6 1.71 -> 0.86 GB
    tokens = np.empty(stored, np.uint16 if content.NARROW else np.int32) if stored is not None else None
    pool = pa.default_memory_pool()
    flats: list[np.ndarray] = []
    row = tpos = 0
    for t in _family_tables(pf, codes, "segment", SEGMENT_FIELDS):
        n = t.num_rows
        for name in ("segment_id", "length", "opaque_key", "opaque_salt"):
            col = t.column(name)
            if col.null_count:
                raise TraceError(str(path), None, name, "null value in a segment row")
            cols[name].append(_np(col, np.int64 if name == "length" else np.uint64))
        lengths = cols["length"][-1]
        cols["kind"].append(_kind_codes(path, t.column("kind")))
        tok = t.column("tokens").combine_chunks()
        if pa.types.is_list(tok.type):
            tok = tok.cast(pa.large_list(pa.int32()))
        valid = _valid(tok)
        cols["has"].append(valid)
        offs = _np(tok.offsets, np.int64) if n else np.zeros(1, np.int64)
        values = tok.values.cast(pa.int32()) if tok.values.type != pa.int32() else tok.values
        flat = _np(values, np.int32)[offs[0]:offs[-1]] if n else np.zeros(0, np.int32)
        got = np.where(valid, np.diff(offs), 0)
        bad = valid & (got != lengths)
        if bad.any():
            raise TraceError(str(path), None, "tokens", f"segment row {row + int(np.argmax(bad))}: "
                             f"{int(got[bad][0])} tokens but length {int(lengths[bad][0])}")
        if tokens is None:
            flats.append(flat.copy())
        elif tpos + flat.size > tokens.size:
            raise TraceError(str(path), None, "tokens", "more stored tokens than pic.stored_tokens says")
        else:
            if tokens.dtype != np.int32 and not content.fits_u16(flat):
                wide = np.empty(tokens.size, np.int32)
                wide[:tpos] = tokens[:tpos]
                tokens = wide
            tokens[tpos:tpos + flat.size] = flat
        row += n
        tpos += flat.size
        del t, tok, flat
        _release_pool(pool)       # NOTE (memory): the group's decoded pages, before the next group is read
    if tokens is None:
        tokens = content.narrow_tokens(np.concatenate(flats) if flats else np.zeros(0, np.int32))
    elif tpos != tokens.size:
        raise TraceError(str(path), None, "tokens", f"{tpos} stored tokens, pic.stored_tokens says {stored}")

    def cat(name: str, dtype) -> np.ndarray:
        return np.concatenate(cols[name]).astype(dtype, copy=False) if cols[name] else np.zeros(0, dtype)

    ids, lengths, kinds = cat("segment_id", np.uint64), cat("length", np.int64), cat("kind", np.uint8)
    keys, salts, has = cat("opaque_key", np.uint64), cat("opaque_salt", np.uint64), cat("has", bool)
    if (lengths <= 0).any():
        raise TraceError(str(path), None, "length", f"segment row {int(np.argmax(lengths <= 0))}: empty segment")
    num = ids.size
    offsets = np.zeros(num + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if has.all():
        return Segments(ids, kinds, offsets, tokens)
    tok_offsets = np.zeros(num + 1, np.int64)
    np.cumsum(np.where(has, lengths, 0), out=tok_offsets[1:])
    keys[has] = 0
    salts[has] = 0
    return Segments(ids, kinds, offsets, tokens, tok_offsets, keys, salts)


def _release_pool(pool: pa.MemoryPool) -> None:
    """``pool.release_unused()`` once the pool has held ``_POOL_RELEASE_MIN`` bytes at once.

    NOTE (speed): pages handed back are faulted in again by the next group's buffers (~3.5 us a page on the 2-core
    VM); a trace whose decoded groups never held that much (Mooncake conversation: ~5 MB) keeps them."""
    if pool.max_memory() >= _POOL_RELEASE_MIN:
        pool.release_unused()


_POOL_RELEASE_MIN = 32 << 20


def _kind_codes(path: Path, col: pa.ChunkedArray) -> np.ndarray:
    """uint8 codes into KINDS of a dictionary (or string) column; unknown or null kinds raise."""
    col = col.combine_chunks()
    if col.null_count:
        raise TraceError(str(path), None, "kind", "null value in a segment row")
    if pa.types.is_dictionary(col.type):
        names = col.dictionary.to_pylist()
        idx = np.asarray(col.indices.to_pylist(), np.int64) if col.indices.type != pa.int8() else \
            _np(col.indices, np.int8).astype(np.int64)
    else:
        names, inv = np.unique(np.asarray(col.to_pylist(), dtype=object), return_inverse=True)
        names, idx = list(names), inv
    lut = np.empty(max(len(names), 1), np.uint8)
    for i, k in enumerate(names):
        if k not in KINDS:
            raise TraceError(str(path), None, "kind", f"unknown kind {k!r}")
        lut[i] = KINDS.index(k)
    return lut[idx] if idx.size else np.zeros(0, np.uint8)
