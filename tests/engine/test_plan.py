"""Plan construction: validation of what policies build, and the fast constructors (``from_prefix``,
``recompute_all``) giving the same Plans as checked construction."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine.plan import Action, Correction, Plan, Span, Tier


def _checked_prefix(n: int, c: int) -> Plan:
    if c <= 0:
        return Plan(n, (Span(0, n, Action.RECOMPUTE),))
    if c >= n:
        return Plan(n, (Span(0, n, Action.REUSE, 0),))
    return Plan(n, (Span(0, c, Action.REUSE, 0), Span(c, n, Action.RECOMPUTE)))


@pytest.mark.parametrize("n", [1, 2, 3, 17, 4096])
def test_from_prefix_is_the_checked_plan(n):
    """Every split of the prompt gives the Plan (fields, types, repr, hash) checked construction gives; again
    with its reused head remembered (a second call), and with numpy integers."""
    for c in sorted({-3, 0, 1, n // 2, n - 1, n, n + 5}) * 2 + [np.int64(n // 2 + 1)]:
        got, want = Plan.from_prefix(n, c), _checked_prefix(n, c)
        assert got == want and repr(got) == repr(want) and hash(got) == hash(want)
        for a, b in zip(got.spans, want.spans, strict=True):
            assert [type(getattr(a, f)) for f in Span.__slots__] == [type(getattr(b, f)) for f in Span.__slots__]
            assert a.tier is Tier.HBM and a.action is b.action
        assert got.correction is want.correction
        assert got.num_reused == max(0, min(c, n)) and got.leading_reuse == max(0, min(c, n))


def test_from_prefix_and_recompute_all_reject_empty_prompts():
    for c in (-1, 0, 1, 5):
        with pytest.raises(ValueError, match="bad span"):
            Plan.from_prefix(0, c)
    with pytest.raises(ValueError, match="bad span"):
        Plan.recompute_all(-2)


def test_recompute_all_is_shared_per_length_and_keeps_a_numpy_length_as_given():
    a, b = Plan.recompute_all(123), Plan.recompute_all(123)
    assert a is b and a == Plan(123, (Span(0, 123, Action.RECOMPUTE),))
    c = Plan.recompute_all(np.int64(123))
    assert c == a and type(c.num_tokens) is np.int64 and Plan.recompute_all(123).num_tokens.__class__ is int


def test_plan_validation_still_guards_policy_plans():
    """Hand-built plans are checked: gaps, a short cover, and a correction recomputing more than is reused;
    a correction that recomputes nothing needs no reuse."""
    with pytest.raises(ValueError, match="not contiguous"):
        Plan(10, (Span(0, 4, Action.REUSE, 0), Span(5, 10, Action.RECOMPUTE)))
    with pytest.raises(ValueError, match="cover"):
        Plan(10, (Span(0, 4, Action.REUSE, 0),))
    with pytest.raises(ValueError, match="correction recomputes more"):
        Plan(10, (Span(0, 4, Action.REUSE, 0), Span(4, 10, Action.RECOMPUTE)), Correction(recompute_tokens=5))
    assert Plan(10, (Span(0, 4, Action.REUSE, 0), Span(4, 10, Action.RECOMPUTE)),
                Correction(recompute_tokens=4)).num_recomputed == 10
    assert Plan(10, (Span(0, 10, Action.RECOMPUTE),), Correction(state_loads=2)).num_reused == 0
    with pytest.raises(ValueError, match="REUSE span must keep"):
        Span(3, 5, Action.REUSE, 1)


def test_with_reencode_equals_a_checked_replace():
    """``Plan.with_reencode`` (rdr's lookup) gives the same Plan a checked ``dataclasses.replace`` gives."""
    import dataclasses

    plan = Plan.from_spans(100, [Span(0, 40, Action.REUSE), Span(40, 100, Action.RECOMPUTE)],
                           Correction(recompute_tokens=3, state_loads=1, reencode_tokens=2, state_store_tokens=7))
    want = dataclasses.replace(plan, correction=dataclasses.replace(plan.correction, reencode_tokens=62))
    got = plan.with_reencode(60)
    assert got == want and got.correction == want.correction and hash(got) == hash(want)
    assert plan.correction.reencode_tokens == 2
