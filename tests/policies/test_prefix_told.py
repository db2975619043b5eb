"""``prefix`` told, not asked (``policies.prefix_told``, #12): wherever it is told, every output of a replay
(requests.parquet's rows, summary.json less wall times, config.json's stats) equals the one that asks it; its node
count equals a radix tree's on opaque prompts (prefixes ending inside a segment by a chance first token too); it is
not told where the points are unknown (stored tokens, a stream at two lengths), content is owned twice, pages are
longer, capacity is bounded or the event loop runs; a told state off by one fails the comparison."""

from __future__ import annotations

import math

import numpy as np
import pytest

import pic.engine.replay as R
from pic import accel
from pic.engine.config import ReplayConfig
from pic.engine.coverage import _order_rows
from pic.engine.policies import prefix_told as T
from pic.engine.policies.base import PolicyContext
from pic.engine.policies.prefix import PrefixCache, stored_once
from pic.engine.resident import resident_prefixes
from pic.traces.content import opaque_bases, opaque_run
from pic.traces.schema import SegmentTable, Trace, requests_frame
from tests.engine.test_coverage import _opaque_trace, _tricky_trace
from tests.policies.test_fixed_chunk_tally import fresh_trace
from tests.policies.test_prefix_twin import _same

_TELL = T.tell


@pytest.fixture(autouse=True)
def modes():
    yield
    accel.set_mode(None)


def _colliding(n: int, size: int = 4, salt: int = 5) -> list[list[int]]:
    """``n`` groups of ``size`` opaque keys whose first tokens are equal (by chance: 1 in 2^17 a pair)."""
    keys = np.arange(1, 1 << 19, dtype=np.uint64)
    first = opaque_run(opaque_bases(keys, salt), np.zeros(keys.shape[0], np.int64), np.ones(keys.shape[0], np.int64))
    o = np.argsort(first, kind="stable")
    f = first[o]
    heads = np.flatnonzero(f[size - 1:] == f[:1 - size])
    out, seen = [], set()
    for h in heads.tolist():
        if int(f[h]) not in seen:
            seen.add(int(f[h]))
            out.append([int(keys[o[h + j]]) for j in range(size)])
        if len(out) == n:
            break
    return out


