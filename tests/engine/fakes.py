"""Tiny stand-ins for the cost model and an exact-prefix cache (serving tests only)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from engine.plan import Plan
from engine.policies.base import CachePolicy, PolicyContext, RequestView, Usage


class FakeCost:
    """Affine cost: step = fixed + a*new_tokens + b*cached_before + c*decode_context."""

    def __init__(self, fixed=1e-3, a=2e-6, b=1e-9, c=1e-8, joule_per_s=600.0):
        self.fixed, self.a, self.b, self.c, self.w = fixed, a, b, c, joule_per_s

    def step_time(self, prefill_chunks, num_decode, decode_context_tokens):
        t = self.fixed + self.c * decode_context_tokens
        for n, before in prefill_chunks:
            t += self.a * n + self.b * before
        return t

    def decode_step_coeffs(self, num_decode):
        return self.fixed, self.c

    def prefill(self, plan):
        n = max(1, plan.num_recomputed)
        t = self.step_time(((n, plan.num_tokens - n),), 0, 0)
        return SimpleNamespace(flops=2.0 * n, hbm_bytes=1.0 * plan.num_tokens, time_s=t, joules=t * self.w,
                               cache_read_bytes=float(plan.num_reused), rotation_flops=0.0, rotation_bytes=0.0)


class BrutePrefix(CachePolicy):
    """Exact-prefix cache by brute force: committed prompts in a list, unbounded, never evicts."""

    name = "brute-prefix"

    def __init__(self, ctx: PolicyContext | None = None, config=None, reject: bool = False):
        super().__init__(ctx or PolicyContext(float("inf"), 1), config)
        self.stored: list[np.ndarray] = []
        self.locked = 0
        self.reject = reject

    def lookup(self, req: RequestView, now_us: int) -> Plan:
        self.stats.lookups += 1
        best = 0
        for s in self.stored:
            m = min(s.size, req.tokens.size)
            neq = np.nonzero(s[:m] != req.tokens[:m])[0]
            best = max(best, int(neq[0]) if neq.size else m)
        return Plan.from_prefix(req.num_tokens, best)

    def admit(self, req, plan, now_us):
        if self.reject:
            self.stats.rejected += 1
            return False
        self.locked += 1
        return True

    def commit(self, req, now_us):
        self.stored.append(req.tokens.copy())

    def release(self, req, now_us):
        self.locked -= 1
        assert self.locked >= 0

    def evict(self, num_bytes, now_us):
        return 0

    def usage(self) -> Usage:
        total = sum(s.size for s in self.stored)
        return Usage(total, 0, total, float("inf"))
