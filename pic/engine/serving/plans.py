"""What the serving model reads of a Plan's spans to price it, and its workload's arrival order
(engine.serving.model)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pic.engine.plan import NO_CORRECTION, Action, Plan
from pic.engine.request import Labels

ROTATED, RECOMPUTE = Action.REUSE_ROTATED, Action.RECOMPUTE


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
    corr = plan.correction
    extra = corr is not NO_CORRECTION and corr != NO_CORRECTION   # (identity first: no dataclass __eq__)
    for s in plan.spans:
        a = s.action
        if a != RECOMPUTE:
            reused += s.end - s.start
            if a == ROTATED:
                rotated += s.end - s.start
                extra = True
        if s.tier:
            extra = True
    return reused, rotated, extra


def arrival_order(w: Any, closed_loop: bool) -> tuple[np.ndarray, list[int] | None, list[int] | None, list[int] | None]:
    """``(chain, next_turn, gap, chain_after)`` of a Workload ``w``. Open loop: every request chained in arrival
    order. Closed loop: only each session's first request is chained (``chain_after[i]``: the head after head
    ``i``); later turns are released by the previous turn's finish (``next_turn``, ``gap``).

    NOTE (memory): open loop keeps no per-request list (request ``i``'s successor is ``i + 1``, no
    turn is released by a finish): four lists of boxed ints cost ~100 MB per simulation at 10^6."""
    n = w.num_requests
    if not closed_loop:
        return np.arange(n, dtype=np.int64), None, None, None
    next_turn = np.full(n, -1, np.int64)
    gap = np.zeros(n, np.int64)
    last: dict[Any, int] = {}
    heads = []
    sess = w.session_ids
    for i, s in enumerate(sess.codes.tolist() if isinstance(sess, Labels) else sess):
        p = last.get(s)
        if p is None:
            heads.append(i)
        else:
            next_turn[p] = i
            gap[p] = int(w.arrival_us[i]) - int(w.arrival_us[p])
        last[s] = i
    chain = np.asarray(heads, np.int64)
    after = np.full(n, -1, np.int64)
    if chain.size > 1:
        after[chain[:-1]] = chain[1:]
    return chain, next_turn.tolist(), gap.tolist(), after.tolist()
