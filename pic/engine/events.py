"""Event kinds of the serving simulation and their same-time ordering.

Events at the same integer microsecond are processed by ``EventKind`` rank, then FIFO (insertion seq):

* ``FINISH`` (0) and ``PREFILL_DONE`` (1) first: a request that ends at ``t`` releases its cache locks and
  a prefill that completes at ``t`` commits its KV *before* anything else at ``t`` looks at the cache, so
  a request starting at ``t`` can reuse content committed at ``t``. Finishes precede prefill completions
  so locks drop before new content asks for room.
* ``ARRIVAL`` (2) next: every request that arrives at ``t`` is queued before a scheduling decision at
  ``t``, so simultaneous arrivals are seen together (and in trace order).
* ``SCHEDULE`` (3): a replica's step boundary; it picks the next phase (prefill / decode / idle).
* ``METRICS`` (4) last: snapshots observe the settled state of instant ``t``.
"""

from __future__ import annotations

from enum import IntEnum


class EventKind(IntEnum):
    FINISH = 0
    PREFILL_DONE = 1
    ARRIVAL = 2
    SCHEDULE = 3
    METRICS = 4


class Event:
    """One timed fact. ``target`` is a replica index (-1 = system), ``req`` a request index (-1 = none),
    ``version`` lets a replica ignore a stale SCHEDULE after it re-planned its phase."""

    __slots__ = ("kind", "target", "req", "version")

    def __init__(self, kind: EventKind, target: int = -1, req: int = -1, version: int = 0) -> None:
        self.kind = kind
        self.target = target
        self.req = req
        self.version = version

    def __repr__(self) -> str:
        return f"Event({self.kind.name}, target={self.target}, req={self.req}, version={self.version})"
