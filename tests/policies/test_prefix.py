"""Unit tests of the ``prefix`` policy (radix tree, page size, LRU/LFU, locks, capacity)."""

from __future__ import annotations

import numpy as np

from pic.engine import policies
from pic.engine.plan import Action
from tests.policies.conftest import BYTES_PER_TOKEN, make_ctx, serve, view


def test_reuses_shared_prefix_up_to_first_difference() -> None:
    """A second prompt reuses exactly the tokens before its first differing token."""
    p = policies.build("prefix", make_ctx(float("inf")))
    serve(p, view(0, np.arange(100)), 1)
    plan = p.lookup(view(1, np.r_[np.arange(60), [999], np.arange(61, 100)]), 2)
    assert plan.leading_reuse == 60 and plan.num_reused == 60
    assert plan.spans[0].action == Action.REUSE


def test_shifted_content_is_not_reused() -> None:
    """One token prepended loses the whole prefix (the weakness PIC addresses)."""
    p = policies.build("prefix", make_ctx(float("inf")))
    serve(p, view(0, np.arange(100)), 1)
    assert p.lookup(view(1, np.r_[[7], np.arange(100)]), 2).num_reused == 0


def test_page_size_rounds_match_down() -> None:
    """With page_size 16 a 60-token common prefix reuses 48 tokens."""
    p = policies.build("prefix", make_ctx(float("inf")), {"page_size": "16"})
    serve(p, view(0, np.arange(100)), 1)
    assert p.lookup(view(1, np.r_[np.arange(60), [999] * 40]), 2).num_reused == 48


def test_lfu_and_lru_pick_different_victims() -> None:
    """A frequently hit old entry is kept by LFU but evicted by LRU."""
    survivors = {}
    for order in ("lru", "lfu"):
        p = policies.build("prefix", make_ctx(float("inf")), {"eviction": order})
        hot, cold = view(0, np.arange(50)), view(1, np.arange(1000, 1050))
        serve(p, hot, 1)
        for t in range(2, 6):
            p.lookup(hot, t)                 # hot: many hits, last touched at t=5
        serve(p, cold, 10)                  # cold: one use, most recent
        p.evict(50 * BYTES_PER_TOKEN, 20)
        survivors[order] = p.lookup(hot, 30).num_reused
    assert survivors == {"lru": 0, "lfu": 50}


def test_locked_prefix_survives_evict() -> None:
    """KV reused by an admitted, unreleased request stays resident and protected."""
    p = policies.build("prefix", make_ctx(float("inf")))
    serve(p, view(0, np.arange(100)), 1)
    r = view(1, np.r_[np.arange(80), [5] * 20])
    plan = p.lookup(r, 2)
    assert p.admit(r, plan, 2)
    p.evict(10**9, 3)
    assert p.usage().protected >= 80 * BYTES_PER_TOKEN
    assert p.lookup(r, 4).num_reused == 80


def test_admit_evicts_to_fit_then_refuses_what_cannot_fit() -> None:
    """Admit evicts unlocked KV to make room, and returns False when the request is larger than capacity."""
    p = policies.build("prefix", make_ctx(150))
    serve(p, view(0, np.arange(100)), 1)
    serve(p, view(1, np.arange(500, 600)), 2)      # needs 100: evicts the first prompt
    assert p.usage().total == 100 * BYTES_PER_TOKEN
    assert p.lookup(view(2, np.arange(100)), 3).num_reused == 0
    big = view(3, np.arange(2000, 2200))
    assert not p.admit(big, p.lookup(big, 4), 4)
    assert p.stats.rejected == 1


def test_stale_plan_is_refused() -> None:
    """A plan whose prefix was evicted between lookup and admit is refused, not half-honoured."""
    p = policies.build("prefix", make_ctx(float("inf")))
    serve(p, view(0, np.arange(100)), 1)
    r = view(1, np.arange(120))
    plan = p.lookup(r, 2)
    p.evict(10**9, 3)
    assert not p.admit(r, plan, 4)
    assert p.stats.extra["stale_plans"] == 1


def test_mooncake_hit_rate_equals_trace_prefix_reuse() -> None:
    """On the Mooncake conversation trace (first 2,000 requests, capacity inf) the prefix hit rate equals
    the trace's own reuse (leading run of seen block ids x 512, capped by input_length) within 0.5 points."""
    import json

    from pic.engine.rolling import mix
    from tests.conftest import shared_file

    path = shared_file("mooncake", "conversation_trace.jsonl")
    p = policies.build("prefix", make_ctx(float("inf")))
    seen: set[int] = set()
    expected = reused = total = 0
    with open(path) as f:
        for rid, line in zip(range(2000), f, strict=False):
            row = json.loads(line)
            ids, n = row["hash_ids"], row["input_length"]
            run = next((i for i, h in enumerate(ids) if h not in seen), len(ids))
            expected += min(run * 512, n)
            seen.update(ids)
            blocks = np.asarray(ids, np.int64)[:, None] * 512 + np.arange(512)
            toks = (mix(blocks.ravel()) % np.uint64(100_000)).astype(np.int32)[:n]
            req = view(rid, toks)
            plan = p.lookup(req, rid)
            assert p.admit(req, plan, rid)
            p.commit(req, rid)
            p.release(req, rid)
            reused += plan.num_reused
            total += n
    assert abs(reused / total - expected / total) < 0.005
    assert reused > 0


def test_unbounded_cache_builds_its_eviction_heap_only_when_asked() -> None:
    """An unbounded cache keeps no eviction heap while serving (memory); an explicit evict then frees
    the same leaves, in the same order, as a tree that kept its heap all along."""
    from pic.engine.radix import RadixTree

    p = policies.build("prefix", make_ctx(float("inf")))
    eager = RadixTree(evicts=True)
    for i in range(12):
        toks = np.r_[np.arange(30), np.arange(100 * i, 100 * i + 20 + i)]
        serve(p, view(i, toks), i + 1)
        eager.insert(toks, i + 1)
    assert not p.tree._heap and not p.tree.evicts
    for n in (25, 60, 10**6):
        assert p.tree.evict(n) == eager.evict(n)
        assert p.tree.total_tokens == eager.total_tokens
    assert p.tree.total_tokens == 0
