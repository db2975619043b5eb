"""Policy protocol: every cache policy answers ``lookup`` with a Plan and keeps its own state.

Lifecycle of one request in the serving model (all times integer microseconds):

1. ``plan = lookup(req, now)``   pure question: what could be reused right now? (no state change
   beyond recency bookkeeping of the entries it touched)
2. ``ok = admit(req, plan, now)`` lock what ``plan`` reuses and reserve bytes for the KV the request
   will produce (evicting unlocked entries by the policy's key function). ``False`` = cannot fit even
   after evicting everything evictable; the serving model then runs the request uncached
   (``Plan.recompute_all``) and never calls ``commit``/``release`` for it.
3. ``commit(req, now)``          prefill finished: the request's prompt KV becomes reusable (still locked).
4. ``release(req, now)``         request finished: unlock; its KV stays resident and evictable.

``usage()`` must satisfy ``evictable + protected == total <= capacity`` after every call; the contract
test and ``--verify`` replays check it. Family-specific payloads stay inside each policy.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from pic.engine.plan import Plan
from pic.engine.seq import Seq


class RequestView:
    """What a policy sees of one request. ``tokens``: int32 [N]; ``segment_bounds``: int64 [k+1]
    token offsets of the trace's segments (content ids ``segment_ids`` uint64 [k], kinds uint8 [k]).

    A view built by the replay engine refers to the trace's segments (``segment_rows`` into ``source``,
    a :class:`~pic.traces.content.Segments`) and makes ``tokens`` only when a policy first reads them;
    ``seq`` describes the prompt by its segments (:mod:`engine.seq`) for token-free prefix matching.
    Such a view may be given ``segment_bounds=None`` with ``num_tokens``: the bounds are then made from
    the segments' lengths when first read (NOTE (speed): the replay does so for a one-segment prompt, ~0.5 us
    less per request and simulation, ~1 us where a policy reads only its ``seq``, which needs just its length).
    Likewise ``segment_ids`` / ``segment_kinds`` may be None (gathered from ``source`` when first read) and
    ``seq`` given ready-made (the replay makes the Seqs of many prompts at once: :mod:`engine.views`)."""

    __slots__ = ("request_id", "session_id", "_bounds", "_ids", "_kinds", "_rows",
                 "source", "num_tokens", "_tokens", "_seq")

    def __init__(self, request_id: int, session_id: str, tokens: np.ndarray | None,
                 segment_bounds: np.ndarray | None, segment_ids: np.ndarray | None, segment_kinds: np.ndarray | None,
                 segment_rows: np.ndarray | None = None, source: Any = None, num_tokens: int | None = None,
                 seq: Seq | None = None) -> None:
        self.request_id, self.session_id = request_id, session_id
        self._bounds, self._ids, self._kinds = segment_bounds, segment_ids, segment_kinds
        self._rows, self.source = segment_rows, source
        self._tokens, self._seq = tokens, seq
        if tokens is None and (segment_rows is None or source is None):
            raise ValueError("RequestView needs tokens, or segment_rows with their source")
        if (segment_ids is None or segment_kinds is None) and (segment_rows is None or source is None):
            raise ValueError("RequestView without segment_ids / segment_kinds needs segment_rows and their source")
        if segment_bounds is None and (segment_rows is None or source is None or num_tokens is None):
            raise ValueError("RequestView without segment_bounds needs segment_rows, their source and num_tokens")
        if num_tokens is None:
            num_tokens = int(tokens.shape[0]) if tokens is not None else int(segment_bounds[-1])
        self.num_tokens = num_tokens

    @property
    def segment_bounds(self) -> np.ndarray:
        b = self._bounds
        if b is None:
            rows = self.segment_rows
            if rows.shape[0] == 1:
                b = self._bounds = np.array((0, self.num_tokens), np.int64)
            else:
                offsets = self.source.offsets
                b = self._bounds = np.zeros(rows.shape[0] + 1, np.int64)
                np.cumsum(offsets[rows + 1] - offsets[rows], out=b[1:])
        return b

    @property
    def segment_rows(self) -> np.ndarray | None:
        rows = self._rows
        if type(rows) is tuple:        # (segment_view's (rows of the whole trace, start, end): sliced when read)
            rows = self._rows = rows[0][rows[1]:rows[2]]
        return rows

    @property
    def segment_ids(self) -> np.ndarray:
        ids = self._ids
        if ids is None:
            ids = self._ids = self.source.ids[self.segment_rows]
        return ids

    @property
    def segment_kinds(self) -> np.ndarray:
        kinds = self._kinds
        if kinds is None:
            kinds = self._kinds = self.source.kinds[self.segment_rows]
        return kinds

    @property
    def tokens(self) -> np.ndarray:
        if self._tokens is None:
            self._tokens = self.source.gather(self.segment_rows)
        return self._tokens

    @property
    def seq(self) -> Seq:
        if self._seq is None:
            if self._tokens is None or self.source is not None:
                rows = self.segment_rows
                if self._bounds is None and rows.shape[0] == 1:
                    self._seq = Seq.of_segment(self.source, rows.item(0), self.num_tokens)
                else:
                    self._seq = Seq.of_segments(self.source, rows, self.segment_bounds)
            else:
                self._seq = Seq.of_array(self._tokens)
        return self._seq

    def __repr__(self) -> str:
        return f"RequestView(request_id={self.request_id}, session_id={self.session_id!r}, N={self.num_tokens})"

    @staticmethod
    def from_tokens(request_id: int, tokens, session_id: str = "s0") -> RequestView:
        """A single-segment view (tests, demos)."""
        toks = np.ascontiguousarray(tokens, dtype=np.int32)
        return RequestView(request_id, session_id, toks, np.array([0, toks.size], np.int64),
                           np.zeros(1, np.uint64), np.zeros(1, np.uint8))


def segment_view(request_id: int, session_id: str, rows: tuple, source: Any, num_tokens: int, seq: Seq) -> RequestView:
    """``RequestView(request_id, session_id, None, None, None, None, rows[0][rows[1]:rows[2]], source, num_tokens,
    seq)`` without its argument checks (they hold: rows and their source are given), its segment rows sliced
    when first read. NOTE (speed): engine.views makes one per request and simulation; ``__init__``'s checks and
    keyword defaults were ~0.5 us of it, the numpy slice ~0.4 us (an exact-prefix policy reads only the Seq)."""
    v = _NEW(RequestView)
    v.request_id, v.session_id, v._rows, v.source, v.num_tokens, v._seq = (request_id, session_id, rows,
                                                                          source, num_tokens, seq)
    v._bounds = v._ids = v._kinds = v._tokens = None
    return v


_NEW = object.__new__


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """World facts a policy is built from. ``capacity_bytes = math.inf`` means unbounded.

    ``bytes_per_token`` is the resident KV bytes of one token across all layers (from the ModelSpec);
    ``model`` is the ModelSpec itself for policies that need more (recurrent state sizes, RoPE dims).
    """

    capacity_bytes: float
    bytes_per_token: int
    model: Any = None
    seed: int = 0
    verify: bool = False

    def __post_init__(self) -> None:
        if self.bytes_per_token <= 0:
            raise ValueError("bytes_per_token must be > 0")
        if not (self.capacity_bytes > 0):
            raise ValueError("capacity_bytes must be > 0")

    @property
    def capacity_tokens(self) -> float:
        return math.inf if math.isinf(self.capacity_bytes) else self.capacity_bytes // self.bytes_per_token


@dataclass(slots=True)
class Usage:
    """Resident bytes split by lock state; ``evictable + protected == total <= capacity``. NOTE (speed): not
    frozen — the serving model asks every cache for it after each admission and release (twice per request); a
    frozen dataclass's ``__init__`` sets fields through ``object.__setattr__`` (1.05 us against 0.28 us)."""

    evictable: int
    protected: int
    total: int
    capacity: float

    def check(self, who: str = "policy") -> None:
        if self.evictable < 0 or self.protected < 0:
            raise AssertionError(f"{who}: negative usage {self}")
        if self.evictable + self.protected != self.total:
            raise AssertionError(f"{who}: evictable + protected != total ({self})")
        if self.total > self.capacity:
            raise AssertionError(f"{who}: resident {self.total} B exceeds capacity {self.capacity} B")


