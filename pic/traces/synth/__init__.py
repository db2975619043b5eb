"""Seeded synthetic agentic traces (``pic synth``): the prompt shapes the PIC literature names.

``synth(scenario, num_requests, seed, markers=False, **knobs)`` returns a validated :class:`Trace`;
the same arguments always give the same trace (and the same Parquet bytes). Scenarios and their knobs:
``SCENARIOS[name].config`` (a frozen dataclass; each field's help is in its metadata). See
docs/scenarios.md.
"""

from __future__ import annotations

from collections.abc import Callable

from pic.traces.schema import Trace
from pic.traces.stats import trace_stats
from pic.traces.suggest import did_you_mean
from pic.traces.synth import chat, early_variation, multi_agent, rag, tool_reorder
from pic.traces.synth.common import Builder, Scenario, SessionConfig, config_json, make_config
from pic.traces.synth.text import make_rng

GENERATOR_VERSION = 1

SCENARIOS: dict[str, Scenario] = {
    m.SCENARIO.name: m.SCENARIO
    for m in (early_variation, rag, tool_reorder, multi_agent, chat)
}


def scenario_config(scenario: str, **knobs) -> SessionConfig:
    """The resolved config of ``scenario`` with ``knobs`` applied (string values parsed by field type)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario: unknown {scenario!r}{did_you_mean(scenario, SCENARIOS)}; choose from "
                         f"{', '.join(SCENARIOS)}")
    return make_config(SCENARIOS[scenario].config, knobs)


def synth(scenario: str, num_requests: int, seed: int, markers: bool = False, *,
          progress: Callable[[int], None] | None = None, **knobs) -> Trace:
    """Generate ``num_requests`` requests of ``scenario`` from ``seed``.

    ``markers=True`` wraps every shared region (system, tools, each document / tool output) in the 64-token
    S2 boundary marker (one marker segment between two adjacent shared regions). Knobs are fields of
    ``SCENARIOS[scenario].config``; unknown knobs or bad values raise ``ValueError``. ``progress(n)`` is
    called with the number of requests made so far (every 1024 requests).
    """
    cfg = scenario_config(scenario, **knobs)
    if num_requests < 1:
        raise ValueError(f"num_requests: must be >= 1, got {num_requests}")
    rng = make_rng(seed)
    builder = Builder(markers, progress)
    SCENARIOS[scenario].generate(rng, cfg, int(num_requests), builder)
    meta = {
        "synth.scenario": scenario, "synth.seed": str(seed), "synth.num_requests": str(num_requests),
        "synth.markers": str(bool(markers)).lower(), "synth.config": config_json(cfg),
        "synth.version": str(GENERATOR_VERSION),
    }
    return builder.finish(f"<synth:{scenario}>", meta)


def summarize(trace: Trace) -> dict[str, float]:
    """Headline numbers of a trace (from :func:`traces.stats.trace_stats`): requests, sessions, prompt
    tokens, distinct tokens, span, rate."""
    s = trace_stats(trace)
    return {
        "requests": s["requests"], "sessions": s["sessions"], "agents": s["agents"],
        "segments": s["distinct_segments"], "prompt_tokens": s["prompt_tokens"],
        "distinct_tokens": s["segment_tokens_distinct"], "dedup_ratio": s["dedup_ratio"] or 0.0,
        "prompt_p50": s["prompt_len"]["p50"], "prompt_p99": s["prompt_len"]["p99"],
        "output_tokens": s["output_tokens"], "span_s": s["duration_s"], "rate_rps": s["arrival_rate_rps"] or 0.0,
    }


__all__ = ["GENERATOR_VERSION", "SCENARIOS", "Scenario", "scenario_config", "summarize", "synth"]
