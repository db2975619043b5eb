"""The ``oracle`` policy answering from the trace-level oracle (``OracleCache.told``, #12): where every request's
trace-level reuse is its exact prefix, a replay's every output (plans' rows, summaries, the indexed windows of
config.json and the registry entries) equals the one that builds the policy's window index; elsewhere it is not
used."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pic.engine.replay as R
from pic.engine import rolling
from pic.engine.config import ReplayConfig
from pic.engine.policies import oracle as oracle_policy
from pic.engine.policies.oracle import OracleCache
from pic.traces.schema import SegmentTable, Trace, requests_frame
from tests.policies.test_block_answers import _strip, _trace
from tests.policies.test_oracle_lines import _key_at, _opaque_trace


def _grown_trace(seed: int, n: int = 120) -> Trace:
    """Opaque prompts whose only content met earlier is a prefix: each request is fresh content, or an earlier
    prompt (whole, or cut at a segment boundary) followed by fresh content; the fresh part may repeat a row, hold
    one stream at two lengths or two streams whose lines overlap or continue one another (windows repeated inside
    the prompt), and segments of 1 to 300 tokens (windows over several pieces, prompts shorter than a window)."""
    rng = np.random.default_rng(seed)
    table = SegmentTable()
    rows = {c: [] for c in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    prompts: list[list[int]] = []

    def fresh() -> list[int]:
        out = []
        for _ in range(int(rng.integers(1, 5))):
            key, salt = (int(rng.integers(1, 1 << 40)), int(rng.integers(0, 4)))
            ln = int(rng.choice([1, 3, 20, 63, 64, 65, 100, 300]))
            out.append(table.add_opaque(key, salt, ln, "block"))
            r = rng.random()
            if r < 0.15:
                out.append(out[-1])                                            # the same row again
            elif r < 0.3:
                out.append(table.add_opaque(key, salt, max(1, ln // 2), "block"))   # the stream, shorter
            elif r < 0.4 and ln > 20:
                out.append(table.add_opaque(_key_at(key, salt, ln // 3), 0, ln, "block"))   # overlapping line
            elif r < 0.5:
                out.append(table.add_opaque(_key_at(key, salt, ln), 0, 70, "block"))       # continues it
        return out

    t = 0
    for i in range(n):
        t += int(rng.choice([0, 0, 1, 400, 30_000]))
        r = rng.random()
        if prompts and r < 0.25:
            segs = list(prompts[int(rng.integers(len(prompts)))])                      # again, whole
        elif prompts and r < 0.7:
            p = prompts[int(rng.integers(len(prompts)))]
            segs = p[:int(rng.integers(len(p) + 1))] + (fresh() if rng.random() < 0.9 else [])
        else:
            segs = fresh()
        if not segs:
            segs = fresh()
        prompts.append(segs)
        for c, v in zip(rows, (1000 - i, f"s{i % 7}", "a", t, int(rng.choice([1, 2, 30, 300])), segs), strict=True):
            rows[c].append(v)
    return Trace(table.build(), requests_frame(rows), source="<grown>")


def _both(trace: Trace, cfg: ReplayConfig, monkeypatch) -> tuple:
    told, hashed = [], []
    real_told, real_hash = OracleCache.told, rolling.window_hashes

    def counting(*a):
        got = real_told(*a)
        told.append(got is not False)
        return got

    def counting_hash(toks, m):
        hashed.append(toks.shape[0])
        return real_hash(toks, m)

    monkeypatch.setattr(OracleCache, "told", staticmethod(counting))
    monkeypatch.setattr(rolling, "window_hashes", counting_hash)
    on = R.replay(trace, cfg)
    monkeypatch.setattr(rolling, "window_hashes", real_hash)
    monkeypatch.setattr(OracleCache, "told", staticmethod(lambda *a: False))
    off = R.replay(trace, cfg)
    return on, off, told, hashed


def _equal(on, off) -> None:
    assert on.table.equals(off.table)
    assert json.dumps(_strip(on.summary), sort_keys=True) == json.dumps(_strip(off.summary), sort_keys=True)
    assert json.dumps(_strip(on.resolved), sort_keys=True) == json.dumps(_strip(off.resolved), sort_keys=True)


# (twin: prefix's simulation taken, Told.see; not where prefix evicts, nor where its pages cut its reuse; prefix
# replayed too: simulated before block-hash, first; but after oracle without block-hash)
CONFIGS = [({}, True), ({"token_budget": 64}, True), ({"capacity_bytes": 2e8, "policies": ("oracle", "prefix")}, False),
           ({"max_requests": 90, "rate": 3000.0}, True), ({"policies": ("oracle", "prefix")}, True),
           ({"policies": ("prefix", "oracle")}, True), ({"policies": ("oracle", "prefix"), "baselines": ("prefix",)}, False), ({"policy_options": {"prefix": {"page_size": 16}}}, False),
           ({"policy_options": {"oracle": {"min_match": 16}}, "token_budget": 256}, True)]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("change, twin", CONFIGS)
def test_told_equals_the_index(seed, change, twin, monkeypatch):
    """Told (every reuse an exact prefix): the same outputs as the index, with prefix's simulation (twin) or its
    own; windows repeated inside a prompt counted by hashing that prompt's new windows."""
    trace = _grown_trace(seed)
    cfg = ReplayConfig(**{"policies": ("oracle",), **change})
    on, off, told, hashed = _both(trace, cfg, monkeypatch)
    assert told == [True]
    assert hashed, "no prompt with windows repeated inside it"
    _equal(on, off)
    s = on.resolved["policies"]["oracle"]["stats"]
    assert s["hits"] > 0 and s["indexed_windows"] == on.summary["policies"]["oracle"]["registry_entries"] > 0
    assert (on.summary["policies"]["oracle"]["wall_seconds"] == 0.0) == twin      # (no simulation of its own)
    assert off.summary["policies"]["oracle"]["wall_seconds"] > 0.0


