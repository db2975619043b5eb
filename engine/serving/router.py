"""Request routers: pick a replica for an arriving request.

* ``round-robin``  — replicas in turn.
* ``least-loaded`` — fewest outstanding requests (queued + prefilling + decoding); ties lowest index.
* ``cache-aware``  — the replica whose policy ``lookup`` would reuse the most tokens right now; ties
  least-loaded, then lowest index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Router:
    """Stateful router over ``replicas`` (objects with ``num_outstanding``) and their ``policies``."""

    def __init__(self, name: str, replicas: Sequence[Any], policies: Sequence[Any]) -> None:
        if name not in ("round-robin", "least-loaded", "cache-aware"):
            raise ValueError(f"router: unknown {name!r}; known: round-robin, least-loaded, cache-aware")
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
        reuse = [self.policies[i].lookup(view, now_us).num_reused for i in range(n)]
        return min(range(n), key=lambda i: (-reuse[i], self.replicas[i].num_outstanding, i))
