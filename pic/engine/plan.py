"""The Plan: a policy's answer for one request, the one currency between policies, the cost model and
the GPU executor.

A Plan covers the prompt ``[0, num_tokens)`` with ordered, contiguous, non-overlapping spans. Each span
says how its KV is obtained:

* ``REUSE``          cached KV used as is, at the same absolute positions;
* ``REUSE_ROTATED``  cached KV produced at ``source_pos``; RoPE keys rotated by delta = start - source_pos;
* ``RECOMPUTE``      prefilled now (attends over everything before it).

Extra work that is not a span lives in :class:`Correction` (tokens recomputed for quality on top of the
spans, recurrent-state compositions, re-encodes). Tiers name where reused KV is read from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class Action(IntEnum):
    REUSE = 0
    REUSE_ROTATED = 1
    RECOMPUTE = 2


class Tier(IntEnum):
    HBM = 0
    HOST = 1
    DISK = 2


# NOTE (speed): enum members as module constants: ``Action.REUSE`` is a class attribute lookup through the
# enum metaclass (~0.23 us on Python 3.11, several per span built or plan read), a global ~0.02 us
REUSE, REUSE_ROTATED, RECOMPUTE = Action.REUSE, Action.REUSE_ROTATED, Action.RECOMPUTE
HBM, HOST, DISK = Tier.HBM, Tier.HOST, Tier.DISK


@dataclass(frozen=True, slots=True)
class Span:
    """Tokens ``[start, end)`` of the prompt handled by ``action``.

    ``source_pos`` is the absolute position the cached KV was produced at (``start`` for REUSE,
    -1 for RECOMPUTE). ``delta = start - source_pos`` is the RoPE rotation a rotated reuse needs.
    """

    start: int
    end: int
    action: Action
    source_pos: int = -1
    tier: Tier = HBM

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end:
            raise ValueError(f"bad span [{self.start}, {self.end})")
        if self.action == RECOMPUTE and self.source_pos != -1:
            raise ValueError("RECOMPUTE span has no source_pos")
        if self.action == REUSE and self.source_pos not in (-1, self.start):
            raise ValueError("REUSE span must keep its position (use REUSE_ROTATED)")
        if self.action == REUSE_ROTATED and self.source_pos < 0:
            raise ValueError("REUSE_ROTATED span needs source_pos >= 0")

    @property
    def num_tokens(self) -> int:
        return self.end - self.start

    @property
    def delta(self) -> int:
        return 0 if self.action != REUSE_ROTATED else self.start - self.source_pos


@dataclass(frozen=True, slots=True)
class Correction:
    """Work beyond the spans (token counts unless named otherwise).

    ``recompute_tokens``: reused tokens whose KV is recomputed anyway (CacheBlend/EPIC quality recompute).
    ``probe_tokens``: tokens run through the layers up to the first attention layer's K/V to choose them
    (CacheBlend's selection pass). ``state_loads``: cached recurrent states read to start the recurrent
    layers (LinearKV S_init); > 0 means the recurrent layers run only the recomputed tokens, from that state,
    instead of every token after the first non-prefix reuse. ``state_compositions``: dense state
    compositions building S_init (LinearKV exact mode). ``state_store_tokens``: new tokens whose
    zero-start chunk end states are made for the cache (one extra recurrent scan). ``reencode_tokens``:
    tokens re-encoded into another precision tier (RDR).
    """

    recompute_tokens: int = 0
    state_compositions: int = 0
    reencode_tokens: int = 0
    state_loads: int = 0
    probe_tokens: int = 0
    state_store_tokens: int = 0

    def __post_init__(self) -> None:
        if min(self.recompute_tokens, self.state_compositions, self.reencode_tokens, self.state_loads,
               self.probe_tokens, self.state_store_tokens) < 0:
            raise ValueError("negative correction")


NO_CORRECTION = Correction()


@dataclass(frozen=True, slots=True)
class Plan:
    """Ordered cover of ``[0, num_tokens)`` by spans (validated on construction)."""

    num_tokens: int
    spans: tuple[Span, ...]
    correction: Correction = field(default=NO_CORRECTION)

    def __post_init__(self) -> None:
        pos = 0
        for s in self.spans:
            if s.start != pos:
                raise ValueError(f"spans not contiguous at {pos} (next starts at {s.start})")
            pos = s.end
        if pos != self.num_tokens:
            raise ValueError(f"spans cover [0, {pos}) but prompt has {self.num_tokens} tokens")
        # NOTE (speed): num_reused walks the spans; only a correction that recomputes tokens needs it
        if self.correction.recompute_tokens and self.correction.recompute_tokens > self.num_reused:
            raise ValueError("correction recomputes more tokens than are reused")

    # ---- Public API -------------------------------------------------------------------------------
    @staticmethod
    def recompute_all(num_tokens: int) -> Plan:
        """Prefill every token (one Plan per prompt length, shared: Plans are immutable)."""
        plan = _RECOMPUTE_ALL.get(num_tokens) if type(num_tokens) is int else None
        if plan is None:
            plan = Plan(num_tokens, (Span(0, num_tokens, RECOMPUTE),))   # validates num_tokens
            if type(num_tokens) is not int:     # (a numpy integer is kept as given, not memoized)
                return plan
            if len(_RECOMPUTE_ALL) >= _MEMO_MAX:    # NOTE (memory): bounded
                _RECOMPUTE_ALL.clear()
            _RECOMPUTE_ALL[num_tokens] = plan
        return plan

    @staticmethod
    def from_prefix(num_tokens: int, num_cached: int) -> Plan:
        """Reuse ``[0, num_cached)`` in place, recompute the rest."""
        if num_cached <= 0:
            return Plan.recompute_all(num_tokens)
        if num_cached >= num_tokens:
            if num_tokens <= 0:
                raise ValueError(f"bad span [0, {num_tokens})")
            return _trusted_plan(num_tokens, (_reuse_head(num_tokens),))
        # NOTE (speed): 0 < num_cached < num_tokens makes both spans and their cover valid by construction,
        # so they are built without the checks (~2 us of the ~4.6 us a prefix plan cost per request); the
        # reused head is shared by the plans of equal reuse (Spans are immutable; a match ends at a page or
        # segment boundary, so few lengths recur: Mooncake's 512-token blocks)
        return _trusted_plan(num_tokens, (_reuse_head(num_cached),
                                          _trusted_span(num_cached, num_tokens, RECOMPUTE, -1)))

    def tokens_by(self, action: Action) -> int:
        return sum(s.num_tokens for s in self.spans if s.action == action)

    @property
    def num_reused(self) -> int:
        """Tokens whose KV comes from the cache (in place or rotated)."""
        return self.num_tokens - self.tokens_by(RECOMPUTE)

    @property
    def num_rotated(self) -> int:
        return self.tokens_by(REUSE_ROTATED)

    @property
    def num_recomputed(self) -> int:
        """Tokens prefilled now: RECOMPUTE spans plus quality recompute inside reused spans."""
        return self.tokens_by(RECOMPUTE) + self.correction.recompute_tokens

    @property
    def leading_reuse(self) -> int:
        """Length of the in-place reused prefix (what an exact-prefix cache could also serve)."""
        s = self.spans[0] if self.spans else None
        return s.end if s is not None and s.action == REUSE else 0

    def with_reencode(self, num_tokens: int) -> Plan:
        """The same spans, with ``num_tokens`` more tokens to re-encode (``rdr``). NOTE (speed): the spans
        are not checked again (the same valid cover), where ``dataclasses.replace`` twice cost ~12 us."""
        c = self.correction
        corr = object.__new__(Correction)
        for name in ("recompute_tokens", "state_compositions", "state_loads", "probe_tokens", "state_store_tokens"):
            _set(corr, name, getattr(c, name))
        _set(corr, "reencode_tokens", c.reencode_tokens + num_tokens)
        p = object.__new__(Plan)
        _set(p, "num_tokens", self.num_tokens)
        _set(p, "spans", self.spans)
        _set(p, "correction", corr)
        return p

    @staticmethod
    def from_spans(num_tokens: int, spans: list[Span], correction: Correction = NO_CORRECTION) -> Plan:
        """Merge adjacent compatible spans and fill gaps with RECOMPUTE."""
        out: list[Span] = []
        pos = 0
        for s in sorted(spans, key=lambda s: s.start):
            if s.start > pos:
                out.append(Span(pos, s.start, RECOMPUTE))
            prev = out[-1] if out else None
            if (prev is not None and prev.action == s.action and prev.tier == s.tier and prev.end == s.start
                    and (s.action == RECOMPUTE or prev.delta == s.delta)):
                out[-1] = Span(prev.start, s.end, s.action, prev.source_pos, prev.tier)
            else:
                out.append(s)
            pos = s.end
        if pos < num_tokens:
            prev = out[-1] if out else None
            if prev is not None and prev.action == RECOMPUTE:
                out[-1] = Span(prev.start, num_tokens, RECOMPUTE)
            else:
                out.append(Span(pos, num_tokens, RECOMPUTE))
        return Plan(num_tokens, tuple(out), correction)


_MEMO_MAX = 1 << 16
_RECOMPUTE_ALL: dict[int, Plan] = {}
_set = object.__setattr__


# NOTE (speed): the slots' own descriptors set a frozen dataclass's fields (what ``object.__setattr__`` does
# after looking the descriptor up by name: the same object, ~0.18 us less per span built)
_NEW = object.__new__
_SPAN_START, _SPAN_END, _SPAN_ACTION, _SPAN_SOURCE, _SPAN_TIER = (
    Span.__dict__[f].__set__ for f in ("start", "end", "action", "source_pos", "tier"))
_PLAN_TOKENS, _PLAN_SPANS, _PLAN_CORRECTION = (Plan.__dict__[f].__set__ for f in ("num_tokens", "spans", "correction"))


def _trusted_span(start: int, end: int, action: Action, source_pos: int) -> Span:
    """``Span(start, end, action, source_pos)`` on HBM without ``__post_init__``'s checks: only for
    arguments valid by construction (the same object a checked construction gives)."""
    s = _NEW(Span)
    _SPAN_START(s, start)
    _SPAN_END(s, end)
    _SPAN_ACTION(s, action)
    _SPAN_SOURCE(s, source_pos)
    _SPAN_TIER(s, HBM)
    return s


def _reuse_head(num_tokens: int) -> Span:
    """``_trusted_span(0, num_tokens, REUSE, 0)`` (``num_tokens`` > 0), one per length (remembered, bounded)."""
    s = _REUSE_HEAD.get(num_tokens) if type(num_tokens) is int else None
    if s is None:
        s = _trusted_span(0, num_tokens, REUSE, 0)
        if type(num_tokens) is int:     # (a numpy integer is kept as given, not remembered)
            if len(_REUSE_HEAD) >= _MEMO_MAX:    # NOTE (memory): bounded
                _REUSE_HEAD.clear()
            _REUSE_HEAD[num_tokens] = s
    return s


_REUSE_HEAD: dict[int, Span] = {}


def _trusted_plan(num_tokens: int, spans: tuple[Span, ...]) -> Plan:
    """``Plan(num_tokens, spans)`` without the cover check (spans valid by construction)."""
    p = _NEW(Plan)
    _PLAN_TOKENS(p, num_tokens)
    _PLAN_SPANS(p, spans)
    _PLAN_CORRECTION(p, NO_CORRECTION)
    return p
