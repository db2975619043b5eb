"""Content-defined chunking (CDC) of token streams with a Gear rolling hash, and chunk fingerprints.

Hash. ``h_i = (h_{i-1} << 1) + G[t_i] mod 2**64`` equals ``sum_{j<64} G[t_{i-j}] << j``: bits shifted past
bit 63 fall off, so ``h_i`` depends on the last 64 tokens only. It is computed vectorized by log-doubling
(``H_1 = G[t]``; ``H_2k[i] = (H_k[i-k] << k) + H_k[i]``: 6 shift+add passes for a 64-token window) in
cache-sized blocks; :func:`gear_hash_gathers` (64 shifted gathers) is kept as the slower alternative.
``G`` (``CDCConfig.gear``): ``mix``, the default, is ``G(t) = z ^ (z >> 32)`` with ``z = ((t mod 2**32) ^ key) *
0xBF58476D1CE4E5B9 mod 2**64``, ``key = (seed + 1) * 0x9E3779B97F4A7C15 mod 2**64`` (a multiply-xorshift: a
bijection of the token id, :func:`gear_values`), computed 8 lanes at a time by the compiled kernel; ``table``
(the default until the tenth round of #12, kept as an option) is a seeded uint64 table of 2**16 entries, a
token id ``t`` (any int32) picking ``G[(t * 0x9E3779B1 mod 2**32) >> 16]`` (Fibonacci hashing): FastCDC's
byte-indexed 256-entry table sits in L1, but a token vocabulary needs a 512 KB table, and one random load per
token from it bounds CDC + fingerprints to <= 0.44x raw xxh64 (docs/benchmarks.md), where ``mix`` runs at
0.54-0.58x; ``mix`` also gives distinct tokens distinct values (the table maps ~2.3 vocabulary ids of a 150 k
vocabulary to each entry). The same hash formula and boundary rules, so every property below holds for both
(other values, so other cuts: hit rates equal within the seed-to-seed spread, docs/design.md).

Boundaries. A cut *after* token ``i`` (chunk boundary offset ``b = i + 1``) is a candidate when
``h_i < threshold`` and ``i >= 63`` (a full window). Every rule below depends on content near ``b`` only,
never on where the previous chunk was cut, so an edit before a region cannot move the region's cuts:

* min size: a candidate is dropped if another candidate or a hard boundary follows within ``min_chunk``
  tokens (keep the last of a cluster), if it lies within ``min_chunk`` after a hard boundary, or if
  ``b < min_chunk``;
* hard boundaries (S2 marker edges) always cut;
* max size: a gap longer than ``max_chunk`` between two cuts holds a run with no content cut (one line
  repeated, the same token). If a Gear hash value repeats in it (a phase of the repeated line), the gap is
  cut at every ``K``-th occurrence of the smallest such value (``K = max_chunk // period``): pieces of
  whole periods that start at the same phase of the run wherever it sits. What is left over ``max_chunk``
  is split into ``max_chunk`` pieces anchored at its start, the last two sharing the remainder evenly
  (each piece in ``[max_chunk / 2, max_chunk]``), so a gap that grows at its end keeps its earlier cuts.

Chunk sizes are therefore in ``[min_chunk, max_chunk]`` except the last chunk of a prompt and chunks that
touch a hard boundary placed closer than ``min_chunk`` to another. The candidate probability ``p`` is solved
from ``avg_chunk`` so that kept cuts come every ``avg_chunk`` tokens on random content
(``p (1-p)^(min_chunk-1) = 1/avg_chunk``).

Property (tested with Hypothesis): inserting or deleting tokens before a region leaves every cut of the
region that lies >= 64 tokens after the edit unchanged, when no max-size split is involved; with splits,
every cut from the first content-defined cut >= 64 tokens after the edit on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import xxhash

from pic import accel
from pic.engine.rolling import sorted_unique

WINDOW = 64
TABLE_BITS = 16
_FIB32 = np.uint32(0x9E3779B1)
_BLOCK = 1 << 15  # tokens per hash block (arrays stay in L2)
_EMPTY = np.zeros(0, np.int64)
_SHIFTS = {k: np.uint64(k) for k in (1, 2, 4, 8, 16, 32)}
GEARS = ("mix", "table")       # the default first
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_NO_TABLE = np.zeros(0, np.uint64)


@dataclass(frozen=True, slots=True)
class CDCConfig:
    """Chunking parameters (tokens)."""

    avg_chunk: int = field(default=256, metadata={"help": "expected chunk size in tokens"})
    min_chunk: int = field(default=64, metadata={"help": "minimum chunk size in tokens"})
    max_chunk: int = field(default=1024, metadata={"help": "maximum chunk size in tokens"})
    seed: int = field(default=0, metadata={"help": "seed of the Gear values"})
    gear: str = field(default="mix", metadata={
        "help": "Gear values: mix (a multiply-xorshift of the token id and the seed: no table loads, 8 lanes "
                "vectorized; the default) | table (a seeded 2**16-entry table, the default before #12's tenth "
                "round; other cuts)"})

    def __post_init__(self) -> None:
        if self.gear not in GEARS:
            raise ValueError(f"gear must be one of {', '.join(GEARS)}, got {self.gear!r}")
        if self.min_chunk < 1:
            raise ValueError(f"min_chunk must be >= 1, got {self.min_chunk}")
        if self.max_chunk < 2 * self.min_chunk:
            raise ValueError(f"max_chunk ({self.max_chunk}) must be >= 2 * min_chunk ({self.min_chunk})")
        if not self.max_chunk > self.avg_chunk > math.e * self.min_chunk:
            raise ValueError(f"need max_chunk > avg_chunk > e * min_chunk, got avg_chunk={self.avg_chunk} "
                             f"min_chunk={self.min_chunk} max_chunk={self.max_chunk}")

    @property
    def threshold(self) -> np.uint64:
        """Candidate when ``h < threshold``."""
        return _threshold(self.avg_chunk, self.min_chunk)


@lru_cache(maxsize=64)
def _threshold(avg: int, min_chunk: int) -> np.uint64:
    # solve p (1-p)^(m-1) = 1/avg on p in (0, 1/m] (the increasing branch) by bisection
    lo, hi = 0.0, 1.0 / min_chunk
    for _ in range(100):
        mid = (lo + hi) / 2
        if mid * (1 - mid) ** (min_chunk - 1) < 1.0 / avg:
            lo = mid
        else:
            hi = mid
    return np.uint64(min(int(lo * 2.0**64), 2**64 - 1))


@lru_cache(maxsize=16)
def gear_table(seed: int) -> np.ndarray:
    """uint64 [2**16]: the seeded Gear table."""
    return np.random.default_rng(seed).integers(0, 2**64, size=1 << TABLE_BITS, dtype=np.uint64,
                                                endpoint=False)


def mix_key(seed: int) -> np.uint64:
    """The table-free Gear values' key: ``(seed + 1) * 0x9E3779B97F4A7C15 mod 2**64``."""
    return np.uint64((seed + 1) * _GOLDEN % 2**64)


