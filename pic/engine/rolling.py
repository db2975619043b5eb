"""Vectorized polynomial hashes over token arrays (no Python loop per token).

Tokens are first mixed to 64-bit words (splitmix64 finalizer), then hashed as a polynomial in an odd
base ``B`` modulo 2^64: ``H[i] = sum_{j<i} x_j * B^(i-1-j)``. numpy uint64 arithmetic wraps modulo 2^64,
so ``H`` is computed in closed form as ``H[i] = B^i * S[i]`` with ``S = cumsum(x_j * B^-(j+1))`` (``B``
is odd, hence invertible mod 2^64). Then

* ``prefix_hashes(t)[i]`` hashes the whole prefix ``t[:i]`` (a chained block hash is ``H`` at block ends);
* ``window_hashes(t, w)[i]`` hashes ``t[i:i+w]`` for every offset: ``H[i+w] - H[i] * B^w`` — O(1) each.

Equal windows always get equal hashes; distinct ones collide with probability ~2^-64 for non-adversarial
data, and callers that promise "no false hit" verify tokens under ``--verify``.
"""

from __future__ import annotations

import numpy as np

_M64 = (1 << 64) - 1
BASE = 0x9E3779B97F4A7C15 | 1
BASE_INV = pow(BASE, -1, 1 << 64)
_pow = np.ones(1, np.uint64)      # B^i, grown on demand
_ipow = np.ones(1, np.uint64)     # B^-i


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """B^i and B^-i for i in [0, n] (cached, grown geometrically)."""
    global _pow, _ipow
    if _pow.shape[0] <= n:
        m = max(n + 1, 2 * _pow.shape[0])
        _pow = np.cumprod(np.r_[np.uint64(1), np.full(m - 1, BASE, np.uint64)], dtype=np.uint64)
        _ipow = np.cumprod(np.r_[np.uint64(1), np.full(m - 1, BASE_INV, np.uint64)], dtype=np.uint64)
    return _pow, _ipow


def mix(tokens: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer of each token id: uint64 [N]."""
    z = tokens.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def prefix_hashes(tokens: np.ndarray) -> np.ndarray:
    """uint64 [N+1]: ``out[i]`` hashes ``tokens[:i]`` (``out[0] == 0``)."""
    n = tokens.shape[0]
    pw, ipw = _powers(n)
    out = np.zeros(n + 1, np.uint64)
    if n:
        s = np.cumsum(mix(tokens) * ipw[1:n + 1], dtype=np.uint64)
        out[1:] = pw[1:n + 1] * s
    return out


def window_hashes(tokens: np.ndarray, width: int, h: np.ndarray | None = None) -> np.ndarray:
    """uint64 [max(N - width + 1, 0)]: ``out[i]`` hashes ``tokens[i:i+width]`` (pass ``h`` =
    :func:`prefix_hashes` of ``tokens`` to reuse it)."""
    n = tokens.shape[0]
    if n < width:
        return np.zeros(0, np.uint64)
    if h is None:
        h = prefix_hashes(tokens)
    pw, _ = _powers(width)
    return h[width:] - h[:n - width + 1] * pw[width]


def span_hashes(h: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """uint64: the hash of ``tokens[s:s+m]`` for each ``(s, m)`` from ``h`` = :func:`prefix_hashes` of
    ``tokens`` (same values as :func:`window_hashes` at width ``m``)."""
    starts, lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)
    pw, _ = _powers(int(lengths.max()) if lengths.size else 0)
    return h[starts + lengths] - h[starts] * pw[lengths]
