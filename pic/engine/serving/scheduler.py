"""Closed-form step accounting for one replica (continuous batching + chunked prefill).

Decode: with ``B`` requests decoding and total context ``C`` at the first step, step ``j`` takes
``fixed + per_token * (C + B*j)`` seconds (the CostModel's affine decode step, exactly), because every
step adds one token to each of the ``B`` contexts. ``n`` steps therefore take
``n*fixed + per_token*(n*C + B*n*(n-1)/2)``: an arithmetic series, solved for ``n`` instead of stepped.
"""

from __future__ import annotations

import math


def decode_time(fixed_s: float, per_token_s: float, num_decode: int, context: int, num_steps: int) -> float:
    """Seconds for ``num_steps`` decode-only steps starting at total context ``context``."""
    n = num_steps
    return n * fixed_s + per_token_s * (n * context + num_decode * n * (n - 1) / 2)


def decode_steps_covering(fixed_s: float, per_token_s: float, num_decode: int, context: int,
                          elapsed_s: float, max_steps: int) -> int:
    """Smallest ``n`` in ``[0, max_steps]`` whose cumulative decode time is ``>= elapsed_s``
    (the step boundary at or after an instant ``elapsed_s`` into the phase); ``max_steps`` if none."""
    return decode_boundary(fixed_s, per_token_s, num_decode, context, elapsed_s, max_steps)[0]


def decode_boundary(fixed_s: float, per_token_s: float, num_decode: int, context: int,
                    elapsed_s: float, max_steps: int) -> tuple[int, float]:
    """``(n, decode_time(..., n))`` for ``n = decode_steps_covering(...)``: the boundary and its seconds
    (NOTE (speed): the rounding fix-up below has computed them already in the common case)."""
    if elapsed_s <= 0:
        return 0, decode_time(fixed_s, per_token_s, num_decode, context, 0)
    a = per_token_s * num_decode / 2
    b = fixed_s + per_token_s * (context - num_decode / 2)
    if a > 0:
        n = math.ceil((-b + math.sqrt(b * b + 4 * a * elapsed_s)) / (2 * a))
    elif b > 0:
        n = math.ceil(elapsed_s / b)
    else:
        return 0, decode_time(fixed_s, per_token_s, num_decode, context, 0)
    if n > max_steps:      # n = max(0, min(n, max_steps))
        n = max_steps
    if n < 0:
        n = 0
    # NOTE: fix float rounding of the root so the boundary is exact for the series as evaluated
    # (decode_time inlined: the same expression, ``k * fixed + per * (k * ctx + nd * k * (k - 1) / 2)``)
    f, p, c, d = fixed_s, per_token_s, context, num_decode
    while n > 0:
        k = n - 1
        if not k * f + p * (k * c + d * k * (k - 1) / 2) >= elapsed_s:
            break
        n = k
    while n < max_steps:
        t = n * f + p * (n * c + d * n * (n - 1) / 2)
        if t >= elapsed_s:
            return n, t
        n += 1
    return n, n * f + p * (n * c + d * n * (n - 1) / 2)


def to_us(seconds: float) -> int:
    """Duration in whole microseconds, rounded up (an event never fires before its work is done)."""
    return math.ceil(seconds * 1e6 - 1e-6)
