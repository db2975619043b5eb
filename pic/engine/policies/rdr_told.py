"""``rdr`` (``irminsul+rdr``) told, not asked, where its plans are the requests' exact prefixes (issue #12).

``rdr`` prices its own timeline (its compressed KV bytes per token: ``cost.with_kv_read_bytes``), so it cannot take
``prefix``'s rows (``prefix_twin.take``). But where the trace-level oracle proves every request's exact prefix
(:meth:`prefix_twin.Twin.proven`) and the wrapped policy (one of ``prefix_twin.NAMES``) plans exactly those
prefixes in a replay in arrival order (one replica, open loop, unbounded, nothing watching), its plans are known
before the timeline: ``Plan.from_prefix(N, r)``, re-encoding its ``N - r`` new tokens. :func:`tally` then fills its
final state: the wrapped policy told (its ``tally``) or else asked in arrival order (``prefix_twin._asked``: the
same calls as the replay), and rdr's own allocation of every request's new tokens in one pass (the same values as
one per commit: :meth:`RateDistortionRetention._allocate`), its counters summed in arrival order. The serving
model then runs its timeline from those plans in one compiled call (:attr:`RateDistortionRetention.told_plans`,
``engine.serving.timeline.run_two_pass``), or asks it as usual where that does not apply (it answers the same plans:
``_answer``). Where not shown (a plan not the prefix's, an eviction) it is rebuilt and simulated as before.

NOTE (speed): rdr's allocation depends on a request's new tokens only through their count, their positions below
``protect_sinks`` and their segments' kinds: where no segment of the trace has a protected kind, one allocation per
distinct ``(new tokens, min(reuse, protect_sinks))`` (Azure conversation: 2,344 of 19,366 requests; Mooncake
conversation: 6,790 of 12,031), one compiled call for them all (:func:`pic._accel_numba_rdrsel.rdr_cases`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from pic import accel
from pic.engine.policies import prefix_twin
from pic.engine.policies.block_radix import in_arrival_order

_WATCHED = {"lookup", "admit", "commit", "release"}


def wanted(config, ctx, facts: Callable[[], tuple]) -> prefix_twin.Twin | None:
    """``prefix_twin.wanted``'s Twin, else one where a policy replayed is ``NAME+rdr`` (NAME of
    ``prefix_twin.NAMES``) in a replay in arrival order, unbounded: its :meth:`~prefix_twin.Twin.proven`."""
    twin = prefix_twin.wanted(config, ctx, facts)
    if twin is not None or not in_arrival_order(config) or not math.isinf(ctx.capacity_tokens):
        return twin
    over = [n.split("+") for n in config.policies]
    return prefix_twin.Twin(facts) if any(p[1:] == ["rdr"] and p[0] in prefix_twin.NAMES for p in over) else None


def tell(pols: list, work: Any, twin: prefix_twin.Twin | None) -> None:
    """Tell ``pols[0]`` (an ``rdr`` over a policy of ``prefix_twin.NAMES``, one replica) its final state where
    the oracle proves every exact prefix (``twin``) and its plans are those (:func:`tally`); where they are not,
    ``pols[0]`` is replaced by a fresh one (to be simulated)."""
    if twin is None or len(pols) != 1:
        return
    pol = pols[0]
    inner = getattr(pol, "inner", None)
    if getattr(type(pol), "name", None) != "rdr" or getattr(inner, "name", None) not in prefix_twin.NAMES:
        return
    if pol.ctx.verify or getattr(inner.config, "s1", False) or _WATCHED & (vars(pol).keys() | vars(inner).keys()):
        return
    pfx = twin.proven()
    if pfx is None or len(pfx) != work.num_requests:
        return
    ok = tally(pol, work, pfx, twin.m, twin.window)
    if ok is None:          # (the wrapped policy's tally declined: asked, from a fresh one, as prefix_twin.take)
        pols[0] = pol = type(pol)(pol.ctx, pol.config)
        ok = tally(pol, work, pfx, twin.m, twin.window, ask=True)
    if not ok:
        pols[0] = type(pol)(pol.ctx, pol.config)


def tally(pol: Any, work: Any, pfx: np.ndarray, m: int, window: int, ask: bool = False) -> bool | None:
    """``RateDistortionRetention.tally``: the wrapped policy told (its ``tally``; ``ask``: not) or asked in arrival
    order; True where its plans were ``Plan.from_prefix(N, pfx[i])``, nothing evicted nor refused, rdr's
    allocation of each request's new tokens ``[pfx[i], N)`` then made (:func:`allocate_all`) and
    :attr:`told_plans` set; None (falsy) where the wrapped policy's tally declined (it may be asked)."""
    inner = pol.inner
    pfx = np.ascontiguousarray(pfx, np.int64)
    told = None if ask else getattr(inner, "tally", None)
    if told is not None and not told(work, pfx, m, window):
        return None
    if told is None and not prefix_twin._asked(inner, work, pfx.tolist()):
        return False
    if inner.stats.evictions or inner.stats.rejected:
        return False
    ntok = np.ascontiguousarray(work.num_prompt, np.int64)
    if np.any(pfx > ntok) or np.any(pfx < 0):
        return False
    pol.stats = inner.stats
    allocate_all(pol, work, pfx)
    pol.told_plans, pol._told_ids = (pfx, ntok - pfx), np.asarray(work.request_ids)
    return True


