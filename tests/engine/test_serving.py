"""Serving model: closed-form phases vs a step-by-step reference, routers, batch-step energy, lifecycle."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine.cost import PrefillCost
from pic.engine.events import EventKind
from pic.engine.plan import Plan
from pic.engine.policies.base import CachePolicy, PolicyContext, RequestView, Usage
from pic.engine.serving import ServingModel, Workload
from pic.engine.serving.scheduler import decode_steps_covering, decode_time

# ---- tiny stand-ins: an affine cost model and a brute-force exact-prefix cache ----------------------


class FakeCost:
    """Affine cost: step = fixed + a*new_tokens + b*cached_before + c*decode_context."""

    def __init__(self, fixed=1e-3, a=2e-6, b=1e-9, c=1e-8, joule_per_s=600.0):
        self.fixed, self.a, self.b, self.c, self.w = fixed, a, b, c, joule_per_s

    def step_time(self, prefill_chunks, num_decode, decode_context_tokens):
        t = self.fixed + self.c * decode_context_tokens
        for n, before in prefill_chunks:
            t += self.a * n + self.b * before
        return t

    def decode_step_coeffs(self, num_decode):
        return self.fixed, self.c

    def prefill_step(self, num_new, num_cached, num_decode, ctx):
        """The fixed part is shared by token count; the chunk's own terms are its own (as CostModel does)."""
        t = self.step_time(((num_new, num_cached),), num_decode, ctx)
        return t, self.fixed * num_new / (num_new + num_decode) + self.a * num_new + self.b * num_cached

    @property
    def busy_watts(self):
        return self.w

    def prefill(self, plan):
        n = max(1, plan.num_recomputed)
        t = self.step_time(((n, plan.num_tokens - n),), 0, 0)
        return PrefillCost(flops=2.0 * n, hbm_bytes=1.0 * plan.num_tokens, time_s=t, joules=t * self.w,
                           cache_read_bytes=float(plan.num_reused), rotation_flops=0.0, rotation_bytes=0.0,
                           attn_layer_s=t, attn_tokens=n)


class BrutePrefix(CachePolicy):
    """Exact-prefix cache by brute force: committed prompts in a list, unbounded, never evicts."""

    name = "brute-prefix"

    def __init__(self, ctx: PolicyContext | None = None, config=None, reject: bool = False):
        super().__init__(ctx or PolicyContext(float("inf"), 1), config)
        self.stored: list[np.ndarray] = []
        self.locked = 0
        self.reject = reject

    def lookup(self, req: RequestView, now_us: int) -> Plan:
        self.stats.lookups += 1
        best = 0
        for s in self.stored:
            m = min(s.size, req.tokens.size)
            neq = np.nonzero(s[:m] != req.tokens[:m])[0]
            best = max(best, int(neq[0]) if neq.size else m)
        return Plan.from_prefix(req.num_tokens, best)

    def admit(self, req, plan, now_us):
        if self.reject:
            self.stats.rejected += 1
            return False
        self.locked += 1
        return True

    def commit(self, req, now_us):
        self.stored.append(req.tokens.copy())

    def release(self, req, now_us):
        self.locked -= 1
        assert self.locked >= 0

    def evict(self, num_bytes, now_us):
        return 0

    def usage(self) -> Usage:
        total = sum(s.size for s in self.stored)
        return Usage(total, 0, total, float("inf"))




def _workload(num, seed=0, max_out=300, span_us=2_000_000, sessions=5, shared=100):
    rng = np.random.default_rng(seed)
    toks = [np.concatenate([np.arange(shared), rng.integers(1000, 2000, rng.integers(10, 3000))]).astype(np.int32)
            for _ in range(num)]
    return Workload(np.arange(num, dtype=np.int64), [f"s{i % sessions}" for i in range(num)],
                    np.array([t.size for t in toks], np.int64), rng.integers(1, max_out, num),
                    np.sort(rng.integers(0, span_us, num)).astype(np.int64),
                    lambda i: RequestView.from_tokens(i, toks[i], f"s{i % sessions}"))


