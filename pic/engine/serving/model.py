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

from pic.engine.cost import CostModel
from pic.engine.cost_fns import one_chunk_terms_np, prefill_shares_fn
from pic.engine.events import Event, EventKind
from pic.engine.loop import VOID, Simulator
from pic.engine.plan import NO_CORRECTION, Action, Plan
from pic.engine.request import RequestTable
from pic.engine.serving.plans import _one_chunk, _plan_stats, arrival_order
from pic.engine.serving.replica import Phase, Replica
from pic.engine.serving.router import Router
from pic.engine.serving.shares import ShareBook, TermsBook
from pic.engine.serving.timeline import run_two_pass

INF = float("inf")
FINISH, PREFILL_DONE, ARRIVAL, SCHEDULE = (EventKind.FINISH, EventKind.PREFILL_DONE, EventKind.ARRIVAL,
                                           EventKind.SCHEDULE)
REUSE, RECOMPUTE = Action.REUSE, Action.RECOMPUTE
PREFILL, WAKE = Phase.PREFILL, Phase.WAKE
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
                 closed_loop: bool = False, progress: Callable[[int, int], None] | None = None,
                 lean: bool = False) -> None:
        self.w = workload
        self.policies = list(policies)
        self.cost = cost
        self.replicas = [Replica(i, cost, token_budget) for i in range(len(self.policies))]
        self.router = Router(router, self.replicas, self.policies)
        self.progress = progress
        self._n = n = workload.num_requests
        # NOTE (memory): one flat column per request field, written as the values are made (engine.request)
        self.requests = RequestTable(workload.request_ids, workload.session_ids, workload.num_prompt,
                                     workload.num_output, workload.arrival_us)
        c = self.requests.cols
        # NOTE (speed): the columns the handlers write, bound once (each write is one array item assignment)
        self._first_token, self._finish_us = c["first_token_us"], c["finish_us"]
        self._num_prompt, self._num_output = c["num_prompt_tokens"], c["num_output_tokens"]
        self._arrival, self._replica, self._admitted = c["arrival_us"], c["replica"], c["admitted"]
        self._prefill_cols = tuple(c[f] for f in (
            "start_us", "uncached", "num_evictions", "num_reused", "num_rotated", "num_recomputed", "prefill_flops",
            "prefill_hbm_bytes", "cache_read_bytes", "num_recurrent_tokens", "attn_layer_s", "recurrent_layer_s",
            "nocache_attn_layer_s", "nocache_recurrent_layer_s", "prefill_joules", "nocache_prefill_joules",
            "prefix_prefill_joules"))
        self._views: dict[int, Any] = {}     # request index -> RequestView while in flight
        self._chain, self._next_turn, self._gap, self._chain_after = arrival_order(workload, closed_loop)
        self.resident = [0] * len(self.policies)
        # (each policy's usage().total: CachePolicy.resident_bytes, or through usage() for another object)
        self._resident_of = [getattr(p, "resident_bytes", None) or (lambda p=p: p.usage().total) for p in self.policies]
        self.peak_resident = 0
        self.num_finished = 0
        self._tick = max(1, n // 200)
        self._memo: dict[Any, Any] = {}
        self._hybrid = bool(getattr(getattr(cost, "model", None), "is_hybrid", False))
        self._one_chunk = getattr(cost, "prefill_one_chunk", None)   # CostModel's plain-plan pricing
        self._terms = getattr(cost, "one_chunk_terms", None)          # ... its values as a tuple (or None)
        self._tmemo: dict[Any, tuple] = {}
        self._full: dict[int, tuple] = {}     # one_chunk_terms of a full recompute, by token count (an int key)
        self._view = workload.view
        # each policy's fused lookup + admit of an exact-prefix plan (PrefixCache.start_prefix), or None (also where
        # lookup or admit is replaced on the policy itself: by a caller watching them, e.g. benchmarks' plan digests)
        self._starts = [None if {"lookup", "admit"} & getattr(p, "__dict__", {}).keys()
                        else getattr(p, "start_prefix", None) for p in self.policies]
        self._watts = cost.busy_watts
        # the counterfactual full prefills, priced in batches (None: one at a time, Replica.prefill_share)
        # NOTE (speed): ``lean``: a baseline replay read for its reuse, prefill joules and timeline only (engine.replay):
        # no counterfactual full prefill (nocache joules: the prefill's own), an exact-prefix plan's columns unpriced
        self._lean = lean
        shares = prefill_shares_fn(cost) if isinstance(cost, CostModel) and not lean else None
        self._book = None if shares is None else ShareBook(shares, cost.busy_watts, self._prefill_cols[15:17])
        # ... and an exact-prefix plan's priced columns (None: as it starts)
        terms = one_chunk_terms_np(cost) if shares is not None and self._terms is not None else None
        self._tbook = None if terms is None else TermsBook(terms, tuple(self._prefill_cols[k] for k in (6, 7, 8, 10, 12)),
                                                           self._num_prompt, self._prefill_cols[3])
        self._tmarks = None if self._tbook is None else self._tbook.marks
        # NOTE (speed): with one replica, its phase end is the Simulator's timer (one pending event, replaced
        # by a newer one): a prefill's PREFILL_DONE, whose handler then sets the SCHEDULE at the same instant
        # (the order the heap gave: FINISH, PREFILL_DONE, ARRIVAL, SCHEDULE at one time), or a decode phase's
        # SCHEDULE, which a cut replaces (its version was then old): no heap entry per phase, no stale one
        # dispatched. Several replicas: heap events (their SCHEDULEs' ties go by push order).
        self._one = len(self.replicas) == 1
        # NOTE (speed): with one replica, a policy whose commit never raises its resident bytes (it stores at most
        # what admit reserved: CachePolicy ``commit_never_grows``) is not asked for them after a commit (no new peak)
        self._note_commit = [not (self._one and getattr(p, "commit_never_grows", False)) for p in self.policies]
        # ... and one that keeps the most of its resident bytes at the end of an admission (``peak_bytes``: prefix,
        # block-hash) is not asked after one either: its peak is read at the end (run). (Admissions and, for the
        # others, commits are where the peak is sampled; with several replicas the per-replica sum needs them all.)
        self._note_admit = [self._note_commit[k] or not hasattr(p, "peak_bytes") for k, p in enumerate(self.policies)]
        # NOTE (speed): one replica, no observer (_fold): an event of the replica's own that nothing else can
        # precede (no arrival nor heap event due at or before it) is run by the handler that would queue it,
        # counted as the loop counts one: the SCHEDULE at an arrival's wake (open loop), a prefill's PREFILL_DONE
        # and the SCHEDULE at its end, a decode phase's end. The same events in the same order, fewer loop turns.
        self._fold = self._fold_in = False    # (run: with one replica and no observer; _fold_in: open loop too)
        self._open = self._next_turn is None
        self._next_at: float = INF      # open loop: the next arrival's time (closed loop: in the heap)
        self.sim = Simulator({FINISH: self._on_finish, PREFILL_DONE: self._on_prefill_done,
                              ARRIVAL: self._on_arrival, SCHEDULE: self._on_schedule},
                             timer_kinds=(PREFILL_DONE, SCHEDULE) if self._one else ())

    # ---- Public API -------------------------------------------------------------------------------
    def run(self) -> RequestTable:
        """Replay every request to completion; returns the requests (index = workload row; iterating gives
        Request copies, ``request_frame`` reads the columns)."""
        self._fold = self._one and not self.sim.observers
        self._fold_in = self._fold and self._open
        self._heap = self.sim._heap
        for k, p in enumerate(self.policies):
            if not self._note_admit[k] and p.peak_bytes:     # (admitted before: its peak is not this run's)
                self._note_admit[k] = True
        if not run_two_pass(self):         # (one replica, answers known from the arrival order: engine.serving.timeline)
            if self._next_turn is None:    # open loop: every arrival known in advance, fed in order
                if self._n:
                    self._next_at = self._arrival[0]
                self.sim.feed(self.w.arrival_us, ARRIVAL, self._arrive)
            elif self._chain.size:
                first = int(self._chain[0])
                self.sim.schedule(Event(ARRIVAL, -1, first), int(self.w.arrival_us[first]))
            self.sim.run()
        for k, p in enumerate(self.policies):
            if not self._note_admit[k] and p.peak_bytes > self.peak_resident:     # (one replica)
                self.peak_resident = p.peak_bytes
        if self._book is not None:
            self._book.flush()
        if self._tbook is not None:
            self._tbook.flush()
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

    def _plain_terms(self, key: tuple, num_tokens: int, num_new: int, start: int) -> tuple:
        """CostModel.one_chunk_terms of a plain plan (``prefill_one_chunk``'s values), remembered by
        :meth:`prefill_cost`'s ``key`` for it."""
        if len(self._tmemo) >= _MEMO_MAX:
            self._tmemo.clear()
        t = self._tmemo[key] = self._terms(num_tokens, num_new, start)
        return t

    def _full_terms(self, num_tokens: int) -> tuple:
        """CostModel.one_chunk_terms of ``Plan.recompute_all(num_tokens)``, remembered by its token count."""
        if len(self._full) >= _MEMO_MAX:
            self._full.clear()
        t = self._full[num_tokens] = self._terms(num_tokens, num_tokens, 0)
        return t

    # ---- Event handlers ---------------------------------------------------------------------------
    def _on_arrival(self, ev: Event, now: int) -> list[tuple[int, Event]]:
        """Closed loop: request ``ev.req`` arrives; the next session head's arrival is chained after it."""
        i = ev[2]
        out = self._arrive(i, now) or []
        nxt = self._chain_after[i]
        if nxt >= 0:
            out.append((max(now, self.w.arrival_us.item(nxt)), (ARRIVAL, -1, nxt, 0)))
        return out

    def _arrive(self, i: int, now: int) -> list[tuple[int, Event]] | None:
        """Request ``i`` arrives at ``now``: routed and queued; a replica that must re-plan is woken."""
        self._arrival[i] = now
        if self._open:
            self._next_at = self._arrival[i + 1] if i + 1 < self._n else INF
        view = self._views[i] = self._view(i)
        replicas = self.replicas
        k = 0 if self._one else self.router.pick(view, now)
        self._replica[i] = k
        rep = replicas[k]
        rep.queue.append(i)
        rep.num_outstanding += 1
        ph = rep.phase
        if ph == PREFILL or ph == WAKE:       # (Replica.cut's answer there: nothing to do)
            return None
        wake = rep.cut(now)
        if wake is None:
            return None
        if self._fold_in and wake < self._next_at and (not self._heap or self._heap[0][0] > wake):
            # (open loop: the feed gives every arrival, the next at _next_at; run here: _fold, _quiet)
            self.sim.num_events += 1
            self.sim.now = wake
            return self._on_schedule((SCHEDULE, k, -1, rep.version), wake)
        return [(wake, (SCHEDULE, k, -1, rep.version))]

    def _on_schedule(self, ev: Event, now: int) -> Any:
        rep = self.replicas[ev[1]]
        if ev[3] != rep.version:     # superseded (a cut re-planned the phase): not an event (loop.VOID)
            return VOID
        while True:
            dec = rep.decoding
            out = None
            if dec and dec[0][0] <= rep.steps:
                for j in rep.pop_finished():
                    follow = self._finish(j, now)
                    if follow:
                        if out is None:
                            out = follow
                        else:
                            out.extend(follow)
            heap = self._heap
            if rep.queue:
                i = rep.queue.popleft()
                end, finishes = self._start_prefill(rep, i, now)
                if out is None and self._fold and not finishes:     # (its PREFILL_DONE alone)
                    if end < self._next_at and (not heap or heap[0][0] > end):   # run here (_fold), with the
                        sim = self.sim                                           # SCHEDULE after it
                        sim.num_events += 1
                        sim.now = now = end
                        out = self._prefill_done(i, end)
                        if out is None:
                            sim.num_events += 1
                            continue
                        out.append((end, (SCHEDULE, rep.index, -1, rep.version)))
                        return out
                started = self._started(rep, i, end, finishes)
                if out is None:
                    return started
                out.extend(started)
            elif rep.num_decode:
                end = rep.run_decode(now)
                if out is None and self._fold and end < self._next_at and (not heap or heap[0][0] > end):
                    sim = self.sim      # its SCHEDULE, run here (_fold: the next turn)
                    sim.num_events += 1
                    sim.now = now = end
                    continue
                item = (end, (SCHEDULE, rep.index, -1, rep.version))
                if out is None:
                    return [item]
                out.append(item)
            else:
                rep.go_idle(now)
            return out

    def _on_prefill_done(self, ev: Event, now: int) -> list[tuple[int, Event]] | None:
        out = self._prefill_done(ev[2], now)
        if self._one:      # the replica's SCHEDULE at the prefill's end (its timer's next event)
            if out is None and self._fold and now < self._next_at and (not self._heap or self._heap[0][0] > now):
                self.sim.num_events += 1        # (run here: _fold)
                return self._on_schedule((SCHEDULE, 0, -1, self.replicas[0].version), now)
            item = (now, (SCHEDULE, 0, -1, self.replicas[0].version))
            if out is None:
                return [item]
            out.append(item)
        return out

    def _prefill_done(self, i: int, now: int) -> list[tuple[int, Event]] | None:
        """Request ``i``'s first token at ``now``: its KV committed, finished if it wanted one token."""
        self._first_token[i] = now
        if self._admitted[i]:
            k = self._replica[i]
            self.policies[k].commit(self._views[i], now)
            if self._note_commit[k]:
                self._note_resident(k)
        return self._finish(i, now) if self._num_output[i] <= 1 else None

    def _on_finish(self, ev: Event, now: int) -> list[tuple[int, Event]] | None:
        return self._finish(ev[2], now)

    # ---- Internal helpers -------------------------------------------------------------------------
    def _started(self, rep: Replica, i: int, end: int, finishes: list[tuple[int, int]]) -> list[tuple[int, Event]]:
        """The events of request ``i``'s prefill on ``rep`` ending at ``end`` (:meth:`_start_prefill`'s answer)."""
        # (events as plain (kind, target, req, version) tuples: engine.events)
        k = rep.index
        if finishes:
            out = [(t, (FINISH, k, j, 0)) for t, j in finishes]
            out.append((end, (PREFILL_DONE, k, i, 0)))
            if not self._one:
                out.append((end, (SCHEDULE, k, -1, rep.version)))
            return out
        if self._one:      # (the SCHEDULE at ``end`` follows the PREFILL_DONE: _on_prefill_done)
            return [(end, (PREFILL_DONE, k, i, 0))]
        return [(end, (PREFILL_DONE, k, i, 0)), (end, (SCHEDULE, k, -1, rep.version))]

    def _start_prefill(self, rep: Replica, i: int, now: int) -> tuple[int, list[tuple[int, int]]]:
        """Request ``i``'s prefill started on ``rep`` at ``now``: its end and the decoders finishing during it
        (``(finish_us, request)``)."""
        (c_start, c_uncached, c_evictions, c_reused, c_rotated, c_recomputed, c_flops, c_hbm, c_read, c_rec_tokens,
         c_attn, c_rec, c_nc_attn, c_nc_rec, c_joules, c_nc_joules, c_prefix_joules) = self._prefill_cols
        k, view, n = rep.index, self._views[i], self._num_prompt[i]
        c_start[i] = now
        pol = self.policies[k]
        ev0 = pol.stats.evictions
        start, plan = self._starts[k], None
        if start is not None:
            # NOTE (speed): an exact-prefix policy's lookup and admit in one call, its plan Plan.from_prefix(m, r)
            # not made (but for a full hit: one REUSE span, priced by the general path below)
            r, m = start(view, now), view.num_tokens
            if r >= 0:
                self._admitted[i] = True
                if self._note_admit[k]:
                    self._note_resident(k)
                if r >= m:
                    plan = Plan.from_prefix(m, r)
            else:
                r, m = 0, n                       # Plan.recompute_all(n)
                c_uncached[i] = True
        else:
            plan = pol.lookup(view, now)
            if pol.admit(view, plan, now):
                self._admitted[i] = True
                if self._note_admit[k]:
                    self._note_resident(k)
            else:
                plan = Plan.recompute_all(n)
                c_uncached[i] = True
            spans = plan.spans
            a = spans[0]
            if self._terms is not None and plan.correction is NO_CORRECTION and not a.tier:
                if len(spans) == 1 and a.action == RECOMPUTE:       # (a full recompute: r = 0)
                    r, m, plan = 0, plan.num_tokens, None
                elif len(spans) == 2 and a.action == REUSE and spans[1].action == RECOMPUTE and not spans[1].tier:
                    r, m, plan = a.end, plan.num_tokens, None         # (an exact-prefix plan: [0, r) reused)
        c_evictions[i] = pol.stats.evictions - ev0
        if plan is not None or self._terms is None:
            if plan is None:
                plan = Plan.from_prefix(m, r)
            spans = plan.spans
            reused, rotated, needs_extra = _plan_stats(plan)
            # NOTE: hybrid models: reuse after a non-prefix point still runs the recurrent layers (engine.hybrid_cost)
            needs_extra = needs_extra or (self._hybrid and reused > plan.leading_reuse)
            num_recomputed = n - reused + plan.correction.recompute_tokens
            c_reused[i] = reused
            c_rotated[i] = rotated
            c_recomputed[i] = num_recomputed
            plain = reused == 0 and not needs_extra
            t = None
            if self._terms is not None and not needs_extra and len(spans) <= 2:
                # NOTE (speed): a plain plan priced as prefill_one_chunk's values in a tuple (engine.cost), remembered
                # by prefill_cost's key: no PrefillCost built per plan shape (its recurrent fields are zeros, as the
                # columns start). (The key tells two RECOMPUTE spans, which prefill prices, from one chunk.)
                key = (plan.num_tokens, reused, spans[0].action, len(spans))
                t = self._tmemo.get(key)
                if t is None:
                    chunk = _one_chunk(spans)
                    if chunk is not None:
                        t = self._plain_terms(key, plan.num_tokens, chunk[0], chunk[1])
            if t is not None:
                flops, hbm, _, read, attn_s, _ = t
                # (the recurrent columns stay at their zeros)
                if plain:
                    nc_attn = attn_s
                else:
                    nc = self._full.get(n)
                    nc_attn = (nc if nc is not None else self._full_terms(n))[4]
            else:
                pc = self.prefill_cost(plan, reused if not needs_extra else -1)
                flops, hbm, read = pc.flops, pc.hbm_bytes, pc.cache_read_bytes
                attn_s = pc.attn_layer_s
                nc = pc if plain else self.prefill_cost(Plan.recompute_all(n), 0)
                nc_attn = nc.attn_layer_s
                c_rec_tokens[i] = pc.recurrent_tokens
                c_rec[i] = pc.recurrent_layer_s
                c_nc_rec[i] = nc.recurrent_layer_s
            c_flops[i] = flops
            c_hbm[i] = hbm
            c_read[i] = read
            c_attn[i] = attn_s
            c_nc_attn[i] = nc_attn
            num_new = num_recomputed if num_recomputed < n else n      # max(1, min(n, num_recomputed))
            if num_new < 1:
                num_new = 1
            extra = 0.0
            if needs_extra:
                # rotation / correction / tier-transfer time beyond a plain chunked prefill of num_new tokens
                extra = max(0.0, pc.time_s - self.cost.step_time(((num_new, n - num_new),), 0, 0))
            full = None if plain or self._lean else self._full_share(rep, i, n)   # before this prefill changes the batch
        elif not r:
            # NOTE (speed): a full recompute (a miss, an unadmitted request), the general path below specialised:
            # _plan_stats gives (0, 0, False), so reused / rotated stay at their zeros, every token is recomputed,
            # the plan is plain (its no-cache attention its own, no counterfactual prefill) and priced as one chunk
            t = self._full.get(m)      # (the one span is [0, num_tokens): a Plan covers it)
            if t is None:
                t = self._full_terms(m)
            flops, hbm, _, read, attn_s, _ = t
            c_recomputed[i] = n
            c_flops[i] = flops
            c_hbm[i] = hbm
            c_read[i] = read
            c_attn[i] = attn_s
            c_nc_attn[i] = attn_s
            num_new = n if n > 1 else 1      # max(1, min(n, n))
            extra, full = 0.0, None
        else:
            # NOTE (speed): an exact-prefix plan (Plan.from_prefix: reuse [0, r) in place, recompute [r, m)), the
            # general path below specialised: _plan_stats gives (r, 0, False), the leading reuse is all the reuse
            # (no hybrid extra), the plan is plain but not a full recompute, its one chunk ``(m - r, r)``
            num_new = n - r
            c_reused[i] = r
            c_recomputed[i] = num_new
            if num_new < 1:
                num_new = 1
            # (priced as one chunk, not looked up in _tmemo: a prefix plan's (tokens, reused) pair is seldom seen
            # twice; Mooncake conversation: never)
            if self._tbook is not None and not self._lean:
                if m == n:      # (marked: Plan.from_prefix(n, r), r its reused column, priced at the end)
                    self._tmarks[i] = 1
                else:
                    self._tbook.add(i, m, m - r, r, n)
            elif not self._lean:
                flops, hbm, _, read, attn_s, _ = self._terms(m, m - r, r)
                nc = self._full.get(n)
                c_flops[i] = flops
                c_hbm[i] = hbm
                c_read[i] = read
                c_attn[i] = attn_s
                c_nc_attn[i] = (nc if nc is not None else self._full_terms(n))[4]
            extra = 0.0
            book = self._book               # (_full_share, inlined: before this prefill changes the batch)
            full = (rep.prefill_share(n, n) if book is None else book.add(rep, i, n)) if not self._lean else None
        end, finishes, share = rep.run_prefill(now, n, num_new, extra, i, self._num_output[i])
        watts = self._watts
        joules = watts * share
        c_joules[i] = joules
        if full is None or full >= 0.0:      # (-1.0: the ShareBook writes them)
            nocache = joules if full is None else watts * full
            c_nc_joules[i] = nocache
            c_prefix_joules[i] = nocache      # replay fills in the baseline's own
        return end, finishes

    def _full_share(self, rep: Replica, i: int, n: int) -> float:
        """``rep.prefill_share(n, n)``, or -1.0 where the ShareBook prices it later (and writes its joules)."""
        return rep.prefill_share(n, n) if self._book is None else self._book.add(rep, i, n)

    def _finish(self, i: int, now: int) -> list[tuple[int, Event]] | None:
        k = self._replica[i]
        view = self._views.pop(i)
        if self._admitted[i]:
            self.policies[k].release(view, now)
        self._finish_us[i] = now
        self.replicas[k].num_outstanding -= 1
        self.num_finished += 1
        if self.progress is not None and (self.num_finished % self._tick == 0
                                          or self.num_finished == self._n):
            self.progress(self.num_finished, self._n)
        if self._next_turn is None:
            return None
        j = self._next_turn[i]
        if j < 0:
            return None
        return [(max(now, self._arrival[i] + self._gap[i]), (ARRIVAL, -1, j, 0))]

    def _note_resident(self, k: int) -> None:
        total = self._resident_of[k]()
        res = self.resident
        res[k] = total
        s = total if self._one else sum(res)     # (sum of one: 0 + total, the same value)
        if s > self.peak_resident:
            self.peak_resident = s


__all__ = ["ServingModel", "Workload", "Phase"]
