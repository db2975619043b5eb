"""prefix: its footprint's duplicate count told 0 from the segment names (policies.prefix.stored_once) is the count
of its runs (engine.oracle.duplicate_tokens, token by token) wherever it is told; elsewhere it is left to the count."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic.engine import oracle
from pic.engine.policies import prefix as prefix_mod
from pic.engine.policies.base import PolicyContext
from pic.engine.policies.prefix import PrefixCache, PrefixConfig, stored_once
from pic.engine.replay import workload_from_trace
from tests.engine.test_coverage import _opaque_trace, _tricky_trace


def _asked(trace, capacity: float = math.inf, page_size: int = 1, seed: int = 0) -> PrefixCache:
    """A prefix cache asked for every request of ``trace`` in arrival order (committed, released); bounded ones
    evict."""
    rng = np.random.default_rng(seed)
    work = workload_from_trace(trace)
    pol = PrefixCache(PolicyContext(capacity, 1), PrefixConfig(page_size=page_size))
    for i in rng.permutation(work.num_requests) if seed else range(work.num_requests):
        v = work.view(int(i))
        if pol.start_prefix(v, int(i)) >= 0:
            pol.commit(v, int(i))
            pol.release(v, int(i))
    return pol


def _counted(runs, m: int) -> int:
    """The count token by token (equal to the count by reference, below, from ``min_match`` 8 on: opaque tokens
    equal by chance are windows of fewer tokens)."""
    return oracle.duplicate_tokens([(q.tokens(lo, hi), c) for q, lo, hi, c in runs], m)


@pytest.mark.parametrize("seed", range(6))
def test_told_zero_is_the_count(seed: int) -> None:
    """Opaque prompts (with and without content met again after another prefix), unbounded and bounded (evicting),
    whole pages of 1 and 8, asked in arrival order or another: where stored_once tells 0, the count of the runs is 0
    at every min_match (token by token from 8 on); some tell it, some (content stored twice) do not."""
    told = []
    for repeats in (False, True):
        t = _opaque_trace(seed, repeats=repeats)
        for cap, page, order in ((math.inf, 1, 0), (math.inf, 8, 0), (3000, 1, 0), (math.inf, 1, seed + 1)):
            pol = _asked(t, cap, page, order)
            fp = pol.footprint()
            counts = {m: _counted(fp.runs, m) for m in (8, 64)}
            refs = {m: oracle.duplicate_tokens(fp.runs, m) for m in (1, 8, 64)}     # (what the replay counted)
            assert refs[8] == counts[8] and refs[64] == counts[64]
            told.append(fp.duplicates == 0)
            if fp.duplicates is not None:
                assert fp.duplicates == 0 and counts == {8: 0, 64: 0} and refs == {1: 0, 8: 0, 64: 0}
            assert stored_once(fp.runs) == (fp.duplicates == 0)
            if cap < math.inf:
                assert pol.stats.evictions > 0
    assert True in told and False in told


@pytest.mark.parametrize("seed", range(3))
def test_not_told_where_the_count_is_not_zero(seed: int) -> None:
    """Stored-token segments, repeats inside one prompt, content met after another prefix: wherever the count is
    above 0, stored_once does not tell 0 (and the footprint leaves it to the count)."""
    for t in (_tricky_trace(seed), _opaque_trace(seed, repeats=True)):
        fp = _asked(t).footprint()
        if _counted(fp.runs, 8) > 0:
            assert fp.duplicates is None and not stored_once(fp.runs)
    assert _counted(_asked(_opaque_trace(2, repeats=True)).footprint().runs, 8) > 0


def test_a_repeat_inside_one_prompt_is_seen() -> None:
    """One opaque block twice in one prompt (past any earlier prompt): owned twice by one run, count > 0, not told.
    The overlap test is what sees it: without it (a wrong stored_once) 0 would be told."""
    from pic.traces.schema import SegmentTable, Trace, requests_frame

    table = SegmentTable()
    a, b = table.add_opaque(1, 5, 100, "block"), table.add_opaque(2, 5, 100, "block")
    rows = {"request_id": [0, 1], "session_id": ["s", "t"], "agent_id": ["a", "a"], "arrival_us": [0, 1],
            "output_tokens": [1, 1], "segment_ids": [[a], [b, a, a]]}
    pol = _asked(Trace(table.build(), requests_frame(rows), source="<repeat>"))
    fp = pol.footprint()
    assert _counted(fp.runs, 64) == 100 and fp.duplicates is None and not stored_once(fp.runs)


def test_stored_tokens_are_not_told() -> None:
    """Stored-token segments (their tokens in the file): a passage, then the passage twice after the same opaque
    block: the second prompt stores the second copy (at offsets of its segment the first did not hold), whose
    windows the first prompt's run holds: count > 0, and the names tell nothing of stored tokens (not told)."""
    from pic.traces.schema import SegmentTable, Trace, requests_frame

    table = SegmentTable()
    passage = np.arange(100, dtype=np.int32) + 7
    a = table.add_opaque(1, 5, 100, "block")
    p, q = table.add(passage, "document"), table.add(np.concatenate([passage, passage]), "document")
    rows = {"request_id": [0, 1], "session_id": ["s", "t"], "agent_id": ["a", "a"], "arrival_us": [0, 1],
            "output_tokens": [1, 1], "segment_ids": [[a, p], [a, q]]}
    fp = _asked(Trace(table.build(), requests_frame(rows), source="<stored>")).footprint()
    assert _counted(fp.runs, 64) == 100 and fp.duplicates is None and not stored_once(fp.runs)


def test_no_runs_and_other_stores() -> None:
    """An empty tree holds nothing twice; runs of private token arrays are not told."""
    from pic.engine.radix import RadixTree

    assert stored_once([]) and PrefixCache(PolicyContext(math.inf, 1)).footprint().duplicates == 0
    tree = RadixTree()
    tree.insert(np.arange(100, dtype=np.int32), 0)
    assert not stored_once(tree.run_refs())


def test_joined_int32_int64_and_mixed() -> None:
    from array import array

    for parts in ([array("i", [1, 2]), array("i", [3])], [array("q", [1, 2]), array("q", [3])],
                  [array("i", [1, 2]), array("q", [3])], [array("q", [1]), array("i", [2, 3])]):
        assert prefix_mod._joined(parts, 3).tolist() == [1, 2, 3]