def gear_values(tokens: np.ndarray, seed: int = 0, gear: str = "mix") -> np.ndarray:
    """uint64 [N]: the Gear value ``G(t)`` of each token. ``table``: ``G[(t * 0x9E3779B1 mod 2**32) >> 16]``
    of the seeded table; ``mix``: ``z ^ (z >> 32)``, ``z = ((t mod 2**32) ^ mix_key(seed)) * 0xBF58476D1CE4E5B9
    mod 2**64`` (one multiply: the compiled scan computes 8 at a time with no table loads)."""
    toks = np.ascontiguousarray(tokens, dtype=np.int32)
    if gear == "table":
        return _gear_values(toks, gear_table(seed))
    z = (toks.view(np.uint32).astype(np.uint64) ^ mix_key(seed)) * _M1
    return z ^ (z >> np.uint64(32))


def _gear_values(tokens: np.ndarray, table: np.ndarray) -> np.ndarray:
    idx = (tokens.astype(np.uint32, copy=False) * _FIB32) >> np.uint32(32 - TABLE_BITS)
    return table[idx]


@lru_cache(maxsize=16)
def _kernel_gear(seed: int, gear: str) -> tuple[np.ndarray, np.uint64]:
    """``(table, key)`` as the compiled kernels take them: the table, or an empty one and the mix key."""
    return (gear_table(seed), np.uint64(0)) if gear == "table" else (_NO_TABLE, mix_key(seed))


