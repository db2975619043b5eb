"""irminsul's shortcuts return the plans of the plain algorithm: lazily built tries (and the walks their
prefilters skip) against tries built at every index, on streams with reordered documents, shared heads
and tails, short chunks, and a cache tight enough to evict and cut chunks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic.engine import cdc, policies
from pic.engine.policies import PolicyContext, RequestView
from pic.engine.policies.irminsul_store import ChunkStore
from pic.traces.schema import KIND_CODE
from tests.policies.conftest import plans_of

BPT = 2


def _stream(seed: int, num: int = 60) -> list[np.ndarray]:
    """Prompts from a few shared documents in random order behind short headers, with shared tails, some
    continuing an earlier prompt, some tiny (chunks shorter than min_match)."""
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, 5000, int(rng.integers(40, 900)), dtype=np.int32) for _ in range(8)]
    tails = [rng.integers(0, 5000, int(rng.integers(1, 20)), dtype=np.int32) for _ in range(3)]
    out: list[np.ndarray] = []
    for _ in range(num):
        r = rng.random()
        if r < 0.2 and out:
            p = np.concatenate([out[int(rng.integers(len(out)))], docs[int(rng.integers(8))]])
        elif r < 0.3:
            p = tails[int(rng.integers(3))].copy()
        else:
            k = int(rng.integers(1, 5))
            parts = [rng.integers(0, 5000, int(rng.integers(0, 40)), dtype=np.int32)]
            parts += [docs[int(j)] for j in rng.choice(8, k, replace=False)]
            parts.append(tails[int(rng.integers(3))])
            p = np.concatenate(parts)
        out.append(p[:6000])
    return out


def _views(prompts: list[np.ndarray], seed: int) -> list[RequestView]:
    """One in three prompts gets a marker segment (S2: its edges are hard cuts, so a chunk can end where
    the same content goes on in another prompt: a fingerprint hit that a stored chunk extends)."""
    rng = np.random.default_rng(seed + 100)
    out = []
    for rid, toks in enumerate(prompts):
        n = toks.shape[0]
        if n > 40 and rng.random() < 0.35:
            a = int(rng.integers(1, n - 20))
            b = a + int(rng.integers(1, 12))
            out.append(RequestView(rid, "s", toks, np.array([0, a, b, n], np.int64), np.arange(3, dtype=np.uint64),
                                   np.array([0, KIND_CODE["marker"], 0], np.uint8)))
        else:
            out.append(RequestView.from_tokens(rid, toks))
    return out


def _end_node(st, c):
    """Chunk ``c``'s end node in the chunk trie (a lean store's chunk keeps none: the walk to it)."""
    if c.node is not None or not st.lean or c.indexed is None:
        return c.node
    return st.trie.node_of(c.src, c.fp, c.pos, c.pos + c.indexed)


def _plans(reqs: list[RequestView], capacity_tokens: float, eager: bool, monkeypatch, s1: bool = False) -> list:
    if eager:                             # replay the index log after every operation: the plain algorithm
        index, unindex = ChunkStore._index, ChunkStore._unindex

        def index_now(self, c):
            index(self, c)
            self._flush()

        def unindex_now(self, c):
            unindex(self, c)
            self._flush()
        monkeypatch.setattr(ChunkStore, "_index", index_now)
        monkeypatch.setattr(ChunkStore, "_unindex", unindex_now)
        monkeypatch.setattr(ChunkStore, "extendable", lambda self, c: (n := _end_node(self, c)) is not None and
                            self.trie.has_children(n))
        monkeypatch.setattr(ChunkStore, "longest",
                            lambda self, toks, short=False, head=None, _f=ChunkStore.longest: _f(self, toks, True))
    cap = math.inf if math.isinf(capacity_tokens) else capacity_tokens * BPT
    pol = policies.build("irminsul", PolicyContext(cap, BPT, verify=True), {"avg_chunk": 128, "min_chunk": 32,
                                                                           "max_chunk": 256, "s1": s1,
                                                                           "s1_window": 48})
    out = plans_of(pol, reqs)
    monkeypatch.undo()
    assert pol.stats.collisions == 0
    # the prefilter counts (fed from the lookup's edge keys, not from each chunk's tokens) are those of the
    # chunks indexed now
    st, m, want = pol._store, pol._store.min_match, ({}, {})
    for c in st.chunks():
        n = c.indexed
        if n is not None and n >= m:
            t = c.part(0, n)
            for d, k in zip(want, (cdc.fingerprint(t[:m]), cdc.fingerprint(t[-m:])), strict=True):
                d[k] = d.get(k, 0) + 1
    assert (dict(st._heads.items()), dict(st._tails.items())) == want
    return out


@pytest.mark.parametrize("capacity", [math.inf, 3000, 800])
@pytest.mark.parametrize("seed", [0, 1])
def test_lazy_tries_give_the_plans_of_eager_tries(seed, capacity, monkeypatch):
    prompts = _views(_stream(seed), seed)
    lazy = _plans(prompts, capacity, False, monkeypatch, s1=bool(seed))
    eager = _plans(prompts, capacity, True, monkeypatch, s1=bool(seed))
    assert lazy == eager
    assert sum(s[1] - s[0] for p in lazy for s in p if s[2] != 2) > 0      # the stream reuses


def test_hit_extended_through_a_hard_cut_same_plan_lazy_or_eager(monkeypatch):
    """A chunk cut short by a marker edge hits a stored chunk, and the trie walk extends it into a longer
    stored chunk with the same beginning (built lazily, the walk still finds it)."""
    rng = np.random.default_rng(7)
    d = rng.integers(0, 5000, 1500, dtype=np.int32)
    h1, h2, h3 = (rng.integers(0, 5000, k, dtype=np.int32) for k in (30, 50, 70))
    p1 = np.concatenate([h1, d])
    k = 30 + 700
    m = KIND_CODE["marker"]
    reqs = [RequestView.from_tokens(0, np.concatenate([h2, d])),
            RequestView(1, "s", p1, np.array([0, k, k + 3, p1.size], np.int64), np.arange(3, dtype=np.uint64),
                        np.array([0, m, 0], np.uint8)),
            RequestView(2, "s", np.concatenate([h3, d]), np.array([0, k + 40, k + 43, 1570], np.int64),
                        np.arange(3, dtype=np.uint64), np.array([0, m, 0], np.uint8))]
    lazy = _plans(reqs, math.inf, False, monkeypatch)
    eager = _plans(reqs, math.inf, True, monkeypatch)
    assert lazy == eager
    assert sum(s[1] - s[0] for s in lazy[2] if s[2] != 2) > 1300


def test_new_chunk_is_the_class_call() -> None:
    """``irminsul_records.new_chunk`` (admit's factory without the class call) sets every slot as ``Chunk(...)``
    does, keys or none."""
    from pic.engine.policies.irminsul_records import LEAN, Chunk, Extent, new_chunk
    from pic.engine.seq import Seq

    src = Seq.of_array(np.arange(100, dtype=np.int32))
    x = Extent(src, 0, 100, 100 * BPT, 7, 1, LEAN, 3)
    for keys in ((11, 12), None):
        a = Chunk(2**63 + 5, src, 10, 50, [[x, 10, 50]], 3, [x], keys)
        b = new_chunk(2**63 + 5, src, 10, 50, [[x, 10, 50]], 3, [x], keys)
        assert type(b) is Chunk
        for s in Chunk.__slots__:
            assert getattr(a, s) == getattr(b, s), s
        assert b.ready is False and b.windows is a.windows and b.keys == keys
