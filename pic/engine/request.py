"""Request entity of the serving simulation: trace facts, lifecycle timestamps and ``num_*`` counters;
:class:`RequestTable` holds one simulation's requests as flat columns (a Request is a read-only copy)."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from enum import IntEnum

import numpy as np


class Status(IntEnum):
    PENDING = 0      # not arrived yet
    WAITING = 1      # arrived, queued at a replica
    PREFILL = 2      # prefill in progress
    DECODE = 3       # first token out, decoding
    FINISHED = 4


class Request:
    """One trace request inside one simulation (mutable; times in integer µs, -1 = not yet)."""

    __slots__ = (
        "idx", "request_id", "session_id", "num_prompt_tokens", "num_output_tokens", "status", "replica",
        "arrival_us", "start_us", "first_token_us", "finish_us",
        "num_reused", "num_rotated", "num_recomputed", "num_prefix_reused",
        "prefill_flops", "prefill_hbm_bytes", "cache_read_bytes", "prefill_joules",
        "nocache_prefill_joules", "prefix_prefill_joules", "num_evictions", "uncached", "num_oracle_reused",
        "num_recurrent_tokens", "attn_layer_s", "recurrent_layer_s", "nocache_attn_layer_s",
        "nocache_recurrent_layer_s",
        "view", "admitted",
    )

    def __init__(self, idx: int, request_id: int, session_id: str, num_prompt_tokens: int,
                 num_output_tokens: int, arrival_us: int) -> None:
        self.idx = idx
        self.request_id = request_id
        self.session_id = session_id
        self.num_prompt_tokens = num_prompt_tokens
        self.num_output_tokens = num_output_tokens
        self.status = Status.PENDING
        self.replica = -1
        self.arrival_us = arrival_us
        self.start_us = self.first_token_us = self.finish_us = -1
        self.num_reused = self.num_rotated = self.num_recomputed = self.num_prefix_reused = 0
        self.prefill_flops = self.prefill_hbm_bytes = self.cache_read_bytes = 0.0
        self.prefill_joules = self.nocache_prefill_joules = self.prefix_prefill_joules = 0.0
        self.num_evictions = 0
        self.num_oracle_reused = 0  # the trace-level oracle's reuse of this request (engine.oracle)
        self.uncached = False
        self.num_recurrent_tokens = 0   # tokens the recurrent layers of a hybrid model ran
        self.attn_layer_s = self.recurrent_layer_s = 0.0   # prefill time by layer kind (plan priced alone)
        self.nocache_attn_layer_s = self.nocache_recurrent_layer_s = 0.0
        self.view = None            # RequestView while in flight (dropped at finish)
        self.admitted = False       # the policy admitted it (commit/release owed)

    def __repr__(self) -> str:
        return (f"Request(id={self.request_id}, status={self.status.name}, replica={self.replica}, "
                f"N={self.num_prompt_tokens}, out={self.num_output_tokens})")


class Labels(Sequence):
    """Strings of many rows (a session id per request) as int codes into their distinct values.

    NOTE (memory): chat 10^6 as a list of Python strings: ~64 MB for the whole replay (one str object
    per request); as codes: 4 B per request. ``labels[i]`` is a plain ``str``."""

    __slots__ = ("codes", "names")

    def __init__(self, codes: np.ndarray, names: Sequence[str]) -> None:
        self.codes, self.names = codes, names

    def __len__(self) -> int:
        return int(self.codes.shape[0])

    def __getitem__(self, i):   # type: ignore[override]
        if isinstance(i, slice):
            return [self.names[c] for c in self.codes[i].tolist()]
        return self.names[self.codes[i]]

    def __iter__(self) -> Iterator[str]:
        names = self.names
        return (names[c] for c in self.codes.tolist())


#: per-request values a RequestTable keeps in numpy columns once a request finishes, by dtype
_INT_FIELDS = (
    "request_id", "num_prompt_tokens", "num_output_tokens", "replica", "arrival_us", "start_us",
    "first_token_us", "finish_us", "num_reused", "num_rotated", "num_recomputed", "num_prefix_reused",
    "num_evictions", "num_oracle_reused", "num_recurrent_tokens",
)
_FLOAT_FIELDS = (
    "prefill_flops", "prefill_hbm_bytes", "cache_read_bytes", "prefill_joules", "nocache_prefill_joules",
    "prefix_prefill_joules", "attn_layer_s", "recurrent_layer_s", "nocache_attn_layer_s",
    "nocache_recurrent_layer_s",
)
_BOOL_FIELDS = ("uncached", "admitted")


class RequestTable(Sequence):
    """The requests of one simulation, index = workload row, as one flat column per field.

    The simulation writes a request's values straight into :attr:`cols` (``array.array`` per field: int64
    ``q``, float64 ``d``, bool ``b``), as it computes them; no object exists per request.
    ``table[i]`` and iteration give read-only :class:`Request` copies rebuilt from the columns (status from
    which timestamps are set); :meth:`column` gives a field as a numpy array.

    NOTE (speed and memory): ``array.array`` item assignment is a C call on unboxed storage (8 B per value,
    no Python object per request, no batched copy): a Request object per request in flight, its ~25
    attribute writes and the copy of its values into numpy columns at finish cost ~4 us per request, about
    a tenth of a prefix simulation."""

    def __init__(self, request_ids: np.ndarray, session_ids: Sequence[str], num_prompt: np.ndarray,
                 num_output: np.ndarray, arrival_us: np.ndarray) -> None:
        n = int(np.asarray(request_ids).shape[0])
        self._n = n
        self.session_ids = session_ids
        zero8, zero1 = bytes(8 * n), bytes(n)
        #: field -> the per-request values (the simulation's write path; index = workload row)
        self.cols: dict[str, array] = {f: array("q", zero8) for f in _INT_FIELDS}
        self.cols.update({f: array("d", zero8) for f in _FLOAT_FIELDS})
        self.cols.update({f: array("b", zero1) for f in _BOOL_FIELDS})
        for f, v in (("request_id", request_ids), ("num_prompt_tokens", num_prompt),
                     ("num_output_tokens", num_output), ("arrival_us", arrival_us)):
            self.column(f)[:] = v
        for f in ("replica", "start_us", "first_token_us", "finish_us"):   # as Request() starts them
            self.column(f)[:] = -1

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> Request:   # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if not -self._n <= i < self._n:
            raise IndexError(i)
        return self._rebuild(i % self._n)

    def __iter__(self) -> Iterator[Request]:
        for i in range(self._n):
            yield self._rebuild(i)

    def column(self, field: str) -> np.ndarray:
        """numpy view of ``field`` (a Request attribute) for every request (it changes as the simulation
        writes; copy it to keep a snapshot)."""
        col = self.cols[field]
        return np.frombuffer(col, _DTYPE[col.typecode]) if self._n else np.zeros(0, _DTYPE[col.typecode])

    # ---- Internal helpers -------------------------------------------------------------------------
    def _rebuild(self, i: int) -> Request:
        c = self.cols
        r = Request(i, c["request_id"][i], self.session_ids[i], c["num_prompt_tokens"][i],
                    c["num_output_tokens"][i], c["arrival_us"][i])
        for f, col in c.items():
            setattr(r, f, col[i] if col.typecode != "b" else bool(col[i]))
        r.status = (Status.FINISHED if r.finish_us >= 0 else Status.DECODE if r.first_token_us >= 0
                    else Status.PREFILL if r.start_us >= 0 else Status.WAITING if r.replica >= 0
                    else Status.PENDING)
        return r


_DTYPE = {"q": np.int64, "d": np.float64, "b": np.bool_}