def _reference(w: Workload, cost: FakeCost, budget: int):
    """Step-by-step single-replica simulation with the same batching rules (float seconds)."""
    n = w.num_requests
    first, finish = np.zeros(n), np.zeros(n)
    t, nxt, queue, cur, decoders = 0.0, 0, [], None, []   # decoders: [idx, remaining, context]
    arr = w.arrival_us / 1e6
    while nxt < n or queue or cur is not None or decoders:
        while nxt < n and arr[nxt] <= t + 1e-12:
            queue.append(nxt)
            nxt += 1
        if cur is None and queue:
            cur = [queue.pop(0), 0]
        if cur is None and not decoders:
            t = arr[nxt]
            continue
        nd = len(decoders)
        ctx = sum(d[2] for d in decoders)
        chunks = []
        if cur is not None:
            new = int(w.num_prompt[cur[0]])
            chunk = min(new - cur[1], max(1, budget - nd))
            chunks = [(chunk, cur[1])]
        t += cost.step_time(chunks, nd, ctx)
        for d in decoders:
            d[1] -= 1
            d[2] += 1
            if d[1] == 0:
                finish[d[0]] = t
        decoders = [d for d in decoders if d[1] > 0]
        if cur is not None:
            cur[1] += chunks[0][0]
            if cur[1] == int(w.num_prompt[cur[0]]):
                i = cur[0]
                first[i] = t
                out = int(w.num_output[i])
                if out > 1:
                    decoders.append([i, out - 1, int(w.num_prompt[i]) + 1])
                else:
                    finish[i] = t
                cur = None
    return first, finish


@pytest.mark.parametrize("budget, seed, span_us", [(512, 1, 1_000_000), (8192, 1, 1_000_000), (64, 2, 300_000),
                                                   (2048, 3, 5_000_000), (8192, 4, 0)])
def test_closed_form_matches_step_reference(budget, seed, span_us):
    """First-token and finish times equal a step-by-step simulation (whole-µs step times, no rounding)."""
    w = _workload(60, seed=seed, max_out=80, span_us=max(span_us, 1))
    cost = FakeCost(fixed=1e-3, a=1e-6, b=0.0, c=1e-6)
    reqs = ServingModel(w, [BrutePrefix(reject=True)], cost, token_budget=budget).run()
    first, finish = _reference(w, cost, budget)
    got_first = np.array([r.first_token_us for r in reqs]) / 1e6
    got_finish = np.array([r.finish_us for r in reqs]) / 1e6
    tol = 1e-7
    assert np.abs(got_first - first).max() < tol
    assert np.abs(got_finish - finish).max() < tol


def test_events_scale_with_requests_not_decode_steps():
    """Long decodes cost no extra events: the event count stays O(requests)."""
    w = _workload(40, seed=2, max_out=20_000)
    m = ServingModel(w, [BrutePrefix()], FakeCost())
    m.run()
    assert int(w.num_output.sum()) > 100 * w.num_requests
    assert m.sim.num_events <= 6 * w.num_requests


def test_decode_steps_covering_is_first_boundary_after():
    """The cut boundary is the first step boundary at or after the instant."""
    f, p, b, c = 1e-3, 1e-7, 7, 5000
    for elapsed in (0.0, 1e-4, 0.0123, 0.5):
        n = decode_steps_covering(f, p, b, c, elapsed, 10_000)
        assert decode_time(f, p, b, c, n) >= elapsed
        assert n == 0 or decode_time(f, p, b, c, n - 1) < elapsed


def _alone(cost: FakeCost, n: int, new: int, budget: int) -> float:
    """Joules of a chunked prefill of ``new`` of ``n`` tokens in steps of its own."""
    return cost.w * sum(cost.step_time(((min(budget, new - d), n - new + d),), 0, 0) for d in range(0, new, budget))


