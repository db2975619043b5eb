"""``fixed-chunk`` told, not asked (``fixed_chunk_tally.tally``, #12): where every token past the prefixes is fresh
(``fresh_past``), the told state (stats, usage, footprint with its duplicate count, describe, peak) equals the one
the asked pass leaves (``prefix_twin._asked``), and a replay's outputs equal the simulation's; it declines on
repeats inside a prompt, overlapping lines, stored tokens and the configurations it does not cover. A wrong tally
fails the comparison."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine import policies as registry
from pic.engine.config import ReplayConfig
from pic.engine.oracle import duplicate_tokens
from pic.engine.policies import prefix_twin as I
from pic.engine.policies.base import PolicyContext
from pic.engine.policies.fixed_chunk_tally import fresh_past, prompt_rows
from pic.engine.replay import workload_from_trace
from pic.engine.resident import resident_prefixes
from pic.traces.schema import SegmentTable, Trace, requests_frame
from tests.policies.test_oracle_lines import _key_at
from tests.policies.test_oracle_told import _grown_trace
from tests.policies.test_prefix_twin import _both, _same


def fresh_trace(seed: int, n: int = 90, repeat: str = "") -> Trace:
    """Opaque prompts: fresh lines, or an earlier prompt (whole, or cut at a segment) then fresh lines (rows of 1 to
    700 tokens: prompts shorter than a chunk, chunks over several rows, prefixes ending anywhere in a chunk).
    ``repeat``: one request past the first ten also holds, past its prefix, ``"row"`` one of its rows again,
    ``"shorter"`` its line shorter, ``"overlap"`` an overlapping line, ``"earlier"`` an earlier prompt's row."""
    rng = np.random.default_rng(seed)
    table = SegmentTable()
    rows = {c: [] for c in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    prompts: list[list[int]] = []
    lines: list[tuple[int, int, int]] = []
    odd = int(rng.integers(10, n)) if repeat else -1

    def fresh() -> list[int]:
        out = []
        for _ in range(int(rng.integers(1, 4))):
            key, salt, ln = int(rng.integers(1, 1 << 40)), int(rng.integers(0, 4)), int(rng.choice([1, 7, 60, 250,
                                                                                                     256, 700]))
            lines.append((key, salt, ln))
            out.append(table.add_opaque(key, salt, ln, "block"))
        return out

    t = 0
    for i in range(n):
        t += int(rng.choice([0, 1, 400, 30_000]))
        r = rng.random()
        if prompts and r < 0.2:
            segs = list(prompts[int(rng.integers(len(prompts)))])
        elif prompts and r < 0.75:
            p = prompts[int(rng.integers(len(prompts)))]
            segs = p[:int(rng.integers(len(p) + 1))] + fresh()
        else:
            segs = fresh()
        if i == odd:
            segs = segs + fresh()
            key, salt, ln = lines[-1]
            if repeat == "row":
                segs.append(segs[-1])
            elif repeat == "shorter":
                segs.append(table.add_opaque(key, salt, max(1, ln // 2), "block"))
            elif repeat == "overlap":
                segs.append(table.add_opaque(_key_at(key, salt, ln // 3), 0, 300, "block"))
            elif repeat == "earlier":
                segs.append(prompts[0][0])
        prompts.append(segs)
        for c, v in zip(rows, (5000 - i, f"s{i % 5}", "a", t, 3, segs), strict=True):
            rows[c].append(v)
    return Trace(table.build(), requests_frame(rows), source="<fresh>")


def _prefixes(work) -> np.ndarray:
    src, rows, offs, _ = prompt_rows(work)
    return resident_prefixes(src, rows, offs)


def _policy(name: str, opts: dict | None = None, model: str | None = None):
    from pic.engine.replay import check_config

    m = check_config(ReplayConfig(policies=(name,), **({"model": model} if model else {})))[0]
    return registry.build(name, PolicyContext(float("inf"), m.kv_bytes_per_token, m), opts)


def told_and_asked(trace: Trace, name: str, opts: dict | None = None, window: int = 64) -> tuple:
    """``(told: whether tally took it, its state, the asked pass's state)``; a state: stats, usage, entries, duplicate
    stored tokens at ``window``, describe, peak bytes."""
    work = workload_from_trace(trace)
    pfx = _prefixes(work)
    pol, ref = _policy(name, opts), _policy(name, opts)
    told = pol.tally(work, pfx, 8, window)
    assert I._asked(ref, work, pfx.tolist()) or not told

    def state(p):
        fp = p.footprint()
        dup = duplicate_tokens(fp.runs, window) if fp.duplicates is None else fp.duplicates
        return (p.stats.as_dict(), p.usage(), fp.entries, dup, p.describe(), p.peak_bytes)

    return told, state(pol), state(ref)


@pytest.mark.parametrize("seed", range(12))
def test_told_equals_asked(seed):
    """Fresh content past every prefix: told, and the told state is the asked one."""
    told, mine, theirs = told_and_asked(fresh_trace(seed), "fixed-chunk")
    assert told and mine == theirs
    assert mine[0]["chunk_tokens"] == 0 and mine[2] > 0


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("opts, window", [({"chunk_size": 8}, 64), ({"chunk_size": 64}, 64), ({"chunk_size": 32}, 8),
                                          ({"chunk_size": 700}, 16), ({"eviction": "fifo"}, 64)])
def test_other_chunk_sizes_and_windows(seed, opts, window):
    """Chunks of 8 to 700 tokens, duplicate windows of 8 to 64 (a chunk shorter than the window adds none)."""
    told, mine, theirs = told_and_asked(fresh_trace(seed), "fixed-chunk", opts, window)
    assert told and mine == theirs


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("repeat", ["row", "shorter", "overlap", "earlier"])
def test_declines_where_content_repeats(seed, repeat):
    """A line held twice in a prompt (a row again, shorter, an overlapping line) or an earlier prompt's row past the
    prefix: not fresh, declined."""
    trace = fresh_trace(seed, repeat=repeat)
    work = workload_from_trace(trace)
    assert not fresh_past(work, _prefixes(work))
    told, _, _ = told_and_asked(trace, "fixed-chunk")
    assert not told
    assert fresh_past(*(lambda w: (w, _prefixes(w)))(workload_from_trace(fresh_trace(seed))))


@pytest.mark.parametrize("opts, window", [({"chunk_size": 7}, 64), ({"save_unfull_chunk": True}, 64),
                                          ({"prefix_page_size": 2}, 64), ({"prefix_stage": False}, 64),
                                          ({}, 65), ({}, 7)])
def test_declines_what_it_does_not_cover(opts, window):
    """Chunks shorter than the proof's runs, partial chunks, pages, no prefix stage, windows past the held runs' width
    or below the proof's: declined (asked)."""
    told, _, _ = told_and_asked(fresh_trace(1), "fixed-chunk", opts, window)
    assert not told


def test_grown_traces_told_only_where_equal():
    """The lead's grown traces (repeats inside prompts, overlapping lines): where told, the state is the asked one;
    declined on most."""
    n_told = 0
    for seed in range(8):
        told, mine, theirs = told_and_asked(_grown_trace(seed), "fixed-chunk")
        n_told += told
        assert not told or mine == theirs
    assert n_told < 8


def test_stored_tokens_decline():
    """A prompt with stored (not opaque) tokens: declined."""
    rng = np.random.default_rng(0)
    table = SegmentTable()
    segs = [table.add(rng.integers(0, 1000, 300).astype(np.int32), "block") for _ in range(3)]
    rows = {"request_id": [0, 1], "session_id": ["a", "b"], "agent_id": ["a", "a"], "arrival_us": [0, 5],
            "output_tokens": [1, 1], "segment_ids": [segs[:2], segs[:1] + segs[2:]]}
    told, _, _ = told_and_asked(Trace(table.build(), requests_frame(rows), source="<t>"), "fixed-chunk")
    assert not told


@pytest.mark.parametrize("seed", [0, 5])
@pytest.mark.parametrize("change", [{}, {"token_budget": 64}])
def test_replay_told_equals_the_simulation(seed, change, monkeypatch):
    """Through a replay (prefix_twin.take): told, the same outputs as the simulated policy."""
    told = []
    real = registry.get("fixed-chunk").tally

    def spy(self, *a):
        told.append(real(self, *a))
        return told[-1]

    monkeypatch.setattr(registry.get("fixed-chunk"), "tally", spy)
    on, off, took = _both(fresh_trace(seed, 120), ReplayConfig(policies=("fixed-chunk",), **change), monkeypatch)
    assert took and told == [True] and _same(on, off)


def one_more_usage(pol) -> None:
    """Spoil a told state: one more evictable byte."""
    from pic.engine.policies.base import Usage

    u = pol.usage()
    pol.usage = lambda: Usage(u.evictable + 1, u.protected, u.total + 1, u.capacity)


def wrong_tally_fails(monkeypatch, name: str, spoil) -> None:
    """``name``'s tally followed by ``spoil(policy)`` fails both comparisons (the state's and the replay's
    outputs)."""
    cls = registry.get(name)
    real = cls.tally

    def wrong(self, *a):
        ok = real(self, *a)
        spoil(self)
        return ok

    monkeypatch.setattr(cls, "tally", wrong)
    told, mine, theirs = told_and_asked(fresh_trace(2), name)
    assert told and mine != theirs
    on, off, took = _both(fresh_trace(2, 120), ReplayConfig(policies=(name,)), monkeypatch)
    assert took and not _same(on, off)


@pytest.mark.parametrize("spoil", ["entries", "hits", "duplicates", "usage"])
def test_a_wrong_tally_fails(spoil, monkeypatch):
    """A tally off by one anywhere fails both comparisons (the state's and the replay's outputs)."""
    from pic.engine.policies.base import Footprint

    def spoiled(pol):
        fp = pol.footprint()
        if spoil == "entries":
            pol.footprint = lambda: Footprint(fp.entries + 1, None, fp.duplicates)
        elif spoil == "duplicates":
            pol.footprint = lambda: Footprint(fp.entries, None, fp.duplicates + 1)
        elif spoil == "hits":
            pol.stats.hits += 1
        else:
            one_more_usage(pol)

    wrong_tally_fails(monkeypatch, "fixed-chunk", spoiled)
