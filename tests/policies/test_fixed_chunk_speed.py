"""``fixed-chunk``'s per-request passes (admit's grid taken in one pass, the lookup's candidates looked up in one):
each stored chunk a request holds is locked once, however often the prompt's grid or its hits name it, and the
greedy takes the stored candidates only, in order, without overlap."""

from __future__ import annotations

import numpy as np

from pic.engine import policies
from pic.engine.plan import Action
from tests.policies.conftest import BYTES_PER_TOKEN, make_ctx, serve, view


def _policy(**opts):
    return policies.build("fixed-chunk", make_ctx(float("inf")), {"chunk_size": "32", **opts})


def _refs(p) -> dict[int, int]:
    return {key: ch.ref for key, ch in p._store.items()}


def test_a_repeated_chunk_of_the_grid_is_locked_once() -> None:
    """A prompt whose grid holds the same two chunks three times locks each once at admit (its locked tokens: 64)
    and frees them at release."""
    p = _policy()
    doc = np.arange(500, 564)
    prompt = np.r_[doc, doc, doc, np.arange(7)]
    serve(p, view(0, prompt), 1)
    assert len(p._store) == 2 and set(_refs(p).values()) == {0}
    req = view(1, prompt)
    plan = p.lookup(req, 2)
    assert p.admit(req, plan, 2)
    assert set(_refs(p).values()) == {1} and p._locked_tokens == 64
    p.commit(req, 3)
    assert set(_refs(p).values()) == {1} and p._locked_tokens == 64
    p.release(req, 4)
    assert set(_refs(p).values()) == {0} and p._locked_tokens == 0
    assert p.usage().protected == 0


def test_hits_on_the_grid_are_locked_once() -> None:
    """Chunks the lookup takes that also lie on the request's grid (a document moved by a whole chunk) are locked
    once, by the hit; the missing grid chunks are stored at commit, locked until release."""
    p = _policy(prefix_stage="false")
    doc = np.arange(1000, 1064)
    serve(p, view(0, np.r_[doc, np.arange(10)]), 1)
    req = view(1, np.r_[np.arange(2000, 2032), doc, np.arange(3000, 3032)])
    plan = p.lookup(req, 2)
    assert [(s.start, s.end, s.action, s.source_pos) for s in plan.spans if s.action != Action.RECOMPUTE] == \
        [(32, 96, Action.REUSE_ROTATED, 0)]
    assert p.admit(req, plan, 2)
    assert sorted(_refs(p).values()) == [1, 1] and p._locked_tokens == 64
    assert p.usage().protected == (64 + 64) * BYTES_PER_TOKEN          # 2 held chunks + 2 missing ones reserved
    p.commit(req, 3)
    assert sorted(_refs(p).values()) == [1, 1, 1, 1] and p._locked_tokens == 128
    p.release(req, 4)
    assert set(_refs(p).values()) == {0} and p._locked_tokens == 0


def test_greedy_takes_stored_candidates_in_order_without_overlap() -> None:
    """Of two stored windows that overlap the leftmost is taken, the other skipped; a later one is taken again."""
    p = _policy(prefix_stage="false")
    x, y, z = np.arange(100, 116), np.arange(116, 132), np.arange(300, 316)
    serve(p, view(0, np.r_[x, y, y, z]), 1)                   # chunks [x y] at 0 and [y z] at 32
    prompt = np.r_[np.arange(5), x, y, z, np.arange(900, 907), y, z, np.arange(3)]
    plan = p.lookup(view(1, prompt), 2)
    got = [(s.start, s.end, s.source_pos) for s in plan.spans if s.action != Action.RECOMPUTE]
    assert got == [(5, 37, 0), (60, 92, 32)]       # [y z] at 21 overlaps [x y] at 5: skipped


def test_chunks_stored_between_admit_and_commit_are_locked_not_made_again() -> None:
    """Two requests with the same prompt admitted before either commits: the first commit makes the chunks (one
    pass, locked once), the second finds them stored and locks them too; releases free them."""
    p = _policy()
    prompt = np.arange(4000, 4100)
    a, b = view(0, prompt), view(1, prompt)
    plans = [p.lookup(a, 1), p.lookup(b, 1)]
    assert p.admit(a, plans[0], 1) and p.admit(b, plans[1], 1)
    p.commit(a, 2)
    made = dict(p._store)
    assert len(made) == 3 and set(_refs(p).values()) == {1} and p._locked_tokens == 96
    p.commit(b, 3)
    assert p._store == made and set(_refs(p).values()) == {2} and p._locked_tokens == 96
    p.release(a, 4)
    p.release(b, 4)
    assert set(_refs(p).values()) == {0} and p._locked_tokens == 0 and p._chunk_tokens == 96
