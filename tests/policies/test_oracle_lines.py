"""The ``oracle`` policy's named windows (engine.oracle_lines) give the plans and window counts of the index
of every window's hash: opaque streams met at several lengths, short pieces (windows over three or more),
repeats inside a prompt, lines that overlap or continue one another (several streams in one group), shared
prefixes, lookups and commits interleaved, and a switch to the hashed index mid-run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic import accel
from pic.engine import policies
from pic.engine.plan import Action
from pic.engine.policies import RequestView
from pic.engine.policies import oracle as oracle_policy
from pic.engine.replay import workload_from_trace
from pic.traces.content import opaque_bases
from pic.traces.schema import SegmentTable, Trace, requests_frame
from tests.policies.conftest import make_ctx

_M = (1 << 64) - 1
_G = 0x9E3779B97F4A7C15


def _unmix(z: int) -> int:
    """The inverse of the splitmix64 finalizer (:func:`traces.content.splitmix64`)."""
    z ^= (z >> 31) ^ (z >> 62)
    z = (z * pow(0x94D049BB133111EB, -1, 1 << 64)) & _M
    z ^= (z >> 27) ^ (z >> 54)
    z = (z * pow(0xBF58476D1CE4E5B9, -1, 1 << 64)) & _M
    z ^= (z >> 30) ^ (z >> 60)
    return z


def _key_at(key: int, salt: int, d: int) -> int:
    """A key (salt 0) whose line starts ``d`` tokens after the line of ``(key, salt)``."""
    b = int(opaque_bases(np.array([key], np.uint64), np.array([salt], np.uint64))[0])
    return _unmix((b + d * _G) & _M)


def _opaque_trace(seed: int, n: int = 70) -> Trace:
    rng = np.random.default_rng(seed)
    table = SegmentTable()
    streams = [(int(k), 3) for k in rng.integers(1, 1 << 40, 6)]
    streams += [(_key_at(*streams[0], 100), 0), (_key_at(*streams[1], 120), 0),    # overlapping lines
                (_key_at(*streams[2], 300), 0)]                                    # continues a 300-token row
    pool = []
    for _ in range(30):
        k, s = streams[int(rng.integers(len(streams)))]
        pool.append(table.add_opaque(k, s, int(rng.choice([1, 5, 20, 40, 63, 64, 65, 100, 300, 512])), "block"))
    pool.append(table.add_opaque(*streams[2], 300, "block"))
    pool.append(table.add_opaque(*streams[8], 200, "block"))
    rows = {c: [] for c in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    prompts: list[list[int]] = []
    for i in range(n):
        r = rng.random()
        if prompts and r < 0.35:
            sids = prompts[int(rng.integers(len(prompts)))] + [pool[int(rng.integers(len(pool)))]
                                                              for _ in range(int(rng.integers(0, 3)))]
        else:
            sids = [pool[int(rng.integers(len(pool)))] for _ in range(int(rng.integers(1, 7)))]
            if rng.random() < 0.2:
                sids = sids + sids[:2]                           # a repeat inside the prompt
            if rng.random() < 0.15:
                sids = [pool[-2], pool[-1]] + sids               # a continued line
        prompts.append(sids)
        for c, v in zip(rows, (i, f"s{i}", "a", i, 1, sids), strict=True):
            rows[c].append(v)
    return Trace(table.build(), requests_frame(rows), source="<opaque>")


def _run(trace: Trace, named: bool, m: int, tokens_from: int | None = None, compiled_from: int | None = None
         ) -> tuple[list, list]:
    """Plans (spans) and index sizes, requests looked up in pairs and committed in reverse order (from request
    ``compiled_from`` on with the compiled kernels: one state for both forms)."""
    oracle_policy._NAMED = named
    try:
        pol = policies.build("oracle", make_ctx(math.inf), {"min_match": str(m)})
        work = workload_from_trace(trace)
        views = [work.view(i) for i in range(trace.num_requests)]
        if tokens_from is not None:
            views[tokens_from:] = [RequestView.from_tokens(v.request_id, v.tokens) for v in views[tokens_from:]]
        plans, sizes = [], []
        for i in range(0, len(views), 2):
            if i == compiled_from:
                accel.set_mode("1")
                assert accel.kernels(1, "oracle") is not None
            pair = views[i:i + 2]
            for v in pair:
                plans.append([(s.start, s.end, s.action, s.source_pos) for s in pol.lookup(v, i).spans])
            for v in reversed(pair):
                pol.commit(v, i)
                sizes.append((len(pol.footprint().runs), pol.footprint().entries, pol.stats.extra["indexed_windows"]))
        assert (pol._lines is not None) == (named and tokens_from is None and m >= 8)
        return plans, sizes
    finally:
        oracle_policy._NAMED = True


@pytest.mark.parametrize("mode", ["0", "1"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("m", [1, 16, 64])
def test_named_windows_equal_hashed_windows(mode: str, seed: int, m: int) -> None:
    if mode == "1" and not accel.available():
        pytest.skip("numba not installed")
    accel.set_mode(mode)
    try:
        assert (accel.kernels(1, "oracle") is not None) == (mode == "1")
        t = _opaque_trace(seed)
        want = _run(t, False, m)
        assert _run(t, True, m) == want
        assert _run(t, True, m, tokens_from=40) == want      # named, then moved into the hashed index
        if mode == "0" and accel.available():
            assert _run(t, True, m, compiled_from=30) == want  # numpy form, then the kernels on its state
        assert sum(len(p) for p in want[0]) > 0
    finally:
        accel.set_mode(None)


def test_lines_group_overlapping_and_continued_streams() -> None:
    """Rows of one stream share a simple group (their own stream id); streams whose lines overlap or touch form
    one group of several streams (not named); a store with stored tokens names nothing."""
    from pic.engine.oracle_lines import Lines

    table = SegmentTable()
    ids = [table.add_opaque(11, 3, 200, "block"), table.add_opaque(_key_at(11, 3, 100), 0, 50, "block"),
           table.add_opaque(12, 3, 300, "block"), table.add_opaque(_key_at(12, 3, 300), 0, 10, "block"),
           table.add_opaque(13, 3, 64, "block"), table.add_opaque(13, 3, 128, "block"),
           table.add_opaque(14, 3, 64, "block"), table.add_opaque(_key_at(14, 3, 65), 0, 9, "block")]
    store = table.build()
    lines = Lines(store)
    sid = lines.sid[[int(np.flatnonzero(store.ids == i)[0]) for i in ids]].tolist()
    assert lines.ok and sid[:4] == [-1] * 4
    assert sid[4] == sid[5] >= 0 and len({sid[4], sid[6], sid[7]}) == 3 and min(sid[6:]) >= 0   # (a gap of 1)
    table.add(np.arange(10, dtype=np.int32), "user")
    assert not Lines(table.build()).ok


def test_layout_kernel_equals_numpy() -> None:
    """The compiled layout (``line_layout``) equals the numpy one: pieces empty, short, of streams or not."""
    from pic.engine.oracle_lines import Layout, Lines

    if not accel.available():
        pytest.skip("numba not installed")
    accel.set_mode("1")
    try:
        assert accel.kernels(1, "oracle") is not None
    finally:
        accel.set_mode(None)
    rng = np.random.default_rng(5)
    lines = Lines(_opaque_trace(1).segments)
    for _ in range(300):
        K = int(rng.integers(0, 9))
        rows = rng.integers(0, len(lines.sid), K).astype(np.int64)
        L = np.diff(lines.store.offsets)[rows] * (rng.random(K) < 0.9)        # some pieces empty
        bounds = np.r_[0, np.cumsum(L)].astype(np.int64)
        for m in (2, 16, 64):
            got = []
            for mode in ("0", "1"):
                accel.set_mode(mode)
                try:
                    lay = Layout(lines, rows, bounds, m)
                finally:
                    accel.set_mode(None)
                got.append([lay.n, lay.ins, *(x.tolist() for x in (lay.key, lay.a, lay.b, lay.pos, lay.ha, lay.hb))])
            assert got[0] == got[1]


def _key_with_first(token: int, skip: int = 0) -> int:
    """A key (salt 0) whose opaque stream starts with ``token`` (searched: 1 in 2^17 keys)."""
    from pic.traces.content import opaque_run

    keys = np.arange(1 << 40, (1 << 40) + (1 << 22), dtype=np.uint64)
    first = opaque_run(opaque_bases(keys, np.zeros(keys.shape[0], np.uint64)), np.zeros(keys.shape[0], np.int64),
                       np.ones(keys.shape[0], np.int64))
    return int(keys[np.flatnonzero(first == token)[skip]])


@pytest.mark.parametrize("mode", ["0", "1"])
def test_windows_equal_by_a_few_tokens_are_found(mode: str) -> None:
    """Windows that hold one chance-equal token where two pieces meet (a stream's shorter row followed by a
    stream starting with the token that follows in the longer row; two right streams starting alike) are
    hashed, so the oracle finds them as the hashed index does."""
    from pic.traces.content import opaque_run

    if mode == "1" and not accel.available():
        pytest.skip("numba not installed")
    b21 = opaque_bases(np.array([21], np.uint64), np.array([0], np.uint64))
    s200 = int(opaque_run(b21, np.array([200]), np.array([1]))[0])
    kx = _key_with_first(s200)
    ky = _key_with_first(s200, 1)
    table = SegmentTable()
    S, Sh = table.add_opaque(21, 0, 300, "block"), table.add_opaque(21, 0, 200, "block")
    X, Y = table.add_opaque(kx, 0, 100, "block"), table.add_opaque(ky, 0, 100, "block")
    Z, P, Q, D = (table.add_opaque(k, 0, 90, "block") for k in (31, 32, 33, 34))
    prompts = [[D], [S], [Z, Sh, X], [P, X], [Q, P, Y], [D]]     # (looked up in pairs: 2 after 1, 4 after 3)
    rows = {c: [] for c in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    for i, sids in enumerate(prompts):
        for c, v in zip(rows, (i, f"s{i}", "a", i, 1, sids), strict=True):
            rows[c].append(v)
    t = Trace(table.build(), requests_frame(rows), source="<chance>")
    accel.set_mode(mode)
    try:
        want = _run(t, False, 64)
        assert _run(t, True, 64) == want
    finally:
        accel.set_mode(None)
    assert (90, 90 + 201, Action.REUSE_ROTATED, 0) in want[0][2]        # S[137:201) = S[137:200) + X[0]
    assert any(s[2] == Action.REUSE_ROTATED for s in want[0][4])               # P's tail + Y[0] = P's tail + X[0]


def test_hashed_windows_kernels_equal_prefix_hashes() -> None:
    """The compiled hashed windows (hashed_add, hashed_lookup: ranges whose tokens overlap, across pieces, from an
    offset on) hold the hashes the prompt's prefix hashes give, each with its first position."""
    from pic.engine.oracle import WindowIndex
    from pic.engine.oracle_lines import Lines
    from pic.engine.rolling import _powers, prefix_hashes
    from pic.traces.content import _MASK

    if not accel.available():
        pytest.skip("numba not installed")
    accel.set_mode("1")
    try:
        fast = accel.kernels(1, "oracle")
    finally:
        accel.set_mode(None)
    t = _opaque_trace(0)
    work, lines = workload_from_trace(t), Lines(t.segments)
    rng, m, checked = np.random.default_rng(0), 16, 0
    bm = _powers(m)[0][m]
    for i in range(70):
        v = work.view(i)
        n = v.num_tokens - m + 1
        if n <= 3:
            continue
        cuts = np.sort(rng.choice(n, size=min(n, 6) // 2 * 2, replace=False)).astype(np.int64)
        z = np.zeros((6, cuts.shape[0] // 2), np.int64)
        z[4], z[5] = cuts[0::2], cuts[1::2]
        off = int(rng.integers(0, n))
        pieces = (lines.keyx, v.segment_rows, np.ascontiguousarray(v.segment_bounds))
        idx = WindowIndex()
        idx._to_table()
        idx._reserve(n)
        idx._n += fast.hashed_add(*pieces, z, z.shape[1], off, m, _MASK, bm, idx._table, idx._shift)
        h = prefix_hashes(v.tokens)
        p = np.concatenate([np.arange(max(x, off), y + 1) for x, y in zip(z[4].tolist(), z[5].tolist(), strict=True)])
        w = h[p + m] - h[p] * bm
        first: dict[int, int] = {}
        for key, pos in zip(w.tolist(), p.tolist(), strict=True):
            first.setdefault(key, pos)
        assert len(idx) == len(first)
        found, val = idx.lookup(np.array(list(first), np.uint64))
        assert found.all() and val.tolist() == list(first.values())
        out = np.zeros((2, n + 1), np.int64)
        hs, ps = np.empty(n, np.uint64), np.empty(n, np.int64)
        k = fast.hashed_lookup(*pieces, z, z.shape[1], off, m, _MASK, bm, idx._table, idx._shift, out, 0, hs, ps) >> 32
        assert out[0, :k].tolist() == (p - off).tolist() and out[1, :k].tolist() == [first[x] for x in w.tolist()]
        checked += 1
    assert checked > 30
