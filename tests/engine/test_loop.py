"""Event loop: integer-µs heap, same-time ordering by kind, resumable run, handler follow-ups."""

from __future__ import annotations

import math

import pytest

from pic.engine.events import Event, EventKind
from pic.engine.loop import VOID, Simulator


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


def _mixed(observe: bool):
    """Handlers that also call schedule() themselves (some ahead of the event being handled: same instant,
    lower rank), return follow-ups as lists, generators or plain (kind, target, req, version) tuples."""
    import random

    rng = random.Random(5)
    seen = []
    sim = Simulator()

    def handler(ev, now):
        seen.append((now, int(ev[0]), ev[2], type(ev).__name__))
        if len(seen) >= 400:
            return None
        x = rng.random()
        if x < 0.25:    # ahead of the current event (FINISH ranks first at this instant)
            sim.schedule(Event(EventKind.FINISH, req=ev[2] * 3 + 1), now)
        elif x < 0.35:
            sim.schedule(Event(EventKind.METRICS, req=ev[2] * 3 + 1), now + 2)
        outs = [(now + rng.choice([0, 1, 4]), (rng.choice(list(EventKind)), -1, ev[2] * 3 + 2 + k, 0))
                for k in range(rng.choice([0, 1, 2, 2]))]
        return (o for o in outs) if rng.random() < 0.3 else outs

    sim.handlers.update(dict.fromkeys(EventKind, handler))
    obs = []
    if observe:
        sim.observers.append(lambda ev, now: obs.append(type(ev).__name__))
    for k in range(4):
        sim.schedule(Event(EventKind.ARRIVAL, req=k + 1), k)
    sim.run()
    return seen, obs, sim.num_events


def test_events_and_handlers_that_schedule_run_in_the_same_order_with_or_without_observers():
    """The inlined loop (no observer) and step() agree on handlers that schedule ahead of their own event,
    generator follow-ups and plain-tuple events (order, count); observers see Event objects."""
    fast, slow = _mixed(False), _mixed(True)
    assert len(fast[0]) > 50 and fast[0] == slow[0] and fast[2] == slow[2] == len(fast[0])
    assert {t for *_, t in fast[0]} == {"Event", "tuple"}
    assert len(slow[1]) == len(slow[0]) and set(slow[1]) == {"Event"}
    assert Event.of((EventKind.FINISH, 1, 2, 3)) == Event(EventKind.FINISH, 1, 2, 3)
    assert Event(EventKind.SCHEDULE, 0, -1, 7).version == 7 and "SCHEDULE" in repr(Event.of((3, 0, -1, 7)))


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


def _run_in_mode(sim, mode: str, observer) -> None:
    """Run ``sim`` to the end: in one drain, with ``observer`` watching (``observers``), or in stops (``until``)."""
    if mode == "observers":
        sim.observers.append(observer)
        sim.run()
    elif mode == "until":
        for stop in (7, 20, 21, 45):
            sim.run(until=stop)
            assert sim.now == stop
        sim.run()
    else:
        sim.run()


def _feed_vs_heap(seed: int, mode: str):
    """The same events dispatched two ways: arrivals as heap events chained one after another (the old
    open-loop path) vs arrivals fed (Simulator.feed); handlers add finishes, prefill completions and
    schedules at random times, many of them at an arrival's instant."""
    import random

    def build(use_feed):
        rng = random.Random(seed)
        times = sorted(rng.randrange(0, 60) for _ in range(40))
        follow = [[(t + rng.choice([0, 0, 1, 3]), rng.choice([EventKind.FINISH, EventKind.PREFILL_DONE,
                                                              EventKind.SCHEDULE, EventKind.METRICS]))
                   for _ in range(rng.randrange(0, 3))] for t in times]
        seen = []

        def arrive(j, now):
            seen.append((now, "A", j))
            out = [(t, Event(k, req=j)) for t, k in follow[j]]
            if not use_feed and j + 1 < len(times):
                out.append((times[j + 1], Event(EventKind.ARRIVAL, req=j + 1)))
            return out

        def other(ev, now):
            seen.append((now, ev.kind.name, ev.req))
            return [(now, Event(EventKind.METRICS, req=-ev.req - 1))] if ev.kind == EventKind.FINISH else []

        sim = Simulator({**dict.fromkeys(EventKind, other), EventKind.ARRIVAL: lambda ev, now: arrive(ev.req, now)})
        sim.schedule(Event(EventKind.FINISH, req=99), times[0])         # a tie with the first arrival
        if use_feed:
            sim.feed(times, EventKind.ARRIVAL, arrive)
        else:
            sim.schedule(Event(EventKind.ARRIVAL, req=0), times[0])
        _run_in_mode(sim, mode, lambda ev, now: None)
        return seen, sim.num_events

    return build(False), build(True)


@pytest.mark.parametrize("mode", ["drain", "observers", "until"])
@pytest.mark.parametrize("seed", range(6))
def test_fed_arrivals_dispatch_in_the_heap_order(seed, mode):
    """Simulator.feed gives the order the heap gives (time, then kind rank; the heap holds no event of the
    fed kind), in the fast drain, with observers and through run(until) stops."""
    (heap_seen, heap_n), (fed_seen, fed_n) = _feed_vs_heap(seed, mode)
    assert fed_seen == heap_seen and fed_n == heap_n
    assert sum(1 for _, k, _ in fed_seen if k == "A") == 40


