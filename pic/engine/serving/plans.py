"""What the serving model reads of a Plan's spans to price it (engine.serving.model)."""

from __future__ import annotations

from pic.engine.plan import NO_CORRECTION, Action, Plan

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
