"""``prefix`` told, not asked (issue #12): the state its replay in arrival order leaves, from the segment structure.

With one replica, the open loop, unbounded capacity, pages of one token and nothing watching, the serving model asks
``prefix`` in arrival order (``engine.serving.timeline``: lookup + admit, commit, release), so request ``i`` reuses its
longest prefix shared with an earlier prompt: ``engine.resident.resident_prefixes`` (the trace-level oracle computes
them from the segment trie for every replay, ``coverage.prompt_oracle``; same values as a radix tree's inserts,
tested there), not ``prefix``'s own answers. :func:`tell` sets what that replay leaves and the timeline reads:

* stats: ``lookups`` = the requests, ``hits`` = those with a prefix; nothing evicted nor refused;
* the tree's tokens: ``sum(N - pfx)``, all evictable at the end, never falling (the peak: that total);
* its nodes: every insert ends a prompt at a new leaf (``N > pfx``) and splits the edge where its prefix ends (a node
  there unless one was already, ``pfx > 0``): the distinct token strings among those points. The segment trie names
  them (``resident._from_structure``'s points: a node per whole-segment prefix, exact where the trie answers; a point
  inside a segment by its sibling run and depth), so the count is one ``np.unique``;
* the duplicate count: 0 where :func:`own_once` shows every token past a prefix opaque and named once (what
  ``prefix.stored_once`` shows from the tree's edges: the same tokens, cut at the nodes), else not told;
* its plans: ``told_plans`` (every request's reuse; nothing re-encoded) for the compiled timeline, told only where
  that runs (``timeline.run_two_pass``); nothing asks the told policy afterwards (its tree is a stand-in of counts).

Elsewhere (points unknown: a trace of stored tokens, an oracle from a cache; a piece of length 0) it is asked as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pic.engine.policies.base import Footprint
from pic.engine.policies.prefix import disjoint

_WATCHED = {"lookup", "admit", "commit", "release", "start_prefix"}


class _Counts:
    """A told tree's counts (what ``PrefixCache.usage`` and ``resident_bytes`` read); no walks."""

    __slots__ = ("page_size", "evictable_tokens", "protected_tokens", "num_nodes")

    def __init__(self, tokens: int, nodes: int) -> None:
        self.page_size, self.evictable_tokens, self.protected_tokens, self.num_nodes = 1, tokens, 0, nodes

    @property
    def total_tokens(self) -> int:
        return self.evictable_tokens + self.protected_tokens


def tell(pols: list, sm: Any, trace: Any, work: Any) -> bool:
    """Tell ``pols[0]`` (a fresh ``prefix``, simulated by ``sm``: a ServingModel about to run ``work``, the first
    requests of ``trace`` in arrival order) its final state and plans (module docstring); False: nothing set."""
    if len(pols) != 1 or trace is None:
        return False
    pol = pols[0]
    if getattr(type(pol), "name", None) != "prefix" or pol.config.page_size != 1 or not pol._unbounded \
            or pol.ctx.verify or pol.stats.lookups or pol._live or _WATCHED & vars(pol).keys() or not _compiled(sm):
        return False
    from pic.engine.coverage import _order_rows

    n = work.num_requests
    order = np.lexsort((trace.column("request_id"), trace.column("arrival_us")))[:n]
    got = points(trace, order)
    if got is None:
        return False
    pfx, shared, last, partial = got
    ntok = np.asarray(work.num_prompt, np.int64)
    if pfx.shape[0] != n or not np.array_equal(np.asarray(trace.prompt_lengths)[order], ntok):
        return False
    own = _own_known(trace, order)
    if own is None:
        rows, item_offs = _order_rows(trace, np.asarray(order, np.int64))
        own = own_once(trace.segments, rows, item_offs, pfx)
    if not own:
        return False
    nodes = radix_nodes(pfx, ntok, shared, last, partial)
    if nodes is None:
        return False
    tokens = int((ntok - pfx).sum())
    s = pol.stats
    s.lookups, s.hits = n, int(np.count_nonzero(pfx))
    pol.tree = _Counts(tokens, nodes)
    pol.peak_bytes = tokens * pol._bpt
    pol.footprint = lambda: Footprint(nodes, None, 0)
    pol.told_plans = (np.ascontiguousarray(pfx, np.int64), np.zeros(n, np.int64))
    return True


