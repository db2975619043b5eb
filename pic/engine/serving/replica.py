"""One serving replica's batch state, advanced phase by phase in closed form.

A replica is always in one phase: IDLE, PREFILL (one request's chunked prefill with the decode batch
riding along; never interrupted), DECODE (decode-only until the earliest decode finish; an arrival cuts
it at the next step boundary) or WAKE (a SCHEDULE is already pending). The state below describes the
batch as of the end of the current phase (``busy_until``).

Decode bookkeeping is O(1) per step count: ``steps`` counts scheduler steps; a decoding request that
joined at step ``s_j`` with prompt ``N_j`` has context ``N_j + 1 + (s - s_j)`` at step ``s``, so the
batch context is ``ctx_base + num_decode * s`` with ``ctx_base = sum(N_j + 1 - s_j)``. Decoders sit in
a heap keyed by the step count at which they finish.

Inter-token latencies come from the same closed form, without a per-token event: every step emits one
token per decoding request, so the ITL of each of the ``B`` decoders in a step is that step's duration.
A decode-only phase of ``n`` steps is an arithmetic series ``d0 + Δ·j`` (``Δ = per_token·B``), one prefill
chunk step is one value; each is recorded as one segment ``(d0, Δ, n, B)`` in :attr:`Replica.itl`.
"""

from __future__ import annotations

import itertools
from collections import deque
from enum import IntEnum
from heapq import heappop, heappush
from math import ceil
from typing import Any

from pic.engine.serving.itl import ItlLog
from pic.engine.serving.scheduler import decode_boundary


class Phase(IntEnum):
    IDLE = 0
    PREFILL = 1
    DECODE = 2
    WAKE = 3


