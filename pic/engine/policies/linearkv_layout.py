"""Prompt layouts of the ``linearkv`` policy (:mod:`engine.policies.linearkv`): a prompt's CDC chunks (bounds and
fingerprints), made whole or resumed from a committed prompt's kept layout, and the record of one lookup's chunks."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pic.engine import cdc
from pic.engine.policies.base import RequestView
from pic.engine.policies.irminsul import marker_boundaries
from pic.engine.policies.irminsul_layout import _may_mark, opaque_layout

#: edge-key length given to ``opaque_layout``: longer than any prompt, so it makes none (linearkv reads none)
_NO_EDGES = 1 << 62


def _context_tags(bl: list[int], fl: list[int], new: dict[int, tuple[int, int]]) -> dict[int, int]:
    """Per new chunk a 16-bit tag: 8 more bits of its fingerprint (the filter's slot takes the top 22) and
    a nonzero byte of its context, its position and the chunk before it (in place again: the same tag)."""
    first = {a: k for k, a in enumerate(bl)}
    return {fp: (fp >> 34 & 0xFF) << 8 | ((fl[first[a] - 1] if first[a] else 0) ^ a * 0x9E3779B97F4A7C15) % 255 + 1
            for fp, (a, _) in new.items()}


@dataclass(frozen=True, slots=True)
class _Layout:
    """One prompt's chunks: bounds, fingerprints, which are hits (entry fp), and what to add."""

    bounds: list[int]
    fps: list[int]
    prefix: int                      # tokens the prefix stage serves (chunk hits start at or after it)
    hits: list[int]                  # chunk indices reused
    used: list[int]                  # distinct entry fingerprints read, first-use order
    new: dict[int, tuple[int, int]]  # fingerprint -> [a, b) of chunks to store
    computed: tuple[tuple[int, int], ...] = ()  # seen-twice: (fingerprint, context tag) of every new chunk
    cold: frozenset[int] = frozenset()  # seen-twice: new chunks stored in free room, first to be evicted


def prompt_chunks(req: RequestView, config, cfg: cdc.CDCConfig, marker: np.ndarray, other: tuple | None = None,
                  shared: int = 0) -> tuple[list[int], list[int], Callable[[], np.ndarray], int, bytes | None]:
    """``(bounds, fingerprints, tokens, known, anchors)`` of the prompt's CDC chunks (``cfg``; ``config``: the policy's,
    its ``s2``; lists; ``tokens()`` gives its tokens; ``known``: how many leading chunks are ``other``'s; ``anchors``:
    one byte per bound, where one compiled call made the layout, else None).

    NOTE (speed): a prompt of opaque segments with no marker (Mooncake, Azure) is derived, chunked and fingerprinted by
    one compiled call, as ``irminsul`` does (:func:`irminsul_layout.opaque_layout`; was gather, chunk, fingerprints:
    three calls and ~20 numpy calls per prompt), its tokens never gathered.
    NOTE (speed): as ``irminsul`` does, a prompt whose first ``shared`` tokens are those of a committed prompt with the
    kept layout ``other`` (``(prompt, bounds, fingerprints, anchors)``, made by that call) takes its cuts and
    fingerprints up to its last anchor ``c`` with ``c + min_chunk <= shared`` and chunks from ``c`` on, its tokens
    from ``c - 63`` made (the same cuts as chunking the whole prompt)."""
    if not config.s2 or (req.source is not None and not _may_mark(req.source, marker)):
        if other is not None:
            _, pb, pf, panc = other
            k = bisect_right(pb, shared - cfg.min_chunk) - 1
            while k > 0 and not panc[k]:
                k -= 1
            if k > 0:
                c = pb[k]
                base = max(0, c - (cdc.WINDOW - 1))
                got = opaque_layout(req, base, base, c, cfg, _NO_EDGES)
                if got is not None:
                    return pb[:k].tolist() + got[1], pf[:k].tolist() + got[3], lambda: req.tokens, k, panc[:k] + got[2]
        got = opaque_layout(req, 0, 0, 0, cfg, _NO_EDGES)      # (no hard boundary)
        if got is not None:
            return got[1], got[3], lambda: got[0], 0, got[2]
    toks = req.tokens
    hard = marker_boundaries(req, marker) if config.s2 else None
    bounds, _, fps = cdc.layout_fps(toks, cfg, hard)
    return bounds.tolist(), fps.tolist(), lambda: toks, 0, None