@dataclass(frozen=True, slots=True)
class Footprint:
    """What a policy holds at one instant. ``entries``: its registry entries (hash-keyed entries: blocks,
    chunks, S1 windows; for a radix tree, its nodes). ``runs``: the token runs whose KV it stores, each
    ``(tokens, context)`` where the first ``context`` tokens only give context (a radix edge's parent
    path) and are not stored by that run; ``None`` when the policy keeps no tokens (duplicates unknown).
    ``duplicates``: the duplicate stored tokens (``engine.oracle.duplicate_tokens`` of the runs) where the policy
    knows the count without its runs (told, not asked: ``prefix_twin``), else None (counted from ``runs``)."""

    entries: int
    runs: list[tuple[np.ndarray, int]] | None
    duplicates: int | None = None


@dataclass(slots=True)
class PolicyStats:
    """Counters every policy keeps (family-specific counters go in ``extra``)."""

    lookups: int = 0
    hits: int = 0                 # lookups that reused >= 1 token
    evicted_bytes: int = 0
    evictions: int = 0            # entries evicted
    verified_hits: int = 0        # --verify: hits whose tokens were compared
    collisions: int = 0           # --verify: hits whose tokens differed (must stay 0)
    rejected: int = 0             # admits that could not fit
    extra: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        d = {k: getattr(self, k) for k in ("lookups", "hits", "evicted_bytes", "evictions",
                                           "verified_hits", "collisions", "rejected")}
        d.update(self.extra)
        return d


