"""linearkv's fast paths give what the general ones give: a prompt of opaque segments chunked by one compiled
call (``LinearKV._chunks`` through ``irminsul_layout.opaque_layout``) against its gathered tokens chunked by
``cdc.layout_fps``; the lookup's split loop (chunks starting inside the prefix: only a missing one matters) against
the full loop it takes under ``--verify``; the store's per-request ``add_new`` / ``unlock_all`` against ``add`` /
``unlock`` / ``drop`` per chunk."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic import accel
from pic.engine import cdc, eviction, policies
from pic.engine.policies import PolicyContext, RequestView
from pic.engine.policies.base import PolicyStats
from pic.engine.policies.linearkv_store import Store
from pic.engine.specs import MODELS
from pic.traces.content import Segments
from tests.policies.conftest import opaque_store, plans_of

QNEXT = MODELS["qwen3-next-80b-a3b"]


def _store(seed: int, num: int = 30) -> Segments:
    """Opaque segments only (one empty), lengths 1 .. ~900."""
    return opaque_store(seed, num, 900)


def _view(store: Segments, rows: list[int], rid: int) -> RequestView:
    r = np.array(rows, np.int64)
    lens = store.offsets[r + 1] - store.offsets[r]
    sb = np.zeros(r.size + 1, np.int64)
    np.cumsum(lens, out=sb[1:])
    return RequestView(rid, f"s{rid}", None, sb, store.ids[r], store.kinds[r], r, store)


def _prompts(store: Segments, seed: int, num: int = 24) -> list[list[int]]:
    """Rows of prompts that share prefixes (conversation turns) and reorder segments (moved content)."""
    rng = np.random.default_rng(seed)
    out: list[list[int]] = []
    for _ in range(num):
        if out and rng.random() < 0.6:
            base = out[int(rng.integers(len(out)))]
            rows = base[:int(rng.integers(0, len(base) + 1))]
        else:
            rows = []
        rows = rows + rng.choice(store.ids.shape[0], int(rng.integers(1, 5)), replace=False).tolist()
        if rng.random() < 0.3:
            rng.shuffle(rows)
        out.append(rows)
    return out


def _policy(capacity=math.inf, verify=False, **opts):
    ctx = PolicyContext(capacity, QNEXT.kv_bytes_per_token, model=QNEXT, verify=verify)
    return policies.build("linearkv", ctx, {"avg_chunk": 128, "min_chunk": 32, "max_chunk": 512, **opts})


@pytest.mark.parametrize("seed", [0, 1])
def test_opaque_prompts_chunk_as_their_gathered_tokens(seed: int) -> None:
    """``_chunks`` of a prompt of opaque segments (the compiled call where the kernels load) is the CDC layout and
    fingerprints of its gathered tokens (numpy reference), and its tokens are those tokens."""
    pytest.importorskip("numba")
    store = _store(seed)
    pol = _policy()
    for rid, rows in enumerate(_prompts(store, seed)):
        accel.set_mode("0")
        try:
            toks = _view(store, rows, rid).tokens
            b, _, fps = cdc.layout_fps(toks, pol._cdc)
        finally:
            accel.set_mode(None)
        accel.set_mode("1")
        try:
            req = _view(store, rows, rid)
            bl, fl, tokens, _ = pol._chunks(req)
        finally:
            accel.set_mode(None)
        assert (req._tokens is None) == (req.num_tokens > 64), rows        # (the one call: nothing gathered)
        assert bl == b.tolist() and fl == fps.tolist(), rows
        assert np.array_equal(tokens(), toks), rows


@pytest.mark.parametrize("capacity", [math.inf, 3e9])
@pytest.mark.parametrize("opts", [{}, {"admission": "always"}, {"prefix_stage": False}, {"prefix_page_size": 16}])
def test_split_lookup_is_the_full_loop(capacity, opts) -> None:
    """Without ``--verify`` the lookup skips the hit test of chunks that start inside the prefix-stage prefix; the
    plans, stats and layouts are those of the full loop (taken under ``--verify``, which finds no collision here)."""
    store = _store(5)
    reqs = [_view(store, rows, rid) for rid, rows in enumerate(_prompts(store, 5, 40))]
    fast, full = _policy(capacity, **opts), _policy(capacity, verify=True, **opts)
    layouts: list[tuple] = []
    for pol in (fast, full):
        got = []
        orig = pol._analyze

        def rec(req, prefix, orig=orig, got=got):
            lay = orig(req, prefix)
            got.append((lay.prefix, lay.hits, lay.used, list(lay.new.items()), lay.cold))
            return lay
        pol._analyze = rec
        layouts.append((plans_of(pol, reqs), got))
    assert layouts[0] == layouts[1]
    assert any(lay[1] for lay in layouts[0][1])
    assert any(lay[0] for lay in layouts[0][1]) == opts.get("prefix_stage", True)      # (prefix hits too)
    s, f = fast.stats, full.stats
    assert (s.lookups, s.hits, s.rejected, s.evictions) == (f.lookups, f.hits, f.rejected, f.evictions)
    assert s.extra == f.extra and f.collisions == 0 and f.verified_hits > 0


@pytest.mark.parametrize("evicts", [False, True])
def test_store_batch_calls_are_the_single_ones(evicts: bool) -> None:
    """``add_new`` and ``unlock_all`` leave the entries, their fields and the byte counts that ``add`` per chunk
    (cold ones at recency -1) and ``unlock`` then ``drop`` of the never-ready per chunk leave."""
    rng = np.random.default_rng(3)
    stores = [Store(eviction.key("lru"), evicts), Store(eviction.key("lru"), evicts)]
    batch, single = stores
    stats = PolicyStats()
    for step in range(60):
        new = {int(x): (a, a + int(rng.integers(1, 50))) for x, a in
               zip(rng.integers(0, 400, 6), rng.integers(0, 1000, 6), strict=True)}
        new = {fp: ab for fp, ab in new.items() if fp not in single.entries}
        cold = frozenset(fp for fp in new if rng.random() < 0.3)
        batch.add_new(new, "src", 3, 7, step, cold)
        for fp, (a, b) in new.items():
            e = single.add(fp, "src", b - a, a, (b - a) * 3 + 7, step)
            if fp in cold:
                e.last_access_us = e.created_us = -1
        for st in stores:
            for fp in list(st.entries)[::5]:
                st.entries[fp].ready = True
        # each chosen locked entry locked once more, then unlocked twice (its last unlock frees it); a missing one
        chosen = [fp for fp in single.entries if single.entries[fp].refs and rng.random() < 0.5]
        for fp in chosen:
            batch.lock(batch.entries[fp])
            single.lock(single.entries[fp])
        fps = chosen + [10_000] + chosen
        batch.unlock_all(fps)
        for fp in fps:
            e = single.entries.get(fp)
            if e is None:
                continue
            single.unlock(e)
            if e.refs == 0 and not e.ready:
                single.drop(e)
        assert (batch.evictable, batch.protected) == (single.evictable, single.protected)
        assert [(e.fp, e.size, e.base_pos, e.nbytes, e.refs, e.last_access_us, e.created_us, e.ready)
                for e in batch.entries.values()] == \
               [(e.fp, e.size, e.base_pos, e.nbytes, e.refs, e.last_access_us, e.created_us, e.ready)
                for e in single.entries.values()]
        if evicts and step % 10 == 9:
            assert batch.evict(200, stats) == single.evict(200, stats)