class Replica:
    """Batch state of one replica (its caches live beside it in the ServingModel)."""

    def __init__(self, index: int, cost: Any, token_budget: int) -> None:
        self.index = index
        self.cost = cost
        self.token_budget = token_budget
        self.queue: deque[int] = deque()
        self.decoding: list[tuple[int, int, int, int]] = []   # (finish_step, seq, req_idx, ctx_term)
        self.num_decode = 0
        self.ctx_base = 0
        self.steps = 0
        self.phase = Phase.IDLE
        self.version = 0
        self.busy_until = 0
        self.busy_us = 0
        self.num_outstanding = 0
        self._seq = itertools.count()
        self._decode_phase: tuple[int, int, float, float, int, int] | None = None
        #: ITL segments (first step s, step increment s, number of steps, decoders per step), in order
        self.itl = ItlLog()
        self._itl_pos = -1          # the running decode phase's segment in ``itl`` (a cut shortens it)
        self._itl_a = self.itl._a   # (its float64 array: run_decode appends to it in place)
        # NOTE (speed): bound once; the decode coefficients per batch size are the cost model's, remembered
        fn = getattr(cost, "prefill_step_fn", None)
        self._prefill_step = cost.prefill_step if fn is None else fn()
        self._coeffs: dict[int, tuple[float, float]] = {}

    # ---- Public API -------------------------------------------------------------------------------
    def pop_finished(self) -> list[int]:
        """Request indices whose last decode step is done (as of ``steps``)."""
        out = []
        dec, s = self.decoding, self.steps
        while dec and dec[0][0] <= s:
            _, _, idx, term = heappop(dec)
            self.num_decode -= 1
            self.ctx_base -= term
            out.append(idx)
        return out

    def run_prefill(self, now: int, num_tokens: int, num_new: int, extra_s: float,
                    req_idx: int, num_output: int) -> tuple[int, list[tuple[int, int]], float]:
        """Start a chunked prefill of ``num_new`` tokens (the last ``num_new`` of ``num_tokens``) at
        ``now``. Returns (end_us, [(finish_us, req_idx)] of decoders finishing during it, share_s): share_s
        is the request's part of the busy seconds of the steps it ran in (``CostModel.prefill_step``; the
        extra seconds are all its own). The request joins the decode batch at the end when it has more
        than one output token."""
        budget, step, dec = self.token_budget, self._prefill_step, self.decoding
        s, nd, base = self.steps, self.num_decode, self.ctx_base
        num_cached = num_tokens - num_new
        t, done, finishes, share = extra_s, 0, [], extra_s
        while done < num_new:
            chunk, cap = num_new - done, budget - nd        # min(num_new - done, max(1, budget - nd))
            if cap < chunk:
                chunk = cap if cap > 1 else 1
            dt, sh = step(chunk, num_cached + done, nd, base + nd * s if nd else 0)
            share += sh
            if nd:   # every decoder gets one token at the end of this step: ITL = the step (+ extra_s first)
                d = dt + extra_s if done == 0 else dt
                a = self._itl_a     # ItlLog.add_step, inlined
                if a and a[-3] == 0.0 and a[-4] == d and a[-1] == nd:
                    a[-2] += 1
                else:
                    a.fromlist([d, 0.0, 1, nd])
            t += dt
            done += chunk
            s += 1
            while dec and dec[0][0] <= s:
                _, _, idx, term = heappop(dec)
                nd -= 1
                base -= term
                finishes.append((now + ceil(t * 1e6 - 1e-6), idx))
        if num_output > 1:     # joins the decode batch (its context term: prompt + 1 - join step)
            term = num_tokens + 1 - s
            heappush(dec, (s + num_output - 1, next(self._seq), req_idx, term))
            nd += 1
            base += term
        self.steps, self.num_decode, self.ctx_base = s, nd, base
        end = now + ceil(t * 1e6 - 1e-6)      # to_us
        self.phase = PREFILL
        self.version += 1
        self.busy_us += end - now
        self.busy_until = end
        return end, finishes, share

    def prefill_share(self, num_tokens: int, num_new: int) -> float:
        """``share_s`` :meth:`run_prefill` would give a prefill of ``num_new`` of ``num_tokens`` tokens
        started now (no extra seconds), without changing anything: the counterfactual full prefill of
        a request, priced in the batch it actually met."""
        step, share = self._prefill_step, 0.0
        for chunk, cached, nd, ctx in self.prefill_steps(num_tokens, num_new):
            share += step(chunk, cached, nd, ctx)[1]
        return share

    def prefill_steps(self, num_tokens: int, num_new: int) -> list[tuple[int, int, int, int]]:
        """The steps :meth:`prefill_share` prices, in order: ``(chunk, cached tokens, decoders, their context)``
        (``prefill_step``'s arguments), without changing anything."""
        budget = self.token_budget
        s, nd, base = self.steps, self.num_decode, self.ctx_base
        fins: list[tuple[int, int, int, int]] | None = None
        done, num_cached, out = 0, num_tokens - num_new, []
        while done < num_new:
            chunk, cap = num_new - done, budget - nd        # min(num_new - done, max(1, budget - nd))
            if cap < chunk:
                chunk = cap if cap > 1 else 1
            out.append((chunk, num_cached + done, nd, base + nd * s if nd else 0))
            done += chunk
            s += 1
            if done >= num_new:
                break
            if fins is None:
                # NOTE (speed): the decoders' finish steps matter only from a second chunk on (most prefills
                # fit one step); a copy of the decode heap gives the few finishing within the prefill's steps
                # without sorting the whole batch (every decoder with finish step <= s leaves, in any order)
                fins = self.decoding.copy()
            while fins and fins[0][0] <= s:
                term = heappop(fins)[3]
                nd -= 1
                base -= term
        return out

    def run_decode(self, now: int) -> int:
        """Start a decode-only phase that lasts until the earliest decode finish; returns its end µs."""
        s, nd = self.steps, self.num_decode
        n = self.decoding[0][0] - s
        co = self._coeffs.get(nd)
        if co is None:
            co = self._coeffs[nd] = self.cost.decode_step_coeffs(nd)
        fixed, per = co
        ctx = self.ctx_base + nd * s
        # decode_time and to_us, inlined (the same operations)
        end = now + ceil((n * fixed + per * (n * ctx + nd * n * (n - 1) / 2)) * 1e6 - 1e-6)
        self._decode_phase = (now, s, fixed, per, ctx, n)
        a = self._itl_a         # ItlLog.append, inlined
        self._itl_pos = len(a)
        a.fromlist([fixed + per * ctx, per * nd, n, nd])
        self.steps = s + n
        self.phase = DECODE
        self.version += 1
        self.busy_us += end - now
        self.busy_until = end
        return end

    def cut(self, now: int) -> int | None:
        """An arrival at ``now``: if a decode-only phase is running, end it at the next step boundary
        (returns that µs, a new SCHEDULE is owed); if idle, wake now. None = nothing to do."""
        phase = self.phase
        if phase == IDLE:
            self.phase = WAKE
            self.version += 1
            self.busy_until = now
            return now
        if phase != DECODE or now >= self.busy_until:
            return None
        start, s0, fixed, per, ctx, n = self._decode_phase
        nd = self.num_decode
        m, secs = decode_boundary(fixed, per, nd, ctx, (now - start) / 1e6, n)
        end = start + ceil(secs * 1e6 - 1e-6)      # to_us
        if end >= self.busy_until:
            return None
        self.busy_us -= self.busy_until - end
        self.steps = s0 + m
        if m:               # ItlLog.set_count, inlined (the running phase's segment is the newest)
            self._itl_a[self._itl_pos + 2] = m
        else:
            self.itl.set_count(self._itl_pos, 0)
        self.phase = WAKE
        self.version += 1
        self.busy_until = end
        return end

    def go_idle(self, now: int) -> None:
        self.phase = IDLE
        self.version += 1
        self.busy_until = now


IDLE, PREFILL, DECODE, WAKE = Phase.IDLE, Phase.PREFILL, Phase.DECODE, Phase.WAKE
