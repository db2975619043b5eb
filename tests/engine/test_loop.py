"""Event loop: integer-µs heap, same-time ordering by kind, resumable run, handler follow-ups."""

from __future__ import annotations

import math

import pytest

from pic.engine.events import Event, EventKind
from pic.engine.loop import Simulator


def _recording_sim():
    seen = []

    def handler(ev, now):
        seen.append((now, ev.kind, ev.req))
        return []

    return Simulator(dict.fromkeys(EventKind, handler)), seen


def test_same_time_orders_by_kind_then_fifo():
    """At one instant: finishes, prefill completions, arrivals, scheduling, metrics; ties FIFO."""
    sim, seen = _recording_sim()
    for kind, req in [(EventKind.METRICS, 0), (EventKind.SCHEDULE, 1), (EventKind.ARRIVAL, 2),
                      (EventKind.ARRIVAL, 3), (EventKind.PREFILL_DONE, 4), (EventKind.FINISH, 5)]:
        sim.schedule(Event(kind, req=req), 10)
    sim.run()
    assert [r for _, _, r in seen] == [5, 4, 2, 3, 1, 0]


def test_run_until_is_resumable_and_peek_reports_next():
    """run(until) stops before `until`, sets now, and a later run continues where it stopped."""
    sim, seen = _recording_sim()
    for t in (5, 10, 15):
        sim.schedule(Event(EventKind.ARRIVAL, req=t), t)
    assert sim.run(until=10) == 1 and sim.now == 10 and sim.peek() == 10
    assert sim.run() == 2 and [t for t, _, _ in seen] == [5, 10, 15]
    assert sim.peek() == math.inf


def test_handlers_return_follow_ups_and_observers_see_each_event():
    """Follow-up events returned by a handler are scheduled; observers run once per event."""
    def arrival(ev, now):
        return [(now + 3, Event(EventKind.FINISH, req=ev.req))]

    finished = []
    sim = Simulator({EventKind.ARRIVAL: arrival,
                     EventKind.FINISH: lambda ev, now: finished.append((now, ev.req))})
    observed = []
    sim.observers.append(lambda ev, now: observed.append(ev.kind))
    sim.schedule(Event(EventKind.ARRIVAL, req=7), 4)
    sim.run()
    assert finished == [(7, 7)] and observed == [EventKind.ARRIVAL, EventKind.FINISH]


def test_scheduling_in_the_past_raises():
    """Neither schedule() nor a handler may put an event before now."""
    sim = Simulator({EventKind.ARRIVAL: lambda ev, now: [(now - 1, Event(EventKind.FINISH))]})
    sim.schedule(Event(EventKind.ARRIVAL), 5)
    with pytest.raises(ValueError, match="past"):
        sim.run()
    with pytest.raises(ValueError, match="cannot schedule"):
        sim.schedule(Event(EventKind.ARRIVAL), 1)


def test_counters_are_per_simulator():
    """Two simulators keep independent sequence counters (no class-level globals)."""
    a, _ = _recording_sim()
    b, _ = _recording_sim()
    a.schedule(Event(EventKind.ARRIVAL), 1)
    a.schedule(Event(EventKind.ARRIVAL), 1)
    b.schedule(Event(EventKind.ARRIVAL), 1)
    assert [e[2] for e in a._heap] == [0, 1] and [e[2] for e in b._heap] == [0]


def _cascade(observe: bool):
    """A random cascade of follow-ups (same-time ties of every kind); returns (order seen, events, now)."""
    import random

    rng = random.Random(3)
    seen = []

    def handler(ev, now):
        seen.append((now, int(ev.kind), ev.req))
        if ev.req >= 400:
            return []
        return [(now + rng.choice([0, 0, 1, 5]), Event(rng.choice(list(EventKind)), req=ev.req * 2 + k))
                for k in range(rng.choice([0, 1, 2]))]

    sim = Simulator(dict.fromkeys(EventKind, handler))
    if observe:
        sim.observers.append(lambda ev, now: None)
    for k in range(5):
        sim.schedule(Event(EventKind.ARRIVAL, req=k + 1), k)
    n = sim.run()
    return seen, n, sim.num_events, sim.now


def test_run_without_observers_processes_what_step_by_step_processes():
    """run() takes an inlined loop when no observer listens: the same events, order, count and clock as
    step() one at a time (the path with an observer)."""
    fast, slow = _cascade(False), _cascade(True)
    assert len(fast[0]) > 20 and fast == slow


def test_a_failing_handler_leaves_the_count_of_processed_events():
    """A handler's exception propagates out of run(); events processed before it are counted."""
    def arrival(ev, now):
        if ev.req == 3:
            raise RuntimeError("boom")
        return []

    sim = Simulator({EventKind.ARRIVAL: arrival})
    for k in range(5):
        sim.schedule(Event(EventKind.ARRIVAL, req=k), k)
    with pytest.raises(RuntimeError, match="boom"):
        sim.run()
    assert sim.num_events == 3 and sim.now == 3 and sim.run() == 1
