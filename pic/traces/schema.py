"""Canonical trace: content stored once as segments, requests as ordered lists of segment ids.

On disk (see ``traces.io``) a trace is ONE Parquet file holding two record families:
segment rows (``record == "segment"``) and request rows (``record == "request"``). The schema version
lives in the file's key/value metadata under ``pic.schema_version``.

In memory a :class:`Trace` keeps segments in CSR form (:class:`traces.content.Segments`: one flat token
array, uint16 where every token fits, else int32, + offsets; opaque segments derive their tokens on demand)
so a request's prompt is a concatenation of a few slices, and hashing/chunking stays vectorized.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import xxhash

from pic.traces.content import Segments, opaque_segment_id

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

SCHEMA_VERSION = 2
SCHEMA_KEY = b"pic.schema_version"

#: segment kinds, in code order (the uint8 code is the index)
KINDS: tuple[str, ...] = (
    "system", "tools", "document", "tool_output", "user", "assistant", "marker", "block",
)
KIND_CODE = {k: i for i, k in enumerate(KINDS)}

#: REQUEST_COLUMNS (dict[str, pl.DataType]): the canonical request columns and their polars types (module
#: ``__getattr__``: polars is imported on first use)


class TraceError(ValueError):
    """Bad trace input. ``str(err)`` is one line: ``file:line: field: what is wrong``."""

    def __init__(self, path: str, line: int | None, field_name: str, message: str):
        self.path, self.line, self.field, self.message = str(path), line, field_name, message
        loc = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{loc}: {field_name}: {message}")


def segment_id(tokens: np.ndarray) -> int:
    """Content id of a segment: xxh64 (seed 0) of its int32 little-endian token bytes."""
    return xxhash.xxh64_intdigest(np.ascontiguousarray(tokens, dtype="<i4").tobytes())


class SegmentTable:
    """Builder that dedupes segments by content id while readers stream input."""

    def __init__(self) -> None:
        self._index: dict[int, int] = {}
        self._ids: list[int] = []
        self._kinds: list[int] = []
        self._lengths: list[int] = []
        self._chunks: list[np.ndarray] = []
        self._opaque: dict[int, tuple[int, int]] = {}   # row -> (key, salt) of opaque segments

    def add(self, tokens: np.ndarray, kind: str) -> int:
        """Store ``tokens`` once (if new) and return its segment id."""
        toks = np.ascontiguousarray(tokens, dtype=np.int32)
        if toks.size == 0:
            raise ValueError("empty segment")
        sid = segment_id(toks)
        if sid not in self._index:
            self._index[sid] = len(self._ids)
            self._ids.append(sid)
            self._kinds.append(KIND_CODE[kind])
            self._lengths.append(int(toks.size))
            self._chunks.append(toks)
        return sid

    def add_opaque(self, key: int, salt: int, length: int, kind: str) -> int:
        """Record an opaque segment (tokens derived from ``key, salt``; see :mod:`traces.content`) once
        and return its id. No token is materialized."""
        if length <= 0:
            raise ValueError("empty segment")
        sid = opaque_segment_id(key, salt, length)
        if sid not in self._index:
            row = len(self._ids)
            self._index[sid] = row
            self._ids.append(sid)
            self._kinds.append(KIND_CODE[kind])
            self._lengths.append(int(length))
            self._opaque[row] = (key, salt)
        return sid

    def __contains__(self, sid: int) -> bool:
        return sid in self._index

    def build(self) -> Segments:
        lengths = np.asarray(self._lengths, dtype=np.int64)
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int32)
        ids = np.asarray(self._ids, dtype=np.uint64)
        kinds = np.asarray(self._kinds, dtype=np.uint8)
        if not self._opaque:
            return Segments(ids, kinds, offsets, tokens.astype(np.int32, copy=False))
        stored = lengths.copy()
        rows = np.fromiter(self._opaque, dtype=np.int64, count=len(self._opaque))
        stored[rows] = 0
        tok_offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(stored, out=tok_offsets[1:])
        keys = np.zeros(lengths.size, np.uint64)
        salts = np.zeros(lengths.size, np.uint64)
        ks = np.fromiter((k for k, _ in self._opaque.values()), dtype=np.uint64, count=rows.size)
        ss = np.fromiter((s & (2**64 - 1) for _, s in self._opaque.values()), dtype=np.uint64, count=rows.size)
        keys[rows], salts[rows] = ks, ss
        return Segments(ids, kinds, offsets, tokens.astype(np.int32, copy=False), tok_offsets, keys, salts)


class _RequestRows:
    """``Trace.requests`` (a dataclass field): set as a polars frame or an Arrow table of the request rows. A table
    holding the canonical columns exactly (:func:`traces.arrow_cols.fast_table`) is kept (``_table``) and its frame
    made on first read; anything else is kept as a frame (``_frame``)."""

    def __get__(self, obj, objtype=None):
        if obj is None:
            raise AttributeError("requests")          # (no default: a required field)
        d = obj.__dict__
        if d["_frame"] is None:
            d["_frame"] = _frame_of(obj._full_table())
        return d["_frame"]

    def __set__(self, obj, value) -> None:
        d = obj.__dict__
        arrow = sys.modules.get("pyarrow")
        if arrow is not None and isinstance(value, arrow.Table):
            from pic.traces.arrow_cols import fast_table
            if fast_table(value):
                d["_table"], d["_frame"] = value, None
                return
            value = _frame_of(value)
        d["_table"], d["_frame"] = None, value


@dataclass(frozen=True)
class Trace:
    """A validated canonical trace.

    ``requests`` is a polars frame with :data:`REQUEST_COLUMNS`, sorted by (arrival_us, request_id).
    Use :meth:`prompt` for a request's token ids and :attr:`prompt_lengths` for all lengths at once.

    ``requests`` may be given as an Arrow table of the canonical columns (``traces.io`` does): where it holds
    them exactly (:func:`traces.arrow_cols.fast_table`) it is kept, read by :meth:`column`, :meth:`strings`,
    :meth:`string_codes` and :meth:`segment_lists` without polars, and the frame made on first access.
    """

    segments: Segments
    requests: pl.DataFrame = _RequestRows()           # type: ignore[assignment]
    source: str = "<memory>"
    meta: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def num_requests(self) -> int:
        return self._table.num_rows if self._table is not None else self._frame.height

    def column(self, name: str) -> np.ndarray:
        """numpy values of an integer request column (``request_id``, ``arrival_us``, ``output_tokens``)."""
        if self._table is not None:
            from pic.traces.arrow_cols import values
            return values(self._table.column(name), _NUMPY[name])
        return self._frame[name].to_numpy()

    def strings(self, name: str) -> list:
        """A string request column's values (``session_id``, ``agent_id``; None for a null)."""
        if self._table is not None:
            from pic.traces.arrow_cols import strings
            return strings(self._table.column(name))
        return self._frame[name].to_list()

    def string_codes(self, name: str) -> tuple[np.ndarray, list[str]] | None:
        """``(codes int64, names)``: a string request column's distinct values sorted and each row's index into
        them; None where it holds a null."""
        if self._table is not None:
            from pic.traces.arrow_cols import string_codes
            col = self._table.column(name)
            if col.null_count:
                return None
            kept = self.__dict__.setdefault("_codes", {})     # (validate and the workload both ask: once)
            if name not in kept:
                kept[name] = string_codes(col)
            return kept[name]
        col = self._frame[name]
        if col.null_count():
            return None
        names = col.unique().sort()
        return names.search_sorted(col).to_numpy().astype(np.int64), names.to_list()

    def segment_lists(self) -> tuple[np.ndarray, np.ndarray]:
        """``(counts int64 [R], ids uint64)``: each request's number of segment ids, and all of them in order."""
        if self._table is not None:
            if _LISTS not in self._table.column_names:         # (read into the CSR: Trace._csr)
                offs, idx = self._csr
                return np.diff(offs), self.segments.ids[idx]
            from pic.traces.arrow_cols import list_values
            offs, ids = list_values(self._table.column(_LISTS))
            return np.diff(offs), ids
        seg_lists = self._frame["segment_ids"]
        return (seg_lists.list.len().to_numpy().astype(np.int64, copy=False),
                seg_lists.explode().to_numpy().astype(np.uint64, copy=False))

    @cached_property
    def _sorted_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """(argsort of segment ids, the sorted ids)."""
        order = np.argsort(self.segments.ids)
        return order, self.segments.ids[order]

    @cached_property
    def _csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(req_offsets [R+1], seg_index [sum segs]) mapping requests to segment row indices."""
        counts, flat = self.segment_lists()
        offs = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offs[1:])
        order, sorted_ids = self._sorted_ids
        # NOTE (speed): the references are looked up in sorted order: numpy's binary search starts from the
        # previous key's answer when the keys ascend, and the gathers after it walk forward (Mooncake
        # conversation's 288,500 references: 46 -> 22 ms CPU, both in one process)
        by_id = np.argsort(flat)
        keys = flat[by_id]
        pos = np.searchsorted(sorted_ids, keys)
        np.minimum(pos, max(sorted_ids.size - 1, 0), out=pos)
        if flat.size and (sorted_ids.size == 0 or not np.array_equal(sorted_ids[pos], keys)):
            bad = int(by_id[sorted_ids[pos] != keys].min()) if sorted_ids.size else 0   # first in row order
            req = int(np.searchsorted(offs, bad, side="right") - 1)
            raise TraceError(self.source, None, "segment_ids",
                             f"request row {req} references unknown segment {int(flat[bad])}")
        seg_index = np.empty(flat.size, np.int64)
        seg_index[by_id] = order[pos]
        # NOTE (memory): the segment id lists are now the CSR (ids: ``segments.ids[seg_index]``, segment_lists) and
        # the sorted ids are read by nothing else: neither is kept beside it (chat 10^6: the Arrow list column
        # ~84 MB, the sorted ids and their order ~29 MB). The frame (``requests``, made on first use) has the lists.
        d = self.__dict__
        d.pop("_sorted_ids", None)
        table = d.get("_table")
        if table is not None and _LISTS in table.column_names:
            d["_lists_at"] = table.column_names.index(_LISTS)     # (its place, for _full_table)
            d["_table"] = table.select([c for c in table.column_names if c != _LISTS])
        return offs, seg_index

    def _full_table(self) -> pa.Table:
        """The request rows' Arrow table with its ``segment_ids`` (made again from the CSR where :attr:`_csr` dropped
        them: the same values, list<uint64>, at the same column place)."""
        table = self._table
        if _LISTS in table.column_names:
            return table
        import pyarrow as pa

        offs, idx = self._csr
        ids = np.ascontiguousarray(self.segments.ids[idx], np.uint64)
        wide = offs[-1] >= 1 << 31
        values = pa.Array.from_buffers(pa.uint64(), ids.shape[0], [None, pa.py_buffer(ids)])
        offsets = np.ascontiguousarray(offs, np.int64 if wide else np.int32)
        lists = (pa.LargeListArray if wide else pa.ListArray).from_arrays(
            pa.Array.from_buffers(pa.int64() if wide else pa.int32(), offsets.shape[0], [None, pa.py_buffer(offsets)]),
            values)
        return table.add_column(self.__dict__.get("_lists_at", table.num_columns), _LISTS, lists)

    def request_segments(self, i: int) -> np.ndarray:
        """Row indices into ``segments`` of request ``i``'s segments, in prompt order."""
        offs, idx = self._csr
        return idx[offs[i]:offs[i + 1]]

    @cached_property
    def prompt_lengths(self) -> np.ndarray:
        """int64 [R]: prompt tokens per request."""
        offs, idx = self._csr
        seg_len = self.segments.lengths[idx]
        out = np.zeros(self.num_requests, dtype=np.int64)
        nonempty = offs[:-1] < offs[1:]
        out[nonempty] = np.add.reduceat(seg_len, offs[:-1][nonempty]) if seg_len.size else 0
        return out

    def prompt(self, i: int) -> np.ndarray:
        """int32 [N]: request ``i``'s prompt tokens (concatenated segments; opaque ones derived; int32 however the
        trace keeps them)."""
        return self.segments.gather(self.request_segments(i))

    def segment_bounds(self, i: int) -> np.ndarray:
        """int64 [k+1]: token offsets of request ``i``'s segment boundaries within its prompt."""
        lens = self.segments.lengths[self.request_segments(i)]
        out = np.zeros(lens.size + 1, dtype=np.int64)
        np.cumsum(lens, out=out[1:])
        return out


