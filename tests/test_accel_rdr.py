"""rdr's compiled kernels (pic._accel_numba_rdr) against the numpy reference, on fresh random inputs: numpy's
pairwise sums, the greedy cut without a full sort (ties, cuts exactly at the budget, the exact fallback) and a
whole request from its spans (block sums of the prior table, protection, the three float sums)."""

from __future__ import annotations

import numpy as np
import pytest

from pic import accel
from pic.engine.angle_codes import EVICTED
from pic.engine.rdr_alloc import allocate, gqa_options, make_options, mla_options

pytest.importorskip("numba")


@pytest.fixture(scope="module")
def fast():
    accel.set_mode("1")
    try:
        yield accel.kernels(1, "rdr")
    finally:
        accel.set_mode(None)


def test_pairwise_sum_is_numpys(fast) -> None:
    """np_sum (the kernels' summation) adds as np.sum does: equal bits for every length up to a few
    thousand (the 8-way unrolled blocks, the halving above 128) and for long arrays, values of mixed scale."""
    rng = np.random.default_rng()
    lengths = list(range(0, 700)) + [int(x) for x in rng.integers(700, 400_000, 25)]
    for n in lengths:
        a = rng.random(n) * 10.0 ** rng.uniform(-6, 6, n)
        assert fast.np_sum(a) == np.sum(a), n


def _reference(opts, block_w, sizes, prot, head, budget):
    w = (block_w[:, None] * head[None, :]).ravel()
    size = np.repeat(sizes.astype(np.float64), head.size)
    return allocate(opts, w, size, np.repeat(prot, head.size), budget), w, size


def _sorted_costs(opts, w, size, prot, H):
    """Running cost of the reference order (the cut points a budget can fall on exactly), and forced."""
    protected = np.repeat(prot, H)
    forced = float(np.sum(size[protected]) * opts.frac[opts.best])
    free = np.flatnonzero(~protected & (size > 0))
    key = ((w[free] / size[free])[:, None] * opts.efficiency()[None, :]).ravel()
    cost = (size[free][:, None] * opts.step_frac[None, :]).ravel()
    return np.cumsum(cost[np.argsort(-key, kind="stable")]), forced


def _random_case(rng, trial):
    kind = trial % 4
    if kind == 0:
        opts = mla_options(512, 64, (8, 4, 3, 2))
    elif kind == 1:
        opts = gqa_options(128, (8, 4, 3, 2))
    elif kind == 2:                       # dyadic: exact sums, equal keys across steps
        opts = make_options((EVICTED, 2, 4, 8), np.array([0, 0.25, 0.5, 1.0]), np.array([1, 0.5, 0.25, 0.125]))
    else:
        k = int(rng.integers(2, 5))
        frac = np.concatenate([[0.0], np.sort(rng.uniform(0.05, 1.0, k))])
        eps2 = np.concatenate([[1.0], np.sort(rng.uniform(0.0, 0.9, k))[::-1]])
        opts = make_options((EVICTED, *range(1, k + 1)), frac, eps2)
    B, H = int(rng.integers(1, 200)), int(rng.choice([1, 2, 5, 27]))
    sizes = np.where(rng.random(B) < 0.8, 64, rng.integers(1, 65, B)).astype(np.int64)
    style = int(rng.integers(0, 4))
    if style == 0:                        # a prior-like weight: smooth, most blocks full
        block_w = sizes * (1.0 + np.arange(B)[::-1] * 64 / 256.0) ** -0.5
        head = rng.lognormal(0.0, 1.0, H)
    elif style == 1:                      # few distinct values: many equal keys
        block_w = sizes * rng.choice([0.5, 0.25, 1.0, 2.0], B)
        head = rng.choice([1.0, 2.0, 0.5], H)
    elif style == 2:
        block_w = rng.lognormal(0.0, 2.0, B)
        head = np.ones(H)
    else:                                 # large densities (bits above 1.0's) beside protected blocks
        block_w = sizes * 10.0 ** rng.uniform(0, 12) * rng.lognormal(0.0, 1.0, B)
        head = rng.lognormal(0.0, 1.0, H) + 1.0
    prot = rng.random(B) < rng.choice([0.0, 0.1, 0.5])
    if style == 3:
        prot[int(rng.integers(B))] = True
    return opts, block_w.astype(np.float64), sizes, prot, head


