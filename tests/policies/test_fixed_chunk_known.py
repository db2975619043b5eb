"""``fixed-chunk`` does not hash again the part of a prompt its prefix stage matched against a committed prompt: that
prompt's grid keys are this one's there (:meth:`FixedChunkCache._scan`, ``prompt_scan``'s ``known``). Plans, stats,
stored chunks and usage must be those of hashing every prompt whole (and of the numpy paths), on conversation-like
traces (turns continuing or branching off earlier ones, stored and opaque segments, chunk-unaligned prefixes), with
requests admitted in groups before they commit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic import accel
from pic.engine import policies
from pic.engine.replay import workload_from_trace
from pic.traces.schema import SegmentTable, Trace, requests_frame
from tests.policies.conftest import conversations, in_groups, make_ctx


def _conversations(seed: int, n: int) -> Trace:
    """Conversation turns (conftest.conversations) of stored segments (a low vocabulary: chance matches) and opaque
    ones, of lengths cutting chunks anywhere."""
    def stored(lo: int, hi: int, kind: str):
        return lambda rng, table: table.add(rng.integers(0, 30, int(rng.integers(lo, hi)), dtype=np.int32), kind)
    user = stored(1, 150, "user")

    def new(rng, table, r):
        if r < 0.6:
            return table.add_opaque(int(rng.integers(0, 1 << 30)), 3, int(rng.integers(1, 200)), "block")
        return user(rng, table)
    return conversations(seed, n, stored(5, 90, "document"), new)


def _run(work, opts: dict, knows: bool, mode: str, group: int) -> tuple:
    """Every request looked up and admitted in groups of ``group``, then the group committed and released; plans,
    stats, stored chunks, usage after each group, and how many grid keys were known."""
    accel.set_mode(mode)
    try:
        p = policies.build("fixed-chunk", make_ctx(math.inf), opts)
        if not knows:
            p._knows = False
        known = [0]
        inner = p._candidates

        def candidates(req, start, k=np.zeros(0, np.uint64)):
            known[0] += k.shape[0]
            return inner(req, start, k)
        p._candidates = candidates
        plans = []

        def admitted(rid, plan):
            held, _, _, _, missing = p._live[rid]
            plans.append([(s.start, s.end, int(s.action), s.source_pos) for s in plan.spans])
            plans.append(([ch.key for ch in held], [m[1] for m in missing]))    # the chunks it locks and stores
        states = in_groups(p, work, group, admitted)
        store = sorted((ch.key, ch.pos, ch.size, ch.ref) for ch in p._store.values())
        return (plans, states, p.stats.as_dict(), store), known[0]
    finally:
        accel.set_mode(None)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("opts", [{"chunk_size": "16"}, {"chunk_size": "7"}, {"chunk_size": "64"},
                                  {"chunk_size": "16", "prefix_page_size": "4"}])
def test_known_grid_keys_change_nothing(seed: int, opts: dict) -> None:
    if not accel.available():
        pytest.skip("numba not installed")
    work = workload_from_trace(_conversations(seed, 90))
    for group in (1, 3):
        got, known = _run(work, opts, True, "1", group)
        want, none = _run(work, opts, False, "1", group)
        ref, _ = _run(work, opts, True, "0", group)
        assert got == want == ref
        assert known > 0 and none == 0
        assert sum(s[1] - s[0] for plan in got[0][::2] for s in plan if s[2] != 0) > 0      # chunks reused too


def test_known_keys_only_where_kept() -> None:
    """Bounded, without the prefix stage or with tails stored: no prompt's grid keys are kept."""
    for cap, opts in ((1000, {}), (math.inf, {"prefix_stage": "false"}), (math.inf, {"save_unfull_chunk": "true"})):
        p = policies.build("fixed-chunk", make_ctx(cap), {"chunk_size": "16", **opts})
        assert not p._knows
    assert policies.build("fixed-chunk", make_ctx(math.inf), {"chunk_size": "16"})._knows


def test_a_match_ending_inside_another_prompts_edge_reads_that_prompts_keys() -> None:
    """p1 = A + B, p2 = A + C, q = A + C[:60] + E, r = q + E: q's match ends 60 tokens into p2's edge, below the node
    p1 made (A): the keys known there are p2's (p1's differ from the 7th chunk on), and q's later chunks and r's
    reuse of them come out as when every prompt is hashed whole."""
    if not accel.available():
        pytest.skip("numba not installed")
    rng = np.random.default_rng(5)
    table = SegmentTable()
    a, b, c, e = (rng.integers(0, 1000, k, dtype=np.int32) for k in (100, 100, 100, 70))
    sa, sb, sc, sc60, se = (table.add(x, "user") for x in (a, b, c, c[:60], e))
    prompts = [[sa, sb], [sa, sc], [sa, sc60, se], [sa, sc60, se, se]]
    rows = {"request_id": list(range(4)), "session_id": ["s"] * 4, "agent_id": ["a"] * 4, "arrival_us": list(range(4)),
            "output_tokens": [1] * 4, "segment_ids": prompts}
    work = workload_from_trace(Trace(table.build(), requests_frame(rows), source="<branch>"))
    got, known = _run(work, {"chunk_size": "16"}, True, "1", 1)
    want, _ = _run(work, {"chunk_size": "16"}, False, "1", 1)
    assert got == want and known >= 160 // 16
    assert [s[:3] for s in got[0][6]] == [(0, 230, 0), (230, 294, 1), (294, 300, 2)]     # r reuses q's E chunks