def points(trace, order: np.ndarray) -> tuple | None:
    """``(pfx, shared, last, partial)`` of the requests ``order`` of ``trace`` where their prompts are opaque rows (the
    prefixes, their radix points: ``resident._from_structure``), else None; from its last ``coverage.prompt_oracle``
    (else made here: an oracle from a cache)."""
    from pic.engine import coverage

    order, seg = np.asarray(order, np.int64), trace.segments
    got = coverage.kept_points(trace, order)
    if got is None:
        if seg.keys is None or not seg.opaque_mask.all():
            return None
        coverage._prefixes(trace, order, *coverage._order_rows(trace, order))
        got = coverage._POINTS[0][2:]
    return got[1:] if got[0] else None


def radix_nodes(pfx: np.ndarray, ntok: np.ndarray, shared: np.ndarray, last: np.ndarray,
                partial: np.ndarray) -> int | None:
    """The nodes of a radix tree (pages of one token) into which the prompts were inserted in order (module
    docstring): the distinct points among each prompt's end (``N > pfx``: its last whole-segment node ``last``) and
    where its prefix ends (``pfx > 0``: the node ``shared`` of its shared whole segments, or ``partial``'s point inside
    its next one); None where a point is not named."""
    whole = (pfx > 0) & (partial < 0)
    ends = np.concatenate([shared[whole], last[ntok > pfx]])
    inside = partial[(pfx > 0) & (partial >= 0)]
    if (ends < 0).any():
        return None
    return _distinct(ends) + _distinct(inside)


def _distinct(x: np.ndarray) -> int:
    """The distinct values of ``x``. NOTE (speed): one sort; ``np.unique`` imports ``numpy.ma`` (~8 ms CPU)."""
    s = np.sort(x)
    return int(np.count_nonzero(s[1:] != s[:-1])) + 1 if s.shape[0] else 0


def own_once(seg, rows: np.ndarray, item_offs: np.ndarray, pfx: np.ndarray) -> bool:
    """Whether every token past each item's prefix (item ``i``: the segment rows ``rows[item_offs[i]:item_offs[i+1]]``)
    lies in an opaque row and no (stream, offset) is held twice past the prefixes (``prefix.stored_once``'s test of
    the tree's edges, which cut these same tokens at the nodes: a cut adds no overlap); False also where a piece is
    empty (an edge's test reads those at its ends otherwise than an item's)."""
    if seg.keys is None or not rows.shape[0]:
        return not rows.shape[0]
    L = np.diff(seg.offsets)[rows]
    if not (L > 0).all():
        return False
    cnt = np.diff(item_offs)
    item = np.repeat(np.arange(cnt.shape[0], dtype=np.int64), cnt)
    cum = np.zeros(L.shape[0] + 1, np.int64)
    np.cumsum(L, out=cum[1:])
    a = np.maximum(np.asarray(pfx, np.int64)[item] - (cum[:-1] - cum[item_offs[:-1]][item]), 0)   # first own offset
    own = np.flatnonzero(a < L)
    if not seg.opaque_mask[rows[own]].all():
        return False
    return disjoint((seg.keys ^ seg.salts)[rows[own]], a[own], L[own])


def _own_known(trace, order: np.ndarray) -> bool | None:
    """:func:`own_once`'s answer for the requests ``order`` of ``trace`` where their last ``coverage.prompt_oracle``
    found it (``resident._unmet_past_prefix``, from its sort: the same test), else None."""
    from pic.engine import coverage

    got = coverage._PREFIXES[0] if coverage._PREFIXES else None
    if got is None or got[0]() is not trace or got[1] != coverage._digest(np.asarray(order, np.int64)):
        return None
    return got[2]


def _compiled(sm: Any) -> bool:
    """Whether ``engine.serving.timeline.run_two_pass`` will replay ``sm`` with a policy told its plans (its test,
    the serve kernels loaded: the event loop would ask the told policy)."""
    from pic import accel
    from pic.engine.serving import timeline

    pol = sm.policies[0] if sm.policies else None
    if pol is None or not timeline.applies(sm) or timeline.constants(sm.cost) is None:
        return False
    if sm._n < timeline._MIN_REQUESTS and accel.mode() == "auto" and not accel.loaded():
        return False
    return accel.kernels(accel.AUTO_TOKENS, "serve") is not None
