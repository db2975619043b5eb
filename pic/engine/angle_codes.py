"""Angle-domain (ADA) key codes: the tier table, the codebooks and the error model ε(b). Pure numpy.

A key k ∈ R^d (d even) is stored as its radius and the direction of Πk, Π a fixed random orthogonal
matrix, split into d/2 coordinate pairs (x_i, y_i) = ((Πk)_i, (Πk)_{i+d/2}) written in polar form
(ρ_i, θ_i) with Σ ρ_i² = 1:

* θ_i: uniform ``theta_bits`` code, centre θ_c = (c + ½)·2π / 2^theta_bits (after the rotation θ_i is
  uniform on [0, 2π), so the uniform quantizer is the optimal one);
* ρ_i: ``rho_bits`` Lloyd–Max code for the density of one pair's share of a uniformly random unit
  vector, ρ² ~ Beta(1, d/2 − 1), i.e. f(ρ) = (d − 2) ρ (1 − ρ²)^(d/2 − 2);
* the radius r̃ = (Πk · ũ) / ‖ũ‖² (least-squares scale of the decoded direction ũ), float32.

Tier b spends 2b bits per coordinate pair — the budget of b bits per hyperspherical angle — split
between θ and ρ as measured best (docs/bench-ada.md): 8 → (8, 8), 4 → (5, 3), 3 → (4, 2), 2 → (3, 1).
Codes of one pair are ``θ | ρ << theta_bits`` and are packed ``32 // pair_bits`` per int32 word. A code
decodes to (ρ̂ cos θ̂, ρ̂ sin θ̂) with cos/sin rounded to float16; for pair codes of <= 8 bits the product
itself is rounded to float16 (``pair_codebook``: one table lookup per pair in the kernels).

Error model: with Δ = 2π / 2^theta_bits and θ errors uniform on [−Δ/2, Δ/2],
E‖ũ − u‖² = (d/2)·(E(ρ̂ − ρ)² + 2·E[ρρ̂]·(1 − sin(Δ/2)/(Δ/2))), and ε(b) = sqrt(E‖ũ − u‖²) is the RMS
relative logit error |q·k̃ − q·k| / (‖q‖ r / √d) for queries independent of the quantization error.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

TIERS = (8, 4, 3, 2)          # bits per coordinate (pair = 2b bits), best first
WORD_BITS = 32
RADIUS_BYTES = 4              # float32 r̃ per token per head


@dataclass(frozen=True, slots=True)
class Tier:
    """One precision tier: ``bits`` per coordinate, split into θ and ρ bits per pair."""

    bits: int
    theta_bits: int
    rho_bits: int

    @property
    def pair_bits(self) -> int:
        return self.theta_bits + self.rho_bits

    @property
    def codes_per_word(self) -> int:
        return WORD_BITS // self.pair_bits

    def words(self, head_dim: int) -> int:
        """int32 words of packed codes per key."""
        return -(-(head_dim // 2) // self.codes_per_word)

    def key_bytes(self, head_dim: int) -> int:
        """Stored bytes of one key (codes + float32 radius)."""
        return 4 * self.words(head_dim) + RADIUS_BYTES


TIER = {8: Tier(8, 8, 8), 4: Tier(4, 5, 3), 3: Tier(3, 4, 2), 2: Tier(2, 3, 1)}


def tier(bits: int) -> Tier:
    """The Tier of ``bits`` (8, 4, 3 or 2); raises ValueError otherwise."""
    if bits not in TIER:
        raise ValueError(f"ADA tier {bits!r}: expected one of {', '.join(map(str, TIERS))}")
    return TIER[bits]


def token_bytes(head_dim: int, bits: int | None, value_bytes: int = 2) -> int:
    """Bytes of one token of one KV head: key (codes + radius, or dense when ``bits`` is None) + value."""
    key = head_dim * value_bytes if bits is None else tier(bits).key_bytes(head_dim)
    return key + head_dim * value_bytes


def theta_codebook(theta_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(cos θ_c, sin θ_c) of the uniform angle codebook, rounded to float16 (what the kernels store)."""
    c = (np.arange(2 ** theta_bits) + 0.5) * (2 * math.pi / 2 ** theta_bits)
    return np.cos(c).astype(np.float16).astype(np.float64), np.sin(c).astype(np.float16).astype(np.float64)


