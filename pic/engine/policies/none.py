"""``none`` — no cache: every request prefills every token. The floor every other policy is measured
against (energy saved vs no cache)."""

from __future__ import annotations

from pic.engine.plan import Plan
from pic.engine.policies import register
from pic.engine.policies.base import CachePolicy, RequestView, Usage


@register
class NoCache(CachePolicy):
    name = "none"

    def lookup(self, req: RequestView, now_us: int) -> Plan:
        self.stats.lookups += 1
        return Plan.recompute_all(req.num_tokens)

    def admit(self, req: RequestView, plan: Plan, now_us: int) -> bool:
        return True

    def commit(self, req: RequestView, now_us: int) -> None:
        return None

    def release(self, req: RequestView, now_us: int) -> None:
        return None

    def evict(self, num_bytes: int, now_us: int) -> int:
        return 0

    def usage(self) -> Usage:
        return Usage(0, 0, 0, self.ctx.capacity_bytes)
