"""Runs of a lean ``irminsul`` chunk store (:class:`~engine.policies.irminsul_records.Run`): a row of new chunks one
admission recomputed whole, kept as one record, and the :class:`~engine.policies.irminsul_records.Chunk` of one of
them made only when a reader needs it. Mixed into :class:`~engine.policies.irminsul_store.ChunkStore`, with its
stored runs (:meth:`RunChunks.stored_runs`: read from the runs as columns)."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Sequence
from itertools import chain, compress, repeat
from operator import is_, sub

import numpy as np

from pic.engine import cdc
from pic.engine.flat_trie import FlatTrie
from pic.engine.oracle import RefRuns
from pic.engine.policies.irminsul_records import LEAN, RELEASED, Chunk, Extent, Run, new_chunk, new_extent
from pic.engine.seq import Seq


class RunChunks:
    """The chunks of a lean store's runs (see :class:`~engine.policies.irminsul_records.Run`), made on demand."""

    entries: dict[int, Chunk | Run]
    min_match: int
    _keep_keys: bool
    made: list
    lean: bool
    bpt: int
    num_extents: int
    parts_of: Callable[[Extent], list[Extent]]
    live: Callable[[Extent, int, int], list | None]
    admission: Callable[[], int]
    _admissions: int
    evictable: int
    protected: int
    trie: FlatTrie
    rtrie: FlatTrie | None

    def chunk_at(self, r: Run, i: int) -> Chunk:
        """Run ``r``'s chunk ``i`` as a :class:`Chunk` (made once, then the registry's entry of its fingerprint):
        the chunk admit made before runs were kept as records (same fields, pieces, readiness and keys)."""
        cs = r.cs
        if cs is None:
            cs = r.cs = [None] * r.n
        c = cs[i]
        if c is not None:
            return c
        x, m = r.x, self.min_match
        eb, j = run_edges(r)
        a = eb[j + i]
        n = eb[j + i + 1] - a
        keys = (r.heads[i], r.tails[i]) if n >= m and r.heads is not None else None
        c = new_chunk(r.fps[r.k + i], r.src, a, n, ((x, a - x.base_pos, n),), r.owner, r.own if i == 0 else RELEASED, keys)
        if r.nodes:                           # (its paths are in the tries, _flush: the end nodes its claims got)
            c.node = self.trie.node_of(r.src, c.fp, a, a + n)
            if self.rtrie is not None:
                c.rnode = self.rtrie.node_of(r.src, c.fp, a, a + n)
        if r.ready:
            c.ready = True
            c.indexed = n
            if n >= m:
                c.head = keys[0] if keys is not None else cdc.fingerprint(c.part(0, m))
                if not self._keep_keys:
                    c.keys = None
            else:
                c.keys = None
        cs[i] = c
        if self.entries.get(c.fp) is r:
            self.entries[c.fp] = c
        return c

    def chunks(self) -> list[Chunk]:
        """The registry's chunks in its order (a run's made: tests, debugging)."""
        return [self.chunk_of(e, fp) for fp, e in list(self.entries.items())]

    def chunks_of(self, r: Run) -> list[Chunk]:
        """Every chunk of run ``r``, in order (made)."""
        return [self.chunk_at(r, i) for i in range(r.n)]

    def chunk_of(self, e: Chunk | Run, fp: int) -> Chunk:
        """The chunk of fingerprint ``fp`` that registry entry ``e`` names."""
        return self.chunk_at(e, e.index(fp)) if type(e) is Run else e      # type: ignore[arg-type]

    def expand(self, chunks: list) -> list[Chunk]:
        """``chunks`` with each run replaced by its chunks (made)."""
        if Run not in map(type, chunks):
            return chunks
        return [c for e in chunks for c in (self.chunks_of(e) if type(e) is Run else (e,))]

    def run_paths(self, log: list) -> tuple[list, list]:
        """The trie log ``log`` (flat ``add, chunk, n`` triples, :meth:`~engine.policies.irminsul_index.ChunkIndexes._flush`)
        with each run's entry replaced by one per chunk of it, in order; and ``(run, items)`` for each run so replaced in
        a lean store. NOTE (memory): there a chunk not made yet is indexed through a :class:`_Path` (what the log's replay
        reads and sets of a chunk), not made (~0.4 KB less per chunk than a :class:`Chunk` with its pieces): the run is
        marked indexed (:attr:`Run.nodes`), a chunk made of it later finds its end nodes by a walk; once exact (a chunk may be cut) every chunk is made and indexed at its
        size, as before."""
        out: list = []
        runs: list = []
        lean = self.lean
        for add, c, n in zip(log[::3], log[1::3], log[2::3], strict=True):
            if type(c) is not Run:
                out += (add, c, n)
            elif not lean:
                for d in self.chunks_of(c):
                    out += (True, d, d.size)
            else:
                k, n, src = c.k, c.n, c.src
                b, j = run_edges(c)
                b = b[j:j + n + 1]
                items = [_Path(src, fp, a) for fp, a in zip(c.fps[k:k + n], b, strict=False)]
                if c.cs is not None:          # (chunks made of it so far: indexed themselves)
                    items = [p if d is None else d for d, p in zip(c.cs, items, strict=True)]
                out += chain.from_iterable(zip(repeat(True), items, map(sub, b[1:], b)))
                runs.append((c, items))
        return out, runs

    def make_all(self) -> None:
        """Every run's chunks made (the registry names chunks only): the store turns exact."""
        runs = {id(e): e for e in self.entries.values() if type(e) is Run}
        for r in runs.values():
            self.chunks_of(r)

    def place(self, cs: list, js, bounds: list[int], fps: list[int]) -> None:
        """A layout's chunk list ``cs`` names a run at index ``j`` (for each of ``js``) only where the run's chunk of
        ``fps[j]`` lies at the layout's place ``[bounds[j], bounds[j + 1])`` (its extent then holds the chunk at
        ``bounds[j] - x.base_pos``: the exact-prefix stage reads it so); elsewhere the chunk made of it."""
        if len(js) > 4:                       # (C-level passes find the runs of a long list)
            js = compress(js, map(is_, map(type, [cs[j] for j in js]), repeat(Run)))
        for j in js:
            r = cs[j]
            if type(r) is not Run:
                continue
            # its chunk of fps[j]: NOTE (speed): first where the layouts index their chunks alike (a conversation's
            # next turn: the same cuts up to its anchor), the run's fingerprints searched only elsewhere (a run
            # holds each fingerprint once: the same index)
            k, fp = r.k, fps[j]
            i = j - k
            if not (0 <= i < r.n and r.fps[j] == fp):
                i = r.fps.index(fp, k, k + r.n) - k
            eb, jb = run_edges(r)
            a = eb[jb + i]
            if a != bounds[j] or eb[jb + i + 1] - a != bounds[j + 1] - bounds[j]:
                cs[j] = self.chunk_at(r, i)

    def stored_runs(self) -> list[tuple[Seq, int, int, int]] | RefRuns:
        """Every live extent (what is physically stored) by reference, ``(src, lo, hi, 0)``, in registry
        order (a lean store: as :class:`~engine.oracle.RefRuns` columns)."""
        if self.lean:
            # each extent first appears in the pieces of the chunk that made it (its owner): those pieces, cut at
            # the live extents' edges, are the exact store's extents (a run is an extent per chunk there)
            # NOTE (speed): each record gives groups of edges (a run's chunk edges; a chunk's pieces, two edges each)
            # with their prompt, in lists (an array.array converts each int as it is added: ~0.7 us per run's 16
            # edges against ~0.09 us); runs and prompt indices (by first use) in numpy
            ed: list[int] = []
            glen: list[int] = []
            qs: list[Seq] = []
            for rec in self.made:
                t = type(rec)
                if t is not Chunk:            # a run: (x, bounds, k), or the Run (add_runs)
                    x, bounds, k = rec if t is tuple else (rec.x, *run_edges(rec))
                    j = bisect_left(bounds, x.base_pos + x.size, k) + 1        # (ends at the extent's end: an edge)
                    if x.parts is None:
                        ed.extend(bounds[k:j])
                        glen.append(j - k)
                    else:                             # split: its parts' starts too (sorted; repeats: runs of 0)
                        edges = [*bounds[k:j]]         # (a run's own edges may be a tuple: PromptIndex)
                        stack = [x]
                        while stack:                  # (its parts in token order, as parts_of gives them)
                            y = stack.pop()
                            if y.parts is not None:
                                stack += (y.parts[1], y.parts[0])
                            elif y.alive:
                                edges.append(y.base_pos)
                            else:
                                return self._stored_runs_lean()
                        edges.sort()
                        ed.extend(edges)
                        glen.append(len(edges))
                    qs.append(x.src)
                    continue
                o, q, n = rec.owner, None, 0          # a chunk: its own pieces (_own_runs, inline for unsplit ones)
                for x, xo, m in rec.pieces:
                    if x.owner != o or not x.alive and x.parts is None:
                        continue
                    if x.parts is None:
                        q = x.src
                        a = x.base_pos + xo
                        ed.extend((a, a + m))
                        n += 1
                        continue
                    for y, a, b in self.live(x, xo, xo + m) or ():
                        q = y.src
                        ed.extend((y.base_pos + a, y.base_pos + b))
                        n += 1
                if n:                                 # (a chunk's runs: its last piece's prompt, as one record)
                    glen.extend(repeat(2, n))
                    qs.extend(repeat(q, n))
            return _ref_runs(ed, glen, qs)
        seen = dict.fromkeys([p[0] for c in self.entries.values() for p in c.pieces])    # (by identity)
        return [(x.src, x.base_pos, x.base_pos + x.size, 0) for x in seen]

    def _stored_runs_lean(self) -> list[tuple[Seq, int, int, int]]:
        """:meth:`stored_runs` of a lean store chunk by chunk (a run lost a part: never in a replay)."""
        out: list[tuple[Seq, int, int, int]] = []
        for c in self.expand(list(self.entries.values())):
            o = c.owner
            for x, xo, n in c.pieces:
                if x.owner != o:
                    continue
                for y, lo, hi in self.live(x, xo, xo + n) or ():
                    out.append((y.src, y.base_pos + lo, y.base_pos + hi, 0))
        return out

    def add_runs(self, ks: Sequence[int], bounds: list[int], fps: list[int], hk: list, tk: list, k0: int, src: Seq,
                 now_us: int, tag: int, chunks: list, cs: list | None) -> int:
        """Register a lean store's new chunks ``ks`` (the layout's indices, ascending, each recomputed whole, with
        its keys at ``hk``/``tk[k - k0]``) as runs: each row of consecutive ones one locked extent (as admit made
        them) and one :class:`Run`, appended to ``chunks`` and placed in ``cs``; the tokens stored."""
        entries, m, made, run = self.entries, self.min_match, self.made, Run.new
        whole, i, num = 0, 0, len(ks)
        while i < num:
            k1 = ks[i]
            if ks[-1] - k1 == num - 1 - i:    # the rest in a row (most)
                i2 = num
            else:
                i2 = i + 1
                while i2 < num and ks[i2] == ks[i2 - 1] + 1:
                    i2 += 1
            k2 = ks[i2 - 1] + 1
            a, b = bounds[k1], bounds[k2]
            x = new_extent(src, a, b - a, now_us, 1, LEAN, tag)
            self.num_extents += 1
            whole += b - a
            heads, tails = hk[k1 - k0:k2 - k0], tk[k1 - k0:k2 - k0]
            # (a chunk under min_match tokens has no keys; its tail key is 0 (cdc.edge_keys): NOTE (speed): no
            # chunk's length asked without one)
            short = 0 in tails and min(map(sub, bounds[k1 + 1:k2 + 1], bounds[k1:k2])) < m
            if short:
                keep = [bounds[k + 1] - bounds[k] >= m for k in range(k1, k2)]
                heads = [h if y else None for h, y in zip(heads, keep, strict=True)]
                tails = [t if y else None for t, y in zip(tails, keep, strict=True)]
            r = run(x, src, bounds, fps, k1, k2 - k1, heads, tails, tag, short)
            made.append(r)                    # (its chunks' edges, for stored_runs: NOTE (memory): no tuple)
            entries.update(zip(fps[k1:k2], repeat(r)))
            chunks.append(r)
            if cs is not None:
                cs[k1:k2] = [r] * (k2 - k1)
            i = i2
        return whole


    def admit_new(self, got, src: Seq, now_us: int, capacity: float) -> tuple[list, list] | None:
        """Irminsul's admit of a prompt its lookup found nothing of (``got``, the lookup's analysis: no use, no
        registered fingerprint, no key in the prefilters, ``got.hot`` holding only its end; no kept chunks) in a lean
        store with room for all (``capacity`` bytes): its chunks one run, as the general path makes it; ``(chunks,
        the layout's chunk list)``. None (nothing changed) where that does not hold or a fingerprint repeats in the
        prompt (the general path then).

        NOTE (speed): the general path's ~50 steps of gaps, locks, registry and placement for nothing (most Azure
        conversation requests: no reuse)."""
        hot, fps = got.hot, got.fps
        if hot is None or hot[0] or len(hot[1]) != 1 or hot[2] != self._admissions or got.k0 or not fps or \
                capacity - self.evictable - self.protected != math.inf:
            return None
        nf, entries, made = len(fps), self.entries, self.made
        cs: list = [None] * nf
        chunks: list = []
        n0, m0, x0 = len(entries), len(made), self.num_extents
        tag = self.admission(now_us)
        whole = self.add_runs(range(nf), got.bounds, fps, got.heads, got.tails, 0, src, now_us, tag, chunks, cs)
        if len(entries) - n0 != nf:           # a fingerprint repeats: undone (the registry held none of them)
            for fp in fps:
                entries.pop(fp, None)
            del made[m0:]
            self.num_extents = x0
            self._admissions -= 1
            return None
        self.protected += whole * self.bpt
        return chunks, cs