def test_prefill_energy_is_the_token_share_of_each_step():
    """Alone in its steps a request pays them whole; beside decoders it pays its token share, so the same
    prefill costs less than alone; its no-cache joules price a full prefill in the same batch."""
    cost = FakeCost()
    alone_w = _workload(30, seed=3, max_out=2, span_us=10**9)      # one output token: no decode batch
    for r in ServingModel(alone_w, [BrutePrefix()], cost, token_budget=64).run():
        assert r.prefill_joules == pytest.approx(_alone(cost, r.num_prompt_tokens, max(1, r.num_recomputed), 64))
        assert r.nocache_prefill_joules == pytest.approx(_alone(cost, r.num_prompt_tokens, r.num_prompt_tokens, 64))
    busy = _workload(30, seed=3, max_out=400, span_us=20_000)      # long decodes overlap every prefill
    reqs = ServingModel(busy, [BrutePrefix()], cost, token_budget=8192).run()
    shared = [r for r in reqs[1:] if r.prefill_joules < _alone(cost, r.num_prompt_tokens,
                                                                 max(1, r.num_recomputed), 8192) - 1e-9]
    assert len(shared) >= 20 and any(r.num_reused for r in reqs)
    assert all(r.prefill_joules <= r.nocache_prefill_joules + 1e-12 for r in reqs)
    for r in ServingModel(busy, [BrutePrefix(reject=True)], cost, token_budget=8192).run():
        assert r.prefill_joules == r.nocache_prefill_joules


def test_lifecycle_order_and_locks_balance():
    """Each request is admitted, committed and released once, in time order."""
    w = _workload(40, seed=4)
    pol = BrutePrefix()
    reqs = ServingModel(w, [pol], FakeCost()).run()
    assert pol.locked == 0 and len(pol.stored) == w.num_requests
    for r in reqs:
        assert r.arrival_us <= r.start_us <= r.first_token_us <= r.finish_us


def test_content_reusable_only_after_commit():
    """Two identical prompts arriving together: the second reuses only after the first's prefill."""
    toks = np.arange(5000, dtype=np.int32)
    w = Workload(np.arange(2), ["a", "b"], np.array([5000, 5000]), np.array([1, 1]), np.array([0, 0]),
                 lambda i: RequestView.from_tokens(i, toks))
    reqs = ServingModel(w, [BrutePrefix(), BrutePrefix()], FakeCost(), router="round-robin").run()
    assert reqs[0].num_reused == 0 and reqs[1].num_reused == 0       # different replicas
    reqs = ServingModel(w, [BrutePrefix()], FakeCost()).run()
    assert reqs[1].num_reused == 5000 and reqs[1].start_us == reqs[0].first_token_us


@pytest.mark.parametrize("router", ["round-robin", "least-loaded", "cache-aware"])
def test_routers_spread_or_follow_cache(router):
    """Round-robin alternates, least-loaded balances, cache-aware follows cached content."""
    w = _workload(40, seed=5)
    reqs = ServingModel(w, [BrutePrefix() for _ in range(3)], FakeCost(), router=router).run()
    used = {r.replica for r in reqs}
    if router == "round-robin":
        assert [r.replica for r in reqs[:6]] == [0, 1, 2, 0, 1, 2]
    elif router == "least-loaded":
        assert used == {0, 1, 2}
    else:  # only 100 shared tokens (< half of most prompts): below the cache threshold, load decides
        assert used == {0, 1, 2}


def test_cache_aware_follows_mostly_shared_prompts():
    """Cache-aware sends prompts that are mostly cached content to the replica holding it."""
    w = _workload(40, seed=5, shared=6000)
    reqs = ServingModel(w, [BrutePrefix() for _ in range(3)], FakeCost(), router="cache-aware").run()
    assert sum(r.replica == reqs[0].replica for r in reqs) > w.num_requests // 2


def test_cache_aware_falls_back_when_unbalanced():
    """Cache-aware stops piling onto the cached replica once it is BALANCE_ABS requests ahead."""
    from pic.engine.serving.router import BALANCE_ABS, Router

    class Rep:
        def __init__(self, n):
            self.num_outstanding = n

    class Pol:
        def __init__(self, reuse):
            self.reuse = reuse

        def lookup(self, view, now_us):
            from pic.engine.plan import Plan
            return Plan.from_prefix(view.num_tokens, self.reuse)

    view = RequestView.from_tokens(0, np.arange(1000))
    hot = Router("cache-aware", [Rep(BALANCE_ABS), Rep(0)], [Pol(1000), Pol(0)])
    assert hot.pick(view, 0) == 0                       # within balance: follow the cache
    over = Router("cache-aware", [Rep(BALANCE_ABS + 1), Rep(0)], [Pol(1000), Pol(0)])
    assert over.pick(view, 0) == 1                      # out of balance: least-loaded


