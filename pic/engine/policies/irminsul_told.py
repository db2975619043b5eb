"""irminsul taking ``prefix``'s simulation where its plans are ``prefix``'s (issue #12; the oracle's ``Told.see``).

The serving model reads a policy only through its plans, admissions, evictions and resident bytes (the peak). With
one replica, the open loop, unbounded capacity and nothing watching (``block_radix.in_arrival_order``), requests are
prefilled one at a time in arrival order, each committed before the next lookup (``engine.serving.timeline``), and
an unbounded irminsul never evicts nor refuses, so its answers follow from the arrival order. :func:`take` asks it
in that order (lookup, admit, commit, release: the same calls); where every plan is ``Plan.from_prefix(N, r)`` with
``r`` ``prefix``'s reuse of the request, nothing is refused or evicted and its resident bytes never fall (its peak:
the final total), its rows, events and timeline are ``prefix``'s (renamed), its stats and footprint its own. Else
it returns None and the caller simulates it (a fresh policy): the answer is exact, never approximated.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pic.engine.plan import Plan
from pic.engine.policies.block_radix import in_arrival_order

#: the policies this applies to (``irminsul+rdr``: its own KV bytes per token, priced otherwise: not taken)
NAMES = ("irminsul",)
_TICK = 1024          # requests between progress ticks while asking (the bar moves through irminsul's own work)


class Twin:
    """``prefix``'s simulation kept for irminsul (:meth:`see`): ``sim`` (an ``engine.replay._Sim``), or None."""

    __slots__ = ("sim",)

    def __init__(self) -> None:
        self.sim = None

    def see(self, sim) -> None:
        rows = sim.rows
        if sim.reuse is not None and not rows["evictions"].any() and not rows["uncached"].any():
            self.sim = sim


def wanted(config, ctx) -> Twin | None:
    """A :class:`Twin` to fill where irminsul may take ``prefix``'s simulation in a replay of ``config``: irminsul
    replayed, one replica, open loop, nothing watching, unbounded."""
    if not any(n in config.policies for n in NAMES):
        return None
    if not in_arrival_order(config):
        return None
    return Twin() if math.isinf(ctx.capacity_tokens) else None


def take(name: str, pols: list, work: Any, twin: Twin | None, tick=None) -> bool | None:
    """True where irminsul (``pols[0]``, asked in arrival order: its stats and footprint) takes ``prefix``'s
    simulation (``twin.sim``: its rows and timeline); False where that is not proven once asked (``pols[0]`` then
    replaced by a fresh one, for the simulation); None: not asked. ``tick(done, total)``: progress while asking."""
    if name not in NAMES or twin is None or twin.sim is None or len(pols) != 1:
        return None
    pol, t = pols[0], twin.sim
    if getattr(pol.config, "s1", False) or getattr(pol, "kv_bytes_per_token", pol.ctx.bytes_per_token) != \
            pol.ctx.bytes_per_token or pol.ctx.verify or len(t.reuse) != work.num_requests:
        return None
    if {"lookup", "admit", "commit", "release"} & getattr(pol, "__dict__", {}).keys():
        return None         # (watched by a caller, e.g. benchmarks' plan digests: asked when the timeline asks)
    if _asked(pol, work, np.asarray(t.reuse).tolist(), tick):
        return True
    pols[0] = type(pol)(pol.ctx, pol.config)        # (registry.build's: the simulation's own, fresh)
    return False


def _asked(pol, work: Any, reuse: list, tick=None) -> bool:
    """Whether ``pol`` asked in arrival order plans ``Plan.from_prefix(N, reuse[i])`` for each request, admits
    each, evicts nothing and its resident bytes never fall; ``tick(done, total)`` every ``_TICK`` requests."""
    view, arr, ntok = work.view, work.arrival_us.tolist(), work.num_prompt.tolist()
    lookup, admit, commit, release, res = pol.lookup, pol.admit, pol.commit, pol.release, pol.resident_bytes
    last, n = res(), len(arr)
    for i, now in enumerate(arr):
        if tick is not None and i and i % _TICK == 0:
            tick(i, n)
        v = view(i)
        plan = lookup(v, now)
        if v.num_tokens != ntok[i] or plan != Plan.from_prefix(ntok[i], reuse[i]) or not admit(v, plan, now):
            return False
        a = res()
        commit(v, now)
        c = res()
        release(v, now)
        b = res()
        if not last <= a <= c <= b:       # (the peak the serving model samples: the final total)
            return False
        last = b
    return not (pol.stats.evictions or pol.stats.rejected)
