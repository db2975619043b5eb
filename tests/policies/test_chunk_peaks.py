"""``fixed-chunk`` and ``linearkv`` keep their own peak (``peak_bytes``, their resident bytes at the end of every
admission) and declare ``commit_never_grows``: the serving model's peak read from them at the end must equal the peak
it samples itself after every admission and every commit, and ``resident_bytes()`` must be ``usage().total``."""

from __future__ import annotations

import math

import pytest

from pic.engine import policies
from pic.engine.serving import ServingModel
from tests.policies.conftest import make_ctx, request_stream
from tests.policies.test_start_prefix import _served


class _Sampled:
    """A policy seen without ``peak_bytes`` and ``commit_never_grows``: the model asks its resident bytes after every
    admission and every commit, and each answer is checked against ``usage().total``."""

    def __init__(self, pol) -> None:
        self._pol = pol

    def __getattr__(self, name):
        if name in ("peak_bytes", "commit_never_grows", "start_prefix"):
            raise AttributeError(name)
        return getattr(self._pol, name)

    def resident_bytes(self):
        b = self._pol.resident_bytes()
        assert b == self._pol.usage().total
        return b


CASES = [("fixed-chunk", math.inf, None), ("fixed-chunk", 3000, None), ("fixed-chunk", 900, None),
         ("fixed-chunk", 3000, {"save_unfull_chunk": "true", "chunk_size": "32"}),
         ("fixed-chunk", math.inf, {"prefix_stage": "false", "chunk_size": "16"}),
         ("linearkv", math.inf, None), ("linearkv", 3000, None), ("linearkv", 900, None),
         ("linearkv", 3000, {"admission": "always"}), ("linearkv", 2000, {"admission": "prefix-first"}),
         ("linearkv", math.inf, {"prefix_stage": "false"})]


@pytest.mark.parametrize("name,cap,opts", CASES)
def test_own_peak_is_the_peak_sampled_after_every_admission_and_commit(name, cap, opts) -> None:
    w, cost = _served(4, 150, 300, 300_000)
    got = []
    for hide in (False, True):
        pol = policies.build(name, make_ctx(cap), opts)
        m = ServingModel(w, [_Sampled(pol) if hide else pol], cost, token_budget=2048)
        assert m._note_admit[0] == hide and m._note_commit[0] == hide
        m.run()
        got.append(m.peak_resident)
    assert got[0] > 0 and got[0] == got[1]


@pytest.mark.parametrize("name,cap,opts", CASES)
def test_commit_never_raises_resident_bytes(name, cap, opts) -> None:
    """Requests admitted in groups, committed, released: no commit raises ``resident_bytes()``, which is always
    ``usage().total``."""
    pol = policies.build(name, make_ctx(cap), opts)
    live, held = [], []
    for k, req in enumerate(request_stream(7, 120)):
        now = 10 * k
        if pol.admit(req, pol.lookup(req, now), now):
            live.append(req)
        assert pol.resident_bytes() == pol.usage().total
        if len(live) >= 3:
            for q in live:
                before = pol.resident_bytes()
                pol.commit(q, now + 1)
                assert pol.resident_bytes() <= before and pol.resident_bytes() == pol.usage().total
            for q in held + live[:-1]:
                pol.release(q, now + 2)
            held, live = live[-1:], []
