"""Pieces every scenario shares: the session/arrival knobs, the session plan, and the trace builder.

Arrivals: sessions start as a Poisson process at ``rate / turns_mean`` sessions/s, so requests arrive at
about ``rate`` req/s overall; turn t+1 of a session arrives ``output_tokens / decode_tok_s + think`` seconds
after turn t (think ~ exponential with mean ``think_s``), so arrivals are monotone per session.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields

import numpy as np
import polars as pl

from pic.traces.markers import BOUNDARY_MARKER
from pic.traces.options import build_config
from pic.traces.schema import REQUEST_COLUMNS, SegmentTable, Trace
from pic.traces.synth.text import lognormal_int, uniform_int

#: kinds wrapped in S2 boundary markers with ``markers=True`` (content meant to be shared)
SHARED_KINDS = frozenset({"system", "tools", "document", "tool_output"})


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Knobs common to every scenario (arrivals, session length, output and query lengths)."""

    rate: float = field(default=1.0, metadata={"help": "mean request arrival rate, req/s"})
    turns_mean: float = field(default=3.0, metadata={"help": "mean turns (requests) per session (geometric)"})
    turns_max: int = field(default=16, metadata={"help": "cap on turns per session"})
    think_s: float = field(default=5.0, metadata={"help": "mean think/tool time between turns, s (exponential)"})
    decode_tok_s: float = field(default=50.0, metadata={"help": "decode speed used to space turns, tokens/s"})
    output_median: int = field(default=200, metadata={"help": "median output tokens (log-normal)"})
    output_sigma: float = field(default=0.8, metadata={"help": "log-space sigma of output tokens"})
    output_max: int = field(default=2048, metadata={"help": "cap on output tokens"})
    query_min: int = field(default=20, metadata={"help": "min user query tokens"})
    query_max: int = field(default=200, metadata={"help": "max user query tokens"})

    def __post_init__(self) -> None:
        check_positive(self, "rate", "decode_tok_s", "output_median", "output_max", "turns_max")
        if self.turns_mean < 1:
            raise ValueError(f"turns_mean: must be >= 1, got {self.turns_mean}")
        if self.think_s < 0 or self.output_sigma < 0:
            raise ValueError("think_s, output_sigma: must be >= 0")
        check_range(self, "query")
        self._check()

    def _check(self) -> None:
        """Scenario-specific validation (override)."""


def check_positive(cfg, *names: str) -> None:
    for n in names:
        if not getattr(cfg, n) > 0:
            raise ValueError(f"{n}: must be > 0, got {getattr(cfg, n)}")


def check_range(cfg, stem: str, lo: int = 1) -> None:
    a, b = getattr(cfg, f"{stem}_min"), getattr(cfg, f"{stem}_max")
    if not lo <= a <= b:
        raise ValueError(f"{stem}_min/{stem}_max: need {lo} <= min <= max, got {a}..{b}")


def make_config(cls: type, knobs: dict[str, object]):
    """Build config ``cls`` from ``knobs``; string values are parsed and range-checked by field type
    (``traces.options``); unknown keys raise."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(knobs) - names)
    if unknown:
        raise ValueError(f"unknown knob(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    return build_config(cls, knobs, "")


@dataclass(frozen=True, slots=True)
class Scenario:
    """A registered scenario: its config class and ``generate(rng, cfg, num_requests, builder)``."""

    name: str
    config: type
    generate: Callable[[np.random.Generator, SessionConfig, int, Builder], None]
    summary: str


def config_json(cfg) -> str:
    return json.dumps(asdict(cfg), sort_keys=True)


def session_plan(rng: np.random.Generator, cfg: SessionConfig, num_requests: int) -> list[tuple[int, int]]:
    """[(start_us, num_turns)] for as many sessions as needed to make exactly ``num_requests`` turns."""
    plan: list[tuple[int, int]] = []
    t_s, total = 0.0, 0
    gap_mean = cfg.turns_mean / cfg.rate
    while total < num_requests:
        t_s += rng.exponential(gap_mean)
        n = min(int(rng.geometric(1.0 / cfg.turns_mean)), cfg.turns_max, num_requests - total)
        plan.append((int(round(t_s * 1e6)), n))
        total += n
    return plan


def output_tokens(rng: np.random.Generator, cfg: SessionConfig) -> int:
    """One response length (log-normal around ``output_median``, in [1, output_max])."""
    return lognormal_int(rng, cfg.output_median, cfg.output_sigma, 1, cfg.output_max)


def query_len(rng: np.random.Generator, cfg: SessionConfig) -> int:
    return int(uniform_int(rng, cfg.query_min, cfg.query_max))


def next_arrival(rng: np.random.Generator, cfg: SessionConfig, prev_us: int, prev_output: int) -> int:
    """Arrival of the next turn: previous arrival + decode time of its output + think time."""
    think = rng.exponential(cfg.think_s) if cfg.think_s > 0 else 0.0
    gap_s = prev_output / cfg.decode_tok_s + think
    return prev_us + max(1, int(round(gap_s * 1e6)))


class Builder:
    """Collects segments (stored once) and request rows; inserts S2 markers around shared kinds."""

    def __init__(self, markers: bool, progress: Callable[[int], None] | None = None):
        self.table = SegmentTable()
        self._progress = progress
        self.markers = markers
        self._shared: dict[int, bool] = {}
        self._marker = self.table.add(BOUNDARY_MARKER, "marker") if markers else None
        self._rows: dict[str, list] = {c: [] for c in REQUEST_COLUMNS}

    def seg(self, tokens: np.ndarray, kind: str) -> int:
        """Store a segment (once) and return its id."""
        sid = self.table.add(tokens, kind)
        self._shared[sid] = kind in SHARED_KINDS
        return sid

    def request(self, session_id: str, agent_id: str, arrival_us: int, num_output: int,
                sids: list[int]) -> None:
        """Append one request whose prompt is the concatenation of ``sids`` (markers added if on)."""
        if self.markers:
            out: list[int] = []
            for sid in sids:
                if self._shared[sid]:
                    if not out or out[-1] != self._marker:
                        out.append(self._marker)
                    out.extend((sid, self._marker))
                else:
                    out.append(sid)
            sids = out
        r = self._rows
        r["request_id"].append(len(r["request_id"]))
        r["session_id"].append(session_id)
        r["agent_id"].append(agent_id)
        r["arrival_us"].append(int(arrival_us))
        r["output_tokens"].append(int(num_output))
        r["segment_ids"].append(list(sids))
        if self._progress is not None and len(r["request_id"]) % 1024 == 0:
            self._progress(len(r["request_id"]))

    def finish(self, source: str, meta: dict[str, str]) -> Trace:
        """The trace, requests sorted by arrival (ties in generation order), ids renumbered 0..R-1."""
        df = pl.DataFrame(self._rows, schema=REQUEST_COLUMNS)
        df = df.sort(["arrival_us", "request_id"]).with_columns(
            pl.int_range(pl.len(), dtype=pl.Int64).alias("request_id"))
        return Trace(segments=self.table.build(), requests=df, source=source, meta=meta)