def test_greedy_equals_allocate_random(fast) -> None:
    """rdr_greedy chooses every unit's option as allocate does, on random units (smooth priors, few distinct
    weights, one head), at random budgets and at budgets that fall exactly on a running cost of the order
    (and one ulp either side); both the bucketed cut and the exact (sorting) fallback run."""
    rng = np.random.default_rng()
    seen = {True: 0, False: 0}
    for trial in range(400):
        opts, block_w, sizes, prot, head = _random_case(rng, trial)
        H = head.size
        ref_w = (block_w[:, None] * head[None, :]).ravel()
        size = np.repeat(sizes.astype(np.float64), H)
        cum, forced = _sorted_costs(opts, ref_w, size, prot, H)
        budgets = [float(rng.uniform(0.0, 1.1) * sizes.sum() * H)]
        if cum.size:
            j = int(rng.integers(0, cum.size))
            budgets += [forced + cum[j], float(np.nextafter(forced + cum[j], np.inf)),
                        float(np.nextafter(forced + cum[j], 0)), forced + cum[-1]]
        for budget in budgets:
            ref, w, size = _reference(opts, block_w, sizes, prot, head, budget)
            option, w2, size2, per, forced2, exact = fast.rdr_greedy(
                block_w, sizes, prot, head, opts.hull, opts.step_frac, opts.efficiency(), opts.frac,
                len(opts.bits), budget)
            assert np.array_equal(option, ref.option), (trial, budget)
            assert np.array_equal(w2, w) and np.array_equal(size2, size) and forced2 == ref.forced
            assert np.array_equal(per, np.bincount(ref.option, weights=size, minlength=len(opts.bits)))
            seen[bool(exact)] += 1
    assert seen[False] > 100


def test_greedy_exact_fallback_at_a_cut_within_rounding(fast) -> None:
    """Many units with dyadic costs (sums exact) and a budget exactly on a running cost: the cut is within the
    error bound of a reordered sum, so the kernel takes the exact path, and still equals allocate."""
    rng = np.random.default_rng()
    opts = make_options((EVICTED, 2, 4, 8), np.array([0, 0.25, 0.5, 1.0]), np.array([1, 0.5, 0.25, 0.125]))
    exact_runs = 0
    for _ in range(6):
        B, H = 400, 8
        sizes = np.full(B, 64, np.int64)
        block_w = rng.lognormal(0.0, 1.0, B) * 64
        head = rng.lognormal(0.0, 1.0, H)
        prot = np.zeros(B, bool)
        w = (block_w[:, None] * head[None, :]).ravel()
        size = np.repeat(sizes.astype(np.float64), H)
        cum, forced = _sorted_costs(opts, w, size, prot, H)
        budget = forced + cum[int(rng.integers(cum.size // 4, cum.size // 2))]
        ref, _, _ = _reference(opts, block_w, sizes, prot, head, budget)
        option, *_, exact = fast.rdr_greedy(block_w, sizes, prot, head, opts.hull, opts.step_frac,
                                            opts.efficiency(), opts.frac, len(opts.bits), budget)
        assert np.array_equal(option, ref.option)
        exact_runs += bool(exact)
    assert exact_runs == 6


@pytest.mark.parametrize("model", ["deepseek-v2-lite", "llama-3.1-8b"])
@pytest.mark.parametrize("opts", [{}, {"head_sigma": 0.0}, {"budget": 0.3, "block_tokens": 16, "protect_sinks": 70},
                                  {"budget": 1.0, "recency_tokens": 7}])
def test_request_from_spans_equals_numpy_path(modes, model, opts) -> None:
    """A request's counters and distortion sums from rdr_request (spans, prior table) equal the numpy path's,
    bit for bit: spans that touch (one run of positions), spans across segment kinds and the sinks, long
    requests (units past numpy's 128-value pairwise blocks) and prompts growing past the prior table."""
    from pic.engine import policies
    from pic.engine.policies import PolicyContext, RequestView
    from pic.engine.specs import MODELS
    from pic.traces.schema import KIND_CODE

    m = MODELS[model]
    kinds = np.array(sorted(set(KIND_CODE.values())), np.uint8)
    seed = int(np.random.default_rng().integers(1 << 30))

    def run():
        rng = np.random.default_rng(seed)
        pol = policies.build("rdr", PolicyContext(float("inf"), m.kv_bytes_per_token, model=m, seed=5), opts)
        for rid in range(30):
            nseg = int(rng.integers(1, 8))
            scale = int(rng.choice([50, 800, 6000]))
            lens = rng.integers(1, scale, nseg)
            bounds = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            n = int(bounds[-1])
            req = RequestView(rid, "s", np.zeros(n, np.int32), bounds, np.arange(nseg, dtype=np.uint64),
                              rng.choice(kinds, nseg))
            cuts = np.unique(rng.integers(0, n + 1, int(rng.integers(0, 6))))
            edges = np.unique(np.concatenate([[0, n], cuts]))
            spans = [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True) if rng.random() < 0.7]
            if spans:
                arr = np.array(spans, np.int64)
                pol._allocate(req, arr, int(np.sum(arr[:, 1] - arr[:, 0])))
        return dict(pol.stats.extra), list(pol._dist)

    (sa, da), (sb, db) = modes(run)
    assert sa == sb and da == db
    assert sa["rdr_tokens"] > 0
