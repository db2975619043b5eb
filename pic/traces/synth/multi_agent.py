"""`multi-agent`: agents with different role headers sharing tool schemas and a session transcript.

A session is one orchestrated task. Steps alternate: the orchestrator, then a worker (drawn uniformly among
``num_agents - 1`` workers), then the orchestrator again, and so on. Every step's prompt is
``role header(agent) + tools + task + transcript``: the role header (kind ``system``,
``role_min..role_max`` tokens) is fixed per agent and different between agents; the tool schemas are shared
by all; the transcript (every earlier step's output, kind ``assistant``, plus tool results a worker
fetched from a shared pool with probability ``tool_prob``) is the same for every agent of the session. So
the transcript sits at a different offset for each agent: an exact-prefix cache reuses it only when the
same agent speaks again, a position-independent cache across agents.
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

ROLES = ("orchestrator", "researcher", "coder", "reviewer", "tester", "writer", "planner", "critic")


@dataclass(frozen=True, slots=True)
class MultiAgentConfig(SessionConfig):
    """Knobs of `multi-agent` (lengths in tokens)."""

    turns_mean: float = field(default=8.0, metadata={"help": "mean agent steps (requests) per session"})
    turns_max: int = field(default=24, metadata={"help": "cap on steps per session"})
    think_s: float = field(default=0.5, metadata={"help": "mean hand-off / tool time between steps, s"})
    output_median: int = field(default=150, metadata={"help": "median output tokens (log-normal)"})
    output_max: int = field(default=1024, metadata={"help": "cap on output tokens"})
    query_min: int = field(default=50, metadata={"help": "min task description tokens"})
    query_max: int = field(default=400, metadata={"help": "max task description tokens"})
    num_agents: int = field(default=4, metadata={"help": "agents: one orchestrator + workers"})
    role_min: int = field(default=200, metadata={"help": "min role header tokens (per agent)"})
    role_max: int = field(default=800, metadata={"help": "max role header tokens"})
    tools_min: int = field(default=1000, metadata={"help": "min tool-schema tokens (shared, drawn once)"})
    tools_max: int = field(default=4000, metadata={"help": "max tool-schema tokens"})
    tool_out_min: int = field(default=100, metadata={"help": "min tokens per tool output"})
    tool_out_max: int = field(default=1500, metadata={"help": "max tokens per tool output"})
    pool_size: int = field(default=64, metadata={"help": "tool outputs in the shared pool"})
    zipf_a: float = field(default=1.0, metadata={"help": "Zipf exponent of tool-output popularity"})
    tool_prob: float = field(default=0.5, metadata={"help": "chance a worker step adds a tool output"})

    def _check(self) -> None:
        for stem in ("role", "tools", "tool_out"):
            check_range(self, stem)
        check_positive(self, "pool_size")
        if self.num_agents < 2:
            raise ValueError(f"num_agents: need >= 2 (orchestrator + a worker), got {self.num_agents}")
        if not 0 <= self.tool_prob <= 1:
            raise ValueError(f"tool_prob: must be in [0, 1], got {self.tool_prob}")
        if self.zipf_a < 0:
            raise ValueError(f"zipf_a: must be >= 0, got {self.zipf_a}")


def agent_names(n: int) -> list[str]:
    """``n`` agent ids: role names, then ``agent-<i>`` beyond the named roles."""
    return [ROLES[i] if i < len(ROLES) else f"agent-{i}" for i in range(n)]


def generate(rng: np.random.Generator, cfg: MultiAgentConfig, num_requests: int, b: Builder) -> None:
    """Append ``num_requests`` multi-agent requests to ``b``."""
    plan = session_plan(rng, cfg, num_requests)
    names = agent_names(cfg.num_agents)
    roles = [b.seg(text_between(rng, cfg.role_min, cfg.role_max), "system") for _ in names]
    tools = b.seg(text_between(rng, cfg.tools_min, cfg.tools_max), "tools")
    outputs = pool(rng, cfg.pool_size, cfg.tool_out_min, cfg.tool_out_max)
    weights = zipf_weights(cfg.pool_size, cfg.zipf_a)
    for s, (start_us, num_turns) in enumerate(plan):
        task = b.seg(text(rng, query_len(rng, cfg)), "user")
        transcript: list[int] = []
        t_us, num_out = start_us, 0
        for step in range(num_turns):
            if step:
                t_us = next_arrival(rng, cfg, t_us, num_out)
            agent = 0 if step % 2 == 0 else int(rng.integers(1, cfg.num_agents))
            num_out = output_tokens(rng, cfg)
            b.request(f"s{s:06d}", names[agent], t_us, num_out, [roles[agent], tools, task, *transcript])
            if step + 1 == num_turns:  # the last answer is never part of a prompt
                break
            transcript.append(b.seg(text(rng, num_out), "assistant"))
            if agent and rng.random() < cfg.tool_prob:
                transcript.append(b.seg(outputs[int(rng.choice(cfg.pool_size, p=weights))], "tool_output"))


SCENARIO = Scenario("multi-agent", MultiAgentConfig, generate,
                    "orchestrator + workers with different role headers sharing tool schemas and transcript")