def test_closed_loop_turn_waits_for_previous_finish():
    """Closed loop: a session's next turn never arrives before its previous turn finished."""
    w = _workload(40, seed=6, sessions=3, span_us=100_000)
    reqs = ServingModel(w, [BrutePrefix()], FakeCost(), closed_loop=True).run()
    by_session: dict[str, list] = {}
    for r in reqs:
        by_session.setdefault(r.session_id, []).append(r)
    for turns in by_session.values():
        for prev, nxt in zip(turns, turns[1:], strict=False):
            assert nxt.arrival_us >= prev.finish_us
            assert nxt.arrival_us >= prev.arrival_us + (int(w.arrival_us[nxt.idx]) - int(w.arrival_us[prev.idx]))


@pytest.mark.parametrize("seed", range(4))
def test_prefill_share_predicts_run_prefill(seed):
    """``Replica.prefill_share`` (the counterfactual full prefill, priced before the batch changes) equals the
    share ``run_prefill`` then charges for the same prefill, over several chunks while decoders of the batch
    finish between them (small token budget)."""
    from pic.engine.serving.replica import Replica

    rng = np.random.default_rng(seed)
    rep = Replica(0, FakeCost(), token_budget=int(rng.integers(8, 64)))
    now, checked = 0, 0
    for i in range(60):
        n = int(rng.integers(1, 400))
        want = rep.prefill_share(n, n)
        steps = -(-n // max(1, rep.token_budget - rep.num_decode))
        end, finishes, share = rep.run_prefill(now, n, n, 0.0, i, int(rng.integers(1, 12)))
        assert share == want
        checked += steps > 1 and bool(finishes)
        now = end
    assert checked >= 5            # the multi-chunk path with decoders finishing inside it was exercised


def test_itl_add_step_merges_runs_of_equal_steps_and_set_count_edits_the_newest():
    """ItlLog.add_step: a step equal to the newest run ``[d, 0.0, n, w]`` extends it, anything else (another
    duration or width, or a decode series ``step != 0``) starts a segment; ``set_count`` shortens a segment
    or drops the newest (a cut decode phase). The same log as the edits done by hand on lists."""
    import random

    from pic.engine.serving import itl as itl_mod

    rng = random.Random(2)
    log, ref = itl_mod.ItlLog(), []
    for _ in range(20_000):
        x = rng.random()
        if x < 0.2:
            seg = [rng.choice([0.5, 0.25]), 0.125, rng.randrange(1, 4), 3]
            pos = log.append(*seg)
            assert pos == 4 * len(ref)
            ref.append(list(seg))
            if rng.random() < 0.5:      # a cut: shortened, or dropped when no step was run
                m = rng.randrange(0, seg[2])
                log.set_count(pos, m)
                if m:
                    ref[-1][2] = m
                else:
                    ref.pop()
            continue
        d, w = rng.choice([0.5, 0.25]), rng.choice([1, 3])
        log.add_step(d, w)
        last = ref[-1] if ref else None
        if last is not None and last[1] == 0.0 and last[0] == d and last[3] == w:
            last[2] += 1
        else:
            ref.append([d, 0.0, 1, w])
    assert len(log) == len(ref) > 1000 and log.array().tolist() == ref and list(log) == ref
    assert log[-1] == ref[-1] and log[0] == ref[0] and any(r[2] > 1 and r[1] == 0.0 for r in ref)
    if len(ref) > 1:
        with pytest.raises(ValueError):
            log.set_count(0, 0)        # not the newest: the positions after it would move
    assert itl_mod.ItlLog().array().shape == (0, 4) and not itl_mod.ItlLog()


def test_prefill_cost_memo_tells_one_recompute_span_from_two():
    """A plan of two adjacent RECOMPUTE spans (a policy may build one) is priced as itself, not as the
    one-span full recompute met before it under the same (tokens, reused) key."""
    from pic.engine.cost import CostModel
    from pic.engine.plan import Action, Span
    from pic.engine.specs import GPUS, MODELS

    cm = CostModel(MODELS["deepseek-v2-lite"], GPUS["h200"])
    sm = ServingModel(_workload(2), [BrutePrefix()], cm)
    one = Plan.recompute_all(9000)
    two = Plan(9000, (Span(0, 4000, Action.RECOMPUTE), Span(4000, 9000, Action.RECOMPUTE)))
    assert sm.prefill_cost(one, 0) == cm.prefill(one)
    assert sm.prefill_cost(two, 0) == cm.prefill(two) != cm.prefill(one)


def test_plain_plans_priced_as_tuples_give_the_columns_prefill_cost_gives():
    """The serving model prices plain plans with CostModel.one_chunk_terms (tuples, remembered per plan shape;
    a full recompute by its token count and an exact-prefix plan, on _start_prefill's specialised paths); the
    request columns equal those
    of the PrefillCost path (prefill_cost) on the same workload, with reuse, full recomputes and plans of two
    RECOMPUTE spans (priced by CostModel.prefill)."""
    from polars.testing import assert_frame_equal

    from pic.engine.cost import CostModel
    from pic.engine.metrics import request_frame
    from pic.engine.plan import Action, Span
    from pic.engine.specs import GPUS, MODELS

    class Split(BrutePrefix):
        def lookup(self, req, now_us):      # every third prompt as two adjacent RECOMPUTE spans
            plan = super().lookup(req, now_us)
            n = req.num_tokens
            if req.request_id % 3 == 0 and n > 1:
                return Plan(n, (Span(0, n // 2, Action.RECOMPUTE), Span(n // 2, n, Action.RECOMPUTE)))
            return plan

    cm = CostModel(MODELS["deepseek-v2-lite"], GPUS["h200"])
    w = _workload(120, seed=7, max_out=50, span_us=3_000_000)
    fast = ServingModel(w, [Split()], cm, token_budget=1024)
    slow = ServingModel(w, [Split()], cm, token_budget=1024)
    slow._terms = None
    a, b = request_frame("p", fast.run()), request_frame("p", slow.run())
    assert_frame_equal(a, b)
    # exact-prefix plans took _start_prefill's specialised path (priced as tuples, neither remembered in _tmemo
    # nor as PrefillCosts); the slow model priced them as PrefillCosts
    prefix_keys = [[k for k in m._memo if len(k) == 4 and k[2] == Action.REUSE] for m in (fast, slow)]
    assert not prefix_keys[0] and not fast._tmemo and prefix_keys[1] and (a["reused_tokens"] > 0).sum() > 10
    # (an exact-prefix plan's columns priced in batches: engine.serving.shares.TermsBook)
    assert fast._tbook is not None
    assert not slow._full and (a["reused_tokens"] == 0).sum() > 10
    assert a["nocache_attn_layer_s"].min() > 0 and (a["attn_layer_s"] < a["nocache_attn_layer_s"]).any()


@pytest.mark.parametrize("closed_loop", [False, True])
@pytest.mark.parametrize("budget, seed, span_us, max_out", [(8192, 1, 2_000_000, 300), (256, 2, 300_000, 80),
                                                             (64, 3, 5_000_000, 3), (2048, 4, 0, 40)])
def test_one_replica_timer_gives_the_heap_path_outputs(closed_loop, budget, seed, span_us, max_out):
    """One replica: its phase ends through the Simulator's timer (PREFILL_DONE, then SCHEDULE; a cut replaces
    the pending one) give every output the heap path gives (its SCHEDULEs queued, a superseded one
    dispatched as VOID, not counted): rows, ITL segments, busy time, event count."""
    from pic.engine.loop import VOID, Simulator

    def run(timer):
        w = _workload(80, seed=seed, max_out=max_out, span_us=max(span_us, 1))
        m = ServingModel(w, [BrutePrefix()], FakeCost(), token_budget=budget, closed_loop=closed_loop)
        void = []
        if not timer:
            m._one = False
            on_schedule = m._on_schedule

            def counted(ev, now):
                out = on_schedule(ev, now)
                void.append(out is VOID)
                return out

            m.sim = Simulator({**m.sim.handlers, EventKind.SCHEDULE: counted})
        reqs = m.run()
        cols = {f: np.asarray(reqs.cols[f]).tolist() for f in reqs.cols}
        return cols, m.replicas[0].itl.array().tolist(), m.replicas[0].busy_us, m.sim.num_events, sum(void)

    a, b = run(True), run(False)
    assert a[:4] == b[:4]
    if seed == 1:
        assert b[4] > 20       # arrivals cut decode phases: superseded SCHEDULEs, dispatched as VOID
