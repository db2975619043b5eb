"""`early-variation`: a variable-length metadata header BEFORE shared content.

Each request is ``header + system + tools + documents + [earlier turns] + query``:
- header (kind ``user``, unique per request): ``header_common`` tokens common to every request, then
  request-id / timestamp / user / session fields as digit tokens and free-form filler (client, locale,
  trace context) up to a length uniform on ``[header_min, header_max]``; re-drawn on every turn;
- one system prompt (``system_min..system_max`` tokens) and one tool-schema block (``tools_min..tools_max``),
  identical in every request;
- per session ``docs_min..docs_max`` documents from a pool of ``pool_size`` (Zipf popularity ``zipf_a``,
  each ``doc_min..doc_max`` tokens);
- earlier turns' queries and answers (multi-turn sessions), then a short unique user query.
An exact-prefix cache can match only the ``header_common`` leading tokens (plus nothing after the header,
since its length varies); a position-independent cache can find everything after the header.
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
from pic.traces.synth.text import (
    DIGITS,
    digits,
    fixed_text,
    pool,
    text,
    text_between,
    uniform_int,
    zipf_pick,
    zipf_weights,
)


@dataclass(frozen=True, slots=True)
class EarlyVariationConfig(SessionConfig):
    """Knobs of `early-variation` (lengths in tokens)."""

    turns_mean: float = field(default=2.0, metadata={"help": "mean turns (requests) per session (geometric)"})
    header_min: int = field(default=16, metadata={"help": "min metadata header tokens"})
    header_max: int = field(default=200, metadata={"help": "max metadata header tokens"})
    header_common: int = field(default=4, metadata={"help": "leading header tokens common to all requests"})
    system_min: int = field(default=1000, metadata={"help": "min system prompt tokens (drawn once)"})
    system_max: int = field(default=2000, metadata={"help": "max system prompt tokens"})
    tools_min: int = field(default=1000, metadata={"help": "min tool-schema tokens (drawn once)"})
    tools_max: int = field(default=4000, metadata={"help": "max tool-schema tokens"})
    doc_min: int = field(default=300, metadata={"help": "min tokens per document"})
    doc_max: int = field(default=2000, metadata={"help": "max tokens per document"})
    pool_size: int = field(default=32, metadata={"help": "documents in the shared pool"})
    docs_min: int = field(default=2, metadata={"help": "min documents per session"})
    docs_max: int = field(default=4, metadata={"help": "max documents per session"})
    zipf_a: float = field(default=1.0, metadata={"help": "Zipf exponent of document popularity"})

    def _check(self) -> None:
        for stem in ("header", "system", "tools", "doc"):
            check_range(self, stem)
        check_range(self, "docs", lo=0)
        check_positive(self, "pool_size")
        if self.docs_max > self.pool_size:
            raise ValueError(f"docs_max: {self.docs_max} exceeds pool_size {self.pool_size}")
        if not 0 <= self.header_common < self.header_min:
            raise ValueError(f"header_common: need 0 <= header_common < header_min, got {self.header_common}")
        if self.zipf_a < 0:
            raise ValueError(f"zipf_a: must be >= 0, got {self.zipf_a}")


_KEYS = {name: fixed_text(10 + i, 2) for i, name in enumerate(("ts", "user", "session", "seq"))}


def header(rng: np.random.Generator, cfg: EarlyVariationConfig, common: np.ndarray, *, request: int,
           arrival_us: int, user: int, session: int) -> np.ndarray:
    """int32 [L]: a metadata header, L uniform on [header_min, header_max].

    Layout: ``common`` tokens, a random 12-digit request id (uuid-like, so the exact common prefix of two
    headers is ``common`` plus a chance digit), then ts/user/session/seq fields and filler text.
    """
    n = int(uniform_int(rng, cfg.header_min, cfg.header_max))
    fields_ = [
        common, rng.choice(DIGITS, 12),
        _KEYS["ts"], digits(1_764_000_000 + arrival_us // 10**6, 10), _KEYS["user"], digits(user, 6),
        _KEYS["session"], digits(session, 8), _KEYS["seq"], digits(request, 8),
    ]
    head = np.concatenate(fields_).astype(np.int32)
    if head.size >= n:
        return head[:n]
    return np.concatenate([head, text(rng, n - head.size)])


def generate(rng: np.random.Generator, cfg: EarlyVariationConfig, num_requests: int, b: Builder) -> None:
    """Append ``num_requests`` early-variation requests to ``b``."""
    plan = session_plan(rng, cfg, num_requests)
    common = fixed_text(1, cfg.header_common)
    system = b.seg(text_between(rng, cfg.system_min, cfg.system_max), "system")
    tools = b.seg(text_between(rng, cfg.tools_min, cfg.tools_max), "tools")
    docs = pool(rng, cfg.pool_size, cfg.doc_min, cfg.doc_max)
    weights = zipf_weights(cfg.pool_size, cfg.zipf_a)
    num_made = 0
    for s, (start_us, num_turns) in enumerate(plan):
        picks = zipf_pick(rng, weights, int(uniform_int(rng, cfg.docs_min, cfg.docs_max)))
        doc_ids = [b.seg(docs[i], "document") for i in picks]
        user = int(rng.integers(0, 10**6))
        history: list[int] = []
        t_us, num_out = start_us, 0
        for turn in range(num_turns):
            if turn:
                t_us = next_arrival(rng, cfg, t_us, num_out)
            hdr = b.seg(header(rng, cfg, common, request=num_made, arrival_us=t_us, user=user, session=s), "user")
            query = b.seg(text(rng, query_len(rng, cfg)), "user")
            num_out = output_tokens(rng, cfg)
            b.request(f"s{s:06d}", "main", t_us, num_out, [hdr, system, tools, *doc_ids, *history, query])
            num_made += 1
            if turn + 1 == num_turns:  # the last answer is never part of a prompt
                break
            history += [query, b.seg(text(rng, num_out), "assistant")]


SCENARIO = Scenario("early-variation", EarlyVariationConfig, generate,
                    "variable metadata header before shared system prompt + tools + documents")
