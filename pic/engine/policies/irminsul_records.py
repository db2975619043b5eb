"""Records of the ``irminsul`` chunk store (:mod:`engine.policies.irminsul_store`): an :class:`Extent` of
stored KV (tokens by reference into the prompt that produced it) and a :class:`Chunk`, one registry entry
made of pieces of extents."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from pic.engine.seq import Seq

NONE: list[int] = []  # shared by every chunk without S1 windows (never appended to)
# ``users`` of an extent in a lean store (:class:`~engine.policies.irminsul_store.ChunkStore`, unbounded):
# not kept there (no set per extent); made when the store turns exact (its first eviction or drop)
LEAN: frozenset[int] = frozenset()
RELEASED: list = []   # ``own`` of a chunk (or run) whose producer released its extents (never appended to)
# NOTE (memory): the records keep their positions and sizes as these shared int objects where they are below SMALL
# (Python caches only -5..256: each ``b - a`` is a new 28-32 B object): chat 10^5 kept ~3 such ints per extent and
# ~2 per chunk, each its own
SMALL = 1 << 16
INTS: list[int] = list(range(SMALL))


class LeanExtent:
    """An extent of a lean store (:class:`~engine.policies.irminsul_store.ChunkStore`, unbounded): stored KV of tokens
    ``[base_pos, base_pos + size)`` of prompt ``src`` (a :class:`~engine.seq.Seq`: a reference, no token copy),
    produced at ``base_pos``; ``parts``: after a split, ``(left, right, at)`` (the extent itself is then dead);
    ``owner``: the admission that produced it (:meth:`~engine.policies.irminsul_store.ChunkStore.admission`; -1:
    unknown); ``users``: ``LEAN`` (a lean store keeps none). Its bytes are ``size`` times the store's bytes per
    token; ``refs`` is -1 once it is freed (:attr:`alive`).

    A lean store never evicts, so it keeps no recency per extent: no ``last_access_us``, ``hits`` nor
    ``created_us`` slot (the store keeps them per admission). Once the store turns exact (``ChunkStore._exact``: an
    explicit eviction, a request released uncommitted) the extent's ``users`` is a :class:`Late` set, which holds
    them (its admission's); until then they read 0.

    NOTE (memory): 7 slots (88 B), not :class:`Extent`'s 10 (112 B), and no ``created_us`` int (a new one per
    request): chat 10^5 irminsul keeps ~2.4 extents per request."""

    __slots__ = ("src", "base_pos", "size", "refs", "users", "parts", "owner")

    @property
    def alive(self) -> bool:
        """Neither split (:attr:`parts`) nor freed (``refs`` -1)."""
        return self.parts is None and self.refs >= 0

    @property
    def tokens(self) -> np.ndarray:
        """int32 [size]: its tokens (materialized on each call: tests, debugging, ``--verify``)."""
        return self.src.tokens(self.base_pos, self.base_pos + self.size)

    def ref(self) -> tuple[Seq, int, int, int]:
        """``(src, lo, hi, 0)``: the stored run by reference (:func:`engine.oracle.duplicate_tokens`)."""
        return self.src, self.base_pos, self.base_pos + self.size, 0


class Late(set):
    """The ``users`` of a :class:`LeanExtent` once its store turned exact, with the recency :class:`Extent` keeps
    in slots (its admission's when it was made)."""

    __slots__ = ("last_access_us", "hits", "created_us")

    def __init__(self, last_access_us: int, hits: int, created_us: int, users=()) -> None:
        super().__init__(users)
        self.last_access_us, self.hits, self.created_us = last_access_us, hits, created_us

    def __reduce__(self) -> tuple:
        # (copies and pickles: a set's own reduce drops the slots)
        return Late, (self.last_access_us, self.hits, self.created_us, list(self))


def _late_field(name: str) -> property:
    """A :class:`LeanExtent`'s recency field ``name``: its :class:`Late` users' (0 while the store is lean)."""
    def get(x: LeanExtent) -> int:
        u = x.users
        return getattr(u, name) if type(u) is Late else 0

    def put(x: LeanExtent, v: int) -> None:
        setattr(x.users, name, v)     # (AttributeError while lean: a lean store keeps no recency per extent)
    return property(get, put, doc=f"``{name}`` of its :class:`Late` users (0 while its store is lean).")


LeanExtent.last_access_us = _late_field("last_access_us")     # type: ignore[attr-defined]
LeanExtent.hits = _late_field("hits")                         # type: ignore[attr-defined]
LeanExtent.created_us = _late_field("created_us")             # type: ignore[attr-defined]


class Extent(LeanExtent):
    """An extent of an exact store (a bounded one): :class:`LeanExtent`'s fields, ``users`` the set of fingerprints
    of the chunks that read it, and its recency in slots (``last_access_us``, ``hits``, ``created_us``: the store's
    eviction key).

    NOTE (memory): 10 slots (112 B), not 12 (128 B): no ``nbytes`` (the store's ``size * bpt``) nor ``alive`` slot."""

    __slots__ = ("last_access_us", "hits", "created_us")

    def __init__(self, src: Seq, base_pos: int, size: int, nbytes: int, now: int, refs: int = 0,
                 user: int | None | frozenset = None, owner: int = -1) -> None:
        # (``nbytes``: ignored, kept for the callers' signature; the store counts ``size * bpt``)
        self.src, self.base_pos, self.size = src, base_pos, size
        self.refs, self.last_access_us, self.hits, self.created_us = refs, now, 0, now
        self.users: set[int] = set() if user is None else user if isinstance(user, frozenset) else {user}  # type: ignore[assignment]
        self.parts: tuple[Extent, Extent, int] | None = None
        self.owner = owner


class Chunk:
    """One registry entry: a content-defined chunk as pieces ``[extent, offset, length]`` in token order;
    its tokens are those of prompt ``src`` at ``[pos, pos + size)`` (by reference, no copy: a cut chunk keeps
    its first ``size``); ``owner``: the admission that made it (as :attr:`Extent.owner`); ``node``: its end node in
    the chunk trie (None until ready)."""

    __slots__ = ("fp", "src", "pos", "size", "_p", "owner", "ready", "windows", "node", "rnode", "own",
                 "indexed", "keys", "head")

    def __init__(self, fp: int, src: Seq, pos: int, size: int, pieces: list[list[Any]], owner: int,
                 own: list[Extent], keys: tuple[int, int] | None = None) -> None:
        self.fp, self.src, self.pos, self.size, self.owner, self.own = fp, src, pos, size, owner, own
        self.pieces = pieces
        self.keys = keys        # keys of its first and last min_match tokens (or None), until indexed (a bounded store keeps them)
        self.head: int | None = None              # key of its first min_match tokens, once indexed
        self.ready = False
        self.windows: list[int] = NONE            # S1 window fingerprints it registered (a list once it has)
        self.node: int | None = None             # end node of its tokens in the chunk trie (engine.flat_trie)
        self.rnode: int | None = None            # end node of its reversed tokens in the tail trie
        self.indexed: int | None = None          # how many of its tokens the tries index (None: not indexed)

    @property
    def pieces(self) -> tuple:
        """Its pieces ``(extent, offset, length)`` in token order, a tuple of them (made on each call where there are
        several: see :func:`flat_pieces`)."""
        p = self._p
        n = len(p)
        if n == 1:
            return p
        if n == 6:                        # (two pieces: most. NOTE (speed): ~5x a zip of slices)
            return (p[0], p[1], p[2]), (p[3], p[4], p[5])
        return tuple(zip(p[::3], p[1::3], p[2::3], strict=True))

    @pieces.setter
    def pieces(self, pieces) -> None:
        self._p = flat_pieces(pieces)

    @property
    def tokens(self) -> np.ndarray:
        """int32 [size]: its tokens (derived from ``src`` on each call: a view where the prompt stores them)."""
        return self.part(0, self.size)

    def part(self, lo: int, hi: int) -> np.ndarray:
        """int32: its tokens ``[lo, hi)``."""
        return self.src.tokens(self.pos + lo, self.pos + hi).astype(np.int32, copy=False)


_new = object.__new__


def flat_pieces(pieces) -> tuple:
    """A chunk's pieces as :class:`Chunk` keeps them: one piece as ``((extent, offset, length),)``; several as one flat
    tuple ``(extent, offset, length, extent, offset, length, ...)`` (:attr:`Chunk.pieces` reads them back as triples).

    NOTE (memory): chat 10^4 irminsul kept a tuple of 2-3 pieces per straddling chunk (one per request), each a tuple or
    a list of 3 (~210-280 B); one flat tuple is 88-112 B. Offsets and lengths below :data:`SMALL` are kept as the
    shared int objects (~15 B per request less there)."""
    if len(pieces) == 1:
        p = pieces[0]
        return pieces if type(pieces) is tuple and type(p) is tuple else ((p[0], p[1], p[2]),)
    out: list = []
    for x, o, n in pieces:
        out += (x, INTS[o] if o < SMALL else o, INTS[n] if n < SMALL else n)
    return tuple(out)


def new_chunk(fp: int, src: Seq, pos: int, size: int, pieces: list[list[Any]], owner: int, own: list[Extent],
              keys: tuple[int, int] | None = None) -> Chunk:
    """``Chunk(fp, src, pos, size, pieces, owner, own, keys)`` (the same slots, tested).

    NOTE (speed): made by ``object.__new__`` and slot stores, not through the class call (which goes through
    ``type.__call__`` to a Python ``__init__`` frame): ~2x less per chunk, and admit makes one per new chunk
    (~370 k on Mooncake conversation)."""
    c = _new(Chunk)
    c.fp = fp
    c.src = src
    c.pos = INTS[pos] if pos < SMALL else pos
    c.size = INTS[size] if size < SMALL else size
    c._p = flat_pieces(pieces)
    c.owner = owner
    c.own = own
    c.keys = keys
    c.head = None
    c.ready = False
    c.windows = NONE
    c.node = None
    c.rnode = None
    c.indexed = None
    return c


def end_run(x: Extent, size: int) -> int:
    """A lean store's run extent ``x`` ends: its ``size`` (returned) set, as :func:`new_extent` keeps it."""
    x.size = INTS[size] if size < SMALL else size
    return size


def shared_size(n: int) -> int:
    """``n`` (>= 0) as the one int object the records keep for that value where it is below :data:`SMALL`."""
    return INTS[n] if n < SMALL else n


def shared_ints(xs) -> list[int]:
    """``list(xs)`` (ints >= 0), those below :data:`SMALL` as the shared objects (a layout's chunk edges: kept by the
    prompt index and the runs, while a prompt's new edges are a new int each)."""
    return [INTS[v] if v < SMALL else v for v in xs]


def new_extent(src: Seq, base_pos: int, size: int, now: int, refs: int, users: set[int] | frozenset,
               owner: int) -> LeanExtent:
    """``Extent(src, base_pos, size, 0, now, refs, user, owner)`` whose ``users`` are given as they are kept (a
    set); a :class:`LeanExtent` (no ``now`` kept) where they are ``LEAN`` (a lean store's). (The same slots, tested.)
    NOTE (speed): as :func:`new_chunk`, without the class call."""
    lean = users is LEAN
    x = _new(LeanExtent if lean else Extent)
    x.src = src
    x.base_pos = INTS[base_pos] if base_pos < SMALL else base_pos
    x.size = INTS[size] if size < SMALL else size
    x.refs = refs
    x.users = users
    x.parts = None
    x.owner = owner
    if not lean:                  # (an exact store's extent: its recency too)
        x.last_access_us = now
        x.hits = 0
        x.created_us = now
    return x


class Run:
    """A lean store's row of new chunks that one admission recomputed whole, in a row, over one extent ``x``
    (:class:`~engine.policies.irminsul_store.ChunkStore`): chunk ``i`` is the layout's chunk ``k + i``, tokens
    ``[bounds[k + i], bounds[k + i + 1])`` of prompt ``src``, fingerprint ``fps[k + i]``, a piece of ``x`` at offset
    ``bounds[k + i] - x.base_pos`` (a run of a layout kept as a rest: see ``irminsul_runs.run_edges``).
    One record instead of a :class:`Chunk` per chunk: the registry names the run under
    each of its chunks' fingerprints, a layout at each of its chunks' places, and a :class:`Chunk` is made only
    when a reader needs one (:meth:`~engine.policies.irminsul_store.ChunkStore.chunk_at`: a fingerprint hit, a trie
    walk, the store turning exact), then kept in ``cs`` and in the registry.

    ``heads``/``tails``: the keys of each chunk's first and last ``min_match`` tokens (None for a shorter chunk), until
    ready (a store that keeps keys: kept); ``own``: ``[x]`` while its producer holds it; ``nodes``: True once its chunks'
    paths are in the tries (a lean store's :meth:`~engine.policies.irminsul_index.ChunkIndexes._flush`): a chunk made
    of it later finds its :attr:`Chunk.node` and :attr:`Chunk.rnode` by a walk (``FlatTrie.node_of``: the end nodes
    its path's claims got; NOTE (memory): no array of them per run). NOTE (speed): ~30 new chunks
    per Mooncake conversation request were ~30 :class:`Chunk` objects, pieces tuples and readiness stores."""

    __slots__ = ("x", "src", "bounds", "fps", "k", "n", "heads", "tails", "owner", "own", "ready", "cs", "short", "nodes")
    size = sys.maxsize      # (a run's chunks are whole: PromptIndex._served's cut-chunk check passes)

    def __init__(self, x: Extent, src: Seq, bounds: list[int], fps: list[int], k: int, n: int, heads: list,
                 tails: list, owner: int, short: bool) -> None:
        self.x, self.src, self.bounds, self.fps, self.k, self.n = x, src, bounds, fps, k, n
        self.heads, self.tails, self.owner, self.short = heads, tails, owner, short
        self.own: list[Extent] = [x]
        self.ready = False
        self.cs: list[Chunk | None] | None = None     # the chunks made of it (chunk_at), by index
        self.nodes: bool | None = None     # True once its chunks' paths are in the tries

    @classmethod
    def new(cls, x: Extent, src: Seq, bounds: list[int], fps: list[int], k: int, n: int, heads: list, tails: list,
            owner: int, short: bool) -> Run:
        """``Run(x, src, bounds, fps, k, n, heads, tails, owner, short)`` (the same slots, tested). NOTE (speed): as
        :func:`new_chunk`, without the class call (one per admission)."""
        r = _new(cls)
        r.x = x
        r.src = src
        r.bounds = bounds
        r.fps = fps
        r.k = k
        r.n = n
        r.heads = heads
        r.tails = tails
        r.owner = owner
        r.short = short
        r.own = [x]
        r.ready = False
        r.cs = None
        r.nodes = None
        return r

    def index(self, fp: int) -> int:
        """The index of its chunk of fingerprint ``fp`` (it must hold one)."""
        return self.fps.index(fp, self.k, self.k + self.n) - self.k


def flags(anchors: np.ndarray) -> bytes:
    """A layout's anchors as the policy keeps them: one byte (0/1) per bound. NOTE (memory): the prompt index keeps every
    committed prompt's layout: 1 B per bound, not a list's 8 B pointer (bytes concatenate by memcpy, index to 0 and 1)"""
    return anchors.astype(np.bool_, copy=False).tobytes()


def join_use(uses: list, k: int, joint: int, a: int, c: Chunk, lean: bool) -> None:
    """A lean store's exact-prefix walk (``engine.policies.irminsul_lookup``): the use ``uses[k]`` of chunk ``c``'s first
    piece (``c`` served from target ``a``, its pieces' uses from ``k`` on) is the use before it, ``uses[k - 1]``, going
    on in the same extent (or a part of it split since: the same admission's, prompt and tokens) where that one ended at
    an edge of a chunk that made the extent (``joint``: ``a``, or ``-a - 1`` where ``c`` made it, as
    ``ChunkWalk._chunk_uses`` tells it): one use then, of the first one's extent (admit locks its range through
    the parts: ``ChunkStore.lock_range``).

    NOTE (memory): a conversation's turn reuses the previous turn's run of new chunks up to its last chunk, then the
    chunk that straddled the previous prompt's end, whose first piece is that last chunk's tokens: as two uses they
    split the run's extent at admit (chat 10^4: ~0.4 splits per request, two extents and a tuple each) where the exact
    store (an extent per chunk) splits nothing. The same tokens locked, the same plan (abutting uses of equal delta are
    one span), the same stored runs (cut at the run's chunk edges)."""
    if not lean or not k or len(uses) <= k:
        return
    t0, b0, x0, lo0 = uses[k - 1]
    t, b, x, lo = uses[k]
    if t != b0 or b0 != a or not (joint == a or joint == -a - 1 and c.owner == x.owner):
        return
    if x is x0:
        if lo0 + t - t0 != lo:
            return
    elif x.owner != x0.owner or x.src is not x0.src or x.base_pos + lo != x0.base_pos + lo0 + t - t0 or \
            x.base_pos < x0.base_pos or x.base_pos + x.size > x0.base_pos + x0.size:
        return
    uses[k - 1] = (t0, b, x0, lo0)
    del uses[k]