class CachePolicy(ABC):
    """Base class of every policy. Subclasses set ``name`` and ``Config`` (a frozen dataclass whose
    fields carry ``metadata={"help": ...}``) and implement the abstract methods."""

    name: ClassVar[str] = ""
    Config: ClassVar[type] = type(None)
    #: False for an upper bound that ignores the capacity (``oracle``): it stores no KV, ``usage()`` is
    #: zero, nothing is evicted or refused; the contract test skips the capacity checks for it
    bounded: ClassVar[bool] = True

    def __init__(self, ctx: PolicyContext, config: Any = None) -> None:
        self.ctx = ctx
        self.config = config if config is not None else self.Config()
        self.stats = PolicyStats()

    # ---- Public API -------------------------------------------------------------------------------
    @abstractmethod
    def lookup(self, req: RequestView, now_us: int) -> Plan: ...

    @abstractmethod
    def admit(self, req: RequestView, plan: Plan, now_us: int) -> bool: ...

    @abstractmethod
    def commit(self, req: RequestView, now_us: int) -> None: ...

    @abstractmethod
    def release(self, req: RequestView, now_us: int) -> None: ...

    @abstractmethod
    def evict(self, num_bytes: int, now_us: int) -> int:
        """Free at least ``num_bytes`` of evictable bytes if possible; return bytes freed."""

    @abstractmethod
    def usage(self) -> Usage: ...

    def resident_bytes(self) -> int | float:
        """``usage().total`` (what the serving model asks after each admission and commit for its peak; a
        policy may answer without building a Usage)."""
        return self.usage().total

    def holds(self, req: RequestView) -> bool | None:
        """Whether every KV span admitted request ``req``'s plan reuses is still resident (locked KV is
        never evicted). ``None``: the policy does not track it per request; the contract test then
        checks that a fresh lookup still finds at least as much. A policy that locks exactly the
        tokens a plan reuses may leave them unreachable by new lookups while the request runs (the
        chunk that indexed them lost another part); it answers here instead."""
        return None

    def footprint(self) -> Footprint:
        """Registry entries and stored token runs now (``summary.json``: registry_entries,
        duplicate_stored_tokens). The default holds nothing."""
        return Footprint(0, [])

    def describe(self) -> dict[str, Any]:
        """Resolved config for config.json."""
        from dataclasses import asdict, is_dataclass
        return asdict(self.config) if is_dataclass(self.config) else {}
