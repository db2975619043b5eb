"""Policy contract: one suite run over every registered policy (``engine.policies.names()``).

A seeded driver interleaves lookup/admit/commit/release/evict over a stream of requests with shared,
shifted and continued content, at tiny, medium and unbounded capacity, and checks after EVERY call:
the usage invariant (evictable + protected == total <= capacity), that locked KV survives any
eviction, that every reused span equals tokens some committed prompt had at ``source_pos``, that plans
are valid covers, and that the same seed gives the same plans.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from pic.engine import policies
from pic.engine.plan import Action, Plan
from pic.engine.policies import CachePolicy, RequestView
from tests.policies.conftest import History, make_ctx, request_stream

CAPACITIES = {"tiny": 1_500, "medium": 6_000, "inf": math.inf}


def _check(policy: CachePolicy, who: str) -> None:
    u = policy.usage()
    u.check(who)
    assert u.capacity == policy.ctx.capacity_bytes
    assert policy.resident_bytes() == u.total, f"{who}: resident_bytes() != usage().total"


def _check_plan(req: RequestView, plan: Plan) -> None:
    assert plan.num_tokens == req.num_tokens
    assert plan.spans[0].start == 0 and plan.spans[-1].end == req.num_tokens
    for s in plan.spans:
        if s.action == Action.REUSE:
            assert s.source_pos in (-1, s.start)


def drive(name: str, capacity: float, seed: int, num_requests: int = 45,
          verify: bool = False) -> tuple[list[Plan], CachePolicy]:
    """Replay a random interleaving against policy ``name``; assert the contract after every call."""
    policy = policies.build(name, make_ctx(capacity, verify=verify, seed=seed))
    rng = np.random.default_rng(seed)
    stream = request_stream(seed, num_requests)
    history = History()
    admitted: dict[int, tuple[RequestView, Plan]] = {}   # admitted, not yet committed
    running: dict[int, tuple[RequestView, Plan]] = {}    # committed, not yet released
    plans: list[Plan] = []
    now, nxt = 0, 0
    while nxt < len(stream) or admitted or running:
        now += int(rng.integers(1, 50))
        ops = (["lookup"] * 4 * (nxt < len(stream)) + ["commit"] * 3 * bool(admitted)
               + ["release"] * 3 * bool(running) + ["evict"])
        op = ops[int(rng.integers(len(ops)))]
        if op == "lookup":
            req = stream[nxt]
            nxt += 1
            plan = policy.lookup(req, now)
            _check(policy, f"{name} lookup {req.request_id}")
            _check_plan(req, plan)
            history.check_plan(req, plan)
            plans.append(plan)
            if policy.admit(req, plan, now):
                admitted[req.request_id] = (req, plan)
            _check(policy, f"{name} admit {req.request_id}")
        elif op == "commit":
            rid = sorted(admitted)[int(rng.integers(len(admitted)))]
            req, plan = admitted.pop(rid)
            policy.commit(req, now)
            history.add(req.tokens)
            running[rid] = (req, plan)
            _check(policy, f"{name} commit {rid}")
        elif op == "release":
            rid = sorted(running)[int(rng.integers(len(running)))]
            req, _ = running.pop(rid)
            policy.release(req, now)
            _check(policy, f"{name} release {rid}")
        else:
            policy.evict(int(rng.integers(1, 400)) * policy.ctx.bytes_per_token, now)
            _check(policy, f"{name} evict")
        _check_locked(policy, name, {**admitted, **running}, now)
    u = policy.usage()
    assert u.protected == 0, f"{name}: {u.protected} B still protected after every request was released"
    return plans, policy


def _check_locked(policy: CachePolicy, name: str, live: dict[int, tuple[RequestView, Plan]],
                  now: int) -> None:
    """Locked KV survives eviction: on a copy, evict everything evictable; every live request must
    still hold what its admitted plan reused (``CachePolicy.holds``) or, where the policy does not say,
    still find at least as much with a fresh lookup."""
    if not live or now % 4:
        return
    most = max(plan.num_reused for _, plan in live.values()) * policy.ctx.bytes_per_token
    if policy.bounded:      # an unbounded bound (oracle) holds no bytes; holds() still answers below
        assert policy.usage().protected >= most, f"{name}: a live request reuses {most} B, fewer are protected"
    probe = copy.deepcopy(policy)
    probe.evict(10**15, now)
    _check(probe, f"{name} evict-all")
    for req, plan in live.values():
        held = probe.holds(req)
        if held is not None:
            assert held, f"{name}: request {req.request_id} lost locked KV"
            continue
        again = probe.lookup(req, now)
        assert again.num_reused >= plan.num_reused, \
            f"{name}: request {req.request_id} lost locked KV ({again.num_reused} < {plan.num_reused})"


@pytest.mark.parametrize("capacity", list(CAPACITIES.values()), ids=list(CAPACITIES))
@pytest.mark.parametrize("name", policies.names())
def test_contract_holds_after_every_call(name: str, capacity: float) -> None:
    """Usage invariant, locked data kept, no false hit and valid covers over a random interleaving."""
    drive(name, capacity, seed=11)


@pytest.mark.parametrize("name", policies.names())
def test_same_seed_same_plans(name: str) -> None:
    """Two runs with the same seed produce identical plans; a different seed's stream differs."""
    a, _ = drive(name, CAPACITIES["medium"], seed=5, num_requests=30)
    b, _ = drive(name, CAPACITIES["medium"], seed=5, num_requests=30)
    c, _ = drive(name, CAPACITIES["medium"], seed=6, num_requests=30)
    assert a == b
    assert a != c


@pytest.mark.parametrize("name", policies.names())
def test_verify_mode_finds_no_collision(name: str) -> None:
    """Under --verify every hit is token-compared and no hash collision is counted."""
    _, policy = drive(name, math.inf, seed=3, num_requests=30, verify=True)
    assert policy.stats.collisions == 0
    assert policy.stats.lookups >= 30


@pytest.mark.parametrize("name", policies.names())
def test_oversized_request_is_rejected_not_overflowed(name: str) -> None:
    """A request larger than the whole capacity is refused by admit (or admitted within capacity)."""
    policy = policies.build(name, make_ctx(64))
    req = RequestView.from_tokens(0, np.arange(5000, dtype=np.int32))
    plan = policy.lookup(req, 1)
    ok = policy.admit(req, plan, 1)
    _check(policy, f"{name} oversized admit")
    if ok:
        policy.commit(req, 2)
        _check(policy, f"{name} oversized commit")
        policy.release(req, 3)
        _check(policy, f"{name} oversized release")
