"""Rate–distortion allocation for ``rdr``: residency z and ADA tier b per state unit under a byte budget.

A unit is one page-sized block of tokens of one (layer, KV head) — pages are homogeneous in tier. Its
options are "evicted" (z = 0) or a tier b; option o costs ``size · frac[o]`` (bytes as a fraction of the
unit's dense bytes per token) and distorts ``w · eps2[o]``: the surrogate of the logit error², w the
unit's importance (attention mass × r² proxy) and eps2 = ε(b)² from :mod:`pic.engine.angle_codes`
(ε = 1 for an evicted state). Every unit has the same options, so they share one lower convex hull;
units take hull steps in order of marginal distortion saved per byte, w/size · Δε²/Δfrac, largest
first, until the next step does not fit (a prefix of the sorted steps: optimal for the bytes it uses,
because its LP relaxation is integral there). Protected units take the best tier regardless.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pic.engine.angle_codes import EVICTED, logit_error, token_bytes


@dataclass(frozen=True)
class Options:
    """Per-unit choices: ``bits[o]`` (0 = evicted), ``frac[o]`` bytes/dense, ``eps2[o]``; the hull path."""

    bits: tuple[int, ...]
    frac: np.ndarray
    eps2: np.ndarray
    hull: np.ndarray          # option indices on the lower convex hull, evicted first, bytes ascending
    step_frac: np.ndarray     # Δfrac of each hull step
    step_gain: np.ndarray     # Δε² saved by each hull step

    @property
    def best(self) -> int:
        """Option index of the largest tier (what protected units get)."""
        return int(self.hull[-1])

    def efficiency(self) -> np.ndarray:
        """Δε²/Δfrac per hull step (strictly decreasing)."""
        return self.step_gain / self.step_frac


def make_options(bits: tuple[int, ...], frac: np.ndarray, eps2: np.ndarray) -> Options:
    """Options from parallel arrays (``bits[0]`` must be EVICTED with frac 0, eps2 1); computes the hull."""
    frac, eps2 = np.asarray(frac, np.float64), np.asarray(eps2, np.float64)
    order = np.lexsort((eps2, frac))
    hull: list[int] = []
    for o in order:
        if hull and eps2[o] >= eps2[hull[-1]]:
            continue                                   # dominated: more bytes, no less distortion
        while len(hull) >= 2:                          # keep slopes increasing (convex from below)
            a, b = hull[-2], hull[-1]
            if (eps2[b] - eps2[a]) * (frac[o] - frac[a]) >= (eps2[o] - eps2[a]) * (frac[b] - frac[a]):
                hull.pop()
            else:
                break
        hull.append(int(o))
    h = np.array(hull)
    if bits[h[0]] != EVICTED:
        raise ValueError("options: the cheapest option must be the evicted one")
    return Options(tuple(bits), frac, eps2, h, np.diff(frac[h]), -np.diff(eps2[h]))


def gqa_options(head_dim: int, tiers: tuple[int, ...], value_bytes: int = 2) -> Options:
    """Options of one GQA/MHA (layer, KV head) unit: key codes + radius, value in bf16."""
    dense = token_bytes(head_dim, None, value_bytes)
    bits = (EVICTED, *sorted(tiers))
    frac = [0.0] + [token_bytes(head_dim, b, value_bytes) / dense for b in sorted(tiers)]
    return make_options(bits, np.array(frac), np.array([logit_error(head_dim, b) ** 2 for b in bits]))


def mla_options(latent_dim: int, rope_dim: int, tiers: tuple[int, ...], value_bytes: int = 2) -> Options:
    """Options of one MLA layer unit: only the RoPE key k_r is coded (the latent cKV is also the value and
    stays bf16), so tiers save little; ε applies to the k_r part of the logit."""
    dense = (latent_dim + rope_dim) * value_bytes
    bits = (EVICTED, *sorted(tiers))
    frac = [0.0] + [(latent_dim * value_bytes + token_bytes(rope_dim, b, value_bytes) - rope_dim * value_bytes)
                    / dense for b in sorted(tiers)]
    return make_options(bits, np.array(frac), np.array([logit_error(rope_dim, b) ** 2 for b in bits]))


@dataclass(frozen=True)
class Allocation:
    """Result for U units: chosen option per unit, bytes used (fractions × size), distortion Σ w·ε²."""

    option: np.ndarray        # int [U] index into Options.bits
    used: float               # Σ size · frac[option]   (dense-bytes units)
    forced: float             # the part of ``used`` taken by protected units
    distortion: float         # Σ w · eps2[option]


def allocate(opts: Options, weight: np.ndarray, size: np.ndarray, protected: np.ndarray,
             budget: float) -> Allocation:
    """Greedy on marginal distortion per byte (see module doc). ``budget`` in dense-bytes units
    (Σ size · frac ≤ budget over all units, protected ones included when they fit). Ties: lower unit
    index first, then hull order. Deterministic, vectorized (one lexsort over units × hull steps)."""
    weight, size = np.asarray(weight, np.float64), np.asarray(size, np.float64)
    protected = np.asarray(protected, bool)
    U = weight.shape[0]
    level = np.zeros(U, np.int64)                     # hull position per unit
    level[protected] = len(opts.hull) - 1
    forced = float(np.sum(size[protected]) * opts.frac[opts.best])
    room = budget - forced
    free = np.flatnonzero(~protected & (size > 0))
    K = len(opts.step_frac)
    if room > 0 and free.size and K:
        density = weight[free] / size[free]
        key = (density[:, None] * opts.efficiency()[None, :]).ravel()
        cost = (size[free][:, None] * opts.step_frac[None, :]).ravel()
        # NOTE (speed): the flat (unit, hull step) pairs are already in (unit, step) order, so a stable sort
        # on -key alone gives lexsort((step, unit, -key))'s order at half its cost (~55 % of rdr's
        # simulation on Mooncake was this sort)
        order = np.argsort(-key, kind="stable")
        cum = np.cumsum(cost[order])
        taken = order[:int(np.searchsorted(cum, room * (1 + 1e-12), side="right"))]
        level += np.bincount(free[taken // K], minlength=U)
    option = opts.hull[level]
    used = float(np.sum(size * opts.frac[option]))
    return Allocation(option, used, forced, float(np.sum(weight * opts.eps2[option])))
