"""The stored chunk record of ``fixed-chunk`` (:mod:`engine.policies.fixed_chunk`) and the helpers that read
chunks: their stored runs and the cache's footprint, the stored partial chunks a lookup finds, the merge of
abutting hits."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pic.engine.oracle import HeldRuns
from pic.engine.policies.base import Footprint, RequestView
from pic.engine.radix import RadixTree
from pic.engine.rolling import span_hashes
from pic.engine.seq import Seq


class _Chunk:
    """A stored chunk: tokens ``[pos, pos + size)`` of ``src``, the prompt that stored it (a reference,
    never a copy)."""

    __slots__ = ("key", "pos", "src", "size", "ref", "last_access_us", "hits", "created_us", "is_alive")

    def __init__(self, key: int, pos: int, size: int, src: Seq, now_us: int, ref: int = 0) -> None:
        self.key, self.pos, self.size, self.src = key, pos, size, src
        self.ref = ref
        self.last_access_us = self.created_us = now_us
        self.hits = 0
        self.is_alive = True


def _runs(chunks: list[_Chunk]) -> list[tuple]:
    """The chunks' stored runs ``(src, lo, hi, 0)``."""
    return [(ch.src, ch.pos, ch.pos + ch.size, 0) for ch in chunks]


def _add_hit(hits: list[list[int]], a: int, b: int, src: int) -> None:
    """Append hit ``[a, b)`` from ``src``, extending the last one when it abuts with the same delta."""
    if hits:
        last = hits[-1]
        if last[1] == a and a - src == last[0] - last[2]:
            last[1] = b
            return
    hits.append([a, b, src])


def chunk_footprint(store: dict[int, _Chunk], tree: RadixTree | None, c: int, tails: bool) -> Footprint:
    """``fixed-chunk``'s footprint (``c``: its chunk size; ``tails``: partial chunks are stored). Registry entries =
    stored chunks (LMCache's index); runs = the prefix stage's radix edges, then the chunks (the same content
    twice). A chunk's prompt was inserted whole (its whole pages) into the tree by the commit that stored the chunk:
    while the tree never evicted, each chunk inside those pages is held by the edges' runs (every window of up to
    64 tokens: their context is 63), and is counted as such (:class:`engine.oracle.HeldRuns`)."""
    every = list(store.values())
    if tree is None or tree.num_evicted:
        return Footprint(len(store), (tree.run_refs() if tree is not None else []) + _runs(every))
    edges, p = tree.run_refs(63), tree.page_size
    rest = [] if p == 1 else [ch for ch in every if ch.pos + ch.size > ch.src.end // p * p]
    out = {id(ch) for ch in rest}
    held = [ch for ch in every if id(ch) not in out] if out else every
    sizes: dict[int, int] = {}
    for ch in held if p > 1 or tails else ():
        sizes[ch.size] = sizes.get(ch.size, 0) + 1
    if p == 1 and not tails and held:
        sizes[c] = len(held)
    return Footprint(len(store), HeldRuns(edges + _runs(rest), lambda: _runs(held), sizes, 64,
                                          (lambda: edges + _runs(every)) if rest else None))


def tail_uses(h: np.ndarray, req: RequestView, pfx: int, uses: list[tuple[int, int, _Chunk]], tails: dict[int, int],
              store: dict[int, _Chunk], same: Callable[[_Chunk, RequestView, int, int], bool]
              ) -> list[tuple[int, int, _Chunk]]:
    """``uses`` with the stored partial chunks (lengths: ``tails``' keys) found where an uncovered stretch from ``pfx``
    ends (before a hit or at N) added: the longest stored tail length that fits and matches (``same``); ``h``: the
    prompt's prefix hashes."""
    n = req.num_tokens
    lengths = np.array(sorted(tails, reverse=True), np.int64)
    out, lo = [], pfx
    for a, size, ch in [*uses, (n, 0, None)]:
        fit = lengths[lengths <= a - lo]
        if fit.size:
            keys = span_hashes(h, a - fit, fit).tolist()       # hashes of toks[a-m:a], m in fit
            for m, key in zip(fit.tolist(), keys, strict=True):
                t = store.get(key)
                if t is not None and t.size == m and same(t, req, a - m, a):
                    out.append((a - m, m, t))
                    break
        if ch is not None:
            out.append((a, size, ch))
        lo = a + size
    return out
