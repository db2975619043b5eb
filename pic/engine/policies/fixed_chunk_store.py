"""The stored chunk record of ``fixed-chunk`` (:mod:`engine.policies.fixed_chunk`) and the helpers that read
chunks: their stored runs, the merge of abutting hits."""

from __future__ import annotations

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
