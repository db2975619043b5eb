"""Request entity of the serving simulation: trace facts, lifecycle timestamps and ``num_*`` counters;
:class:`RequestTable` holds one simulation's requests (objects while in flight, numpy columns after)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from enum import IntEnum
from operator import attrgetter

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
_FLUSH = 4096     # finished requests copied into the columns at a time


class RequestTable(Sequence):
    """The requests of one simulation, index = workload row. A request is a :class:`Request` object only
    while it is in flight (made at first access); when it finishes (:meth:`finish`) its values move into
    numpy columns and the object is dropped.

    NOTE (memory): 10^6 live Request objects hold ~850 B each (slots plus boxed ints and floats); the
    columns hold 27 x 8 B. Finished requests are copied in batches (``np.fromiter`` per field), so the
    copy costs what building the rows frame from the objects cost before. ``table[i]`` of a finished
    request, and iteration, give read-only copies rebuilt from the columns."""

    def __init__(self, request_ids: np.ndarray, session_ids: Sequence[str], num_prompt: np.ndarray,
                 num_output: np.ndarray, arrival_us: np.ndarray) -> None:
        n = int(np.asarray(request_ids).shape[0])
        self._n = n
        self.session_ids = session_ids
        self._cols: dict[str, np.ndarray] = {f: np.zeros(n, np.int64) for f in _INT_FIELDS}
        self._cols.update({f: np.zeros(n, np.float64) for f in _FLOAT_FIELDS})
        self._cols.update({f: np.zeros(n, np.bool_) for f in _BOOL_FIELDS})
        self._cols["request_id"][:] = request_ids
        self._cols["num_prompt_tokens"][:] = num_prompt
        self._cols["num_output_tokens"][:] = num_output
        self._cols["arrival_us"][:] = arrival_us
        for f in ("replica", "start_us", "first_token_us", "finish_us"):   # as Request() starts them
            self._cols[f][:] = -1
        self._done = np.zeros(n, np.bool_)
        # NOTE (speed): the columns a new Request starts from, bound once (``__getitem__`` runs per event)
        c = self._cols
        self._init_cols = (c["request_id"], c["num_prompt_tokens"], c["num_output_tokens"], c["arrival_us"])
        self._live: dict[int, Request] = {}
        #: the requests in flight by index (the simulation's fast path to them; read-only for callers)
        self.in_flight = self._live
        self._pending: list[Request] = []

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> Request:   # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        r = self._live.get(i)
        if r is not None:
            return r
        if not 0 <= i < self._n:
            raise IndexError(i)
        if self._done.item(i):
            self._flush()
            return self._rebuild(i)
        rid, num_prompt, num_output, arrival = self._init_cols
        r = self._live[i] = Request(i, rid.item(i), self.session_ids[i], num_prompt.item(i),
                                    num_output.item(i), arrival.item(i))
        return r

    def __iter__(self) -> Iterator[Request]:
        for i in range(self._n):
            yield self[i]

    def finish(self, i: int) -> None:
        """Request ``i`` is finished: its values go to the columns (batched) and its object is dropped."""
        r = self._live.pop(i)
        self._done[i] = True
        self._pending.append(r)
        if len(self._pending) >= _FLUSH:
            self._flush()

    def column(self, field: str) -> np.ndarray:
        """numpy values of ``field`` (a Request attribute) for every request; a request still in flight
        has the value it had when it was made (``Request()``'s initial values)."""
        self._flush()
        return self._cols[field]

    # ---- Internal helpers -------------------------------------------------------------------------
    def _flush(self) -> None:
        done = self._pending
        if not done:
            return
        idx = np.fromiter((r.idx for r in done), np.int64, len(done))
        for f, col in self._cols.items():
            col[idx] = np.fromiter(map(attrgetter(f), done), col.dtype, len(done))
        self._pending = []

    def _rebuild(self, i: int) -> Request:
        c = self._cols
        r = Request(i, int(c["request_id"][i]), self.session_ids[i], int(c["num_prompt_tokens"][i]),
                    int(c["num_output_tokens"][i]), int(c["arrival_us"][i]))
        for f, col in c.items():
            setattr(r, f, col[i].item())
        r.status = Status.FINISHED
        return r
