"""One policy's request rows as numpy columns (``requests.parquet``), written through Arrow without polars.

NOTE (speed): a replay made each policy's rows as a polars frame, its derived columns and summaries with polars
expressions, and wrote the frame's Arrow table: polars' import (~0.1 CPU s) and its expressions were ~6% of a
``prefix`` replay of Mooncake conversation. :class:`RequestRows` holds the same values in numpy (the derived
columns computed with the same float operations), sums floats as polars sums them (:func:`polars_sum`: the
summaries keep their last bits), and builds the Arrow table from the buffers (``pa.array`` would import pandas
where it is installed: ~0.16 CPU s). ``RunResult.requests`` (a polars frame, engine.replay) is made on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pic.engine.request import Labels

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

#: requests.parquet columns, in order, and their types (``str``: large_string / polars String)
REQUEST_TYPES: dict[str, str] = {
    "policy": "str", "request_id": "i8", "session_id": "str", "replica": "i4", "arrival_us": "i8",
    "start_us": "i8", "first_token_us": "i8", "finish_us": "i8", "prompt_tokens": "i8", "reused_tokens": "i8",
    "rotated_tokens": "i8", "recomputed_tokens": "i8", "prefix_reused_tokens": "i8", "output_tokens": "i4",
    "ttft_s": "f8", "queue_s": "f8", "e2el_s": "f8", "tpot_s": "f8", "prefill_flops": "f8",
    "prefill_hbm_bytes": "f8", "cache_read_bytes": "f8", "prefill_joules": "f8", "nocache_prefill_joules": "f8",
    "prefix_prefill_joules": "f8", "evictions": "i8", "uncached": "b", "recurrent_tokens": "i8",
    "attn_layer_s": "f8", "recurrent_layer_s": "f8", "nocache_attn_layer_s": "f8",
    "nocache_recurrent_layer_s": "f8", "oracle_reused_tokens": "i8",
}
#: the column that may hold nulls (output of one token: no TPOT); its validity is ``RequestRows.valid``
NULLABLE = "tpot_s"


def polars_schema() -> dict[str, pl.DataType]:
    import polars as pl

    types = {"str": pl.String(), "i8": pl.Int64(), "i4": pl.Int32(), "f8": pl.Float64(), "b": pl.Boolean()}
    return {c: types[t] for c, t in REQUEST_TYPES.items()}


class RequestRows:
    """One policy's rows (request_id order): ``policy``, ``session`` (:class:`engine.request.Labels` or a list of
    str / None) and every other column as a numpy array (``rows[name]``; ``tpot_s`` NaN where null, ``valid``
    its validity). ``select`` keeps some columns (a baseline's), ``with_columns`` replaces some."""

    __slots__ = ("policy", "session", "cols", "valid")

    def __init__(self, policy: str, session: Labels | list, cols: dict[str, np.ndarray],
                 valid: np.ndarray | None = None) -> None:
        self.policy, self.session, self.cols, self.valid = policy, session, cols, valid

    def __len__(self) -> int:
        return len(self.session)

    @property
    def height(self) -> int:
        return len(self.session)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    def non_null(self, name: str) -> np.ndarray:
        """The column's values without its nulls (``tpot_s``: requests of more than one output token)."""
        col = self.cols[name]
        return col[self.valid] if name == NULLABLE and self.valid is not None else col

    def select(self, names) -> RequestRows:
        return RequestRows(self.policy, self.session, {c: self.cols[c] for c in names}, self.valid)

    def with_columns(self, **cols: np.ndarray) -> RequestRows:
        return RequestRows(self.policy, self.session, {**self.cols, **cols}, self.valid)

    def add_latencies(self) -> None:
        """``ttft_s``, ``queue_s``, ``e2el_s``, ``tpot_s`` (null when output <= 1 token) from the µs timestamps,
        as polars computed them in engine.latency.request_latencies: int64 differences as float64, scaled to
        seconds, / (output - 1). NOTE: polars divides a column by a literal as a product with its reciprocal (last
        bits apart from ``/ 1e6``), but a one-row column as a true division: both kept."""
        c = self.cols
        arrival, first, finish = c["arrival_us"], c["first_token_us"], c["finish_us"]

        def seconds(us: np.ndarray) -> np.ndarray:
            return us.astype(np.float64) / 1e6 if us.shape[0] == 1 else us.astype(np.float64) * _US

        c["ttft_s"] = seconds(first - arrival)
        c["queue_s"] = seconds(c["start_us"] - arrival)
        c["e2el_s"] = seconds(finish - arrival)
        out = c["output_tokens"].astype(np.int64)
        self.valid = out > 1
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot = seconds(finish - first) / (out - 1).astype(np.float64)
        tpot[~self.valid] = np.nan
        c["tpot_s"] = tpot

    def to_arrow(self) -> pa.Table:
        """The rows as an Arrow table of every :data:`REQUEST_TYPES` column, in order (the types polars' frame
        of them gave: strings as large_string)."""
        import pyarrow as pa

        n = len(self)
        arrays = []
        for name, typ in REQUEST_TYPES.items():
            if name == "policy":
                arrays.append(_large_strings([self.policy.encode()], np.zeros(n, np.int64)))
            elif name == "session_id":
                arrays.append(_session_array(self.session))
            elif typ == "b":
                bits = np.packbits(np.ascontiguousarray(self.cols[name], np.bool_), bitorder="little")
                arrays.append(pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(bits)]))
            else:
                v = np.ascontiguousarray(self.cols[name], _NP[typ])
                mask = None
                if name == NULLABLE and self.valid is not None and not self.valid.all():
                    mask = pa.py_buffer(np.packbits(self.valid, bitorder="little"))
                arrays.append(pa.Array.from_buffers(_ARROW[typ](), n, [mask, pa.py_buffer(v)],
                                                    null_count=-1 if mask is not None else 0))
        return pa.Table.from_arrays(arrays, names=list(REQUEST_TYPES))

    def to_polars(self) -> pl.DataFrame:
        """The rows as the polars frame ``engine.metrics.request_frame`` made before they were numpy: the same
        values, and the same buffers (its Arrow IPC bytes equal: benchmarks/sim_digests.py hashes them); the
        derived columns by the polars expressions (engine.latency.request_latencies)."""
        import polars as pl

        from pic.engine.latency import request_latencies

        schema = polars_schema()
        n = len(self)
        cols = {"policy": pl.Series("policy", [self.policy] * n, pl.String())}
        s = self.session
        cols["session_id"] = (pl.Series("session_id", s.names, pl.String()).gather(s.codes) if isinstance(s, Labels)
                              else pl.Series("session_id", list(s), pl.String()))
        for c, typ in REQUEST_TYPES.items():
            if typ != "str" and c not in _DERIVED:
                cols[c] = pl.Series(c, self.cols[c]).cast(schema[c])
        df = request_latencies(pl.DataFrame(cols).with_columns(
            ttft_s=(pl.col("first_token_us") - pl.col("arrival_us")).cast(pl.Float64) / 1e6,
            queue_s=(pl.col("start_us") - pl.col("arrival_us")).cast(pl.Float64) / 1e6))
        return df.select(list(REQUEST_TYPES))


