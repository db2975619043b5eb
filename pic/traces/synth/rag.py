"""`rag-reorder`: k retrieved documents from a shared pool, re-ranked per request, after a system prompt.

Each request is ``system + k documents + [earlier questions and answers] + question``. A session (one user's
conversation) has a topic: a working set of ``working_set`` documents drawn from a pool of ``pool_size``
by Zipf popularity ``zipf_a``. Each turn retrieves ``docs_min..docs_max`` of them and re-ranks them by a
per-question relevance score, N(0, 1) + ``rank_bias`` * log(popularity) (0 = order independent of
popularity, large = one canonical order), so the same documents come back in a different order and at
different offsets turn after turn and across users. An exact-prefix cache keeps the system prompt and, by luck, a first document; a
position-independent cache can reuse every retrieved document.
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
from pic.traces.synth.text import pool, text, text_between, uniform_int, zipf_pick, zipf_weights


@dataclass(frozen=True, slots=True)
class RagConfig(SessionConfig):
    """Knobs of `rag-reorder` (lengths in tokens)."""

    turns_mean: float = field(default=2.0, metadata={"help": "mean turns (requests) per session (geometric)"})
    think_s: float = field(default=15.0, metadata={"help": "mean think time between turns, s (exponential)"})
    system_min: int = field(default=300, metadata={"help": "min system prompt tokens (drawn once)"})
    system_max: int = field(default=1000, metadata={"help": "max system prompt tokens"})
    doc_min: int = field(default=200, metadata={"help": "min tokens per retrieved passage"})
    doc_max: int = field(default=1000, metadata={"help": "max tokens per retrieved passage"})
    pool_size: int = field(default=200, metadata={"help": "documents in the shared corpus"})
    working_set: int = field(default=12, metadata={"help": "documents in one session's topic"})
    docs_min: int = field(default=4, metadata={"help": "min documents retrieved per request (k)"})
    docs_max: int = field(default=8, metadata={"help": "max documents retrieved per request (k)"})
    zipf_a: float = field(default=0.9, metadata={"help": "Zipf exponent of document popularity"})
    rank_bias: float = field(default=0.0, metadata={"help": "weight of popularity in the rank (large = fixed order)"})

    def _check(self) -> None:
        for stem in ("system", "doc", "docs"):
            check_range(self, stem)
        check_positive(self, "pool_size", "working_set")
        if not self.docs_max <= self.working_set <= self.pool_size:
            raise ValueError(f"working_set: need docs_max <= working_set <= pool_size, got "
                             f"{self.docs_max}, {self.working_set}, {self.pool_size}")
        if self.zipf_a < 0 or self.rank_bias < 0:
            raise ValueError("zipf_a, rank_bias: must be >= 0")


def rerank(rng: np.random.Generator, picks: np.ndarray, weights: np.ndarray, bias: float) -> np.ndarray:
    """``picks`` ordered by a retriever score N(0, 1) + bias * log(popularity), best first."""
    score = rng.standard_normal(picks.size) + bias * np.log(weights[picks])
    return picks[np.argsort(-score, kind="stable")]


def generate(rng: np.random.Generator, cfg: RagConfig, num_requests: int, b: Builder) -> None:
    """Append ``num_requests`` rag-reorder requests to ``b``."""
    plan = session_plan(rng, cfg, num_requests)
    system = b.seg(text_between(rng, cfg.system_min, cfg.system_max), "system")
    docs = pool(rng, cfg.pool_size, cfg.doc_min, cfg.doc_max)
    weights = zipf_weights(cfg.pool_size, cfg.zipf_a)
    for s, (start_us, num_turns) in enumerate(plan):
        topic = zipf_pick(rng, weights, cfg.working_set)
        topic_w = weights[topic] / weights[topic].sum()
        history: list[int] = []
        t_us, num_out = start_us, 0
        for turn in range(num_turns):
            if turn:
                t_us = next_arrival(rng, cfg, t_us, num_out)
            k = int(uniform_int(rng, cfg.docs_min, cfg.docs_max))
            picks = rerank(rng, topic[zipf_pick(rng, topic_w, k)], weights, cfg.rank_bias)
            doc_ids = [b.seg(docs[i], "document") for i in picks]
            question = b.seg(text(rng, query_len(rng, cfg)), "user")
            num_out = output_tokens(rng, cfg)
            b.request(f"s{s:06d}", "main", t_us, num_out, [system, *doc_ids, *history, question])
            if turn + 1 == num_turns:  # the last answer is never part of a prompt
                break
            history += [question, b.seg(text(rng, num_out), "assistant")]


SCENARIO = Scenario("rag-reorder", RagConfig, generate,
                    "k documents from a Zipf pool, re-ranked per request, after a shared system prompt")
