"""Attention makespan of a Plan's forward on the extend kernel, and its fit to a calibration profile.

A Plan runs as ONE forward whose attention has one varlen sequence per RECOMPUTE run (docs/execute.md).
The extend kernel has no split-KV: a program owns ``tokens_per_program`` new tokens × one head group of one
sequence and walks every key that its last token may see. So a few dozen tokens over a long context take a
handful of programs that each walk the whole context -- the attention time follows the longest program and
the number of waves, not the count of query-key pairs that the single-sequence profile grid is indexed by.

Model: the programs of all sequences are launched in grid order (sequence-major) onto ``slots`` concurrent
slots, each taking the earliest free one (list scheduling); a program's work is the keys it reads, a key of
a rotated page (δ ≠ 0, the k_r rotation runs in the load path) counting ``rotated_factor`` keys. The
makespan in key units times ``seconds_per_key`` (whole forward, all layers) is the attention time.

``fit_extend`` fits ``slots`` (a multiple of the SM count), ``seconds_per_key`` and ``rotated_factor`` to the
profile's own extend points (one sequence, n new over c cached, plain and rotated) from the differences
t(n, c) − t(n, 0): the model's parameters come from the calibration grid only, never from executed Plans.
Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: a sequence of a forward: (new tokens, plain keys before them, rotated keys before them)
Seq = tuple[int, int, int]

_PARTS = 4   # a sequence's programs are priced as this many groups of equal work (the causal ramp)


@dataclass(frozen=True, slots=True)
class ExtendShape:
    """How the executor lays attention work out on this GPU (facts written by ``pic calibrate``)."""

    tokens_per_program: int   # the extend kernel's BLOCK_T
    head_groups: int          # programs per token block: ceil(heads / BLOCK_HH)
    sm_count: int             # streaming multiprocessors of the GPU
    decode_max_new: int       # forwards of <= this many new tokens run attention through the decode kernel

    def to_dict(self) -> dict[str, int]:
        return {"tokens_per_program": self.tokens_per_program, "head_groups": self.head_groups,
                "sm_count": self.sm_count, "decode_max_new": self.decode_max_new}


@dataclass(frozen=True, slots=True)
class ExtendFit:
    """Fitted attention model of one profile (see the module docstring)."""

    slots: int                   # concurrent extend programs
    seconds_per_key: float       # whole forward (all layers), per key a program reads
    rotated_factor: float        # cost of a rotated key / a plain one, extend kernel
    decode_rotated_factor: float  # the same for forwards through the decode kernel
    grid_error: float            # median |relative error| of the fitted forward times on the grid's extend points

    def to_dict(self) -> dict[str, float]:
        return {"slots": self.slots, "seconds_per_key": self.seconds_per_key, "rotated_factor": self.rotated_factor,
                "decode_rotated_factor": self.decode_rotated_factor, "grid_error": self.grid_error}


def makespan(seqs: Sequence[Seq], shape: ExtendShape, slots: int, rotated_factor: float = 1.0) -> float:
    """Key units until the last program of the forward's attention launch finishes."""
    tpp, hg = shape.tokens_per_program, shape.head_groups
    if sum(-(-n // tpp) for n, _, _ in seqs if n > 0) * hg <= slots:
        # one wave: every program starts at once; each sequence ends with its last part (as below)
        return max((p + rotated_factor * r + (min(b * (min(_PARTS, b) - 1) // min(_PARTS, b) * tpp + tpp, n) + n) / 2.0
                    for n, p, r in seqs if n > 0 for b in (-(-n // tpp),)), default=0.0)
    levels: list[list[float]] = [[0.0, float(slots)]]    # [free time, number of slots], sorted by time
    for n, plain, rot in seqs:
        if n <= 0:
            continue
        ctx = plain + rotated_factor * rot
        blocks = -(-n // tpp)
        parts = min(_PARTS, blocks)
        lo = 0
        for k in range(parts):
            hi = blocks * (k + 1) // parts
            if hi <= lo:
                continue
            # programs of token blocks [lo, hi): block j reads ctx + min((j + 1) * tpp, n) keys
            w = ctx + (min((lo + 1) * tpp, n) + min(hi * tpp, n)) / 2.0
            _assign(levels, float((hi - lo) * hg), w)
            lo = hi
    return levels[-1][0]


def _assign(levels: list[list[float]], count: float, work: float) -> None:
    """``count`` programs of ``work`` each onto the earliest free slots (levels kept sorted, merged)."""
    while count > 0:
        t, k = levels[0]
        take = min(count, k)
        count -= take
        if take == k:
            levels.pop(0)
        else:
            levels[0][1] = k - take
        nt = t + work
        for i, lv in enumerate(levels):
            if abs(lv[0] - nt) <= 1e-9 * max(1.0, nt):
                lv[1] += take
                break
            if lv[0] > nt:
                levels.insert(i, [nt, take])
                break
        else:
            levels.append([nt, take])


def fit_extend(shape: ExtendShape, seconds_at: dict[tuple[int, int], float],
               rotated_at: dict[tuple[int, int], float], base_seconds) -> ExtendFit | None:
    """Fit the model to measured single-sequence points. ``seconds_at[(n, c)]`` / ``rotated_at[(n, c)]``:
    forward seconds of n new tokens over c plain / rotated cached tokens; ``base_seconds(n)``: the profile's
    forward of n new tokens over nothing. None when the grid has fewer than two extend points with c > 0."""
    dmn = shape.decode_max_new
    pts = [(n, c, s) for (n, c), s in seconds_at.items() if n > dmn and c > 0]
    if len(pts) < 2:
        return None
    best = None
    for k in range(1, 5):
        slots = max(1, shape.sm_count * k)
        xs = [(makespan([(n, c, 0)], shape, slots) - makespan([(n, 0, 0)], shape, slots), s - base_seconds(n), s)
              for n, c, s in pts]
        den = sum(x * x / (s * s) for x, _, s in xs)
        if den <= 0:
            continue
        kappa = sum(x * y / (s * s) for x, y, s in xs) / den
        if kappa <= 0:
            continue
        errs = sorted(abs(base_seconds(n) + kappa * x - s) / s for (n, _, s), (x, _, _) in zip(pts, xs, strict=True))
        rms = math.sqrt(sum(e * e for e in errs) / len(errs))
        if best is None or rms < best[0] - 1e-12:
            best = (rms, slots, kappa, errs[len(errs) // 2] if len(errs) % 2 else
                    (errs[len(errs) // 2 - 1] + errs[len(errs) // 2]) / 2)
    if best is None:
        return None
    _, slots, kappa, med = best
    rot = [(n, c, s) for (n, c), s in rotated_at.items() if n > dmn and c > 0]
    rho = 1.0
    if rot:
        def loss(r: float) -> float:
            return sum(((base_seconds(n) + kappa * (makespan([(n, 0, c)], shape, slots, r)
                                                     - makespan([(n, 0, 0)], shape, slots)) - s) / s) ** 2
                       for n, c, s in rot)
        rho = min((0.5 + 0.01 * i for i in range(351)), key=loss)   # 0.5 .. 4.0
    dec = []
    for (n, c), s in rotated_at.items():
        plain = seconds_at.get((n, c))
        if n <= dmn and c > 0 and plain is not None and plain - base_seconds(n) > 0:
            dec.append((s - base_seconds(n)) / (plain - base_seconds(n)))
    dec.sort()
    rho_d = (dec[len(dec) // 2] if len(dec) % 2 else (dec[len(dec) // 2 - 1] + dec[len(dec) // 2]) / 2) if dec else 1.0
    return ExtendFit(slots=slots, seconds_per_key=kappa, rotated_factor=rho, decode_rotated_factor=max(rho_d, 0.0),
                     grid_error=med)