def gear_hash(tokens: np.ndarray, seed: int = 0, gear: str = "mix") -> np.ndarray:
    """uint64 [N]: ``h_i = sum_{j<min(64, i+1)} G(t_{i-j}) << j`` (log-doubling, blocked; ``G``:
    :func:`gear_values`)."""
    toks = np.ascontiguousarray(tokens, dtype=np.int32)
    n = toks.size
    fast = accel.kernels(n, "cdc")
    if fast is not None:
        return fast.gear_hash(toks, *_kernel_gear(seed, gear))
    if n <= _BLOCK:
        return _gear_block(toks, seed, gear)
    out = np.empty(n, np.uint64)
    for s in range(0, n, _BLOCK):  # NOTE: loop over 32K-token blocks, not tokens
        lo = max(0, s - (WINDOW - 1))
        e = min(n, s + _BLOCK)
        out[s:e] = _gear_block(toks[lo:e], seed, gear)[s - lo:]
    return out


def _gear_block(toks: np.ndarray, seed: int, gear: str) -> np.ndarray:
    h = gear_values(toks, seed, gear)
    m = h.size
    tmp = np.empty(m, np.uint64)
    k = 1
    while k < min(WINDOW, m):
        t = tmp[: m - k]
        np.left_shift(h[:-k], _SHIFTS[k], out=t)
        h[k:] += t
        k *= 2
    return h


def gear_hash_gathers(tokens: np.ndarray, seed: int = 0, gear: str = "mix") -> np.ndarray:
    """Same values as :func:`gear_hash`, as 64 shifted gathers (the slower reference formulation)."""
    g = gear_values(tokens, seed, gear)
    h = g.copy()
    for j in range(1, WINDOW):  # 63 vector passes over the array
        h[j:] += g[:-j] << np.uint64(j)
    return h


def natural_boundaries(tokens: np.ndarray, cfg: CDCConfig, hard: np.ndarray | None = None) -> np.ndarray:
    """int64 [k]: content-defined cut offsets in (0, N) after the min-size rule (hard cuts excluded)."""
    toks = np.ascontiguousarray(tokens, dtype=np.int32)
    n = toks.size
    if n <= WINDOW:
        return np.zeros(0, np.int64)
    return _natural(toks, 0, n, 0, cfg, clean_hard(hard, n))


