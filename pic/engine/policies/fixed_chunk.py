"""``fixed-chunk`` — LMCache (CacheBlend-style) as deployed: behind the serving engine's own prefix cache.

Keeps two stores in ONE capacity pool, as a vLLM/SGLang + LMCache deployment does:

* the engine's exact-prefix cache: a token radix tree (:mod:`engine.radix`, the same structure and page
  size as the ``prefix`` policy) holding the KV of every committed prompt;
* LMCache's chunk store: the KV of every full ``chunk_size``-token chunk on the fixed grid
  (``[0, C), [C, 2C), ...``) of the request that produced it, one entry per distinct chunk content (the
  first producer's position is remembered as ``source_pos``). The partial tail chunk is stored only with
  ``save_unfull_chunk`` (LMCache's option of that name, default off).

The same content is therefore stored twice (once per store), which is what such a deployment holds.

Lookup: the exact prefix first (the radix tree, token-granular, in place: ``REUSE``), then the rest of the
prompt from the end of that prefix is hashed at EVERY offset with a vectorized rolling hash
(:func:`engine.rolling.window_hashes`); windows whose hash is a stored chunk key are candidates (two
vectorized counting-filter gathers, then a dict check of the few survivors; no Python loop per token).
Candidates are taken greedily left to right without overlap: ``REUSE`` when the window sits where its chunk
was produced, else ``REUSE_ROTATED`` from ``source_pos`` (RoPE keys rotated by delta = start -
source_pos). With ``save_unfull_chunk`` a stored tail chunk is also found where an uncovered stretch of the
prompt ends with it. Under ``--verify`` the tokens of every chunk hit are compared and mismatches counted
as ``collisions`` (and not reused); prefix hits compare tokens by construction.

Eviction: one order over both stores — unlocked radix leaves and unlocked chunks, smallest
``engine.eviction`` key first (lru | lfu | fifo), each store from its own lazy heap. ``prefix_stage=false``
drops the radix tree (LMCache alone, the grid only). Models LMCache + CacheBlend (Yao et al., EuroSys'25)
with position-independent chunk keys; option names map to LMCache's in docs/policies.md.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import numpy as np

from pic import accel
from pic.engine import eviction
from pic.engine.plan import Action, Plan, Span
from pic.engine.policies import register
from pic.engine.policies.base import CachePolicy, Footprint, PolicyContext, RequestView, Usage
from pic.engine.policies.fixed_chunk_filters import _FILTER_BITS, _FILTER_MASK, _FILTER_SHIFT, _Filters  # noqa: F401
from pic.engine.policies.fixed_chunk_store import _add_hit, _Chunk, chunk_footprint, tail_uses
from pic.engine.radix import RadixNode, RadixTree
from pic.engine.rolling import BASE, prefix_hashes, span_hashes
from pic.engine.seq import Seq
from pic.traces.content import _MASK as _OPAQUE_MASK

_SHIFT_U, _MASK_U = np.uint64(_FILTER_SHIFT), np.uint64(_FILTER_MASK)
_NO_KEYS = np.zeros(0, np.uint64)


@dataclass(frozen=True, slots=True)
class FixedChunkConfig:
    chunk_size: int = field(default=256, metadata={"help": "tokens per chunk of the storage grid; "
                                                           "windows of this size are matched at any offset"})
    eviction: str = field(default="lru", metadata={"help": "eviction order over unlocked chunks and prefix-"
                                                           "tree leaves: lru | lfu | fifo"})
    prefix_stage: bool = field(default=True, metadata={
        "help": "serve the exact prefix first from the engine's radix prefix cache (as deployed; false: "
                "LMCache's grid alone)"})
    prefix_page_size: int = field(default=1, metadata={"help": "tokens per page of the prefix stage's radix tree"})
    save_unfull_chunk: bool = field(default=False, metadata={
        "help": "also store each prompt's partial tail chunk (LMCache's save_unfull_chunk; default off)"})

    def __post_init__(self) -> None:
        if self.chunk_size < 1 or self.prefix_page_size < 1:
            raise ValueError(f"fixed-chunk.chunk_size and prefix_page_size must be >= 1, got {self.chunk_size}, "
                             f"{self.prefix_page_size}")
        eviction.key(self.eviction)


@register
class FixedChunkCache(CachePolicy):
    name = "fixed-chunk"
    Config = FixedChunkConfig
    # (commit stores at most what admit reserved: the prefix stage's pages past the locked prefix, each new grid
    # key's chunk once, the tail: resident_bytes() never rises)
    commit_never_grows = True
    from pic.engine.policies.fixed_chunk_tally import tally  # (told, not asked: prefix_twin)

    def __init__(self, ctx: PolicyContext, config: FixedChunkConfig | None = None) -> None:
        super().__init__(ctx, config)
        c = self.config
        self._c = c.chunk_size
        self._key = eviction.key(c.eviction)
        self._store: dict[int, _Chunk] = {}
        # (an unbounded cache's tree keeps no eviction heap until asked to evict, as prefix's: RadixTree evicts)
        self._tree = (RadixTree(c.prefix_page_size, self._key, evicts=ctx.capacity_tokens != float("inf"))
                      if c.prefix_stage else None)
        # (no counts while nothing is removed: _evict_tokens counts the keys then, every full chunk's in the store)
        self._filters = _Filters(counted=ctx.capacity_tokens != float("inf"))
        self._tails: dict[int, int] = {}          # stored partial-chunk length -> how many
        self._chunk_tokens = 0                    # tokens in the chunk store
        self._locked_tokens = 0                   # chunk-store tokens with ref > 0
        self._reserved = 0                        # tokens reserved by admitted, uncommitted requests
        # request -> (held, reserved, its node, the node's depth, grid chunks missing at admit)
        self._live: dict[int, tuple[list[_Chunk], int, RadixNode | None, int, list | None]] = {}
        self._pending: dict[int, tuple[int, list[tuple[int, int, _Chunk]]]] = {}  # rid -> lookup's scan
        self._memo: tuple | None = None     # request, its prefix hashes (or None), its grid keys (or None)
        # id(prompt) -> (prompt, its grid keys) of every admitted prompt (the tree's edges' sources among them), kept
        # where every prompt's chunks are kept anyway (unbounded) and the hashes are not needed past the grid
        self._known: dict[int, tuple[Seq, np.ndarray]] = {}
        self._knows = c.prefix_stage and not c.save_unfull_chunk and ctx.capacity_tokens == float("inf")
        self._bw = pow(BASE, self._c, 1 << 64)   # B^chunk_size: window i's hash is h[i + C] - h[i] * B^C
        self._bw_u = np.uint64(self._bw)
        self._heap: list[tuple[tuple[int, ...], int, _Chunk]] = []
        self._seq = itertools.count()
        self._cap = ctx.capacity_tokens
        # NOTE (speed): an unbounded cache never evicts on its own, so it keeps no eviction heap ("lean": a
        # push per chunk freed, ~46 per Mooncake request, was a fifth of the policy's time); an explicit
        # evict() builds it from the chunks' current keys first (ties: creation order)
        self._lean = self._cap == float("inf")
        self.stats.extra.update(prefix_tokens=0, chunk_tokens=0)
        #: the most :meth:`resident_bytes` at the end of an admission (the serving model's peak, one replica: read
        #: at the end instead of asked after every admission)
        self.peak_bytes = 0

    # ---- Public API -------------------------------------------------------------------------------
    def lookup(self, req: RequestView, now_us: int) -> Plan:
        self.stats.lookups += 1
        if self.stats.lookups == 1 and req.source is not None:
            # NOTE (speed): every prompt is hashed whole, so the trace's distinct tokens (a lower bound on what
            # this policy hashes) are announced up front: the compiled kernels load now when that is worth it
            # (pic.accel), not after 2^22 tokens hashed by numpy (Azure conversation: its first ~900 requests)
            accel.kernels(int(req.source.offsets[-1]))
        pfx, uses = self._scan(req, now_us)
        # hits as [start, end, source_pos]; abutting hits with equal delta are merged here exactly as
        # Plan.from_spans would merge them (fewer Span objects, same plan)
        hits: list[list[int]] = [[0, pfx, 0]] if pfx else []
        for a, size, ch in uses:
            _add_hit(hits, a, a + size, ch.pos)
        if hits:
            self.stats.hits += 1
            self.stats.extra["prefix_tokens"] += pfx
            self.stats.extra["chunk_tokens"] += sum(size for _, size, _ in uses)
        self._pending[req.request_id] = (pfx, uses)
        if len(self._pending) > 4096:       # lookups never followed by admit (probes) must not pile up
            del self._pending[next(iter(self._pending))]
        if not uses:                        # (the same plan, its spans built without checks)
            return Plan.from_prefix(req.num_tokens, pfx)
        return Plan.from_spans(req.num_tokens, [Span(a, b, Action.REUSE if a == src else Action.REUSE_ROTATED, src)
                                                for a, b, src in hits])

    def admit(self, req: RequestView, plan: Plan, now_us: int) -> bool:
        if req.request_id in self._live:
            raise ValueError(f"request {req.request_id} admitted twice")
        got = self._pending.pop(req.request_id, None)
        pfx, uses = got if got is not None else self._scan(req, None)
        held: list[_Chunk] = []
        node = None
        if pfx + sum(size for _, size, _ in uses) != plan.num_reused:
            return self._stale(held, node)       # not the plan this cache answered
        if pfx:
            num, node = self._tree.lock_point(req.seq, pfx, now_us)
            if num < pfx:                        # the prefix was evicted since lookup
                return self._stale(held, None)
            self._tree.inc_lock(node)
        for _, _, ch in uses:
            if not ch.is_alive:                  # evicted since lookup
                return self._stale(held, node)
            self._ref(ch)
            held.append(ch)
        n = req.num_tokens
        need = 0                                 # tokens the request adds; its stored grid chunks are locked
        if self._tree is not None:
            p = self._tree.page_size
            need = max(0, n // p * p - pfx)
        # NOTE (speed): the grid chunks stored now stay (locked) until commit, which looks at the others only. The
        # grid's missing and stored chunks each taken in one pass (Mooncake conversation: ~47 per request); a stored
        # chunk is locked once per request (chunks hash by identity)
        store, c, num_locked = self._store, self._c, 0
        keys, tail = self._grid(req)
        chs = list(map(store.get, keys))
        if self._tails:                 # (a stored partial chunk may answer a grid key: sizes differ)
            chs = [ch if ch is None or ch.size == c else None for ch in chs]
        missing = [(j * c, keys[j], c) for j, ch in enumerate(chs) if ch is None] if None in chs else []
        new = {key for _, key, _ in missing}
        need += c * len(new)
        found = [ch for ch in chs if ch is not None] if missing else chs
        if held or (len(found) > 1 and len(set(found)) < len(found)):
            seen = set(held)
            found = [ch for ch in found if not (ch in seen or seen.add(ch))]
        for ch in found:
            num_locked += 0 if ch.ref else c
            ch.ref += 1
        held += found
        self._locked_tokens += num_locked
        if tail is not None:
            ch = store.get(tail[1])
            if ch is None or ch.size != tail[2]:
                missing.append(tail)
                need += tail[2] if tail[1] not in new else 0
            elif ch not in set(held):
                self._ref(ch)
                held.append(ch)
        over = self._used() + need - self._cap
        if over > 0:
            self._evict_tokens(int(over))
            if self._used() + need > self._cap:
                self._unlock(held, node)
                self.stats.rejected += 1
                return False
        self._reserved += need
        self._live[req.request_id] = (held, need, node, pfx, missing)
        b = self._used() * self.ctx.bytes_per_token        # resident_bytes()
        if b > self.peak_bytes:
            self.peak_bytes = b
        return True

    def commit(self, req: RequestView, now_us: int) -> None:
        held, need, node, pfx, missing = self._live[req.request_id]
        self._reserved -= need
        if self._tree is not None:     # (node: the prefix's, locked since admit; none: the root's, always locked)
            # NOTE (speed): insert_move walks below it, or not at all right after this prompt's lookup and admit
            tree = self._tree
            node = tree.insert_move(req.seq, now_us, pfx, tree.root if node is None else node)[1]
        store, seq, seen, c = self._store, req.seq, None, self._c
        keys = [h for _, h, _ in missing]
        if keys and missing[-1][2] == c and len(set(keys)) == len(keys) and not any(map(store.__contains__, keys)):
            # NOTE (speed): every missing grid chunk still missing and named once (the common case): made, stored
            # and locked in one pass each (Mooncake conversation: ~29 per request), as the loop below would
            made = [_Chunk(h, i, c, seq, now_us, 1) for i, h, _ in missing]
            store.update(zip(keys, made, strict=True))
            self._chunk_tokens += c * len(made)
            self._locked_tokens += c * len(made)
            held += made
            self._filters.add(np.array(keys, np.uint64))
            missing = ()
        new: list[int] = []
        num_locked = 0
        for i, h, size in missing:
            ch = store.get(h)
            if ch is None:
                ch = store[h] = _Chunk(h, i, size, seq, now_us)
                self._chunk_tokens += size
                if size == self._c:
                    new.append(h)
                else:
                    self._tails[size] = self._tails.get(size, 0) + 1
            else:
                if seen is None:
                    seen = set(held)
                if ch in seen or ch.size != size or not self._same(ch, req, i, i + size):
                    continue
            num_locked += size if ch.ref == 0 else 0
            ch.ref += 1
            held.append(ch)
            if seen is not None:
                seen.add(ch)
        self._locked_tokens += num_locked
        if new:
            self._filters.add(np.array(new, np.uint64))
        self._live[req.request_id] = (held, 0, node, 0, None)

    def release(self, req: RequestView, now_us: int) -> None:
        held, need, node, _, _ = self._live.pop(req.request_id)
        self._reserved -= need
        self._unlock(held, node)

    def evict(self, num_bytes: int, now_us: int) -> int:
        bpt = self.ctx.bytes_per_token
        return self._evict_tokens(-(-int(num_bytes) // bpt)) * bpt

    def usage(self) -> Usage:
        b, t = self.ctx.bytes_per_token, self._tree
        tree_ev, tree_pr = (t.evictable_tokens, t.protected_tokens) if t is not None else (0, 0)
        ev = tree_ev + self._chunk_tokens - self._locked_tokens
        pr = tree_pr + self._locked_tokens + self._reserved
        return Usage(ev * b, pr * b, (ev + pr) * b, self.ctx.capacity_bytes)

    def resident_bytes(self) -> int:
        return self._used() * self.ctx.bytes_per_token       # usage().total

    def footprint(self) -> Footprint:
        """Registry entries = stored chunks (LMCache's index); runs = the prefix stage's radix edges, then
        the chunks (the same content twice). A chunk's prompt was inserted whole (its whole pages) into the
        tree by the commit that stored the chunk: while the tree never evicted, each chunk inside those pages
        is held by the edges' runs (every window of up to 64 tokens: their context is 63), and is counted as
        such (:class:`engine.oracle.HeldRuns`)."""
        return chunk_footprint(self._store, self._tree, self._c, bool(self._tails))

    # ---- Internal helpers -------------------------------------------------------------------------
    def _scan(self, req: RequestView, now_us: int | None) -> tuple[int, list[tuple[int, int, _Chunk]]]:
        """``(prefix length, [(start, size, chunk)])``: the prefix stage's match, then the chunks the
        rolling lookup takes from its end (greedy, left to right, no overlap). ``now_us`` None: no
        recency bookkeeping (a re-scan in ``admit``)."""
        c = self._c
        known = _NO_KEYS
        if self._tree is not None:
            pfx, node = self._tree.match_prefix(req.seq, now_us, split=False)
            # NOTE (speed): the prompt that made the deepest node of the match has the same tokens down to it (an
            # edge's source holds its whole root path): its grid keys are this prompt's there, which is not hashed
            # again (Mooncake conversation: the prefix stage serves ~37 % of the tokens)
            depth, src = node.lo + node.n, node.src
            if pfx > depth and self._knows and self._tree.page_size == 1:
                # (the match ends inside the edge of the child the prompt's next token keys: its source too)
                child = node.children.get(req.seq.token(depth))
                if child is not None:
                    depth, src = pfx, child.src
            if depth >= c and self._knows:
                got = self._known.get(id(src))
                if got is not None:
                    known = got[1][:depth // c]
        else:
            pfx = 0
        # greedy from the prefix end: the first candidate at or after the cursor that is a stored chunk
        cand, keys = self._candidates(req, pfx, known)
        uses: list[tuple[int, int, _Chunk]] = []
        # NOTE (speed): the candidates' keys looked up in one pass (most are the filters' false positives: tens per
        # Mooncake lookup), then the greedy walks the stored ones only (a candidate not stored is skipped anyway)
        store = self._store
        cursor = pfx
        for i, ch in [(i, ch) for i, ch in zip(cand.tolist(), map(store.get, keys.tolist()), strict=True) if ch] \
                if cand.shape[0] else ():
            if i < cursor or ch.size != c or not self._same(ch, req, i, i + c):
                continue
            uses.append((i, c, ch))
            cursor = i + c
        if self._tails:
            uses = self._tail_uses(req, pfx, uses)
        if now_us is not None:
            for _, _, ch in uses:
                ch.last_access_us = now_us
                ch.hits += 1
        return pfx, uses

    def _tail_uses(self, req: RequestView, pfx: int, uses: list[tuple[int, int, _Chunk]]
                   ) -> list[tuple[int, int, _Chunk]]:
        """Add stored partial chunks found where an uncovered stretch ends (before a hit or at N): the
        longest stored tail length that fits and matches."""
        return tail_uses(self._hashes(req), req, pfx, uses, self._tails, self._store, self._same)

    def _candidates(self, req: RequestView, start: int, known: np.ndarray = _NO_KEYS) -> tuple[np.ndarray, np.ndarray]:
        """The filters' candidate windows of the request from ``start`` (:meth:`_Filters.candidates`): ``(offsets,
        hashes)``. NOTE (speed): with the compiled kernels, a request not hashed yet is hashed from its segments,
        scanned and its grid keys taken in one call (:func:`pic._accel_numba_fixed.prompt_scan`; was ~10 numpy
        and numba calls: ~25 -> ~10 us a request on Azure conversation, ~1,150 tokens). ``known``: the keys of the
        prompt's first grid chunks, when known (``start`` at or after them): their tokens are not hashed (the memo
        then keeps the grid, not the hashes)."""
        m, src, rows = self._memo, req.source, req.segment_rows
        fast = accel.kernels(req.num_tokens, "fixed") if m is None or m[0] is not req else None
        if fast is None or src is None or rows is None:
            return self._filters.candidates(self._hashes(req), self._c, start)
        b = self._filters.bits
        t = src.offsets if src.token_offsets is None else src.token_offsets
        h, cand, keys, grid = fast.prompt_scan(src.tokens, t, src.offsets, _NO_KEYS if src.keys is None else src.keys,
                                               _NO_KEYS if src.keys is None else src.salts, rows, _OPAQUE_MASK,
                                               self._c, self._bw_u, start, b[0], b[1], _SHIFT_U, _MASK_U, known)
        self._memo = (req, None if known.shape[0] else h, grid)
        return cand, keys

    def _hashes(self, req: RequestView) -> np.ndarray:
        """uint64 [N + 1]: prefix hashes of the request's tokens (:func:`engine.rolling.prefix_hashes`),
        memoized on the request. Window ``i``'s hash is ``h[i + C] - h[i] * B^C`` (``window_hashes``):
        NOTE (speed): derived where needed (grid points, candidates), never stored for every offset; a
        prompt is hashed from its segments (the trace's stored tokens read in place, opaque ones derived
        on the fly: :meth:`traces.content.Segments.pieces`), its tokens never gathered."""
        m = self._memo
        if m is None or m[0] is not req or m[1] is None:
            fast = accel.kernels(req.num_tokens, "fixed")
            src, rows = req.source, req.segment_rows
            if fast is not None and src is not None and rows is not None:
                h = fast.segment_prefix_hashes(src.tokens, *src.pieces(rows), _OPAQUE_MASK)
            elif fast is not None:
                h = fast.prefix_hashes(np.ascontiguousarray(req.tokens, np.int32))
            else:
                h = prefix_hashes(req.tokens)
            self._memo = (req, h, None if m is None or m[0] is not req else m[2])
        return self._memo[1]

    def _grid(self, req: RequestView) -> tuple[list[int], tuple[int, int, int] | None]:
        """The keys of the request's whole grid chunks in order (chunk ``j`` at ``j * C``), and with
        ``save_unfull_chunk`` its partial tail chunk ``(start, key, size)`` (None: none)."""
        c, n = self._c, req.num_tokens
        m = self._memo
        keys = m[2] if m is not None and m[0] is req else None
        if keys is None:
            h = self._hashes(req)
            k = n // c
            keys = h[c:k * c + 1:c] - h[0:(k - 1) * c + 1:c] * self._bw_u if k else h[:0]
            self._memo = (req, h, keys)
        r = n % c
        tail = (n - r, int(span_hashes(self._hashes(req), [n - r], [r])[0]), r) \
            if r and self.config.save_unfull_chunk else None
        if self._knows and keys.shape[0]:
            self._known[id(req.seq)] = (req.seq, keys)      # (the prompt is in the tree once committed)
        return keys.tolist(), tail

    def _same(self, ch: _Chunk, req: RequestView, lo: int, hi: int) -> bool:
        """Whether chunk ``ch`` holds tokens ``[lo, hi)`` of ``req`` (compared only under ``--verify``: the
        request's tokens are then made; otherwise a key match is taken as a hit)."""
        if not self.ctx.verify:
            return True
        self.stats.verified_hits += 1
        if np.array_equal(ch.src.tokens(ch.pos, ch.pos + ch.size), req.tokens[lo:hi]):
            return True
        self.stats.collisions += 1
        return False

    def _used(self) -> int:
        t = self._tree.total_tokens if self._tree is not None else 0
        return t + self._chunk_tokens + self._reserved

    def _stale(self, held: list[_Chunk], node: RadixNode | None) -> bool:
        self._unlock(held, node)
        self.stats.rejected += 1
        self.stats.extra["stale_plans"] = self.stats.extra.get("stale_plans", 0) + 1
        return False

    def _ref(self, ch: _Chunk) -> None:
        if ch.ref == 0:
            self._locked_tokens += ch.size
        ch.ref += 1

    def _unlock(self, held: list[_Chunk], node: RadixNode | None) -> None:
        key, seq, push, store = self._key, self._seq, heapq.heappush, self._store
        heap, num_freed = self._heap, 0
        if self._lean:
            for ch in held:
                ch.ref -= 1
                if ch.ref == 0:
                    num_freed += ch.size
            self._locked_tokens -= num_freed
            if node is not None:
                self._tree.dec_lock(node)
            return
        for ch in held:
            ch.ref -= 1
            if ch.ref == 0:
                num_freed += ch.size
                push(heap, (key(ch), next(seq), ch))
                if len(heap) > 4 * len(store) + 1024:
                    self._compact_heap()
                    heap = self._heap
        self._locked_tokens -= num_freed
        if node is not None:
            self._tree.dec_lock(node)

    def _compact_heap(self) -> None:
        """Drop stale heap entries (one per free live chunk: the last in heap order)."""
        live = {id(e[2]): e for e in self._heap if e[2].is_alive and e[2].ref == 0}
        self._heap = list(live.values())
        heapq.heapify(self._heap)

    def _peek_chunk(self) -> tuple[int, ...] | None:
        heap = self._heap
        while heap:
            k, _, ch = heap[0]
            if not ch.is_alive or ch.ref > 0:
                heapq.heappop(heap)
                continue
            cur = self._key(ch)
            if cur != k:
                heapq.heapreplace(heap, (cur, next(self._seq), ch))
                continue
            return k
        return None

    def _evict_tokens(self, num_tokens: int) -> int:
        """Evict unlocked chunks and radix leaves, smallest key first across both, until ``num_tokens``
        tokens are freed or nothing is evictable (chunks first on equal keys); tokens freed."""
        tree, store, freed = self._tree, self._store, 0
        if self._lean:
            self._lean = False
            self._filters.count(np.array([k for k, ch in store.items() if ch.size == self._c], np.uint64))
            self._heap = [(self._key(ch), next(self._seq), ch) for ch in store.values() if ch.ref == 0]
            heapq.heapify(self._heap)
        gone: list[int] = []
        num_chunks = 0
        while freed < num_tokens:
            ck = self._peek_chunk()
            tk = tree.peek_key() if tree is not None else None
            if ck is None and tk is None:
                break
            if ck is not None and (tk is None or ck <= tk):
                ch = heapq.heappop(self._heap)[2]
                ch.is_alive = False
                del store[ch.key]
                self._chunk_tokens -= ch.size
                freed += ch.size
                num_chunks += 1
                if ch.size == self._c:
                    gone.append(ch.key)
                else:
                    self._tails[ch.size] -= 1
                    if not self._tails[ch.size]:
                        del self._tails[ch.size]
            else:
                before = tree.num_evicted
                freed += tree.evict(1)
                self.stats.evictions += tree.num_evicted - before
        if gone:                                # filter counts of the evicted keys, in one go
            self._filters.remove(np.array(gone, np.uint64))
        self.stats.evictions += num_chunks
        self.stats.evicted_bytes += freed * self.ctx.bytes_per_token
        return freed
