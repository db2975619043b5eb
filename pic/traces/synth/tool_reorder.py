"""`tool-reorder`: an agent loop whose tool outputs (from a shared pool) are reordered between turns.

A session is one task. Turn t's prompt is ``system + tools + task + (call_1, result_1) ... (call_{t-1},
result_{t-1})``; its output is the next tool call (``output_tokens`` long, kind ``assistant``) and the tool
returns a result from a shared pool of ``pool_size`` outputs (file reads, search hits; Zipf popularity, so
different sessions read the same files). Between turns the context manager reorders:
- a result already in context that the tool returns again is moved (re-inserted) to the end, not duplicated;
- with probability ``reorder_prob`` one earlier (call, result) pair is moved to the end (recency refresh);
- at most ``history_max`` pairs are kept (oldest dropped).
Each reorder breaks the exact prefix in the middle of the context; the moved outputs are unchanged content.
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
from pic.traces.synth.text import pool, text, text_between, zipf_weights


@dataclass(frozen=True, slots=True)
class ToolReorderConfig(SessionConfig):
    """Knobs of `tool-reorder` (lengths in tokens)."""

    turns_mean: float = field(default=8.0, metadata={"help": "mean agent steps (requests) per session"})
    turns_max: int = field(default=32, metadata={"help": "cap on steps per session"})
    think_s: float = field(default=1.0, metadata={"help": "mean tool execution time between steps, s"})
    output_median: int = field(default=80, metadata={"help": "median tool-call tokens (log-normal)"})
    output_sigma: float = field(default=0.6, metadata={"help": "log-space sigma of output tokens"})
    output_max: int = field(default=1024, metadata={"help": "cap on output tokens"})
    query_min: int = field(default=50, metadata={"help": "min task description tokens"})
    query_max: int = field(default=400, metadata={"help": "max task description tokens"})
    system_min: int = field(default=800, metadata={"help": "min system prompt tokens (drawn once)"})
    system_max: int = field(default=1500, metadata={"help": "max system prompt tokens"})
    tools_min: int = field(default=1000, metadata={"help": "min tool-schema tokens (drawn once)"})
    tools_max: int = field(default=4000, metadata={"help": "max tool-schema tokens"})
    tool_out_min: int = field(default=100, metadata={"help": "min tokens per tool output"})
    tool_out_max: int = field(default=2000, metadata={"help": "max tokens per tool output"})
    pool_size: int = field(default=64, metadata={"help": "tool outputs in the shared pool"})
    zipf_a: float = field(default=1.0, metadata={"help": "Zipf exponent of tool-output popularity"})
    reorder_prob: float = field(default=0.5, metadata={"help": "chance per step to move an earlier pair to the end"})
    history_max: int = field(default=12, metadata={"help": "max (call, result) pairs kept in context"})

    def _check(self) -> None:
        for stem in ("system", "tools", "tool_out"):
            check_range(self, stem)
        check_positive(self, "pool_size", "history_max")
        if not 0 <= self.reorder_prob <= 1:
            raise ValueError(f"reorder_prob: must be in [0, 1], got {self.reorder_prob}")
        if self.zipf_a < 0:
            raise ValueError(f"zipf_a: must be >= 0, got {self.zipf_a}")


def step_context(rng: np.random.Generator, cfg: ToolReorderConfig, history: list[tuple[int, int]],
                 call: int, result: int) -> list[tuple[int, int]]:
    """The (call, result) pairs after one tool step, with re-insertion, reordering and truncation."""
    hist = [p for p in history if p[1] != result]  # result seen again: re-inserted at the end
    if len(hist) > 1 and rng.random() < cfg.reorder_prob:
        j = int(rng.integers(0, len(hist) - 1))
        hist.append(hist.pop(j))
    hist.append((call, result))
    return hist[-cfg.history_max:]


def generate(rng: np.random.Generator, cfg: ToolReorderConfig, num_requests: int, b: Builder) -> None:
    """Append ``num_requests`` tool-reorder requests to ``b``."""
    plan = session_plan(rng, cfg, num_requests)
    system = b.seg(text_between(rng, cfg.system_min, cfg.system_max), "system")
    tools = b.seg(text_between(rng, cfg.tools_min, cfg.tools_max), "tools")
    outputs = pool(rng, cfg.pool_size, cfg.tool_out_min, cfg.tool_out_max)
    weights = zipf_weights(cfg.pool_size, cfg.zipf_a)
    for s, (start_us, num_turns) in enumerate(plan):
        task = b.seg(text(rng, query_len(rng, cfg)), "user")
        history: list[tuple[int, int]] = []
        t_us, num_out = start_us, 0
        for turn in range(num_turns):
            if turn:
                t_us = next_arrival(rng, cfg, t_us, num_out)
            num_out = output_tokens(rng, cfg)
            ctx = [sid for pair in history for sid in pair]
            b.request(f"s{s:06d}", "main", t_us, num_out, [system, tools, task, *ctx])
            if turn + 1 == num_turns:  # the last answer is never part of a prompt
                break
            call = b.seg(text(rng, num_out), "assistant")
            result = b.seg(outputs[int(rng.choice(cfg.pool_size, p=weights))], "tool_output")
            history = step_context(rng, cfg, history, call, result)


SCENARIO = Scenario("tool-reorder", ToolReorderConfig, generate,
                    "agent loop; tool outputs from a shared pool reordered / re-inserted between steps")