def validate(trace: Trace) -> None:
    """Raise :class:`TraceError` unless the trace obeys the canonical rules.

    Rules: request columns/dtypes exact; unique request ids; arrival_us >= 0 and non-decreasing per
    session; output_tokens >= 0; every request has >= 1 segment and every referenced segment exists;
    segments non-empty with unique ids and known kinds.
    """
    if trace._table is not None and not _table_ok(trace):
        object.__setattr__(trace, "requests", _frame_of(trace._table))   # (the frame's checks say what is wrong)
    src, req, seg = trace.source, trace._frame, trace.segments
    if req is not None:
        for name, dtype in __getattr__("REQUEST_COLUMNS").items():
            if name not in req.columns:
                raise TraceError(src, None, name, "missing column")
            if req.schema[name] != dtype:
                raise TraceError(src, None, name, f"dtype {req.schema[name]} != {dtype}")
    if len(seg) and (np.diff(seg.offsets) <= 0).any():
        raise TraceError(src, None, "tokens", "empty segment")
    sorted_ids = trace._sorted_ids[1]
    if sorted_ids.size and (sorted_ids[1:] == sorted_ids[:-1]).any():
        raise TraceError(src, None, "segment_id", "duplicate segment id")
    if len(seg) and int(seg.kinds.max()) >= len(KINDS):
        raise TraceError(src, None, "kind", "unknown segment kind code")
    if trace.num_requests == 0:
        return
    if req is None:                 # (an Arrow table: :func:`_table_ok` checked the rows)
        _ = trace._csr
        return
    if req["request_id"].n_unique() != req.height:
        raise TraceError(src, None, "request_id", "duplicate request id")
    for col in ("arrival_us", "output_tokens"):
        null = req[col].is_null()
        if null.any():
            raise TraceError(src, int(null.arg_max()), col, "null value")
        neg = req[col] < 0
        if neg.any():
            raise TraceError(src, int(neg.arg_max()), col, "negative value")
    empty = req["segment_ids"].list.len().fill_null(0) == 0
    if empty.any():
        raise TraceError(src, int(empty.arg_max()), "segment_ids", "request has no segments")
    back = _backwards_in_session(req)
    if back is not None:
        raise TraceError(src, back, "arrival_us", "arrival goes backwards within its session")
    _ = trace._csr  # resolves every segment id or raises


