"""Request routers: pick a replica for an arriving request.

* ``round-robin``  — replicas in turn.
* ``least-loaded`` — fewest outstanding requests (queued + prefilling + decoding); ties lowest index.
* ``cache-aware``  — the replica whose policy ``lookup`` would reuse the most tokens right now; ties
  least-loaded, then lowest index. Like SGLang's cache-aware router it falls back to least-loaded
  when the replicas are out of balance (max − min outstanding > ``BALANCE_ABS`` and
  max > ``BALANCE_REL`` × min) or when even the best replica would reuse less than
  ``CACHE_THRESHOLD`` of the prompt (new content spreads instead of piling onto one replica).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pic.engine.config import ROUTERS

BALANCE_ABS = 32        # outstanding requests (SGLang router default balance_abs_threshold)
BALANCE_REL = 1.0001    # SGLang router default balance_rel_threshold
CACHE_THRESHOLD = 0.5   # SGLang router default cache_threshold (fraction of the prompt reused)


class Router:
    """Stateful router over ``replicas`` (objects with ``num_outstanding``) and their ``policies``."""

    def __init__(self, name: str, replicas: Sequence[Any], policies: Sequence[Any]) -> None:
        if name not in ROUTERS:
            raise ValueError(f"router: unknown {name!r}; known: {', '.join(ROUTERS)}")
        self.name = name
        self.replicas = replicas
        self.policies = policies
        self._next = 0

    def pick(self, view: Any, now_us: int) -> int:
        """Replica index for request ``view`` arriving at ``now_us``."""
        n = len(self.replicas)
        if n == 1:
            return 0
        if self.name == "round-robin":
            i = self._next
            self._next = (i + 1) % n
            return i
        if self.name == "least-loaded":
            return min(range(n), key=lambda i: (self.replicas[i].num_outstanding, i))
        load = [self.replicas[i].num_outstanding for i in range(n)]
        least = min(range(n), key=lambda i: (load[i], i))
        if max(load) - load[least] > BALANCE_ABS and max(load) > BALANCE_REL * load[least]:
            return least
        reuse = [self.policies[i].lookup(view, now_us).num_reused for i in range(n)]
        best = min(range(n), key=lambda i: (-reuse[i], load[i], i))
        if reuse[best] < CACHE_THRESHOLD * max(view.num_tokens, 1):
            return least
        return best