def run_edges(r: Run) -> tuple[Sequence[int], int]:
    """``(edges, j)``: run ``r``'s chunk ``i`` lies at ``[edges[j + i], edges[j + i + 1])`` of its prompt (its fingerprint
    is ``r.fps[r.k + i]``). NOTE (memory): a run of a layout the flat prompt index keeps as the one it continues keeps
    the layout's own rest (:meth:`~engine.policies.irminsul_prompts.PromptIndex._add_flat`): its fingerprints, then its
    edges, in one tuple (``r.bounds`` and ``r.fps`` both; ``r.k`` among the fingerprints)."""
    b = r.bounds
    return (b, r.k + (len(b) >> 1)) if b is r.fps else (b, r.k)


class _Path:
    """A lean run's chunk while its paths go into the tries (:meth:`RunChunks.run_paths`): what the replay of the trie
    log reads (``src``, ``fp``, ``pos``) and sets (``node``, ``rnode``) of a chunk."""

    __slots__ = ("src", "fp", "pos", "node", "rnode")

    def __init__(self, src: Seq, fp: int, pos: int) -> None:
        self.src, self.fp, self.pos, self.node, self.rnode = src, fp, pos, None, None


def _ref_runs(ed: list[int], glen: list[int], qs: list) -> RefRuns:
    """:class:`RefRuns` of groups of edges: group ``g`` is ``glen[g]`` consecutive entries of ``ed`` (ascending; an edge
    may come twice), the runs between consecutive distinct edges, of prompt ``qs[g]``; prompts numbered in order of
    first use. Empties ``ed`` and ``glen``.

    NOTE (memory): at the end of a replay this runs on top of the store's whole state (chat 10^6 irminsul: the run's
    peak), so each list or array is dropped as soon as it is read (the lists: ~27 B per edge)."""
    e = np.fromiter(ed, np.int64, len(ed))
    ed.clear()
    g = np.fromiter(glen, np.int64, len(glen))
    glen.clear()
    last = np.cumsum(g) - 1
    cut = np.ones(e.shape[0], bool)
    cut[last] = False
    lo = e[cut]
    cut[:] = True
    cut[last - g + 1] = False
    hi = e[cut]
    del e, cut, last
    ids = np.fromiter(map(id, qs), np.uint64, len(qs))
    _, first, inv = np.unique(ids, return_index=True, return_inverse=True)
    del ids
    order = np.argsort(first)
    rank = np.empty(order.shape[0], np.int64)
    rank[order] = np.arange(order.shape[0])
    src = np.repeat(rank[inv.reshape(-1)], g - 1)
    del inv, rank, g
    keep = lo < hi                  # (an edge met twice in a group: a run of no tokens)
    if not keep.all():
        src, lo, hi = src[keep], lo[keep], hi[keep]
    return RefRuns([qs[i] for i in first[order].tolist()], src, lo, hi)
