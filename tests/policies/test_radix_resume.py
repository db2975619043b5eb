"""A commit resumes where its lookup's walk stopped (``RadixTree._memo``, kept true across the admit's split) and
moves its lock in one walk (``move_lock``): the same trees, locks, access times and plans as walking again and
``inc_lock`` + ``dec_lock`` (the reference), for ``prefix`` and the radix ``block-hash``, on prompts of opaque
segments (conversations: a turn continues an earlier one, its last segment cut) and of private tokens."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine.policies.base import RequestView
from pic.engine.policies.block_hash import BlockHashCache, BlockHashConfig
from pic.engine.policies.prefix import PrefixCache, PrefixConfig
from pic.engine.radix import RadixTree
from pic.traces.content import Segments
from tests.policies.conftest import make_ctx, request_stream


def _segment_stream(seed: int, num: int) -> list[RequestView]:
    """Prompts of opaque segments (lengths 1-40): a new conversation, or an earlier prompt's segments but its
    last, then new ones (Mooncake's hash ids); some segments share a stream (one a prefix of another)."""
    rng = np.random.default_rng(seed)
    S = 400
    lens = rng.integers(1, 40, S)
    keys = rng.integers(0, 150, S).astype(np.uint64)       # (a shared key: the same stream, cut at another length)
    seg = Segments(np.arange(S, dtype=np.uint64), np.zeros(S, np.uint8), np.r_[0, np.cumsum(lens)],
                   np.zeros(0, np.int32), np.zeros(S + 1, np.int64), keys, np.zeros(S, np.uint64))
    prompts: list[np.ndarray] = []
    out = []
    for rid in range(num):
        new = rng.integers(0, S, int(rng.integers(1, 5)))
        if prompts and rng.random() < 0.6:
            prev = prompts[int(rng.integers(len(prompts)))]
            rows = np.r_[prev[:max(1, prev.shape[0] - int(rng.integers(0, 2)))], new]
        else:
            rows = new
        prompts.append(rows)
        bounds = np.r_[0, np.cumsum(lens[rows])]
        out.append(RequestView(rid, f"s{rid % 7}", None, bounds, np.zeros(rows.shape[0], np.uint64),
                               np.zeros(rows.shape[0], np.uint8), rows, seg))
    return out


def _tree_of(pol) -> RadixTree:
    return pol.tree if isinstance(pol, PrefixCache) else pol._radix.tree


def _walking(pol):
    """``pol`` with the reference paths: each commit walks from its admit's node (no memo) and its lock moves
    by ``inc_lock`` + ``dec_lock``."""
    tree = _tree_of(pol)
    commit = pol.commit

    def walk_commit(req, now):
        tree._memo = None
        commit(req, now)

    def move(node, above):
        tree.inc_lock(node)
        tree.dec_lock(above)

    pol.commit = walk_commit
    tree.move_lock = move
    return pol


def _dump(tree: RadixTree) -> list[tuple]:
    """Every node: its root path's tokens and bookkeeping, in path order."""
    out = []
    stack = [tree.root]
    while stack:
        node = stack.pop()
        if node is not tree.root:
            out.append((tree.tokens_of(node).tobytes(), node.n, node.lock_ref, node.last_access_us, node.hits,
                        node.created_us, node.ckey))
        stack.extend(node.children.values())
    return sorted(out)


def _make(kind: str, size: int):
    ctx = make_ctx(float("inf"))
    return PrefixCache(ctx, PrefixConfig(size)) if kind == "prefix" else BlockHashCache(ctx, BlockHashConfig(size))


@pytest.mark.parametrize("kind,size", [("prefix", 1), ("prefix", 4), ("block-hash", 1), ("block-hash", 8)])
@pytest.mark.parametrize("segments", [True, False])
def test_commit_resumes_as_the_walk_would(kind: str, size: int, segments: bool) -> None:
    reqs = _segment_stream(5, 300) if segments else request_stream(seed=7, num_requests=200)
    rng = np.random.default_rng(11)
    fast, ref = _make(kind, size), _walking(_make(kind, size))
    tf, tr = _tree_of(fast), _tree_of(ref)
    resumed = 0
    split = tf._split

    def counted(node, at):
        nonlocal resumed
        resumed += tf._memo is not None and node is tf._memo[5]
        return split(node, at)

    tf._split = counted
    live: list[tuple[RequestView, bool]] = []
    for t, req in enumerate(reqs):
        plans = [p.lookup(req, 3 * t) for p in (fast, ref)]
        assert plans[0] == plans[1]
        assert [p.admit(req, plan, 3 * t) for p, plan in zip((fast, ref), plans, strict=True)] == [True, True]
        live.append((req, False))
        # commit at once (the memo holds) or later, after other requests changed the tree (it does not)
        while live and (len(live) > 5 or rng.random() < 0.6):
            j = len(live) - 1 if rng.random() < 0.5 else int(rng.integers(len(live)))
            r, committed = live[j]
            for p in (fast, ref):
                (p.release if committed else p.commit)(r, 3 * t + 1)
            if committed:
                live.pop(j)
            else:
                live[j] = (r, True)
            assert fast.usage() == ref.usage()
        assert tf.version == tr.version and tf.num_nodes == tr.num_nodes
    assert _dump(tf) == _dump(tr)
    assert fast.stats == ref.stats and fast.stats.hits > 30
    assert resumed > 10 or kind == "prefix"        # (the commit's split of a partly matched edge, resumed)


def test_move_lock_refuses_an_unlocked_node() -> None:
    tree = RadixTree()
    _, leaf = tree.insert(np.arange(5, dtype=np.int32), 0)
    with pytest.raises(ValueError):
        tree.move_lock(leaf, leaf)