def _table_ok(trace: Trace) -> bool:
    """Whether the request rows of an Arrow table (no null in them: ``fast_table``) obey the rules
    :func:`validate` checks of a frame: unique ids, no negative arrival or output, a segment per request, arrivals
    non-decreasing per session."""
    n = trace.num_requests
    if n == 0:
        return True
    rid = np.sort(trace.column("request_id"))
    if (rid[1:] == rid[:-1]).any():
        return False
    arrival = trace.column("arrival_us")
    if (arrival < 0).any() or (trace.column("output_tokens") < 0).any():
        return False
    if (trace.segment_lists()[0] == 0).any():
        return False
    return _backwards(trace.string_codes("session_id")[0], arrival) is None


def _backwards_in_session(req: pl.DataFrame) -> int | None:
    """The first row whose arrival is earlier than the previous row of its session (a null session is one
    session), or None. NOTE (speed): one sort of (session code, row) in numpy; polars' window expression
    (``shift().over(session_id)``) cost 15-25 ms CPU per trace read (Mooncake / Azure conversation)."""
    code = req["session_id"].rank("dense").fill_null(0).to_numpy()     # (equal ids: equal codes; null: 0)
    return _backwards(code, req["arrival_us"].to_numpy())


def _backwards(code: np.ndarray, arrival: np.ndarray) -> int | None:
    """:func:`_backwards_in_session` of rows with session codes ``code`` (equal sessions: equal codes)."""
    order = np.lexsort((np.arange(arrival.shape[0]), code))
    c, a = code[order], arrival[order]
    bad = np.flatnonzero((c[1:] == c[:-1]) & (a[1:] < a[:-1]))
    return int(order[bad + 1].min()) if bad.shape[0] else None


def requests_frame(rows: dict[str, list]) -> pl.DataFrame:
    """Build a canonical requests frame from column lists (casts to the canonical dtypes)."""
    import polars as pl

    return pl.DataFrame(rows, schema=__getattr__("REQUEST_COLUMNS"))


def _frame_of(table: pa.Table) -> pl.DataFrame:
    """The polars frame of an Arrow table of request rows (output tokens and segment ids cast as they are read)."""
    import polars as pl

    return pl.from_arrow(table).cast({"output_tokens": pl.Int32, "segment_ids": pl.List(pl.UInt64)})


_LISTS = "segment_ids"
_NUMPY = {"request_id": np.int64, "arrival_us": np.int64, "output_tokens": np.int32}


def __getattr__(name: str):
    """``REQUEST_COLUMNS`` (polars types): made on first use, so that reading a trace imports no polars."""
    if name == "REQUEST_COLUMNS":
        if name in globals():
            return globals()[name]
        import polars as pl

        cols = {"request_id": pl.Int64(), "session_id": pl.String(), "agent_id": pl.String(),
                "arrival_us": pl.Int64(), "output_tokens": pl.Int32(), "segment_ids": pl.List(pl.UInt64())}
        globals()[name] = cols
        return cols
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

