"""Text-like token streams and the random draws every scenario shares.

Tokens are generated directly as int32 ids in ``[0, VOCAB_SIZE)`` from a Zipf-ish unigram law (rank r has
probability ∝ 1/(r + 2.7)^1.1, ranks mapped to ids by a fixed permutation), so no tokenizer is involved and
content identity is by construction: the same document is the same array, hence the same segment id.
"""

from __future__ import annotations

import numpy as np

VOCAB_SIZE = 50_000
_VOCAB_SEED = 0x5EED_7E87
_ZIPF_S = 1.1
_ZIPF_Q = 2.7

#: digit tokens (as in GPT-2, where "0".."9" are ids 15..24) for numeric header fields
DIGITS = np.arange(15, 25, dtype=np.int32)


def _build_cdf() -> tuple[np.ndarray, np.ndarray]:
    ranks = np.arange(VOCAB_SIZE, dtype=np.float64)
    p = 1.0 / (ranks + _ZIPF_Q) ** _ZIPF_S
    cdf = np.cumsum(p / p.sum())
    cdf[-1] = 1.0
    ids = np.random.Generator(np.random.PCG64(_VOCAB_SEED)).permutation(VOCAB_SIZE).astype(np.int32)
    return cdf, ids


_CDF, _RANK_TO_ID = _build_cdf()


def make_rng(seed: int) -> np.random.Generator:
    """The generator every scenario draws from: ``Generator(PCG64(seed))``."""
    if seed < 0:
        raise ValueError(f"seed: must be >= 0, got {seed}")
    return np.random.Generator(np.random.PCG64(seed))


def text(rng: np.random.Generator, n: int) -> np.ndarray:
    """int32 [n]: a text-like token stream (Zipf-ish unigram draws)."""
    ranks = np.searchsorted(_CDF, rng.random(int(n)), side="right")
    return _RANK_TO_ID[np.minimum(ranks, VOCAB_SIZE - 1)]


def text_between(rng: np.random.Generator, lo: int, hi: int) -> np.ndarray:
    """int32 [n]: a text-like token stream whose length n is uniform on ``[lo, hi]``."""
    return text(rng, int(uniform_int(rng, lo, hi)))


def fixed_text(tag: int, n: int) -> np.ndarray:
    """int32 [n]: a stream that depends only on ``(tag, n)`` (e.g. leading tokens common to all traces)."""
    return text(np.random.Generator(np.random.PCG64([_VOCAB_SEED, tag])), n)


def digits(value: int, width: int) -> np.ndarray:
    """int32 [width]: ``value`` written as zero-padded decimal digit tokens."""
    s = str(int(value)).zfill(width)[-width:]
    return DIGITS[np.frombuffer(s.encode(), dtype=np.uint8) - ord("0")]


def uniform_int(rng: np.random.Generator, lo: int, hi: int, size: int | None = None):
    """Integer(s) uniform on ``[lo, hi]`` inclusive."""
    return rng.integers(lo, hi + 1, size=size)


def lognormal_int(rng: np.random.Generator, median: float, sigma: float, lo: int, hi: int,
                  size: int | None = None):
    """Integer(s) from a log-normal with the given median and log-space sigma, clipped to ``[lo, hi]``."""
    x = np.rint(median * np.exp(sigma * rng.standard_normal(size)))
    out = np.clip(x, lo, hi).astype(np.int64)
    return int(out) if size is None else out


def zipf_weights(n: int, a: float) -> np.ndarray:
    """float64 [n]: popularity of pool item i ∝ 1/(i+1)^a (item 0 most popular)."""
    w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** a
    return w / w.sum()


def zipf_pick(rng: np.random.Generator, weights: np.ndarray, k: int) -> np.ndarray:
    """int64 [k]: k distinct pool indices drawn by popularity, in draw order."""
    k = min(int(k), weights.size)
    return rng.choice(weights.size, size=k, replace=False, p=weights).astype(np.int64)


def pool(rng: np.random.Generator, n: int, lo: int, hi: int) -> list[np.ndarray]:
    """``n`` distinct text items with lengths uniform on ``[lo, hi]``."""
    lengths = uniform_int(rng, lo, hi, size=n)
    return [text(rng, int(m)) for m in lengths]
