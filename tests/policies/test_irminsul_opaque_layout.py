"""irminsul's one-call layout of an opaque prompt (``irminsul_layout.opaque_layout``, the compiled
``prompt_layout`` of :mod:`pic._accel_numba_cdc`): the tokens, CDC layout, fingerprints and edge keys that
``tokens_from``, ``cdc.layout_from_fps`` / ``cdc.layout_fps`` and ``cdc.edge_keys`` give (numpy reference), and
the policy's plans and stats with it are those without it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic import accel
from pic.engine import cdc, policies
from pic.engine.policies import PolicyContext, RequestView
from pic.engine.policies import irminsul_lookup as lookup_mod
from pic.engine.policies.irminsul_layout import edge_arrays, opaque_layout, query_key, tokens_from
from pic.traces.content import Segments
from tests.policies.conftest import opaque_store, plans_of

pytest.importorskip("numba")


def _store(seed: int, num: int = 40) -> Segments:
    """Opaque segments only (one empty), lengths 1 .. ~1500."""
    return opaque_store(seed, num, 1500)


def _view(store: Segments, rows: list[int], rid: int = 0) -> RequestView:
    r = np.array(rows, np.int64)
    lens = store.offsets[r + 1] - store.offsets[r]
    sb = np.zeros(r.size + 1, np.int64)
    np.cumsum(lens, out=sb[1:])
    return RequestView(rid, "s", None, sb, store.ids[r], store.kinds[r], r, store)


def _reference(req: RequestView, lo: int, base: int, start: int, cfg: cdc.CDCConfig, m: int) -> tuple:
    toks = tokens_from(req, lo)
    n = req.num_tokens
    if start == 0:
        b, anc, fps = cdc.layout_fps(toks, cfg)
    else:
        b, anc, fps = cdc.layout_from_fps(toks[base - lo:], base, n, start, cfg)
    heads, tails = cdc.edge_keys(toks, b - lo, m)
    return toks, b, anc, fps, heads, tails


@pytest.mark.parametrize("gear", ["mix", "table"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_opaque_layout_is_tokens_layout_and_edge_keys(seed: int, gear: str) -> None:
    store = _store(seed)
    rng = np.random.default_rng(seed + 7)
    cfg = cdc.CDCConfig(gear=gear) if seed != 2 else cdc.CDCConfig(128, 32, 256, 5, gear)
    checked = 0
    for _ in range(12):
        rows = rng.choice(store.ids.shape[0], int(rng.integers(1, 9)), replace=False).tolist()
        req = _view(store, rows)
        n = req.num_tokens
        cases = [(0, 0, 0)]
        for _ in range(4):
            if n > 200:
                start = int(rng.integers(64, n - 70))
                base = int(rng.integers(max(0, start - 200), start - 62))
                cases.append((int(rng.integers(0, base + 1)), base, start))
        for lo, base, start in cases:
            m = int(rng.choice([1, 16, 40]))
            accel.set_mode("0")
            try:
                want = _reference(req, lo, base, start, cfg, m)
            finally:
                accel.set_mode(None)
            q = int(rng.integers(lo - 2, n + 2))     # (the query key's position: made where lo <= q <= n - m)
            accel.set_mode("1")
            try:
                got = opaque_layout(_view(store, rows), lo, base, start, cfg, m, q)
            finally:
                accel.set_mode(None)
            if n <= max(start, 63) + 1:
                assert got is None
                continue
            assert got is not None
            checked += 1
            _same(got, want, (rows, lo, base, start, m))
            key = cdc.fingerprint(want[0][q - lo:q - lo + m]) if lo <= q <= n - m else 0
            assert query_key(got[-1]) == key, (rows, lo, q, m)
    assert checked > 30


def _same(got: tuple, want: tuple, where) -> None:
    """``opaque_layout``'s answer (tokens an array; bounds, fingerprints and keys lists; anchors bytes; the kernel's
    array) is the reference's arrays."""
    toks, bounds, anchors, fps, heads, tails, meta = got
    assert toks.dtype == np.int32 and np.array_equal(toks, want[0]), where
    assert bounds == want[1].tolist() and fps == want[3].tolist(), where
    assert anchors == want[2].astype(np.bool_).tobytes(), where
    assert heads == want[4].tolist() and tails == want[5].tolist(), where
    for d in (0, 1, len(heads) // 2):
        ha, ta = edge_arrays(meta, d)
        assert ha.dtype == ta.dtype == np.uint64, where
        assert np.array_equal(ha, want[4][d:]) and np.array_equal(ta, want[5][d:]), where


def test_opaque_layout_alternating_stores_and_configs() -> None:
    """The kernel arguments kept for the last store and config asked (``_LAST_OPAQUE``) are those of the store and
    config of each call: two stores and two configs in turn give the numpy reference's layouts; views made without
    segment bounds too (the kernel finds the segment holding ``lo`` from the lengths: none made)."""
    stores = [_store(3), _store(4)]
    cfgs = [cdc.CDCConfig(), cdc.CDCConfig(128, 32, 256, 5, "table")]
    rng = np.random.default_rng(11)
    checked = 0
    for i in range(24):
        store, cfg = stores[i % 2], cfgs[(i // 2) % 2]
        rows = rng.choice(store.ids.shape[0], int(rng.integers(1, 6)), replace=False).tolist()
        n = int((store.offsets[np.array(rows) + 1] - store.offsets[np.array(rows)]).sum())
        if n <= 300:
            continue
        start = int(rng.integers(64, n - 70)) if i % 3 else 0
        base = int(rng.integers(max(0, start - 200), start - 62)) if start else 0
        lo = int(rng.integers(0, base + 1)) if start else 0
        accel.set_mode("0")
        try:
            want = _reference(_view(store, rows), lo, base, start, cfg, 16)
        finally:
            accel.set_mode(None)
        r = np.array(rows, np.int64)
        bare = RequestView(i, "s", None, None, store.ids[r], store.kinds[r], r, store, num_tokens=n)
        accel.set_mode("1")
        try:
            got = opaque_layout(bare, lo, base, start, cfg, 16)
        finally:
            accel.set_mode(None)
        assert got is not None
        assert bare._bounds is None
        _same(got, want, (i, rows, lo, base, start))
        checked += 1
    assert checked > 15


@pytest.mark.parametrize("rows", [[3, 5, 7], [5, 3, 7], [5, 7, 3, 9], [3, 3, 5, 7]])
def test_opaque_layout_from_each_segment_edge(rows: list[int]) -> None:
    """``lo`` at each segment's start and one token either side (the empty segment 3 first, between two others, or
    last), on a view without segment bounds: the reference's tokens and layout (a segment found one off derives
    other tokens)."""
    store = _store(5)
    lens = (store.offsets[np.array(rows) + 1] - store.offsets[np.array(rows)]).tolist()
    n = sum(lens)
    edges = np.cumsum([0, *lens]).tolist()
    cfg = cdc.CDCConfig(128, 32, 256)
    checked = 0
    for e in edges:
        for lo in (e - 1, e, e + 1):
            start = lo + 63
            if lo < 0 or n <= start + 80:
                continue
            accel.set_mode("0")
            try:
                want = _reference(_view(store, rows), lo, lo, start, cfg, 16)
            finally:
                accel.set_mode(None)
            r = np.array(rows, np.int64)
            bare = RequestView(0, "s", None, None, store.ids[r], store.kinds[r], r, store, num_tokens=n)
            accel.set_mode("1")
            try:
                got = opaque_layout(bare, lo, lo, start, cfg, 16)
            finally:
                accel.set_mode(None)
            assert got is not None
            _same(got, want, (rows, lo))
            checked += 1
    assert checked >= 4


def test_opaque_layout_declines_what_it_cannot_make() -> None:
    """A numpy-only run, stored tokens in the store, a prompt given as tokens, a prompt too short: None."""
    store = _store(0)
    req = _view(store, [0, 1, 2])
    cfg = cdc.CDCConfig()
    accel.set_mode("0")
    try:
        assert opaque_layout(req, 0, 0, 0, cfg, 16) is None
    finally:
        accel.set_mode(None)
    accel.set_mode("1")
    try:
        assert opaque_layout(RequestView.from_tokens(0, req.tokens), 0, 0, 0, cfg, 16) is None
        short = [int(i) for i in np.flatnonzero(np.diff(store.offsets) < 30)[:2]]
        assert short and opaque_layout(_view(store, short), 0, 0, 0, cfg, 16) is None
        mixed = Segments(store.ids, store.kinds, store.offsets, np.arange(5, dtype=np.int32),
                         np.concatenate([[0, 5], np.full(store.ids.shape[0] - 1, 5)]).astype(np.int64),
                         store.keys, store.salts)
        assert opaque_layout(_view(mixed, [0, 1, 2]), 0, 0, 0, cfg, 16) is None
        assert opaque_layout(_view(store, [0, 1, 2]), 0, 0, 0, cfg, 16) is not None
    finally:
        accel.set_mode(None)


def _conversations(store: Segments, seed: int) -> list[RequestView]:
    """Sessions that each continue their previous turn with new segments, interleaved, and a few prompts that
    repeat an earlier turn's segments in another order (content found beyond the exact prefix)."""
    rng = np.random.default_rng(seed)
    num = store.ids.shape[0]
    sessions: list[list[int]] = [[] for _ in range(4)]
    out: list[RequestView] = []
    for rid in range(36):
        s = sessions[int(rng.integers(4))]
        if rid % 7 == 6 and s:
            rows = rng.permutation(s).tolist()
        else:
            s += rng.choice(num, int(rng.integers(1, 3)), replace=False).tolist()
            rows = list(s)
        out.append(_view(store, rows, rid))
    return out


@pytest.mark.parametrize("capacity", [math.inf, 20000])
@pytest.mark.parametrize("seed", [0, 1])
def test_plans_with_the_one_call_layout_are_the_same(seed: int, capacity: float, monkeypatch) -> None:
    """numpy only, compiled without the one-call layout, compiled with it (taken): the same plans and stats."""
    store = _store(seed + 10, 30)
    cfg = {"avg_chunk": 128, "min_chunk": 32, "max_chunk": 256}

    def run() -> tuple:
        pol = policies.build("irminsul", PolicyContext(capacity * 2 if capacity < math.inf else math.inf, 2), cfg)
        plans = plans_of(pol, _conversations(store, seed))
        return plans, dict(pol.stats.extra), pol.stats.hits

    calls = []

    def counted(*a):
        got = opaque_layout(*a)
        calls.append(got is not None)
        return got
    try:
        accel.set_mode("0")
        want = run()
        accel.set_mode("1")
        monkeypatch.setattr(lookup_mod, "opaque_layout", lambda *a: None)
        slow = run()
        monkeypatch.setattr(lookup_mod, "opaque_layout", counted)
        got = run()
    finally:
        accel.set_mode(None)
    assert sum(calls) > 20
    assert slow == want and got == want
    assert want[2] > 0 and want[1]["prefix_tokens"] > 0 and want[1]["chunk_hits"] + want[1]["tail_tokens"] > 0