def _natural(tail: np.ndarray, base: int, n: int, start: int, cfg: CDCConfig, hard: np.ndarray) -> np.ndarray:
    """Kept content-defined cuts ``b`` in ``(start, n)`` of a prompt of ``n`` tokens of which ``tail`` holds
    ``[base, n)`` (``base <= max(0, start - 63)``: every window ending after ``start`` is whole); ``hard``:
    the prompt's cleaned hard boundaries. The rules read candidates after ``b`` and hard boundaries only."""
    i0 = max(start, WINDOW - 1)                  # b = i + 1 with i >= 63 (a full window), b > start
    if n - 1 <= i0:
        return _EMPTY
    fast = accel.kernels(n - i0, "cdc")
    m = cfg.min_chunk
    if fast is not None and not hard.size:
        # NOTE (speed): candidates and the min-size rule in one compiled call (no hard boundary: the common
        # case), instead of ~8 numpy calls of set-up per prompt
        return fast.gear_cuts(np.ascontiguousarray(tail, np.int32), *_kernel_gear(cfg.seed, cfg.gear),
                              cfg.threshold, i0 - base, n - 1 - base, base + 1, m)
    if fast is not None:
        table, key = _kernel_gear(cfg.seed, cfg.gear)
        t32 = np.ascontiguousarray(tail, np.int32)
        cand = (fast.gear_candidates(t32, table, cfg.threshold, i0 - base, n - 1 - base) if table.size else
                fast.mix_candidates(t32, key, cfg.threshold, i0 - base, n - 1 - base)) + (base + 1)
    else:
        h = gear_hash(tail[max(0, i0 - (WINDOW - 1) - base):], cfg.seed, cfg.gear)
        off = i0 - max(0, i0 - (WINDOW - 1) - base) - base      # index of i0 in h
        cand = np.flatnonzero(h[off: off + n - 1 - i0] < cfg.threshold) + (i0 + 1)
    # next cut-like event after each candidate: next candidate or next hard boundary
    nxt = np.empty_like(cand)
    nxt[:-1] = cand[1:]
    if cand.size:
        nxt[-1] = n + m  # the end of the prompt does not suppress (keeps cuts append-stable)
    if hard.size:
        j = np.searchsorted(hard, cand, side="right")
        nh = np.where(j < hard.size, hard[np.minimum(j, hard.size - 1)], n + m)
        ph = np.where(j > 0, hard[np.maximum(j - 1, 0)], -m)
        nxt = np.minimum(nxt, nh)
        keep = (nxt - cand >= m) & (cand - ph >= m) & (cand >= m)
    else:
        keep = (nxt - cand >= m) & (cand >= m)
    return cand[keep]


def clean_hard(hard: np.ndarray | None, n: int) -> np.ndarray:
    """Hard boundaries as :func:`chunk` uses them: sorted, distinct, inside ``(0, n)`` (int64)."""
    if hard is None or len(hard) == 0:
        return _EMPTY
    h = np.unique(np.asarray(hard, dtype=np.int64))
    return h[(h > 0) & (h < n)]


def chunk(tokens: np.ndarray, cfg: CDCConfig | None = None, hard_boundaries: np.ndarray | None = None
          ) -> np.ndarray:
    """int64 [k+1]: chunk boundaries ``0 = b_0 < ... < b_k = N``; chunk ``i`` is ``[b_i, b_{i+1})``.

    ``hard_boundaries``: offsets that must be cuts (S2 marker edges); out-of-range values are ignored.
    """
    return layout(tokens, cfg, hard_boundaries)[0]