def chance_trace(seed: int, n: int = 120) -> Trace:
    """Opaque prompts that continue earlier ones (whole, cut at a segment, or the same prompt again), then fresh
    blocks; some go on, after an earlier prompt's cut, with a block whose first token equals the block there by chance
    (its prefix ends one token into that block: several prompts at one such point), or start so. Each block's
    content past a prefix is new (held once)."""
    rng = np.random.default_rng(seed)
    groups = _colliding(12)
    table = SegmentTable()
    rows = {c: [] for c in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    prompts: list[list[int]] = []
    marks: list[tuple[int, int, int]] = []          # (prompt, position, group) of each chance block
    key = 1 << 20

    def chance(j: int) -> int | None:
        return table.add_opaque(groups[j].pop(), 5, 3 + 11 * j, "block") if groups[j] else None

    for i in range(n):
        r = rng.random()
        segs = list(prompts[int(rng.integers(len(prompts)))]) if prompts and r < 0.5 else []
        if segs and rng.random() < 0.4:
            segs = segs[:int(rng.integers(1, len(segs) + 1))]
        if marks and 0.5 <= r < 0.75:
            p, k, j = marks[int(rng.integers(len(marks)))]
            c = chance(j)
            if c is not None:
                segs = prompts[p][:k] + [c]
                marks.append((i, k, j))
        elif r >= 0.75:
            j = int(rng.integers(len(groups)))
            c = chance(j)
            if c is not None:
                marks.append((i, len(segs), j))
                segs.append(c)
        if not (prompts and r < 0.1):
            for _ in range(int(rng.integers(1, 3))):
                key += 1
                segs.append(table.add_opaque(key, 5, int(rng.choice([1, 10, 64])), "block"))
        prompts.append(segs)
        for c, v in zip(rows, (i, f"s{i % 4}", "a", 10 * i, 2, segs), strict=True):
            rows[c].append(v)
    return Trace(table.build(), requests_frame(rows), source="<chance>")


def _asked(trace: Trace) -> PrefixCache:
    """A prefix cache asked for every request of ``trace`` in arrival order (as the serving model asks it)."""
    work = R.workload_from_trace(trace)
    pol = PrefixCache(PolicyContext(math.inf, 1))
    for i in range(work.num_requests):
        v, t = work.view(i), int(work.arrival_us[i])
        assert pol.start_prefix(v, t) >= 0
        pol.commit(v, t)
        pol.release(v, t)
    return pol


def _points(trace: Trace):
    order = np.lexsort((trace.column("request_id"), trace.column("arrival_us")))
    rows, offs = _order_rows(trace, order)
    pts: list = []
    pfx = resident_prefixes(trace.segments, rows, offs, pts)
    return pfx, pts, rows, offs, np.asarray(trace.prompt_lengths)[order]


TRACES = [lambda s: chance_trace(s), lambda s: fresh_trace(s, 120), lambda s: _opaque_trace(s),
          lambda s: _opaque_trace(s, repeats=True), lambda s: fresh_trace(s, 120, "row")]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("make", range(len(TRACES)))
def test_nodes_and_owned_once_are_the_trees(seed, make):
    """Where the segment trie answers, the node count is the asked tree's (prefixes ending inside a segment too), and
    the own tokens' test is prefix.stored_once's of the tree's edges."""
    trace = TRACES[make](seed)
    pol = _asked(trace)
    pfx, pts, rows, offs, ntok = _points(trace)
    assert pfx.tolist() == [int(x) for x in _reuses(trace)]
    if pts:
        assert T.radix_nodes(pfx, ntok, *pts) == pol.tree.num_nodes
    assert T.own_once(trace.segments, rows, offs, pfx) == stored_once(pol.tree.run_refs())


def _reuses(trace: Trace) -> list[int]:
    work = R.workload_from_trace(trace)
    pol = PrefixCache(PolicyContext(math.inf, 1))
    out = []
    for i in range(work.num_requests):
        v, t = work.view(i), int(work.arrival_us[i])
        out.append(pol.start_prefix(v, t))
        pol.commit(v, t)
        pol.release(v, t)
    return out


def test_chance_points_are_met():
    """The chance traces hold prefixes ending inside a segment, some of them at one point (else the test above would
    not see those points counted once)."""
    pfx, pts, *_ = _points(chance_trace(0, 200))
    inside = pts[2][(pfx > 0) & (pts[2] >= 0)]
    assert inside.shape[0] > np.unique(inside).shape[0] > 0


def _both(trace, cfg, monkeypatch, spoil=None, mode="1") -> tuple:
    """(told run, asked run, whether prefix was told)."""
    accel.set_mode(mode)
    told = []

    def spy(pols, sm, tr, work):
        got = _TELL(pols, sm, tr, work)
        told.append(got)
        if got and spoil is not None:
            spoil(pols[0])
        return got

    monkeypatch.setattr(T, "tell", spy)
    on = R.replay(trace, cfg)
    monkeypatch.setattr(T, "tell", lambda *a: False)
    off = R.replay(trace, cfg)
    return on, off, any(told)


CONFIGS = [({}, True), ({"policies": ("block-hash",)}, True), ({"token_budget": 64}, True),
           ({"max_requests": 90, "rate": 3000.0}, True), ({"policies": ("prefix", "irminsul")}, True),
           ({"policies": ("fixed-chunk", "oracle")}, True), ({"policies": ("linearkv", "irminsul+rdr")}, True),
           ({"capacity_bytes": 2e8}, False), ({"replicas": 2}, False), ({"verify": True}, False),
           ({"check_invariants": True}, False), ({"closed_loop": True}, False),
           ({"policy_options": {"prefix": {"page_size": 8}}}, False)]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("change, told", CONFIGS)
def test_told_equals_asked(seed, change, told, monkeypatch):
    """Told only where it applies; wherever told, the same outputs as the replay that asks it."""
    for make in (chance_trace, lambda s: fresh_trace(s, 120)):
        on, off, got = _both(make(seed), ReplayConfig(**change), monkeypatch)
        assert got == told and _same(on, off)


@pytest.mark.parametrize("make", [lambda: _opaque_trace(1), lambda: fresh_trace(3, 120, "row"),
                                  lambda: _tricky_trace(0)])
def test_not_told_where_not_shown(make, monkeypatch):
    """A stream at two lengths (the trie declines), a block twice in one prompt (owned twice), stored tokens."""
    on, off, got = _both(make(), ReplayConfig(), monkeypatch)
    assert not got and _same(on, off)


def test_not_told_where_the_event_loop_runs(monkeypatch):
    """Without the compiled timeline (numpy only) the event loop asks the policy: not told."""
    on, off, got = _both(fresh_trace(1, 120), ReplayConfig(), monkeypatch, mode="0")
    assert not got and _same(on, off)


def test_an_empty_piece_declines():
    """An empty segment row in a prompt (a store that holds one): not told (an edge's test reads those at its ends
    otherwise); the same rows without it are."""
    from types import SimpleNamespace

    seg = SimpleNamespace(offsets=np.array([0, 40, 40, 80]), keys=np.array([1, 3, 2], np.uint64),
                          salts=np.zeros(3, np.uint64), opaque_mask=np.ones(3, bool))
    offs, pfx = np.array([0, 3, 4]), np.array([0, 40])
    assert not T.own_once(seg, np.array([0, 1, 2, 0]), offs, pfx)
    assert T.own_once(seg, np.array([0, 2, 0]), np.array([0, 2, 3]), pfx)


@pytest.mark.parametrize("spoil", ["nodes", "hits", "tokens", "plans"])
def test_a_wrong_told_state_fails(spoil, monkeypatch):
    """A told state off by one anywhere (its node count, hits, stored tokens, one plan) fails the comparison."""
    from pic.engine.policies.base import Footprint

    def spoiled(pol):
        if spoil == "nodes":
            fp = pol.footprint()
            pol.footprint = lambda: Footprint(fp.entries + 1, None, 0)
        elif spoil == "hits":
            pol.stats.hits += 1
        elif spoil == "tokens":
            pol.tree.evictable_tokens += 1
            pol.peak_bytes += pol._bpt
        else:
            pfx = pol.told_plans[0].copy()
            k = int(np.flatnonzero(pfx)[0])
            pfx[k] -= 1
            pol.told_plans = (pfx, pol.told_plans[1])

    on, off, got = _both(chance_trace(1), ReplayConfig(), monkeypatch, spoil=spoiled)
    assert got and not _same(on, off)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("make", range(len(TRACES)))
def test_own_once_from_the_oracles_sort(seed, make):
    """resident._unmet_past_prefix's ``own`` (where it answers True) is own_once's answer: what prefix_told reads from
    the last prompt_oracle instead of testing again."""
    from pic.engine.resident import _unmet_past_prefix

    trace = TRACES[make](seed)
    pfx, _, rows, offs, _ = _points(trace)
    own: list = []
    if _unmet_past_prefix(trace.segments, rows, offs, pfx, 64, own):
        assert own == [T.own_once(trace.segments, rows, offs, pfx)]
    else:
        assert own == []


def test_own_once_from_the_oracles_sort_small():
    """A piece of length 0, a stream twice in one prompt past its prefix (its offsets held twice), twice before it,
    once in each of two prompts: own_once's answers, from the oracle's sort."""
    from types import SimpleNamespace

    from pic.engine.resident import _unmet_past_prefix

    seg = SimpleNamespace(offsets=np.array([0, 40, 40, 80, 100]), keys=np.array([1, 3, 2, 5], np.uint64),
                          salts=np.zeros(4, np.uint64), opaque_mask=np.ones(4, bool))
    cases = [(np.array([0, 1, 2, 0]), np.array([0, 3, 4]), np.array([0, 40]), False),
             (np.array([0, 2, 0]), np.array([0, 2, 3]), np.array([0, 40]), True),
             (np.array([0, 2, 2]), np.array([0, 3]), np.array([0]), False),
             (np.array([2, 2, 0]), np.array([0, 3]), np.array([80]), True),
             (np.array([0, 3, 0, 2]), np.array([0, 2, 4]), np.array([0, 40]), True)]
    for rows, offs, pfx, want in cases:
        own: list = []
        assert _unmet_past_prefix(seg, rows, offs, pfx, 64, own)
        assert own == [want] == [T.own_once(seg, rows, offs, pfx)]
