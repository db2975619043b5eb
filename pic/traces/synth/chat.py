"""`chat`: plain multi-turn chat, the prefix-friendly control.

Turn t's prompt is turn t-1's prompt + its answer (``output_tokens`` long, kind ``assistant``) + a new user
message; turn 1 is ``system + user``. The system prompt is one of ``num_systems`` (apps/personas, Zipf
popularity). Nothing is ever shifted, so an exact-prefix cache already finds everything reusable and a
position-independent cache should add (almost) nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pic.traces.synth.common import (
    Builder,
    Scenario,
    SessionConfig,
    check_positive,
    check_range,
    next_arrival,
    output_tokens,
    query_len,
    session_plan,
)
from pic.traces.synth.text import pool, text, zipf_weights


@dataclass(frozen=True, slots=True)
class ChatConfig(SessionConfig):
    """Knobs of `chat` (lengths in tokens)."""

    turns_mean: float = field(default=5.0, metadata={"help": "mean turns (requests) per session (geometric)"})
    turns_max: int = field(default=32, metadata={"help": "cap on turns per session"})
    think_s: float = field(default=20.0, metadata={"help": "mean user think time between turns, s"})
    output_median: int = field(default=250, metadata={"help": "median answer tokens (log-normal)"})
    query_min: int = field(default=10, metadata={"help": "min user message tokens"})
    query_max: int = field(default=300, metadata={"help": "max user message tokens"})
    system_min: int = field(default=100, metadata={"help": "min system prompt tokens"})
    system_max: int = field(default=800, metadata={"help": "max system prompt tokens"})
    num_systems: int = field(default=3, metadata={"help": "distinct system prompts (Zipf popularity)"})

    def _check(self) -> None:
        check_range(self, "system")
        check_positive(self, "num_systems")


def generate(rng: np.random.Generator, cfg: ChatConfig, num_requests: int, b: Builder) -> None:
    """Append ``num_requests`` chat requests to ``b``."""
    plan = session_plan(rng, cfg, num_requests)
    systems = [b.seg(toks, "system") for toks in pool(rng, cfg.num_systems, cfg.system_min, cfg.system_max)]
    weights = zipf_weights(cfg.num_systems, 1.0)
    for s, (start_us, num_turns) in enumerate(plan):
        prompt = [systems[int(rng.choice(cfg.num_systems, p=weights))]]
        t_us, num_out = start_us, 0
        for turn in range(num_turns):
            if turn:
                t_us = next_arrival(rng, cfg, t_us, num_out)
                prompt.append(b.seg(text(rng, num_out), "assistant"))
            prompt.append(b.seg(text(rng, query_len(rng, cfg)), "user"))
            num_out = output_tokens(rng, cfg)
            b.request(f"s{s:06d}", "main", t_us, num_out, list(prompt))


SCENARIO = Scenario("chat", ChatConfig, generate, "plain multi-turn chat (prefix-friendly control)")