def layout(tokens: np.ndarray, cfg: CDCConfig | None = None, hard_boundaries: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """``(bounds, anchor)``: :func:`chunk`'s boundaries and, for each, whether it is an *anchor* — 0, a kept
    content-defined cut or a hard boundary (not a cut made inside an over-long gap).

    Anchors make chunking resumable: the cuts up to an anchor ``c`` depend only on the tokens before
    ``c + min_chunk`` (candidates up to ``c + min_chunk - 1`` decide which are kept) and on the hard
    boundaries before ``c + min_chunk``. So a prompt that shares its first ``c + min_chunk`` tokens and those
    hard boundaries with a chunked one has the same cuts up to ``c``, and :func:`layout_from` gives the rest
    from its tokens after ``c - 63`` alone."""
    cfg = cfg or CDCConfig()
    toks = np.ascontiguousarray(tokens, dtype=np.int32)
    n = int(toks.shape[0])
    if n == 0:
        return np.zeros(1, np.int64), np.ones(1, bool)
    return _layout(toks, 0, n, 0, cfg, clean_hard(hard_boundaries, n))


def layout_from(tail: np.ndarray, base: int, n: int, start: int, cfg: CDCConfig,
                hard_boundaries: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`layout` of a prompt of ``n`` tokens from anchor ``start`` on (``start`` first, ``n`` last), given
    ``tail`` = its tokens ``[base, n)`` with ``base <= max(0, start - 63)`` and all its hard boundaries
    (absolute). Equal to the bounds of :func:`layout` that are ``>= start`` whenever ``start`` is one of its
    anchors."""
    if not 0 <= base <= max(0, start - (WINDOW - 1)) or not start < n or tail.shape[0] != n - base:
        raise ValueError(f"layout_from: need 0 <= base <= start - 63, start < n, tail = [base, n); got base={base}, "
                         f"start={start}, n={n}, {tail.shape[0]} tokens")
    toks = np.ascontiguousarray(tail, dtype=np.int32)
    return _layout(toks, base, n, start, cfg, clean_hard(hard_boundaries, n))


def layout_fps(tokens: np.ndarray, cfg: CDCConfig | None = None, hard_boundaries: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(bounds, anchor, fps)``: :func:`layout` and the :func:`fingerprints` of its chunks, in one call (one
    compiled call per prompt when the kernels are loaded and there is no hard boundary)."""
    cfg = cfg or CDCConfig()
    toks = np.ascontiguousarray(tokens, dtype=np.int32)
    n = int(toks.shape[0])
    if n == 0:
        return np.zeros(1, np.int64), np.ones(1, bool), np.zeros(0, np.uint64)
    return _layout_fps(toks, 0, n, 0, cfg, clean_hard(hard_boundaries, n))


def layout_from_fps(tail: np.ndarray, base: int, n: int, start: int, cfg: CDCConfig,
                    hard_boundaries: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(bounds, anchor, fps)``: :func:`layout_from` and the :func:`fingerprints` of its chunks (``tail``
    holds tokens ``[base, n)``; chunk ``c`` is ``tail[bounds[c] - base : bounds[c + 1] - base]``)."""
    if not 0 <= base <= max(0, start - (WINDOW - 1)) or not start < n or tail.shape[0] != n - base:
        raise ValueError(f"layout_from: need 0 <= base <= start - 63, start < n, tail = [base, n); got base={base}, "
                         f"start={start}, n={n}, {tail.shape[0]} tokens")
    toks = np.ascontiguousarray(tail, dtype=np.int32)
    return _layout_fps(toks, base, n, start, cfg, clean_hard(hard_boundaries, n))


def _layout_fps(toks: np.ndarray, base: int, n: int, start: int, cfg: CDCConfig, hard: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    i0 = max(start, WINDOW - 1)
    fast = accel.kernels(n - i0, "cdc") if not hard.size and n - 1 > i0 and n > WINDOW else None
    if fast is not None:
        b, anc, fps, ok = fast.gear_layout(toks, *_kernel_gear(cfg.seed, cfg.gear), cfg.threshold, i0 - base,
                                           n - 1 - base, base, cfg.min_chunk, start, n, cfg.max_chunk, True)
        if ok:
            return b, anc, fps
    b, anc = _layout(toks, base, n, start, cfg, hard)
    return b, anc, fingerprints(toks, b - base)


def _layout(toks: np.ndarray, base: int, n: int, start: int, cfg: CDCConfig, hard: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Bounds ``>= start`` (anchor mask with them) of a prompt of ``n`` tokens, ``toks`` = ``[base, n)``."""
    i0 = max(start, WINDOW - 1)
    fast = accel.kernels(n - i0, "cdc") if not hard.size and n - 1 > i0 and n > WINDOW else None
    if fast is not None:
        # NOTE (speed): no hard boundary (the common case): the bounds, anchors and the forced cuts of gaps
        # where nothing repeats from one compiled call, instead of ~10 numpy calls per prompt
        b, anc, _, ok = fast.gear_layout(toks, *_kernel_gear(cfg.seed, cfg.gear), cfg.threshold, i0 - base,
                                         n - 1 - base, base, cfg.min_chunk, start, n, cfg.max_chunk, False)
        if ok:
            return b, anc
    nat = _natural(toks, base, n, start, cfg, hard) if n > WINDOW else _EMPTY
    hard = hard[hard > start]
    cuts = _union(nat, hard) if hard.size else nat
    b = np.concatenate(([start], cuts, [n])).astype(np.int64)
    gaps = np.diff(b)
    big = gaps > cfg.max_chunk
    if not big.any():
        return b, np.ones(b.shape[0], bool)
    anchors = b
    starts, ends = b[:-1][big], b[1:][big]
    fast = accel.kernels(0, "cdc")
    if fast is not None:
        # NOTE (speed): random content has over-long gaps too (~1 chunk in 180); one compiled call keeps the
        # gaps where a Gear hash value repeats (the only ones _periodic_cuts can cut), instead of a hash
        # pass and a sort per gap
        rep = fast.gear_repeats(toks, *_kernel_gear(cfg.seed, cfg.gear), starts - base, ends - base)
        starts, ends = starts[rep], ends[rep]
    # NOTE: a Python loop over the over-long gaps that may hold a periodic run only (rare)
    per = [_periodic_cuts(toks, a - base, e - base, cfg) + base
           for a, e in zip(starts.tolist(), ends.tolist(), strict=True)]
    if per:
        b = _union(b, np.concatenate(per))
        gaps = np.diff(b)
        big = gaps > cfg.max_chunk
    if big.any():
        # forced cuts lie strictly inside their gaps, ascending: inserting them keeps ``b`` sorted and distinct
        cuts = _forced_cuts(b[:-1][big], gaps[big], cfg.max_chunk)
        b = np.insert(b, np.searchsorted(b, cuts), cuts)
    anchor = np.zeros(b.shape[0], bool)
    anchor[np.searchsorted(b, anchors)] = True      # (the anchors are some of the bounds)
    return b, anchor


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.union1d`` of int64 arrays (sorted, distinct), without numpy 2's slow hash-based unique."""
    return sorted_unique(np.concatenate((a, b)).astype(np.int64))


def _periodic_cuts(toks: np.ndarray, s: int, e: int, cfg: CDCConfig) -> np.ndarray:
    """Cuts inside a gap ``[s, e)`` holding a low-entropy run: the positions of the smallest Gear hash value
    that occurs at least 3 times in the gap (one phase of a repeated line, period ``P``), every ``K``-th of
    them with ``K = max_chunk // P``, counted from the first one whose hash window lies wholly inside the
    periodic stretch of tokens. Pieces are whole periods that start at the same phase of the run, measured
    from where the run starts, wherever it sits in the prompt. Empty when nothing repeats."""
    if e - s <= WINDOW + 2:
        return _EMPTY
    h = gear_hash(toks[s:e], cfg.seed, cfg.gear)[WINDOW - 1:]        # windows wholly inside the gap: i = s + 63 + j
    srt = np.sort(h)
    trip = srt[2:][srt[2:] == srt[:-2]]                      # values that occur at least 3 times, ascending
    if not trip.size:
        return _EMPTY
    rep = trip[:1]
    pos = np.flatnonzero(h == rep[0]) + (s + WINDOW)           # cut after the token: b = i + 1
    period = max(1, int(np.median(np.diff(pos))))
    if period < e - s:
        # start of the periodic stretch holding the middle occurrence: the token after the last one that
        # differs from the token a period later
        eq = toks[s:e - period] == toks[s + period:e]
        mid = int(pos[pos.shape[0] // 2]) - 1 - s
        breaks = np.flatnonzero(~eq[:min(mid, eq.shape[0])])
        run = s + (int(breaks[-1]) + 1 if breaks.size else 0)
        pos = pos[pos >= run + WINDOW]                           # hash windows inside the run only
    cuts = pos[::max(1, cfg.max_chunk // period)]
    m = cfg.min_chunk
    return cuts[(cuts - s >= m) & (e - cuts >= m)]


def _forced_cuts(starts: np.ndarray, gaps: np.ndarray, mx: int) -> np.ndarray:
    """Cuts splitting each gap ``[s, s + g)`` (``g > mx``) into pieces of ``mx`` tokens anchored at ``s``;
    when the remainder ``r = g mod mx`` is nonzero, the last two pieces share ``mx + r`` evenly (both in
    ``[mx / 2, mx]``). Anchored at the gap's content-defined start, a gap that grows at its end (one more
    repetition of a low-entropy run, the next turn's continuation) keeps all but its last two cuts."""
    full, rem = gaps // mx, gaps % mx
    num = full - (rem == 0)                          # cuts per gap
    owner = np.repeat(np.arange(gaps.size), num)
    k = np.arange(owner.size) - np.repeat(np.cumsum(num) - num, num) + 1    # 1..num within a gap
    cut = starts[owner] + k * mx
    last = (k == num[owner]) & (rem[owner] > 0)      # the cut between the last two pieces
    cut[last] = starts[owner][last] + (k[last] - 1) * mx + (mx + rem[owner][last]) // 2
    return cut


def fingerprints(tokens: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """uint64 [k]: xxh64 (seed 0) of each chunk's little-endian int32 token bytes."""
    toks = np.ascontiguousarray(tokens, dtype="<i4")
    fast = accel.kernels(toks.shape[0], "cdc")
    if fast is not None and toks.dtype == np.int32:     # (native little-endian)
        return fast.fingerprints(toks, np.ascontiguousarray(bounds, np.int64))
    mv = memoryview(toks).cast("B")
    bl = (np.asarray(bounds, dtype=np.int64) * 4).tolist()
    f = xxhash.xxh64_intdigest
    return np.fromiter((f(mv[a:b]) for a, b in zip(bl[:-1], bl[1:], strict=False)),
                       dtype=np.uint64, count=len(bl) - 1)


def edge_keys(tokens: np.ndarray, bounds: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """uint64 ``(heads, tails)`` per chunk ``[bounds[c], bounds[c + 1])`` of ``tokens``: :func:`fingerprint` of
    its first ``m`` tokens (``tokens[b_c : b_c + m]``, which may run past the chunk's end; 0 where fewer than
    ``m`` tokens follow ``b_c``) and of its last ``m`` (0 for a chunk under ``m`` tokens). The keys under
    which the ``irminsul`` chunk store's prefilters know a chunk's first and last ``min_match`` tokens (a 0
    is a key too: at worst a needless trie walk)."""
    toks = np.ascontiguousarray(tokens, dtype="<i4")
    b = np.ascontiguousarray(bounds, np.int64)
    fast = accel.kernels(0, "cdc")
    if fast is not None and toks.dtype == np.int32:     # (native little-endian)
        return fast.edge_keys(toks, b, int(m))
    mv = memoryview(toks).cast("B")
    f, n, bl = xxhash.xxh64_intdigest, toks.shape[0], b.tolist()
    heads = [f(mv[4 * a:4 * (a + m)]) if n - a >= m else 0 for a in bl[:-1]]
    tails = [f(mv[4 * (e - m):4 * e]) if e - a >= m else 0 for a, e in zip(bl[:-1], bl[1:], strict=False)]
    return np.array(heads, np.uint64), np.array(tails, np.uint64)


def fingerprint(tokens: np.ndarray) -> int:
    """xxh64 of one token slice (same function as :func:`fingerprints`)."""
    return xxhash.xxh64_intdigest(np.ascontiguousarray(tokens, dtype="<i4").tobytes())
