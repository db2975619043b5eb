"""The footprint step of a replay (engine.replay._footprint): a policy's state is dropped, and freed when
asked, before the duplicate count runs over its stored runs; the counts do not change."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from pic.engine import replay as R
from pic.engine.config import ReplayConfig
from pic.engine.policies.base import PolicyContext

SAMPLE = Path(__file__).resolve().parents[2] / "traces" / "samples" / "rag-reorder.parquet"


def _sim(policy: str):
    trace = R.read_trace_file(str(SAMPLE))
    cfg = ReplayConfig(policies=(policy,))
    model, _, cost, _ = R.check_config(cfg)
    ctx = PolicyContext(cfg.capacity_bytes, model.kv_bytes_per_token, model, cfg.seed, cfg.verify)
    return R._simulate(policy, R.workload_from_trace(trace), ctx, cost, cfg, None)


@pytest.mark.parametrize("collect", [True, False])
@pytest.mark.parametrize("policy", ["prefix", "irminsul", "fixed-chunk"])
def test_state_is_freed_before_the_duplicate_count(monkeypatch, policy: str, collect: bool) -> None:
    """With ``collect``, the duplicate count finds the state freed (no cyclic garbage left: a radix tree's
    parent links); without, the state's cycles are still there (freed later). The same counts either way."""
    want = R._footprint(_sim(policy).pols, 16)
    sim = _sim(policy)
    seen = []
    count = R.duplicate_tokens

    def spy(runs, m):
        seen.append(gc.collect())
        return count(runs, m)

    monkeypatch.setattr(R, "duplicate_tokens", spy)
    was = gc.isenabled()
    gc.disable()                   # (as in a replay: only an explicit pass frees the state's cycles)
    try:
        gc.collect()
        got = R._footprint(sim.pols, 16, collect=collect)
    finally:
        if was:
            gc.enable()
    assert sim.pols == [] and len(seen) == 1
    # (an unbounded irminsul's state holds no reference cycle since its prompt index is flat columns, as its tries:
    # dropped, it is freed at once, collected or not)
    assert (seen[0] == 0) == (collect or policy == "irminsul")
    assert got == want and want["duplicate_stored_tokens"] is not None and want["stored_tokens"] > 0


@pytest.mark.parametrize("policies, baselines, dropped", [
    (("irminsul",), ("prefix", "block-hash"), True), (("irminsul", "block-hash"), ("prefix", "block-hash"), False),
    (("irminsul", "prefix"), ("prefix", "block-hash"), False), (("irminsul",), ("block-hash", "prefix"), True)])
def test_baselines_keep_only_what_the_summary_reads(monkeypatch, policies, baselines, dropped) -> None:
    """While the replayed policies are simulated, a baseline not replayed keeps its sums, and its rows only where
    it is the best one (the ``prefix_*`` columns); prefix's reuse per request is dropped once block-hash, if
    replayed, needs it no more. The outputs equal those of a replay that keeps them."""
    from pic.engine.serving import ServingModel

    seen, held, run, best_only = [], [], ServingModel.run, R._best_only

    def spy(sims, bases, keep_reuse):
        held.append(sims)
        return best_only(sims, bases, keep_reuse)

    def watch(self):
        if held:
            seen.append({n: (s.sums is not None, tuple(s.rows.cols), s.reuse is not None)
                         for n, s in held[0].items()})
        return run(self)

    trace = R.read_trace_file(str(SAMPLE))
    cfg = ReplayConfig(policies=policies, baselines=baselines)
    monkeypatch.setattr(R, "_best_only", spy)
    monkeypatch.setattr(ServingModel, "run", watch)
    on = R.replay(trace, cfg)
    best = on.summary["baselines"]["best"]
    got = seen[0]
    if dropped:
        other = next(b for b in baselines if b != best)
        assert got[best][:2] == (True, R._BASELINE_COLUMNS) and got[other][:2] == (True, ())
        assert not got["prefix"][2]
    else:
        assert any(v[1] for v in got.values())
        assert "block-hash" not in policies or got["prefix"][2]
    monkeypatch.setattr(R, "_best_only", lambda *a, **k: None)
    off = R.replay(trace, cfg)
    assert on.table.equals(off.table) and on.summary["baselines"] == off.summary["baselines"]
    assert [on.summary["policies"][p]["token_hit_rate"] for p in policies] == \
        [off.summary["policies"][p]["token_hit_rate"] for p in policies]