def test_feed_rejects_a_second_feed_and_the_past():
    """One feed per simulator; a feed cannot start before now."""
    sim = Simulator({})
    sim.feed([1, 2], EventKind.ARRIVAL, lambda j, now: None)
    with pytest.raises(ValueError, match="one feed"):
        sim.feed([3], EventKind.ARRIVAL, lambda j, now: None)
    sim2 = Simulator({})
    sim2.now = 5
    with pytest.raises(ValueError, match="cannot feed"):
        sim2.feed([4], EventKind.ARRIVAL, lambda j, now: None)


def _timer_vs_heap(seed: int, mode: str, use_timer: bool):
    """A replica-like stream: arrivals (fed) supersede the pending SCHEDULE (a version bump), a SCHEDULE sets
    the next one; finishes and metrics at random times, many at one instant. Heap: a superseded SCHEDULE is
    dispatched and returns VOID. Timer (``timer_kinds``): it is replaced, never dispatched."""
    import random

    rng = random.Random(seed)
    times = sorted(rng.randrange(0, 80) for _ in range(40))
    plan = [(rng.randrange(0, 4), rng.random() < 0.6, rng.randrange(0, 3)) for _ in range(200)]
    seen, state = [], {"v": 0, "k": 0, "void": 0}

    def nxt():
        state["k"] += 1
        return plan[state["k"] % len(plan)]

    def sched(now):
        state["v"] += 1
        return (now + nxt()[0], Event(EventKind.SCHEDULE, 0, -1, state["v"]))

    def arrive(j, now):
        seen.append((now, "A", j))
        d, cut, fin = nxt()
        out = [(now + fin, Event(EventKind.FINISH, req=j))] if fin else []
        if cut:
            out.append(sched(now))
        return out

    def schedule(ev, now):
        if ev.version != state["v"]:
            state["void"] += 1
            return VOID
        seen.append((now, "S", ev.version))
        d, again, fin = nxt()
        out = [(now, Event(EventKind.METRICS, req=ev.version))] if fin == 1 else []
        if again:
            out.append(sched(now))
        return out

    def other(ev, now):
        seen.append((now, ev.kind.name, ev.req))
        return [(now, Event(EventKind.METRICS, req=-1))] if ev.kind == EventKind.FINISH and ev.req % 2 else None

    sim = Simulator({**dict.fromkeys(EventKind, other), EventKind.SCHEDULE: schedule},
                    timer_kinds=(EventKind.SCHEDULE,) if use_timer else ())
    sim.feed(times, EventKind.ARRIVAL, arrive)
    sim.schedule(Event(EventKind.SCHEDULE, 0, -1, 0), times[0])
    observed = []
    _run_in_mode(sim, mode, lambda ev, now: observed.append(ev.kind))
    if mode == "observers":
        assert len(observed) == sim.num_events and EventKind.SCHEDULE in observed
    return seen, sim.num_events, state["void"]


@pytest.mark.parametrize("mode", ["drain", "observers", "until"])
@pytest.mark.parametrize("seed", range(6))
def test_timer_dispatches_what_the_heap_dispatches_less_the_superseded(seed, mode):
    """``timer_kinds`` (one pending event of those kinds, a newer one replaces it) gives the order and the
    count the heap gives when a superseded event's handler returns VOID (not counted, not observed)."""
    heap_seen, heap_n, heap_void = _timer_vs_heap(seed, mode, use_timer=False)
    timer_seen, timer_n, timer_void = _timer_vs_heap(seed, mode, use_timer=True)
    assert timer_seen == heap_seen and timer_n == heap_n == len(heap_seen)
    assert heap_void >= 3 and timer_void == 0      # superseded schedules: dispatched as VOID / never
    assert sum(1 for _, k, _ in heap_seen if k == "S") >= 5


def test_void_events_are_not_counted_nor_observed():
    """A handler returning VOID: no follow-ups, not in num_events, no observer call (step and drain)."""
    for observe in (False, True):
        seen: list[int] = []
        sim = Simulator({EventKind.ARRIVAL: lambda ev, now: VOID if ev.req % 2 else None})
        if observe:
            sim.observers.append(lambda ev, now, seen=seen: seen.append(ev.req))
        for k in range(5):
            sim.schedule(Event(EventKind.ARRIVAL, req=k), k)
        assert sim.run() == 3 and sim.num_events == 3 and sim.now == 4
        assert seen == ([0, 2, 4] if observe else [])


def test_timer_is_replaced_and_peeked():
    """A newer timer event replaces the pending one (schedule() or a follow-up); peek sees it."""
    seen = []
    sim = Simulator({EventKind.SCHEDULE: lambda ev, now: seen.append((now, ev.req)),
                     EventKind.ARRIVAL: lambda ev, now: [(now + 1, Event(EventKind.SCHEDULE, req=3))]},
                    timer_kinds=(EventKind.SCHEDULE,))
    sim.schedule(Event(EventKind.SCHEDULE, req=1), 10)
    sim.schedule(Event(EventKind.SCHEDULE, req=2), 8)
    assert sim.peek() == 8
    sim.schedule(Event(EventKind.ARRIVAL, req=0), 2)
    assert sim.run() == 2 and seen == [(3, 3)] and sim.peek() == math.inf