@functools.cache
def pair_codebook(head_dim: int, bits: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Tiers with pair codes of <= 8 bits: the joint codebook (x, y) = (ρ̂ cos θ̂, ρ̂ sin θ̂) rounded to
    float16, indexed by the pair code ``θ | ρ << theta_bits`` (what the kernels look up, one load per
    pair). None for tier 8 (16-bit codes: θ and ρ are looked up separately)."""
    t = tier(bits)
    if t.pair_bits > 8:
        return None
    cos, sin = theta_codebook(t.theta_bits)
    rho = rho_codebook(head_dim, t.rho_bits)[0]
    code = np.arange(2 ** t.pair_bits)
    th, rh = code & (2 ** t.theta_bits - 1), code >> t.theta_bits
    x = (rho[rh] * cos[th]).astype(np.float16).astype(np.float64)
    return x, (rho[rh] * sin[th]).astype(np.float16).astype(np.float64)


@functools.cache
def _rho_grid(head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Midpoint grid on [0, ρ_max] and its probability masses under f(ρ) (ρ_max: tail mass < 1e-13)."""
    if head_dim < 4 or head_dim % 2:
        raise ValueError(f"head_dim {head_dim}: must be even and >= 4")
    m = head_dim / 2 - 1                      # ρ² ~ Beta(1, m): P(ρ > t) = (1 − t²)^m
    rho_max = math.sqrt(1 - 1e-13 ** (1 / m))
    edges = np.linspace(0.0, rho_max, 1 << 16 | 1)
    cdf = 1.0 - (1.0 - edges ** 2) ** m
    return (edges[1:] + edges[:-1]) / 2, np.diff(cdf)


@functools.cache
def rho_codebook(head_dim: int, rho_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd–Max (centroids [2^b], thresholds [2^b − 1]) of ρ for ``head_dim``, float32-representable."""
    x, w = _rho_grid(head_dim)
    k = 2 ** rho_bits
    mass = np.concatenate([[0.0], np.cumsum(w)])        # cell sums by prefix differences: O(k log n)
    moment = np.concatenate([[0.0], np.cumsum(w * x)])
    c = np.interp((np.arange(k) + 0.5) / k, mass[1:], x)
    for _ in range(1000):
        cut = np.concatenate([[0], np.searchsorted(x, (c[1:] + c[:-1]) / 2), [x.size]])
        m = mass[cut[1:]] - mass[cut[:-1]]
        new = np.where(m > 0, (moment[cut[1:]] - moment[cut[:-1]]) / np.maximum(m, 1e-300), c)
        done = np.max(np.abs(new - c)) < 1e-13
        c = new
        if done:
            break
    c = c.astype(np.float32).astype(np.float64)
    return c, ((c[1:] + c[:-1]) / 2).astype(np.float32).astype(np.float64)


@functools.cache
def direction_mse(head_dim: int, bits: int) -> float:
    """E‖ũ − u‖² of the tier's direction code for a uniformly random unit u (analytic, see module doc)."""
    t = tier(bits)
    x, w = _rho_grid(head_dim)
    c, thr = rho_codebook(head_dim, t.rho_bits)
    rq = c[np.searchsorted(thr, x)]
    half = math.pi / 2 ** t.theta_bits
    kappa = 1.0 - math.sin(half) / half
    per_pair = float(np.sum(w * (rq - x) ** 2) + 2.0 * kappa * np.sum(w * x * rq))
    return head_dim / 2 * per_pair


EVICTED = 0   # "tier" of a state that is not resident (z = 0)


def logit_error(head_dim: int, bits: int) -> float:
    """ε(b): RMS relative logit error of tier ``bits``; 1.0 for ``EVICTED`` (the whole logit is lost)."""
    return 1.0 if bits == EVICTED else math.sqrt(direction_mse(head_dim, bits))
