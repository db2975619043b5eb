"""The any-position oracle: the trace-level count and the `oracle` policy equal brute force; the window
index equals a dict; duplicate stored tokens."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic.engine import policies
from pic.engine.oracle import WindowIndex, duplicate_tokens, trace_oracle
from pic.engine.plan import Action
from tests.policies.conftest import History, make_ctx, request_stream, serve


def _brute(prompts: list[np.ndarray], m: int) -> list[int]:
    """Per prompt: positions inside some m-token window that occurs in an earlier prompt, or inside the
    longest prefix shared with an earlier prompt."""
    seen: set[bytes] = set()
    out = []
    for i, toks in enumerate(prompts):
        cov = np.zeros(toks.size, bool)
        wins = [toks[j:j + m].tobytes() for j in range(toks.size - m + 1)]
        for j, key in enumerate(wins):
            if key in seen:
                cov[j:j + m] = True
        for q in prompts[:i]:
            k = min(q.size, toks.size)
            neq = np.flatnonzero(q[:k] != toks[:k])
            cov[:int(neq[0]) if neq.size else k] = True
        out.append(int(cov.sum()))
        seen.update(wins)
    return out


@pytest.mark.parametrize("m", [8, 64])
def test_trace_oracle_equals_brute_force(m: int) -> None:
    """Reuse counted by the vectorized oracle equals a per-window Python scan plus the longest shared
    prefix (shared, shifted, continued content; repeats inside one prompt do not count)."""
    prompts = [r.tokens for r in request_stream(seed=21, num_requests=40, vocab=50)]
    prompts.append(np.tile(prompts[0][:10], 30))             # a low-entropy prompt
    assert trace_oracle(prompts, m).tolist() == _brute(prompts, m)


@pytest.mark.parametrize("mode", ["0", "1"])
def test_window_index_equals_a_dict(mode: str) -> None:
    """Random inserts (with repeats, first value wins) and lookups agree with a Python dict: the sorted
    levels (numpy) and the compiled hash table (its growth, and the move of the levels into it)."""
    from pic import accel

    if mode == "1" and not accel.available():
        pytest.skip("numba not installed")
    rng = np.random.default_rng()
    idx, ref = WindowIndex(), {}
    accel.set_mode("0")
    try:
        _window_index_steps(rng, idx, ref, mode)
    finally:
        accel.set_mode(None)
    assert (idx._table is not None) == (mode == "1")


def _window_index_steps(rng, idx, ref: dict, mode: str) -> None:
    from pic import accel

    for step in range(200):
        if step == 60:
            accel.set_mode(mode)          # the first 60 steps fill the levels; then (mode 1) the table
        if step % 50 == 49:             # duplicates within one add: the first value wins
            keys = rng.integers(0, 5000, 3000).astype(np.uint64)
            keys = keys[~idx.lookup(keys)[0]]     # (callers add absent keys: the levels would count a key twice)
            vals = rng.integers(0, 10**9, keys.size)
            idx.add(keys, vals)
            for k, v in zip(keys.tolist(), vals.tolist(), strict=True):
                ref.setdefault(k, v)
            continue
        keys = rng.integers(0, 5000, int(rng.integers(0, 60))).astype(np.uint64)
        q = rng.integers(0, 5000, 50).astype(np.uint64)
        found, val = idx.lookup(q)
        assert found.tolist() == [int(k) in ref for k in q]
        assert all(v == ref[int(k)] for k, v, f in zip(q, val, found, strict=True) if f)
        new = keys[~idx.lookup(keys)[0]]
        vals = np.arange(new.size, dtype=np.int64) + 1000 * step
        idx.add(new, vals)
        for k, v in zip(new.tolist(), vals.tolist(), strict=True):
            ref.setdefault(k, v)
        assert len(idx) == len(ref)


def test_policy_reuses_every_window_seen_before() -> None:
    """Served one at a time, the policy reuses exactly the brute-force oracle's tokens, every span at a
    source where committed prompts hold those tokens, with no collision under --verify."""
    stream = request_stream(seed=22, num_requests=40, vocab=50)
    pol = policies.build("oracle", make_ctx(math.inf, verify=True), {"min_match": "16"})
    hist, got = History(), []
    for t, req in enumerate(stream):
        plan = pol.lookup(req, t)
        hist.check_plan(req, plan)
        got.append(plan.num_reused)
        serve(pol, req, t)
        hist.add(req.tokens)
    assert got == _brute([r.tokens for r in stream], 16)
    assert pol.stats.collisions == 0 and pol.stats.verified_hits > 0


def test_policy_finds_content_at_any_position_and_ignores_capacity() -> None:
    """A 300-token document is reused rotated behind any header, even with a 10-token capacity."""
    pol = policies.build("oracle", make_ctx(10))
    doc = np.arange(1000, 1300)
    serve(pol, RequestViewLike(0, np.r_[np.arange(5), doc]), 1)
    plan = pol.lookup(RequestViewLike(1, np.r_[np.arange(50, 97), doc]), 2)
    rot = [s for s in plan.spans if s.action == Action.REUSE_ROTATED]
    assert [(s.start, s.end, s.delta) for s in rot] == [(47, 347, 42)]
    assert pol.usage().total == 0 and not pol.bounded


def RequestViewLike(rid, toks):  # noqa: N802 - a tiny local alias
    from pic.engine.policies import RequestView
    return RequestView.from_tokens(rid, np.asarray(toks, np.int32))


def test_duplicate_tokens_counts_second_copies_only() -> None:
    """A run stored twice counts once as duplicate; context tokens are never counted."""
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 9999, 500, dtype=np.int32), rng.integers(0, 9999, 300, dtype=np.int32)
    assert duplicate_tokens([(a, 0), (b, 0)]) == 0
    assert duplicate_tokens([(a, 0), (np.r_[b, a[100:400]], 0)]) == 300
    assert duplicate_tokens([(a, 0), (a[:200], 150)]) == 50
