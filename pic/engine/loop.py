"""Integer-microsecond discrete-event loop (SimPy-style surface, Vidur-style handlers).

The heap holds ``(time_us, kind, seq, event)`` (an ``EventKind`` orders as its int rank); ``seq`` comes from a per-simulator
``itertools.count`` so ties are FIFO and events are never compared. A handler receives
``(event, now_us)``, mutates engine state and RETURNS follow-ups as ``(at_us, event)`` pairs; only the
loop touches the heap. Observers are called ``observer(event, now_us)`` after each processed event.

Two sources besides the heap: a *feed* (:meth:`Simulator.feed`, events known in advance) and a *timer*
(``timer_kinds``: the one pending event of those kinds, which a newer one replaces). A handler that returns
:data:`VOID` says its event did nothing (a superseded event): it is not counted nor observed.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Sequence

from pic.engine.events import Event, EventKind

Handler = Callable[[Event, int], Iterable[tuple[int, Event]] | None]
Observer = Callable[[Event, int], None]
FeedHandler = Callable[[int, int], Iterable[tuple[int, Event]] | None]


class _Void:
    """The type of :data:`VOID`."""

    __slots__ = ()

    def __iter__(self):
        return iter(())

    def __repr__(self) -> str:
        return "VOID"


#: What a handler returns for an event that did nothing (e.g. a SCHEDULE a later one superseded): no
#: follow-ups, and the event is neither counted in ``num_events`` nor shown to observers. (Truthy, so the
#: loop's common "no follow-ups" test stays one test.)
VOID = _Void()

_HEAP, _FEED, _TIMER, _NONE = 0, 1, 2, -1


class Simulator:
    """Event loop. ``handlers`` maps each EventKind to its handler; failures propagate.

    ``timer_kinds``: events of these kinds are not queued in the heap: at most one is pending (the timer),
    and a newer one (a handler's follow-up or :meth:`schedule`) replaces it, the replaced one never
    dispatched. It fires in the heap's order (time, then kind rank), after any same-time event of the same
    kind in the heap or the feed. NOTE (speed): the serving model with one replica, whose phase end
    (PREFILL_DONE, then SCHEDULE) is one pending event that a cut replaces (engine.serving.model): no heap
    push and pop per phase, and no stale schedule dispatched after a cut."""

    def __init__(self, handlers: dict[EventKind, Handler] | None = None, *,
                 timer_kinds: Iterable[EventKind] = ()) -> None:
        self.now: int = 0
        self.handlers: dict[EventKind, Handler] = dict(handlers or {})
        self.observers: list[Observer] = []
        self.num_events: int = 0
        self._heap: list[tuple[int, int, int, Event]] = []
        self._seq = itertools.count()
        # a feed (:meth:`feed`): item j at _ftimes[j] for j >= _fpos, dispatched as _fhandler(j, at)
        self._ftimes: Sequence[int] = ()
        self._fget: Callable[[int], int] = self._ftimes.__getitem__   # times[j] as a Python int
        self._fkind: int = 0
        self._fhandler: FeedHandler | None = None
        self._fpos: int = 0
        # the timer: its event _tev (of kind _tk) at _tat (math.inf: none pending)
        self._tkinds = frozenset(int(k) for k in timer_kinds)
        self._tat: float = math.inf
        self._tk: int = 0
        self._tev: Event | None = None

    # ---- Public API -------------------------------------------------------------------------------
    def schedule(self, event: Event, at: int) -> None:
        """Queue ``event`` at integer µs ``at`` (must not be in the past); an event of the timer kind
        replaces the pending one."""
        if at < self.now:
            raise ValueError(f"cannot schedule {event!r} at {at} us < now {self.now} us")
        if event[0] in self._tkinds:
            self._tat, self._tk, self._tev = at, event[0], event
        else:
            heapq.heappush(self._heap, (at, event[0], next(self._seq), event))

    def feed(self, times: Sequence[int], kind: EventKind, handler: FeedHandler) -> None:
        """Events known in advance, as a sorted stream instead of heap entries: item ``j`` happens at
        ``times[j]`` (non-decreasing, none in the past) with ``kind``'s same-time rank and is dispatched as
        ``handler(j, at)`` (its follow-ups queued like a handler's). The heap must never hold an event of
        ``kind`` (so ties are by kind rank alone and the order is the one the heap would give). One feed.

        NOTE (speed): an open-loop replay's arrivals (one per request, in arrival order) cost no Event, no
        heap push and pop, and no follow-up scheduling of the next arrival (~2 us per request)."""
        if self._fhandler is not None:
            raise ValueError("Simulator.feed: one feed per simulator")
        get = getattr(times, "item", None) or times.__getitem__    # numpy: .item (no array scalars)
        if len(times) and get(0) < self.now:
            raise ValueError(f"cannot feed an event at {get(0)} us < now {self.now} us")
        self._ftimes, self._fget, self._fkind, self._fhandler, self._fpos = times, get, int(kind), handler, 0

    def peek(self) -> float:
        """Time of the next event in µs, or ``math.inf`` when nothing is queued."""
        t = self._heap[0][0] if self._heap else math.inf
        if self._fpos < len(self._ftimes):
            t = min(t, self._fget(self._fpos))
        return min(t, self._tat)

    def step(self) -> Event:
        """Take exactly one event (the heap's, the feed's or the timer's), advance ``now``, dispatch it,
        queue its follow-ups, notify observers (unless its handler returned :data:`VOID`)."""
        src = self._source()
        if src == _FEED:
            j = self._fpos
            self._fpos = j + 1
            at = self._fget(j)
            event = Event(EventKind(self._fkind), -1, j)
            self.now = at
            follow = self._fhandler(j, at)
        elif src == _TIMER:
            at, event = self._tat, self._tev
            self._tat, self._tev = math.inf, None
            self.now = at
            follow = self.handlers[event[0]](event, at)
            event = Event.of(event)
        elif src == _HEAP:
            at, _, _, event = heapq.heappop(self._heap)
            self.now = at
            follow = self.handlers[event[0]](event, at)
            event = Event.of(event)
        else:
            raise IndexError("Simulator.step: nothing queued")
        if follow is VOID:
            return event
        if follow:
            push, seq, heap, tkinds = heapq.heappush, self._seq, self._heap, self._tkinds
            for t, ev in follow:
                if t < at:
                    raise ValueError(f"handler for {event!r} scheduled {Event.of(ev)!r} in the past ({t} < {at})")
                if ev[0] in tkinds:
                    self._tat, self._tk, self._tev = t, ev[0], ev
                else:
                    push(heap, (t, ev[0], next(seq), ev))
        self.num_events += 1
        for obs in self.observers:
            obs(event, at)
        return event

    def run(self, until: int | None = None) -> int:
        """Process events with time ``< until`` (all when None); resumable. Returns events processed."""
        n0 = self.num_events
        step = self.step
        if until is None:
            if self.observers:
                while self._source() != _NONE:
                    step()
            else:
                self._drain()
        else:
            while self.peek() < until:
                step()
            self.now = max(self.now, until)
        return self.num_events - n0

    # ---- Internal helpers -------------------------------------------------------------------------
    def _source(self) -> int:
        """Where the next event comes from: the feed's next item before the heap's top when earlier, or the
        same time and a lower kind rank; the timer before both when earlier or the same time and a lower
        rank than each; _NONE when nothing is queued."""
        heap, tat, tk = self._heap, self._tat, self._tk
        j = self._fpos
        if j < len(self._ftimes):
            t, k, src = self._fget(j), self._fkind, _FEED
            if heap:
                top = heap[0]
                if not (t < top[0] or (t == top[0] and k < top[1])):
                    t, k, src = top[0], top[1], _HEAP
        elif heap:
            t, k, src = heap[0][0], heap[0][1], _HEAP
        else:
            return _TIMER if tat < math.inf else _NONE
        return _TIMER if tat < t or (tat == t and tk < k) else src

    def _drain(self) -> None:
        """``while queued: step()`` without observers, inlined (the same events in the same order; NOTE
        (speed): a method call and attribute reloads per event, ~0.5 us of ~2.5 us)."""
        heap, handlers, seq = self._heap, self.handlers, self._seq
        pop, push = heapq.heappop, heapq.heappush
        fget, fkind, fhandler, j = self._fget, self._fkind, self._fhandler, self._fpos
        tkinds, inf = self._tkinds, math.inf
        m = len(self._ftimes)
        # the feed's next time; past its end, a time no heap event reaches
        ft = fget(j) if j < m else inf
        n = 0
        try:
            while True:
                tat, tk = self._tat, self._tk
                if heap:
                    top = heap[0]
                    ht = top[0]
                    if ft < ht or (ft == ht and fkind < top[1]):
                        src = _TIMER if tat < ft or (tat == ft and tk < fkind) else _FEED
                    elif tat < ht or (tat == ht and tk < top[1]):
                        src = _TIMER
                    else:
                        src = _HEAP
                elif j < m:
                    src = _TIMER if tat < ft or (tat == ft and tk < fkind) else _FEED
                elif tat < inf:
                    src = _TIMER
                else:
                    break
                if src == _HEAP:
                    at, _, _, event = pop(heap)
                    self.now = at
                    follow = handlers[event[0]](event, at)
                elif src == _FEED:
                    at = ft
                    self.now = at
                    follow = fhandler(j, at)
                    j += 1
                    ft = fget(j) if j < m else inf
                else:
                    at = tat
                    event = self._tev
                    self._tat = inf          # (before the handler: its follow-ups may set the next one)
                    self._tev = None
                    self.now = at
                    follow = handlers[tk](event, at)
                if follow:
                    if follow is VOID:
                        continue
                    for t, ev in follow:
                        if t < at:
                            raise ValueError(f"a handler at {at} us scheduled {Event.of(ev)!r} in the past "
                                             f"({t} < {at})")
                        k = ev[0]
                        if k in tkinds:
                            self._tat = t
                            self._tk = k
                            self._tev = ev
                        else:
                            push(heap, (t, k, next(seq), ev))
                n += 1
        finally:
            self.num_events += n
            self._fpos = j