_DERIVED = ("ttft_s", "queue_s", "e2el_s", "tpot_s")
_US = 1 / 1e6
_NP = {"i8": np.int64, "i4": np.int32, "f8": np.float64}


def _arrow_types() -> dict[str, Any]:
    import pyarrow as pa

    return {"i8": pa.int64, "i4": pa.int32, "f8": pa.float64}


class _Lazy(dict):
    def __missing__(self, key):
        self.update(_arrow_types())
        return dict.__getitem__(self, key)


_ARROW = _Lazy()


def _large_strings(names: list[bytes], codes: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A large_string array whose row ``i`` is ``names[codes[i]]`` (null where ``valid`` is False)."""
    import pyarrow as pa

    n = codes.shape[0]
    lens = np.array([len(b) for b in names], np.int64)
    starts = np.zeros(lens.shape[0] + 1, np.int64)
    np.cumsum(lens, out=starts[1:])
    blob = np.frombuffer(b"".join(names), np.uint8)
    row_len = lens[codes] if n else np.zeros(0, np.int64)
    if valid is not None:
        row_len = np.where(valid, row_len, 0)
    offs = np.zeros(n + 1, np.int64)
    np.cumsum(row_len, out=offs[1:])
    total = int(offs[-1])
    src = np.repeat(starts[:-1][codes] - offs[:-1], row_len) + np.arange(total) if total else np.zeros(0, np.int64)
    data = np.ascontiguousarray(blob[src]) if total else np.zeros(0, np.uint8)
    mask = None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.large_string(), n, [mask, pa.py_buffer(offs), pa.py_buffer(data)],
                                 null_count=-1 if mask is not None else 0)


def _session_array(session: Labels | list) -> pa.Array:
    if isinstance(session, Labels):
        return _large_strings([s.encode() for s in session.names], np.asarray(session.codes, np.int64))
    valid = np.array([s is not None for s in session], bool)
    distinct = sorted({s for s in session if s is not None})
    index = {s: i for i, s in enumerate(distinct)}
    codes = np.array([index.get(s, 0) for s in session], np.int64)
    return _large_strings([s.encode() for s in distinct] or [b""], codes, None if valid.all() else valid)


_STRIPE, _BLOCK = 16, 128


def polars_sum(a: np.ndarray) -> float:
    """The sum of a float64 array exactly as polars computes it (``Series.sum``, polars-compute's ``float_sum``):
    the first ``n % 128`` values added in order, the rest in blocks of 128 (16 lanes of 8 values, the lanes folded
    onto themselves), the blocks' sums added pairwise (the left half ``(blocks // 2) * 128`` values); the two
    parts added last. NOTE: numpy's own pairwise sum groups differently (last bits differ on ~2/3 of arrays)."""
    a = np.ascontiguousarray(a, np.float64)
    n = a.shape[0]
    rest = n % _BLOCK
    restsum = 0.0
    for x in a[:rest].tolist():
        restsum += x
    if n == rest:
        return 0.0 + restsum
    blocks = a[rest:].reshape(-1, _BLOCK // _STRIPE, _STRIPE)
    v = blocks[:, 0, :].copy()
    for j in range(1, _BLOCK // _STRIPE):
        v += blocks[:, j, :]
    width = _STRIPE
    while width > 4:
        v = v[:, :width // 2] + v[:, width // 2:width]
        width //= 2
    sums = ((v[:, 0] + v[:, 2]) + (v[:, 1] + v[:, 3])).tolist()

    def pairwise(lo: int, hi: int) -> float:
        if hi - lo == 1:
            return sums[lo]
        mid = lo + (hi - lo) // 2
        return pairwise(lo, mid) + pairwise(mid, hi)

    return pairwise(0, len(sums)) + restsum
