"""A policy taking ``prefix``'s simulation where its plans are ``prefix``'s (issue #12; the oracle's ``Told.see``).

The serving model reads a policy only through its plans, admissions, evictions and resident bytes (the peak). With
one replica, the open loop, unbounded capacity and nothing watching (``block_radix.in_arrival_order``), requests are
prefilled one at a time in arrival order, each committed before the next lookup (``engine.serving.timeline``), and
an unbounded policy of :data:`NAMES` never evicts nor refuses, so its answers follow from the arrival order.
:func:`take` asks it in that order (lookup, admit, commit, release: the same calls); where every plan is
``Plan.from_prefix(N, r)`` with ``r`` ``prefix``'s reuse of the request, nothing is refused or evicted and its
resident bytes never fall (its peak: the final total), its rows, events and timeline are ``prefix``'s (renamed), its
stats and footprint its own. Else it returns False and the caller simulates it (a fresh policy): the answer is
exact, never approximated.

**Told, not asked.** Where the trace-level oracle proves that no request meets content past its exact prefix
(:meth:`Twin.proven`: ``oracle.proven_prefixes``; no run of ``m`` tokens past a prefix equals one met earlier), a
policy may fill the state a replay in arrival order leaves without being asked request by request: its optional
method ``tally(work, pfx, m, window) -> bool`` sets its stats and what its ``usage()``, ``footprint()`` (its
``duplicates``: ``engine.oracle.duplicate_tokens`` of its runs at ``min_match`` ``window``, the replay's), ``describe()``
(and ``merged_summary``) report, exactly as that replay leaves them, and returns True; False where it cannot show that
its plans would be ``Plan.from_prefix(N, pfx)`` (e.g. it matches runs shorter than ``m``): it is then asked, as a
fresh policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from pic.engine.plan import Plan
from pic.engine.policies.block_radix import in_arrival_order

#: the policies this applies to (``irminsul+rdr``: its own KV bytes per token, priced otherwise: not taken)
NAMES = ("irminsul", "fixed-chunk", "linearkv")
_TICK = 1024          # requests between progress ticks while asking (the bar moves through irminsul's own work)


class Twin:
    """``prefix``'s simulation kept for a policy of :data:`NAMES` (:meth:`see`): ``sim`` (an ``engine.replay._Sim``),
    or None; :meth:`proven`: every request's exact prefix where the trace-level oracle proves that no request meets
    content past it (``oracle.proven_prefixes`` of what ``facts()`` gives: ``(trace, work, oracle reuse,
    min_match)``; :attr:`window`: that ``min_match``, the duplicate count's), else None; :attr:`m`: the shortest run of tokens the proof covers (no run of ``m`` tokens past a
    request's prefix equals one of an earlier request)."""

    __slots__ = ("sim", "facts", "m", "window", "_pfx")

    def __init__(self, facts: Callable[[], tuple] | None = None) -> None:
        self.sim, self.facts, self.m, self.window, self._pfx = None, facts, 0, 0, False

    def see(self, sim) -> None:
        rows = sim.rows
        if sim.reuse is not None and not rows["evictions"].any() and not rows["uncached"].any():
            self.sim = sim

    def proven(self) -> np.ndarray | None:
        if self._pfx is False:          # (once, where a policy would be told)
            self._pfx = None
            if self.facts is not None:
                from pic.engine.policies.oracle import proven_prefixes

                facts = self.facts()
                self.window = facts[3]
                got = proven_prefixes(*facts)
                if got is not None:
                    self._pfx, self.m = got
        return self._pfx

    def may_prove(self, reuse: np.ndarray) -> bool:
        """Whether :meth:`proven` may be ``reuse``: it is the trace-level oracle's reuse (``facts()``) or None, so not
        where they differ (or nothing is known). NOTE (speed, memory): the proof is then not made for a policy that
        could not be told from it (chat 10^6, irminsul not taken: ~4 CPU s and a +0.8 GB high point of the proof's
        structure pass and the asked pass together, before irminsul's simulation)."""
        if self._pfx is not False:         # (made already: cheap)
            return True
        return self.facts is not None and np.array_equal(self.facts()[2], reuse)


def wanted(config, ctx, facts: Callable[[], tuple] | None = None) -> Twin | None:
    """A :class:`Twin` to fill where a policy of :data:`NAMES` may take ``prefix``'s simulation in a replay of
    ``config``: one replayed, one replica, open loop, nothing watching, unbounded; ``facts``: :attr:`Twin.facts`."""
    if not any(n in config.policies for n in NAMES):
        return None
    if not in_arrival_order(config):
        return None
    return Twin(facts) if math.isinf(ctx.capacity_tokens) else None


def take(name: str, pols: list, work: Any, twin: Twin | None, tick=None) -> bool | None:
    """True where the policy ``name`` (``pols[0]``, told (its ``tally``) or asked in arrival order: its stats and
    footprint) takes ``prefix``'s simulation (``twin.sim``: its rows and timeline); False where that is not proven
    once asked (``pols[0]`` then replaced by a fresh one, for the simulation); None: not asked. ``tick(done,
    total)``: progress while asking."""
    if name not in NAMES or twin is None or twin.sim is None or len(pols) != 1:
        return None
    pol, t = pols[0], twin.sim
    if getattr(pol.config, "s1", False) or getattr(pol, "kv_bytes_per_token", pol.ctx.bytes_per_token) != \
            pol.ctx.bytes_per_token or pol.ctx.verify or len(t.reuse) != work.num_requests:
        return None
    if {"lookup", "admit", "commit", "release"} & getattr(pol, "__dict__", {}).keys():
        return None         # (watched by a caller, e.g. benchmarks' plan digests: asked when the timeline asks)
    tally = getattr(pol, "tally", None)
    pfx = None if tally is None or not twin.may_prove(t.reuse) else twin.proven()
    if pfx is not None and np.array_equal(t.reuse, pfx):
        if tally(work, pfx, twin.m, twin.window):
            if tick is not None:
                tick(work.num_requests, work.num_requests)
            return True
        pols[0] = pol = type(pol)(pol.ctx, pol.config)      # (told nothing: asked, from a fresh one)
    if _asked(pol, work, np.asarray(t.reuse), tick):
        return True
    pols[0] = type(pol)(pol.ctx, pol.config)        # (registry.build's: the simulation's own, fresh)
    return False


def _asked(pol, work: Any, reuse, tick=None) -> bool:
    """Whether ``pol`` asked in arrival order plans ``Plan.from_prefix(N, reuse[i])`` for each request, admits
    each, evicts nothing and its resident bytes never fall; ``tick(done, total)`` every ``_TICK`` requests.

    NOTE (memory): the per-request columns are read as Python ints a block of ``_TICK`` requests at a time, not
    whole (chat 10^6, where irminsul is not taken at its ~2,500th request: three lists of 10^6 ints, ~0.1 GB)."""
    view, lookup, admit, commit, release, res = work.view, pol.lookup, pol.admit, pol.commit, pol.release, \
        pol.resident_bytes
    last, n, reuse = res(), work.num_requests, np.asarray(reuse)
    for i0 in range(0, n, _TICK):
        if tick is not None and i0:
            tick(i0, n)
        i1 = min(i0 + _TICK, n)
        for i, now, m, r in zip(range(i0, i1), work.arrival_us[i0:i1].tolist(), work.num_prompt[i0:i1].tolist(),
                                reuse[i0:i1].tolist(), strict=True):
            v = view(i)
            plan = lookup(v, now)
            if v.num_tokens != m or plan != Plan.from_prefix(m, r) or not admit(v, plan, now):
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
