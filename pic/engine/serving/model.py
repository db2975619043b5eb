"""ServingModel: N replicas, a router, one cache policy per replica, and the event handlers that drive
them through the Simulator.

Policy lifecycle per request (pic/engine/policies/base.py): ``lookup`` + ``admit`` at prefill start
(``admit`` False -> the request runs uncached with ``Plan.recompute_all``), ``commit`` at prefill
completion, ``release`` at finish. Prefill energy is priced per batch step: a request's joules are its
share of the steps it ran in (``CostModel.prefill_step``), and its no-cache joules the share a full
prefill would have had in the same batch. The exact-prefix baseline of each request comes from the
baseline policies' own replays (``engine.replay``), not from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pic.engine.events import Event, EventKind
from pic.engine.loop import Simulator
from pic.engine.plan import NO_CORRECTION, Action, Plan
from pic.engine.request import Labels, RequestTable, Status
from pic.engine.serving.replica import Phase, Replica
from pic.engine.serving.router import Router

FINISH, PREFILL_DONE, ARRIVAL, SCHEDULE = (EventKind.FINISH, EventKind.PREFILL_DONE, EventKind.ARRIVAL,
                                           EventKind.SCHEDULE)
ROTATED, RECOMPUTE = Action.REUSE_ROTATED, Action.RECOMPUTE
_MEMO_MAX = 1 << 16         # prefill costs remembered by plan shape (cleared when full)


@dataclass(frozen=True, slots=True)
class Workload:
    """Requests in arrival order: columns plus ``view(i) -> RequestView`` (built lazily at arrival)."""

    request_ids: np.ndarray     # int64 [R]
    session_ids: Sequence[str]  # [R]
    num_prompt: np.ndarray      # int64 [R]
    num_output: np.ndarray      # int64 [R]
    arrival_us: np.ndarray      # int64 [R], non-decreasing
    view: Callable[[int], Any]

    @property
    def num_requests(self) -> int:
        return int(self.request_ids.shape[0])


class ServingModel:
    """Builds the Simulator for one policy and runs the workload through it."""

    def __init__(self, workload: Workload, policies: Sequence[Any], cost: Any, *, token_budget: int = 8192, router: str = "round-robin",
                 closed_loop: bool = False, progress: Callable[[int, int], None] | None = None) -> None:
        self.w = workload
        self.policies = list(policies)
        self.cost = cost
        self.replicas = [Replica(i, cost, token_budget) for i in range(len(self.policies))]
        self.router = Router(router, self.replicas, self.policies)
        self.progress = progress
        self._n = n = workload.num_requests
        # NOTE (memory): a Request object exists only while its request is in flight (engine.request)
        self.requests = RequestTable(workload.request_ids, workload.session_ids, workload.num_prompt,
                                     workload.num_output, workload.arrival_us)
        self._in_flight = self.requests.in_flight   # NOTE (speed): arrived requests, without __getitem__
        self._chain, self._next_turn, self._gap = self._arrival_order(closed_loop)
        self.resident = [0] * len(self.policies)
        self.peak_resident = 0
        self.num_finished = 0
        self._tick = max(1, n // 200)
        self._memo: dict[Any, Any] = {}
        self._hybrid = bool(getattr(getattr(cost, "model", None), "is_hybrid", False))
        self._one_chunk = getattr(cost, "prefill_one_chunk", None)   # CostModel's plain-plan pricing
        self.sim = Simulator({FINISH: self._on_finish, PREFILL_DONE: self._on_prefill_done,
                              ARRIVAL: self._on_arrival, SCHEDULE: self._on_schedule})

    # ---- Public API -------------------------------------------------------------------------------
    def run(self) -> RequestTable:
        """Replay every request to completion; returns the requests (index = workload row; iterating gives
        finished Request entities, ``request_frame`` reads the columns)."""
        if self._next_turn is None:        # open loop: every arrival known in advance, fed in order
            self.sim.feed(self.w.arrival_us, ARRIVAL, self._arrive)
        elif self._chain.size:
            first = int(self._chain[0])
            self.sim.schedule(Event(ARRIVAL, -1, first), int(self.w.arrival_us[first]))
        self.sim.run()
        if self.num_finished != len(self.requests):
            raise RuntimeError(f"simulation ended with {len(self.requests) - self.num_finished} unfinished")
        return self.requests

    def prefill_cost(self, plan: Plan, num_reused: int = -1) -> Any:
        """CostModel.prefill, memoized on the plan's shape (``num_reused >= 0`` marks a plain plan of
        in-place reuse + recompute on HBM, keyed cheaply by its span layout)."""
        spans = plan.spans
        plain = num_reused >= 0 and len(spans) <= 2
        # (the span count too: two adjacent RECOMPUTE spans, which a policy may build, price apart from one)
        key: Any = ((plan.num_tokens, num_reused, spans[0].action, len(spans)) if plain
                    else (plan.num_tokens, spans, plan.correction))
        pc = self._memo.get(key)
        if pc is None:
            if len(self._memo) >= _MEMO_MAX:    # NOTE (memory): bounded (it grew by ~300 B per request)
                self._memo.clear()
            chunk = _one_chunk(spans) if plain and self._one_chunk is not None else None
            pc = self._memo[key] = (self.cost.prefill(plan) if chunk is None
                                    else self._one_chunk(plan, chunk[0], chunk[1]))
        return pc

    # ---- Event handlers ---------------------------------------------------------------------------
    def _on_arrival(self, ev: Event, now: int) -> list[tuple[int, Event]]:
        """Closed loop: request ``ev.req`` arrives; the next session head's arrival is chained after it."""
        out = self._arrive(ev.req, now)
        nxt = self._chain_after[ev.req]
        if nxt >= 0:
            out.append((max(now, self.w.arrival_us.item(nxt)), Event(ARRIVAL, -1, nxt)))
        return out

    def _arrive(self, i: int, now: int) -> list[tuple[int, Event]]:
        """Request ``i`` arrives at ``now``: routed and queued; a replica that must re-plan is woken."""
        r = self.requests[i]
        r.arrival_us = now
        r.status = Status.WAITING
        r.view = self.w.view(i)
        k = self.router.pick(r.view, now)
        r.replica = k
        rep = self.replicas[k]
        rep.queue.append(i)
        rep.num_outstanding += 1
        wake = rep.cut(now)
        return [] if wake is None else [(wake, Event(SCHEDULE, k, -1, rep.version))]

    def _on_schedule(self, ev: Event, now: int) -> list[tuple[int, Event]]:
        rep = self.replicas[ev.target]
        if ev.version != rep.version:
            return []
        out: list[tuple[int, Event]] = []
        for j in rep.pop_finished():
            out.extend(self._finish(j, now))
        if rep.queue:
            out.extend(self._start_prefill(rep, rep.queue.popleft(), now))
        elif rep.num_decode:
            out.append((rep.run_decode(now), Event(SCHEDULE, rep.index, -1, rep.version)))
        else:
            rep.go_idle(now)
        return out

    def _on_prefill_done(self, ev: Event, now: int) -> list[tuple[int, Event]]:
        r = self._in_flight[ev.req]
        r.first_token_us = now
        r.status = Status.DECODE
        k = r.replica
        if r.admitted:
            self.policies[k].commit(r.view, now)
            self._note_resident(k)
        return self._finish(ev.req, now) if r.num_output_tokens <= 1 else []

    def _on_finish(self, ev: Event, now: int) -> list[tuple[int, Event]]:
        return self._finish(ev.req, now)

    # ---- Internal helpers -------------------------------------------------------------------------
    def _start_prefill(self, rep: Replica, i: int, now: int) -> list[tuple[int, Event]]:
        r = self._in_flight[i]
        k, view, n = rep.index, r.view, r.num_prompt_tokens
        r.start_us = now
        r.status = Status.PREFILL
        pol = self.policies[k]
        ev0 = pol.stats.evictions
        plan = pol.lookup(view, now)
        if pol.admit(view, plan, now):
            r.admitted = True
            self._note_resident(k)
        else:
            plan, r.uncached = Plan.recompute_all(n), True
        r.num_evictions = pol.stats.evictions - ev0
        reused, rotated, needs_extra = _plan_stats(plan)
        # NOTE: hybrid models: reuse after a non-prefix point still runs the recurrent layers (engine.hybrid_cost)
        needs_extra = needs_extra or (self._hybrid and reused > plan.leading_reuse)
        num_recomputed = n - reused + plan.correction.recompute_tokens
        r.num_reused, r.num_rotated, r.num_recomputed = reused, rotated, num_recomputed
        pc = self.prefill_cost(plan, reused if not needs_extra else -1)
        r.prefill_flops, r.prefill_hbm_bytes = pc.flops, pc.hbm_bytes
        r.cache_read_bytes = pc.cache_read_bytes
        plain = reused == 0 and not needs_extra
        nc = pc if plain else self.prefill_cost(Plan.recompute_all(n), 0)
        r.num_recurrent_tokens, r.attn_layer_s, r.recurrent_layer_s = (pc.recurrent_tokens, pc.attn_layer_s,
                                                                       pc.recurrent_layer_s)
        r.nocache_attn_layer_s, r.nocache_recurrent_layer_s = nc.attn_layer_s, nc.recurrent_layer_s
        num_new = max(1, min(n, num_recomputed))
        extra = 0.0
        if needs_extra:
            # rotation / correction / tier-transfer time beyond a plain chunked prefill of num_new tokens
            extra = max(0.0, pc.time_s - self.cost.step_time(((num_new, n - num_new),), 0, 0))
        watts = self.cost.busy_watts
        full = None if plain else rep.prefill_share(n, n)       # before this prefill changes the batch
        end, finishes, share = rep.run_prefill(now, n, num_new, extra, i, r.num_output_tokens)
        r.prefill_joules = watts * share
        r.nocache_prefill_joules = r.prefill_joules if full is None else watts * full
        r.prefix_prefill_joules = r.nocache_prefill_joules      # replay fills in the baseline's own
        out = [(t, Event(FINISH, k, j)) for t, j in finishes]
        out.append((end, Event(PREFILL_DONE, k, i)))
        out.append((end, Event(SCHEDULE, k, -1, rep.version)))
        return out

    def _finish(self, i: int, now: int) -> list[tuple[int, Event]]:
        r = self._in_flight[i]
        k = r.replica
        if r.admitted:
            self.policies[k].release(r.view, now)
        r.finish_us = now
        r.status = Status.FINISHED
        r.view = None
        self.requests.finish(i)
        self.replicas[k].num_outstanding -= 1
        self.num_finished += 1
        if self.progress is not None and (self.num_finished % self._tick == 0
                                          or self.num_finished == len(self.requests)):
            self.progress(self.num_finished, len(self.requests))
        if self._next_turn is None:
            return []
        j = self._next_turn[i]
        if j < 0:
            return []
        return [(max(now, r.arrival_us + self._gap[i]), Event(ARRIVAL, -1, j))]

    def _note_resident(self, k: int) -> None:
        total = self.policies[k].usage().total
        self.resident[k] = total
        s = sum(self.resident)
        if s > self.peak_resident:
            self.peak_resident = s

    def _arrival_order(self, closed_loop: bool) -> tuple[np.ndarray, list[int] | None, list[int] | None]:
        """Open loop: every request chained in arrival order. Closed loop: only each session's first
        request is chained; later turns are released by the previous turn's finish.

        NOTE (memory): open loop keeps no per-request list (request ``i``'s successor is ``i + 1``, no
        turn is released by a finish): four lists of boxed ints cost ~100 MB per simulation at 10^6."""
        n = self.w.num_requests
        if not closed_loop:
            self._chain_after = None
            return np.arange(n, dtype=np.int64), None, None
        next_turn = np.full(n, -1, np.int64)
        gap = np.zeros(n, np.int64)
        last: dict[Any, int] = {}
        heads = []
        sess = self.w.session_ids
        for i, s in enumerate(sess.codes.tolist() if isinstance(sess, Labels) else sess):
            p = last.get(s)
            if p is None:
                heads.append(i)
            else:
                next_turn[p] = i
                gap[p] = int(self.w.arrival_us[i]) - int(self.w.arrival_us[p])
            last[s] = i
        chain = np.asarray(heads, np.int64)
        after = np.full(n, -1, np.int64)
        if chain.size > 1:
            after[chain[:-1]] = chain[1:]
        self._chain_after = after.tolist()
        return chain, next_turn.tolist(), gap.tolist()


def _one_chunk(spans: tuple) -> tuple[int, int] | None:
    """(tokens, start) of the only RECOMPUTE span of a plain plan's one or two spans, (0, 0) when none is;
    None when both are RECOMPUTE (two prefill chunks: CostModel.prefill prices them)."""
    a = spans[0]
    b = spans[1] if len(spans) > 1 else None
    if a.action == RECOMPUTE:
        return None if b is not None and b.action == RECOMPUTE else (a.end - a.start, a.start)
    if b is not None and b.action == RECOMPUTE:
        return b.end - b.start, b.start
    return 0, 0


def _plan_stats(plan: Plan) -> tuple[int, int, bool]:
    """(reused tokens, rotated tokens, needs extra time: rotation / correction / non-HBM tier)."""
    reused = rotated = 0
    extra = plan.correction != NO_CORRECTION
    for s in plan.spans:
        if s.action != RECOMPUTE:
            reused += s.end - s.start
            if s.action == ROTATED:
                rotated += s.end - s.start
                extra = True
        if s.tier:
            extra = True
    return reused, rotated, extra


__all__ = ["ServingModel", "Workload", "Phase"]
