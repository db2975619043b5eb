"""A trace's request rows as an Arrow table, read without polars (:class:`traces.schema.Trace`).

NOTE (speed): ``pic replay`` reads a request's id, arrival, output tokens, session and segment ids, and hashes
the rows (``engine.runconfig.trace_sha256``); polars cost ~0.1 CPU s to import and ~0.01 s to build and check its
frame, per run (Mooncake conversation: ~6% of a ``prefix`` replay). A trace read from a file keeps the table
Parquet gave (the canonical column types, no null in the columns a replay reads: :func:`fast_table`); its polars
frame (``Trace.requests``) is made on first access. Anything else (other column types, nulls, a rule broken)
takes the polars path, so what a check reports, and how, is the polars frame's (:func:`traces.schema.validate`).

Nothing here calls ``pa.array`` or ``pyarrow.compute``: the first imports pandas where it is installed
(~0.16 CPU s), the second costs ~0.03 s to import; values are read from the arrays' buffers.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

#: the canonical request columns as Arrow types (what ``traces.io`` writes)
ARROW_TYPES: dict[str, pa.DataType] = {
    "request_id": pa.int64(), "session_id": pa.string(), "agent_id": pa.string(), "arrival_us": pa.int64(),
    "output_tokens": pa.int32(), "segment_ids": pa.list_(pa.uint64()),
}
#: columns a table must hold no null in to be kept as a table (agent_id, read only by the digest, may)
_NO_NULLS = ("request_id", "session_id", "arrival_us", "output_tokens", "segment_ids")


def fast_table(table: pa.Table) -> bool:
    """Whether ``table`` holds exactly the canonical request columns, typed as :data:`ARROW_TYPES`, with no null
    in :data:`_NO_NULLS` (and no null list element): then it is kept as the trace's rows."""
    if table.schema.names != list(ARROW_TYPES):
        return False
    for name, typ in ARROW_TYPES.items():
        col = table.column(name)
        if not col.type.equals(typ) or (name in _NO_NULLS and col.null_count):
            return False
    return all(c.values.null_count == 0 for c in table.column("segment_ids").chunks)


def combined(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def values(col: pa.ChunkedArray | pa.Array, dtype) -> np.ndarray:
    """numpy values (read only) of a null-free primitive column, from its buffer."""
    arr = combined(col)
    dt = np.dtype(dtype)
    buf = arr.buffers()[1]
    if buf is None:
        return np.zeros(len(arr), dt)
    return np.frombuffer(buf, dtype=dt)[arr.offset:arr.offset + len(arr)]


def list_values(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets int64 [R+1] from 0, values uint64)`` of a null-free list<uint64> column."""
    arr = combined(col)
    n = len(arr)
    if n == 0:
        return np.zeros(1, np.int64), np.zeros(0, np.uint64)
    offs = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset:arr.offset + n + 1].astype(np.int64)
    vals = values(arr.values, np.uint64)[offs[0]:offs[-1]]
    return offs - offs[0], vals


def strings(col: pa.ChunkedArray) -> list:
    """The column's values as Python strings (None for a null)."""
    return combined(col).to_pylist()


def string_codes(col: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """``(codes int64, names)`` of a null-free string column: ``names`` its distinct values sorted (by code point,
    as polars sorts them: UTF-8 byte order), ``codes`` each row's index into them.

    NOTE (speed): the strings as one fixed-width bytes array sorted by numpy (Mooncake conversation ~1 ms; a
    Python set and sort of 10^6 session ids ~0.5 s); Python's where a value holds a NUL byte (numpy's bytes
    compare as if cut at trailing NULs) or the array would be large."""
    arr = combined(col)
    n = len(arr)
    if n == 0:
        return np.zeros(0, np.int64), []
    offs = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset:arr.offset + n + 1].astype(np.int64)
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    lens = np.diff(offs)
    width = max(int(lens.max()), 1)
    raw = data[offs[0]:offs[-1]]
    if n * width > 1 << 26 or (raw == 0).any():
        lst = arr.to_pylist()
        names = sorted(set(lst))
        index = {s: i for i, s in enumerate(names)}
        return np.fromiter(map(index.__getitem__, lst), np.int64, n), names
    words = -(-width // 8)
    mat = np.zeros((n, 8 * words), np.uint8)
    mat.reshape(-1)[np.arange(raw.shape[0]) + np.repeat(np.arange(n) * (8 * words) - (offs[:-1] - offs[0]), lens)] = raw
    # NOTE (speed): each value as big-endian 64-bit words (their order is the bytes' order, NUL-padded) sorted by
    # np.lexsort: Azure conversation's 19,366 session ids 8.2 -> 4.3 ms CPU (an argsort of numpy bytes strings)
    key = mat.view(">u8").reshape(n, words)
    order = np.lexsort(key.T[::-1])
    s = key[order]
    head = np.ones(n, bool)
    head[1:] = (s[1:] != s[:-1]).any(axis=1)
    codes = np.empty(n, np.int64)
    codes[order] = np.cumsum(head) - 1
    first = mat[order[head]].view(f"S{8 * words}").reshape(-1)
    return codes, [b.decode() for b in first.tolist()]
