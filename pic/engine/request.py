"""Request entity of the serving simulation: trace facts, lifecycle timestamps and ``num_*`` counters."""

from __future__ import annotations

from enum import IntEnum


class Status(IntEnum):
    PENDING = 0      # not arrived yet
    WAITING = 1      # arrived, queued at a replica
    PREFILL = 2      # prefill in progress
    DECODE = 3       # first token out, decoding
    FINISHED = 4


class Request:
    """One trace request inside one simulation (mutable; times in integer µs, -1 = not yet)."""

    __slots__ = (
        "idx", "request_id", "session_id", "num_prompt_tokens", "num_output_tokens", "status", "replica",
        "arrival_us", "start_us", "first_token_us", "finish_us",
        "num_reused", "num_rotated", "num_recomputed", "num_prefix_reused",
        "prefill_flops", "prefill_hbm_bytes", "cache_read_bytes", "prefill_joules",
        "nocache_prefill_joules", "prefix_prefill_joules", "num_evictions", "uncached", "num_oracle_reused",
        "num_recurrent_tokens", "attn_layer_s", "recurrent_layer_s", "nocache_attn_layer_s",
        "nocache_recurrent_layer_s",
        "view", "admitted",
    )

    def __init__(self, idx: int, request_id: int, session_id: str, num_prompt_tokens: int,
                 num_output_tokens: int, arrival_us: int) -> None:
        self.idx = idx
        self.request_id = request_id
        self.session_id = session_id
        self.num_prompt_tokens = num_prompt_tokens
        self.num_output_tokens = num_output_tokens
        self.status = Status.PENDING
        self.replica = -1
        self.arrival_us = arrival_us
        self.start_us = self.first_token_us = self.finish_us = -1
        self.num_reused = self.num_rotated = self.num_recomputed = self.num_prefix_reused = 0
        self.prefill_flops = self.prefill_hbm_bytes = self.cache_read_bytes = 0.0
        self.prefill_joules = self.nocache_prefill_joules = self.prefix_prefill_joules = 0.0
        self.num_evictions = 0
        self.num_oracle_reused = 0  # the trace-level oracle's reuse of this request (engine.oracle)
        self.uncached = False
        self.num_recurrent_tokens = 0   # tokens the recurrent layers of a hybrid model ran
        self.attn_layer_s = self.recurrent_layer_s = 0.0   # prefill time by layer kind (plan priced alone)
        self.nocache_attn_layer_s = self.nocache_recurrent_layer_s = 0.0
        self.view = None            # RequestView while in flight (dropped at finish)
        self.admitted = False       # the policy admitted it (commit/release owed)

    def __repr__(self) -> str:
        return (f"Request(id={self.request_id}, status={self.status.name}, replica={self.replica}, "
                f"N={self.num_prompt_tokens}, out={self.num_output_tokens})")