def allocate_all(pol: Any, work: Any, pfx: np.ndarray) -> None:
    """What ``pol.commit`` allocates for every request in arrival order, request ``i`` re-encoding its new tokens
    ``[pfx[i], N_i)`` (:meth:`RateDistortionRetention._allocate`), into its counters."""
    ntok = np.ascontiguousarray(work.num_prompt, np.int64)
    new = ntok - pfx
    idx = np.flatnonzero(new > 0)
    if not idx.size:
        return
    fast = accel.kernels(int(new[idx].sum()), "rdrsel")
    if fast is None or not _unprotected(pol, work):
        # the reference: one request at a time, as its commit (its view: the segments' kinds)
        for i in idx.tolist():
            pol._allocate(work.view(i), np.array([[pfx[i], ntok[i]]], np.int64), int(new[i]))
        return
    cfg, opts, HL = pol.config, pol.opts, pol.head_weight.size
    sinks = cfg.protect_sinks
    n, r, k = ntok[idx], pfx[idx], new[idx]
    # the allocation of a request: a function of its new tokens' count and which of them are sinks (no kind protected)
    key = k * (sinks + 1) + np.minimum(r, sinks)
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    d = np.arange(max(int(n.max()), 4096))
    rprior = ((1.0 + d / cfg.recency_tokens) ** -0.5)[::-1].copy()
    budget = cfg.budget * k * HL
    args = (sinks, cfg.block_tokens, pol.head_weight, opts.hull, opts.step_frac, pol._eff, opts.frac, opts.eps2,
            len(opts.bits))
    used, forced, dist, wsum, npr, per, redo = fast.rdr_cases(n[first], r[first], rprior, *args, budget[first])
    for q in np.flatnonzero(redo).tolist():     # (a cut within rounding of the budget: the exact merge, rdr_request)
        nq, rq = int(n[first[q]]), int(r[first[q]])
        used[q], forced[q], dist[q], wsum[q], npr[q], per[q], _ = accel.kernels(0, "rdr").rdr_request(
            np.array([[rq, nq]], np.int64), nq, rprior, np.array([0, nq], np.int64), np.zeros(1, np.uint8),
            np.zeros(256, np.bool_), *args, float(budget[first[q]]))
    used, forced, dist, wsum, npr, per = used[inv], forced[inv], dist[inv], wsum[inv], npr[inv], per[inv]
    unit_bytes = pol.ctx.bytes_per_token / HL
    over = forced - budget
    ex = pol.stats.extra
    ex["rdr_tokens"] += int(k.sum())
    ex["rdr_bytes"] += int(np.rint(used * unit_bytes).astype(np.int64).sum())
    ex["rdr_protected_tokens"] += int(npr.sum())
    ex["rdr_over_budget_bytes"] += int(np.rint(np.where(over > 0.0, over, 0.0) * unit_bytes).astype(np.int64).sum())
    for j, name in enumerate(pol._tier_keys):
        ex[name] += int(np.rint(per[:, j]).astype(np.int64).sum())
    # (the distortion sums in arrival order, one request at a time: a running sum)
    pol._dist[0] = float(np.cumsum(np.concatenate(([pol._dist[0]], dist)))[-1])
    pol._dist[1] = float(np.cumsum(np.concatenate(([pol._dist[1]], wsum)))[-1])


def _unprotected(pol: Any, work: Any) -> bool:
    """Whether no segment of the workload's trace has a kind ``pol`` protects (its views' source; False where
    unknown)."""
    src = getattr(work.view(0), "source", None) if work.num_requests else None
    kinds = getattr(src, "kinds", None)
    return kinds is not None and not pol._protect[np.asarray(kinds)].any()