@pytest.mark.parametrize("seed", [0, 1])
def test_not_told_where_windows_reach_past_the_prefix(seed, monkeypatch):
    """Rows met at other positions (the trace-level reuse beyond the exact prefix): the index is built."""
    trace = _opaque_trace(seed, 120)
    on, off, told, _ = _both(trace, ReplayConfig(policies=("oracle",)), monkeypatch)
    assert told == [False]
    _equal(on, off)


@pytest.mark.parametrize("change", [{"replicas": 2}, {"closed_loop": True}, {"verify": True},
                                    {"check_invariants": True}, {"policy_options": {"oracle": {"min_match": 4}}}])
def test_not_told(change, monkeypatch):
    """Several replicas, a closed loop, a watched policy, windows too short to be named: not told."""
    trace = _grown_trace(7, 60)
    on, off, told, _ = _both(trace, ReplayConfig(**{"policies": ("oracle",), **change}), monkeypatch)
    assert told == [False]
    _equal(on, off)


def test_not_told_on_stored_tokens(monkeypatch):
    """Stored-token segments (no line names): not told."""
    trace = _trace(80, 4)
    on, off, told, _ = _both(trace, ReplayConfig(policies=("oracle",)), monkeypatch)
    assert told == [False]
    _equal(on, off)


def test_told_order_is_checked(monkeypatch):
    """A request looked up or committed out of the answers' order raises."""
    from pic.engine import oracle as oracle_mod

    monkeypatch.setattr(oracle_mod, "_MEMO", {})
    trace = _grown_trace(3, 20)
    work = R.workload_from_trace(trace)
    reuse = R._oracle(trace, work, 64)
    told = OracleCache.told(trace, work, reuse, 64, ReplayConfig(policies=("oracle",)))
    assert told
    from pic.engine import coverage

    assert coverage._PREFIXES                  # (the prefixes were the reuse: not computed again) ...
    coverage._PREFIXES.clear()                 # ... else computed: the same answers
    again = OracleCache.told(trace, work, reuse, 64, ReplayConfig(policies=("oracle",)))
    assert again.pfx.tolist() == told.pfx.tolist() and again.windows.tolist() == told.windows.tolist()
    from tests.policies.conftest import make_ctx

    pol = oracle_policy.OracleCache(make_ctx(float("inf")))
    pol.tell(told)
    v0, v1 = work.view(0), work.view(1)
    with pytest.raises(RuntimeError, match="out of the order"):
        pol.lookup(v1, 0)
    assert pol.start_prefix(v0, 0) == told.pfx[0]
    with pytest.raises(RuntimeError, match="out of the order"):
        pol.lookup(v1, 0)                      # (request 0 not committed yet)
    with pytest.raises(RuntimeError, match="out of the order"):
        pol.commit(v1, 0)
    pol.commit(v0, 0)
    assert pol.lookup(v1, 0).num_tokens == v1.num_tokens
    with pytest.raises(ValueError, match="fresh"):
        pol.tell(told)


def test_twin_progress_reaches_the_total():
    """Taking prefix's simulation, the progress still counts oracle's requests: the last tick is the total."""
    trace = _grown_trace(5, 40)
    ticks = []
    got = R.replay(trace, ReplayConfig(policies=("oracle",)), progress=lambda done, total: ticks.append((done, total)))
    assert got.summary["policies"]["oracle"]["wall_seconds"] == 0.0
    assert ticks[-1] == (3 * 40, 3 * 40)
