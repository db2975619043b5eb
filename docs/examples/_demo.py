"""Shared by the policy examples: three hand-built requests and a printer for Plans (not an example itself).

The requests are made of named pieces of random token ids (seeded, so every run prints the same):

* ``r0 = SYS + DOC_A + DOC_B + Q0``        first sight of everything
* ``r1 = SYS + DOC_A + DOC_B + Q1``        same context, new question: an exact-prefix hit
* ``r2 = HDR + SYS + DOC_B + DOC_A + Q2``  a per-request header in front and the documents swapped:
  nothing is a prefix any more, but every piece except HDR and Q2 was seen before, at another position
"""

from __future__ import annotations

import numpy as np

from pic.engine.plan import Action, Plan
from pic.engine.policies.base import RequestView

SIZES = {"SYS": 600, "DOC_A": 700, "DOC_B": 500, "HDR": 37, "Q0": 40, "Q1": 40, "Q2": 40}
LAYOUTS = (("SYS", "DOC_A", "DOC_B", "Q0"), ("SYS", "DOC_A", "DOC_B", "Q1"),
           ("HDR", "SYS", "DOC_B", "DOC_A", "Q2"))


def three_requests(seed: int = 0) -> list[tuple[RequestView, str]]:
    """``[(request, layout text)]`` for r0, r1, r2 (token ids uniform in [0, 50000))."""
    rng = np.random.default_rng(seed)
    pieces = {name: rng.integers(0, 50_000, n, dtype=np.int32) for name, n in SIZES.items()}
    out = []
    for i, names in enumerate(LAYOUTS):
        pos, parts = 0, []
        for name in names:
            parts.append(f"{name}[{pos},{pos + SIZES[name]})")
            pos += SIZES[name]
        tokens = np.concatenate([pieces[name] for name in names])
        out.append((RequestView.from_tokens(i, tokens), " ".join(parts)))
    return out


def show(name: str, req: RequestView, layout: str, plan: Plan) -> None:
    """Print one request's layout and the plan a policy answered for it."""
    print(f"{name}: {layout}")
    print(f"  N={plan.num_tokens} reused={plan.num_reused} rotated={plan.num_rotated} "
          f"recomputed={plan.num_recomputed}")
    for s in plan.spans:
        src = f"  from {s.source_pos} (delta {s.delta:+d})" if s.action == Action.REUSE_ROTATED else ""
        print(f"    [{s.start:5d}, {s.end:5d})  {s.action.name:<13}{src}".rstrip())
