"""block-hash answering from the prefix replay (engine.policies.block_radix.RadixAnswers, #12): where
``answers_apply`` holds, a replay's every output equals the one that walks block-hash's own tree."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pic.engine.replay as R
from pic.engine.config import ReplayConfig
from pic.engine.policies.base import PolicyContext, RequestView
from pic.engine.policies.block_hash import BlockHashCache, BlockHashConfig
from pic.engine.policies.block_radix import (
    Asked,
    RadixAnswers,
    answer_from_prefix,
    answers_apply,
    asked_views,
)
from pic.traces.schema import SegmentTable, Trace, requests_frame


def _trace(num: int, seed: int) -> Trace:
    """Prompts that share prefixes of every length (segments of lengths around the block sizes, whole prompts
    repeated, prompts that are prefixes of others, prompts shorter than a block), bursts of equal arrival times
    and single-token outputs: the cases where a block cut and a token match part."""
    rng = np.random.default_rng(seed)
    table = SegmentTable()
    parts = [table.add(rng.integers(1, 300, int(rng.integers(1, 40))), "document") for _ in range(12)]
    rows = {k: [] for k in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    prompts: list[list[int]] = []
    t = 0
    for i in range(num):
        t += int(rng.choice([0, 0, 1, 500, 20_000]))
        r = rng.random()
        if prompts and r < 0.2:
            segs = list(prompts[int(rng.integers(len(prompts)))])                # the same prompt again
        elif prompts and r < 0.35:
            p = prompts[int(rng.integers(len(prompts)))]
            segs = p[:max(1, int(rng.integers(len(p) + 1)))]                     # a prefix of an earlier one
        elif prompts and r < 0.75:
            p = prompts[int(rng.integers(len(prompts)))]
            segs = p[:int(rng.integers(len(p) + 1))] + [parts[int(j)] for j in rng.integers(0, 12, 2)]
        else:
            segs = [parts[int(j)] for j in rng.integers(0, 12, int(rng.integers(1, 5)))]
        if rng.random() < 0.3:
            segs = [*segs, table.add(rng.integers(300, 400, int(rng.integers(1, 20))), "user")]
        prompts.append(segs)
        for k, v in (("request_id", 1000 - i), ("session_id", f"s{i % 5}"), ("agent_id", "a"), ("arrival_us", t),
                     ("output_tokens", int(rng.choice([1, 1, 3, 40, 300]))), ("segment_ids", segs)):
            rows[k].append(v)
    return Trace(table.build(), requests_frame(rows), source="test-trace")


def _strip(d):
    if isinstance(d, dict):
        return {k: _strip(v) for k, v in d.items() if "wall" not in k}
    if isinstance(d, list):
        return [_strip(x) for x in d]
    return d


def _both(trace: Trace, cfg: ReplayConfig, monkeypatch) -> tuple:
    used = []

    def counting(cache, ids, reuse):
        used.append(len(ids))
        answer_from_prefix(cache, ids, reuse)

    def asked(ids, ntok):
        view = asked_views(ids, ntok)
        used.append("asked")
        return view

    monkeypatch.setattr(R, "answer_from_prefix", counting)
    monkeypatch.setattr(R, "asked_views", asked)
    on = R.replay(trace, cfg)
    monkeypatch.setattr(R, "answers_apply", lambda *a: False)
    off = R.replay(trace, cfg)
    return on, off, used


CASES = [
    ({}, ("prefix", "block-hash")),
    ({"block-hash": {"block_size": 4}}, ("block-hash", "prefix")),
    ({"block-hash": {"block_size": 1}}, ("block-hash",)),
    ({"block-hash": {"block_size": 8}, "prefix": {"page_size": 4}}, ("prefix", "block-hash", "none")),
    ({"block-hash": {"block_size": 6}, "prefix": {"page_size": 3}}, ("block-hash",)),
    ({}, ("none", "block-hash", "prefix")),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("opts, policies", CASES)
def test_answers_equal_the_tree(seed, opts, policies, monkeypatch):
    """Rows (block-hash's reuse among them), summaries, config.json's stats and peaks: the same with and without
    the answers, and the answers were used."""
    trace = _trace(300, seed)
    cfg = ReplayConfig(policies=policies, policy_options=opts, token_budget=int([64, 256, 8192][seed]))
    on, off, used = _both(trace, cfg, monkeypatch)
    assert used == [300, "asked"]
    assert on.table.equals(off.table)
    assert json.dumps(_strip(on.summary), sort_keys=True) == json.dumps(_strip(off.summary), sort_keys=True)
    assert json.dumps(_strip(on.resolved), sort_keys=True) == json.dumps(_strip(off.resolved), sort_keys=True)
    if "block-hash" in policies:
        s = on.summary["policies"]["block-hash"]
        assert s["reused_tokens"] > 0 and s["peak_resident_bytes"] > 0 and s["stored_tokens"] > 0


def test_answers_with_a_retimed_subset(monkeypatch):
    trace = _trace(400, 5)
    cfg = ReplayConfig(policies=("block-hash",), max_requests=250, rate=2000.0)
    on, off, used = _both(trace, cfg, monkeypatch)
    assert used == [250, "asked"] and on.table.equals(off.table)
    assert json.dumps(_strip(on.summary), sort_keys=True) == json.dumps(_strip(off.summary), sort_keys=True)


@pytest.mark.parametrize("change", [{"replicas": 2}, {"closed_loop": True}, {"capacity_bytes": 1e9},
                                    {"verify": True}, {"check_invariants": True},
                                    {"policy_options": {"prefix": {"page_size": 3}}}])
def test_answers_not_applied(change):
    cfg = ReplayConfig(policies=("block-hash",), **change)
    model, _, _, resolved = R.check_config(cfg)
    cap = cfg.capacity_bytes / model.kv_bytes_per_token
    assert not answers_apply(cfg, cap, resolved)
    cfg = ReplayConfig(policies=("block-hash",))
    assert answers_apply(cfg, float("inf"), R.check_config(cfg)[3])


def test_answers_not_applied_replay_the_tree(monkeypatch):
    """Two replicas: the tree is walked (no answers)."""
    monkeypatch.setattr(R, "answer_from_prefix", lambda *a: pytest.fail("answers used"))
    R.replay(_trace(60, 3), ReplayConfig(policies=("block-hash",), replicas=2))


def _view(rid: int, n: int) -> RequestView:
    toks = np.arange(n, dtype=np.int32)
    return RequestView(rid, "s", toks, np.array([0, n], np.int64), np.zeros(1, np.uint64), np.zeros(1, np.uint8))


def test_asked_views():
    """The asked views carry the workload's ids and token counts, those of its RequestViews."""
    trace = _trace(50, 6)
    work = R.workload_from_trace(trace)
    view = asked_views(work.request_ids, work.num_prompt)
    for i in range(work.num_requests):
        v, w = view(i), work.view(i)
        assert (v.request_id, v.num_tokens) == (w.request_id, w.num_tokens)


def test_radix_answers_refuse_another_order():
    ctx = PolicyContext(float("inf"), 2)
    cache = BlockHashCache(ctx, BlockHashConfig(4))
    answer_from_prefix(cache, np.array([7, 8, 9]), np.array([0, 6, 11]))
    a, b, c = _view(7, 10), _view(8, 10), _view(9, 13)
    with pytest.raises(RuntimeError, match="out of the order"):
        cache.start_prefix(b, 0)                       # not the next one (a lookup counted, as an error's)
    assert cache.start_prefix(a, 0) == 0
    with pytest.raises(RuntimeError, match="out of the order"):
        cache.start_prefix(b, 1)                       # a is not committed yet
    with pytest.raises(RuntimeError, match="locks"):
        cache.usage()
    cache.commit(a, 1)
    assert cache.start_prefix(b, 1) == 4 and cache.resident_bytes() == (2 + 1) * 4 * 2
    cache.commit(b, 2)
    cache.release(a, 2)
    cache.release(b, 2)
    plan = cache.lookup(c, 3)
    assert plan.leading_reuse == 8 and cache.admit(c, plan, 3)
    cache.commit(c, 4)
    cache.release(c, 4)
    assert cache.footprint().entries == 2 + 1 + 1 and cache.usage().total == 4 * 4 * 2
    assert cache.stats.lookups == 5 and cache.stats.hits == 2 and cache.peak_bytes == 4 * 4 * 2
    with pytest.raises(RuntimeError, match="evict"):
        cache.evict(8, 5)
    with pytest.raises(ValueError, match="fresh"):
        answer_from_prefix(cache, np.array([1]), np.array([0]))
    with pytest.raises(ValueError, match="fresh"):
        answer_from_prefix(BlockHashCache(PolicyContext(1e6, 2), BlockHashConfig(4)), np.array([1]), np.array([0]))
    assert isinstance(cache._radix, RadixAnswers)


def test_no_gc_pass_before_an_answering_block_hash(monkeypatch):
    """A small replay's last tree is left to the GC (a CLI run exits first); block-hash answering after prefix
    builds none, so prefix's tree is not collected before it either (a GC pass less); a tree replayed after it
    still is."""
    calls = []
    monkeypatch.setattr(R, "free_cycles", lambda *a: calls.append(a))
    trace = _trace(80, 4)
    R.replay(trace, ReplayConfig(policies=("prefix",)))
    R.replay(trace, ReplayConfig(policies=("block-hash",)))
    assert calls == []
    R.replay(trace, ReplayConfig(policies=("none",)))
    assert len(calls) == 1


def _asked_one_by_one(cache, ids, ntok) -> list[int]:
    out = []
    for k, (rid, n) in enumerate(zip(ids.tolist(), ntok.tolist(), strict=True)):
        v = Asked(rid, n)
        out.append(cache.start_prefix(v, k))
        cache.commit(v, k)
        cache.release(v, k)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_answer_all_equals_the_calls(seed):
    """block_radix.answer_all: the answers, counts, peak and state that start_prefix + commit + release of every
    request in order leave (reuse of every kind: none, whole blocks, past a block's end, a whole prompt)."""
    rng = np.random.default_rng(seed)
    n = 200
    ntok = rng.integers(1, 100, n)
    reuse = np.minimum(ntok, rng.choice([0, 0, 5, 16, 33, 99], n))
    reuse[0] = 0
    ids = rng.permutation(n) + 10
    one, bulk = (BlockHashCache(PolicyContext(float("inf"), 3), BlockHashConfig(8)) for _ in range(2))
    for c in (one, bulk):
        answer_from_prefix(c, ids, reuse)
    want = _asked_one_by_one(one, ids, ntok)
    out = np.full(n, -1, np.int64)
    assert bulk.answer_all(ids, ntok, out)
    assert out.tolist() == want and want == (reuse // 8 * 8).tolist()
    assert bulk.stats.as_dict() == one.stats.as_dict() and bulk.stats.hits == int(np.count_nonzero(reuse >= 8))
    assert bulk.peak_bytes == one.peak_bytes > 0 and bulk.usage() == one.usage()
    assert {k: getattr(bulk._radix, k) for k in RadixAnswers.__slots__} == \
        {k: getattr(one._radix, k) for k in RadixAnswers.__slots__}
    assert not bulk.answer_all(ids, ntok, out)                # (asked already)


def test_answer_all_declines():
    """Not the requests the answers were made for, a cache asked already or watched, a tree: nothing done."""
    ids, ntok, reuse = np.array([3, 4, 5]), np.array([10, 20, 30]), np.array([0, 8, 16])
    out = np.zeros(3, np.int64)

    def fresh():
        c = BlockHashCache(PolicyContext(float("inf"), 2), BlockHashConfig(4))
        answer_from_prefix(c, ids, reuse)
        return c

    for c, args in ((fresh(), (ids[::-1], ntok)), (fresh(), (ids[:2], ntok[:2]))):
        assert not c.answer_all(*args, out) and c.stats.lookups == 0 and c._radix.next == 0
    c = fresh()
    _asked_one_by_one(c, ids[:1], ntok[:1])
    assert not c.answer_all(ids, ntok, out)
    c = fresh()
    c.commit = c.commit                                       # (a watcher's wrapper on the instance)
    assert not c.answer_all(ids, ntok, out)
    assert not BlockHashCache(PolicyContext(float("inf"), 2), BlockHashConfig(4)).answer_all(ids, ntok, out)
    assert not out.any()


def test_answer_all_in_the_timeline(monkeypatch):
    """The compiled timeline asks an answering block-hash all at once, with the outputs of asking it request by
    request (engine.serving.timeline._answers)."""
    from pic import accel
    from pic.engine.serving import timeline

    if not accel.available():
        pytest.skip("numba not installed")
    trace = _trace(300, 7)
    cfg = ReplayConfig(policies=("block-hash", "prefix"))
    calls = []
    real = BlockHashCache.answer_all

    def counted(self, *a):
        calls.append(real(self, *a))
        return calls[-1]

    accel.set_mode("1")
    try:
        monkeypatch.setattr(BlockHashCache, "answer_all", counted)
        on = R.replay(trace, cfg)
        monkeypatch.setattr(BlockHashCache, "answer_all", None)
        off = R.replay(trace, cfg)
    finally:
        accel.set_mode(None)
    assert calls == [True]
    assert on.table.equals(off.table)
    assert json.dumps(_strip(on.summary), sort_keys=True) == json.dumps(_strip(off.summary), sort_keys=True)
    assert json.dumps(_strip(on.resolved), sort_keys=True) == json.dumps(_strip(off.resolved), sort_keys=True)
    assert timeline._MIN_REQUESTS > 300       # (the timeline ran for these 300 only as accel mode 1 loads it)
