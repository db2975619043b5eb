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
from operator import itemgetter


class EventKind(IntEnum):
    FINISH = 0
    PREFILL_DONE = 1
    ARRIVAL = 2
    SCHEDULE = 3
    METRICS = 4


class Event(tuple):
    """One timed fact, a tuple ``(kind, target, req, version)``: ``target`` is a replica index (-1 = system),
    ``req`` a request index (-1 = none), ``version`` lets a replica ignore a stale SCHEDULE after it
    re-planned its phase.

    The loop reads an event by position (``ev[0]`` is its kind), so a plain 4-tuple in that order is an
    event too: NOTE (speed): the serving model makes its events as plain tuples (~0.03 us each, where an
    object with four attributes cost ~0.35 us, ~5 events per request); :meth:`of` names one's fields."""

    __slots__ = ()

    def __new__(cls, kind: EventKind, target: int = -1, req: int = -1, version: int = 0) -> Event:
        return tuple.__new__(cls, (kind, target, req, version))

    kind = property(itemgetter(0))
    target = property(itemgetter(1))
    req = property(itemgetter(2))
    version = property(itemgetter(3))

    @staticmethod
    def of(ev: tuple) -> Event:
        """``ev`` (a plain ``(kind, target, req, version)`` tuple or an Event) as an Event."""
        return ev if type(ev) is Event else tuple.__new__(Event, ev)

    def __repr__(self) -> str:
        return (f"Event({EventKind(self[0]).name}, target={self[1]}, req={self[2]}, "
                f"version={self[3]})")
