"""``linearkv`` — position-independent caching for hybrid models (attention + Gated DeltaNet / Mamba-2).

An attention layer's cached KV of a chunk can be reused at another position (RoPE rotated); a recurrent
layer has no per-token cache, only a state that summarises everything before it. LinearKV (issue #13,
DESIGN.md §5) reuses whole content-defined chunks and starts the recurrent layers from one state built
from the matched chunks' cached states:

* chunks: the CDC chunker of ``irminsul`` (:mod:`engine.cdc`, Gear hash, xxh64 fingerprints, S2 markers as
  hard cuts); chunks are kept whole in :mod:`engine.policies.linearkv_store` and a chunk is reused whole
  when its fingerprint is resident (``REUSE`` at its base position, ``REUSE_ROTATED``
  elsewhere), since a recurrent state exists only at a chunk's end;
* each cached chunk stores its KV, its zero-start end state ``Z`` (state after the chunk's tokens from a
  zero state, all recurrent layers, conv window included) and, for ``compose=exact``, its transition
  operator ``T`` (``S_end = T S_start + Z``; GDN: dk x dk per value head, Mamba-2: a scalar per head).
  Those bytes count against capacity (:attr:`ModelSpec.state_bytes`, :attr:`ModelSpec.operator_bytes`);
* ``S_init = f(states of the K matched chunks)``: ``single-block`` (default) loads the last matched chunk's
  ``Z``; ``exact`` folds all K in context order, ``S <- T_c S + Z_c`` (K dense compositions);
* a selector (:mod:`engine.selectors`: ``epic`` first tokens of each chunk, ``cacheblend`` highest
  KV deviation after a priced selection pass) picks the recompute set U, ``round(r x reused)`` tokens of
  the chunks that moved (an in-place run of chunks from position 0 is an exact prefix and keeps its KV);
  U's attention KV is overwritten and the recurrent state advances from S_init through U and the new
  tokens in context order;
* a request's new chunks get their zero-start states made (one more recurrent scan of their tokens);
* prefix stage (``prefix_stage``, default on): as deployed, the engine's own hybrid prefix cache sits in
  front of the chunk store (as for ``fixed-chunk``): the longest committed exact prefix (a
  :class:`engine.radix.RadixTree` of committed prompts) is reused in place with the recurrent state at
  its end, no recompute and no state load, and chunk hits are taken after it only. One capacity and one
  eviction order over both stores (unlocked radix leaves and unlocked chunks, smallest key first);
* admission under a capacity (``admission``, default ``seen-twice``): a chunk's state can be ~6x its KV, so
  a bounded store keeps a new chunk only where it pays: one computed before in another context (moved
  content, which only the chunk store serves) competes in the eviction order; any other only fills free
  room, first in line for eviction. Chunks inside the prefix-stage prefix are not stored again, a
  request is never refused for chunks it could not store, and a committed request's chunks are unlocked
  (its KV is the prefix stage's locked leaf). ``prefix-first`` also evicts every chunk before prefix-stage
  content; ``always`` is the earlier rule (every new chunk, or the request is not cached).

The Plan carries it (``Correction``: recompute_tokens, probe_tokens, state_loads, state_compositions,
state_store_tokens) and the cost model prices it (:mod:`engine.hybrid_cost`). On an attention-only model
there are no states and the policy is CDC chunk reuse with CacheBlend/EPIC-style recompute. Eviction: whole
unlocked chunks (KV + state together) in key order (``lru``/``lfu``/``fifo``). Details: docs/linearkv.md.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from pic import accel
from pic.engine import cdc, eviction, selectors
from pic.engine.plan import Action, Correction, Plan, Span
from pic.engine.policies import register
from pic.engine.policies.base import CachePolicy, PolicyContext, RequestView, Usage
from pic.engine.policies.linearkv_layout import _context_tags, _Layout, prompt_chunks
from pic.engine.policies.linearkv_store import Entry, Store
from pic.engine.radix import RadixNode, RadixTree
from pic.engine.seq import Seq
from pic.traces.markers import BOUNDARY_MARKER

COMPOSE = ("single-block", "exact")
ADMISSION = ("seen-twice", "prefix-first", "always")
#: slots of the seen-elsewhere filter (indexed by a fingerprint's top 22 bits; each holds 8 more bits of the
#: fingerprint and a context tag; cleared when half full)
_SEEN_SLOTS = 1 << 22


@dataclass(frozen=True, slots=True)
class LinearKVConfig:
    avg_chunk: int = field(default=256, metadata={"help": "expected CDC chunk size (tokens); every chunk "
                                                          "also stores a recurrent state, so larger is leaner"})
    min_chunk: int = field(default=64, metadata={"help": "minimum CDC chunk size (tokens)"})
    max_chunk: int = field(default=2048, metadata={"help": "maximum CDC chunk size (tokens)"})
    gear_seed: int = field(default=0, metadata={"help": "seed of the CDC Gear values"})
    gear: str = field(default="mix", metadata={
        "help": "CDC Gear values: mix (a multiply-xorshift of the token id, the default) | table (a seeded "
                "2**16-entry table, the default before #12's tenth round: ~2x slower chunking, other cuts)"})
    s2: bool = field(default=True, metadata={"help": "S2: boundary markers are hard chunk boundaries"})
    marker_tokens: str = field(default="", metadata={
        "help": "S2 marker as comma-separated token ids (empty: the built-in 64-token marker)"})
    compose: str = field(default="single-block", metadata={
        "help": "S_init of the recurrent layers: single-block (last matched chunk's zero-start state) | exact "
                "(fold all matched chunks with their stored transition operators)"})
    selector: str = field(default="epic", metadata={
        "help": "recompute selector: epic (first tokens of each chunk) | cacheblend (highest KV deviation, "
                "needs a priced selection pass)"})
    recompute_ratio: float = field(default=0.2, metadata={
        "help": "r: share of the reused tokens recomputed anyway (the set U), in [0, 1]"})
    eviction: str = field(default="lru", metadata={"help": "eviction order: lru | lfu | fifo"})
    prefix_stage: bool = field(default=True, metadata={
        "help": "serve the exact prefix first from the engine's hybrid prefix cache (as deployed: KV and the "
                "recurrent state at its end; false: the chunk store alone)"})
    prefix_page_size: int = field(default=1, metadata={"help": "tokens per page of the prefix stage's radix tree"})
    admission: str = field(default="seen-twice", metadata={
        "help": "which new chunks a bounded store keeps (KV + recurrent state): seen-twice (one whose content "
                "was computed before in another context may evict other chunks; any other only fills free "
                "room, first in line for eviction) | prefix-first (the same, and the prefix stage evicts "
                "every chunk before its own content) | always (every new chunk; a request "
                "whose chunks do not fit is not cached)"})

    def __post_init__(self) -> None:
        self.cdc  # noqa: B018 - validates the chunk sizes
        eviction.key(self.eviction)
        selectors.get(self.selector)
        if self.compose not in COMPOSE:
            raise ValueError(f"compose must be one of {', '.join(COMPOSE)}, got {self.compose!r}")
        if not 0.0 <= self.recompute_ratio <= 1.0:
            raise ValueError(f"recompute_ratio must be in [0, 1], got {self.recompute_ratio}")
        if self.marker_tokens:
            try:
                [int(x) for x in self.marker_tokens.split(",")]
            except ValueError:
                raise ValueError(f"marker_tokens: expected comma-separated ints, got {self.marker_tokens!r}") \
                    from None
        if self.prefix_page_size < 1:
            raise ValueError(f"prefix_page_size must be >= 1, got {self.prefix_page_size}")
        if self.admission not in ADMISSION:
            raise ValueError(f"admission must be one of {', '.join(ADMISSION)}, got {self.admission!r}")

    @property
    def cdc(self) -> cdc.CDCConfig:
        return cdc.CDCConfig(self.avg_chunk, self.min_chunk, self.max_chunk, self.gear_seed, self.gear)

    @property
    def marker(self) -> np.ndarray:
        if not self.marker_tokens:
            return BOUNDARY_MARKER
        return np.array([int(x) for x in self.marker_tokens.split(",")], dtype=np.int32)


@register
class LinearKV(CachePolicy):
    name = "linearkv"
    Config = LinearKVConfig
    # (commit stores at most what admit reserved: the prefix stage's pages past the locked prefix; the new chunks
    # were added at admit: resident_bytes() never rises)
    commit_never_grows = True
    from pic.engine.policies.linearkv_tally import tally  # (told, not asked: prefix_twin)

    def __init__(self, ctx: PolicyContext, config: LinearKVConfig | None = None) -> None:
        super().__init__(ctx, config)
        c = self.config
        self._cdc, self._marker = c.cdc, c.marker
        self._selector = selectors.get(c.selector)
        self._store = Store(eviction.key(c.eviction), evicts=ctx.capacity_bytes != float("inf"))
        self._entries = self._store.entries
        m = ctx.model
        hybrid = m is not None and getattr(m, "is_hybrid", False)
        scale = ctx.bytes_per_token / m.kv_bytes_per_token if hybrid else 0.0
        self._hybrid = hybrid
        # NOTE: state bytes in the context's byte unit (replay: the model's own bytes per KV token)
        self._state_b = int(round(m.state_bytes * scale)) if hybrid else 0
        self._op_b = int(round(m.operator_bytes * scale)) if hybrid and c.compose == "exact" else 0
        self._pending: dict[int, _Layout] = {}
        self._admitted: dict[int, list[int]] = {}
        self._locks: dict[int, list[int]] = {}
        # the engine's own exact-prefix cache in front of the chunk store (RadixTree of committed prompts;
        # no eviction heap while the capacity is unbounded), and per admitted request its locked node and
        # the prefix-stage tokens it reserved until commit
        self._tree = (RadixTree(c.prefix_page_size, eviction.key(c.eviction),
                                evicts=ctx.capacity_bytes != float("inf")) if c.prefix_stage else None)
        self._nodes: dict[int, tuple[RadixNode | None, int, int]] = {}   # (locked node, pages reserved, its depth)
        self._reserved = 0
        # admission of a bounded store (seen-twice, prefix-first): per chunk admitted requests computed, the
        # context tag it was last computed in, in the slot of its fingerprint's top bits with 8 check bits
        # (a one-hash filter, cleared when half its slots are set)
        self._unbounded = ctx.capacity_bytes == float("inf")
        self._gate = not self._unbounded and c.admission != "always"
        # id(prompt) -> (prompt, its CDC bounds, fingerprints, anchors) of every admitted prompt chunked whole by one
        # compiled call (the prefix stage's edges' sources among them), kept while unbounded and unverified: a prompt
        # sharing a prefix with one resumes CDC from its last anchor there (_chunks)
        self._layouts: dict[int, tuple] = {}
        self._keeps = self._tree is not None and self._unbounded and not ctx.verify
        self._anc: tuple = (None, b"")      # (request, anchors) of the last layout made by that call
        self._prefix_first = self._tree is not None and c.admission == "prefix-first"
        self._seen, self._seen_n = array("H", bytes(2 * _SEEN_SLOTS if self._gate else 0)), 0
        self.stats.extra.update(chunk_lookups=0, chunk_hits=0, rotated_tokens=0, recompute_tokens=0,
                                probe_tokens=0, state_loads=0, state_compositions=0, state_store_tokens=0,
                                stored_chunks=0, unstored_chunks=0, prefix_tokens=0)
        #: the most :meth:`resident_bytes` at the end of an admission (the serving model's peak, one replica: read
        #: at the end instead of asked after every admission)
        self.peak_bytes = 0

    # ---- Public API -------------------------------------------------------------------------------
    def lookup(self, req: RequestView, now_us: int) -> Plan:
        self.stats.lookups += 1
        if self.stats.lookups == 1 and req.source is not None:
            # NOTE (speed): every prompt is chunked whole, so the trace's distinct tokens (a lower bound on what
            # this policy chunks) are announced up front: the compiled kernels load now when that is worth it
            # (pic.accel), not after 2^22 tokens chunked by numpy (Azure conversation: its first ~900 requests)
            accel.kernels(int(req.source.offsets[-1]))
        lay = self._analyze(req, self._prefix(req, now_us))
        for fp in lay.used:
            e = self._entries[fp]
            e.last_access_us = now_us
            e.hits += 1
        plan = self._plan(req, lay)
        ex = self.stats.extra
        if plan.num_reused:
            self.stats.hits += 1
            ex["rotated_tokens"] += plan.num_rotated
            ex["prefix_tokens"] += lay.prefix
        c = plan.correction
        ex["recompute_tokens"] += c.recompute_tokens
        ex["probe_tokens"] += c.probe_tokens
        ex["state_loads"] += c.state_loads
        ex["state_compositions"] += c.state_compositions
        self._pending[req.request_id] = lay
        if len(self._pending) > 4096:       # lookups never followed by admit (probes) must not pile up
            del self._pending[next(iter(self._pending))]
        return plan

    def admit(self, req: RequestView, plan: Plan, now_us: int) -> bool:
        rid = req.request_id
        lay = self._pending.pop(rid, None) or self._analyze(req, self._prefix(req, None))
        if any(fp not in self._entries for fp in lay.used):   # evicted since lookup: the plan is stale
            self.stats.rejected += 1
            return False
        node = None
        if lay.prefix:
            num, node = self._tree.lock_point(req.seq, lay.prefix, now_us)
            if num < lay.prefix:                              # the prefix was evicted since lookup
                self.stats.rejected += 1
                return False
            self._tree.inc_lock(node)
        st = self._store
        for fp in lay.used:
            st.lock(self._entries[fp])
        per, bpt = self._state_b + self._op_b, self.ctx.bytes_per_token
        num_new = sum(b - a for a, b in lay.new.values())
        need = num_new * bpt + len(lay.new) * per
        need_pages = self._pages(req, lay.prefix) * bpt
        # (unbounded: ``over`` is -inf; not computed)
        over = 0 if self._unbounded else self.resident_bytes() + need + need_pages - self.ctx.capacity_bytes
        if over > 0 and self.evict(int(over), now_us) < over:
            for fp in lay.used:
                st.unlock(self._entries[fp])
            if node is not None:
                self._tree.dec_lock(node)
            self.stats.rejected += 1
            return False
        self._reserved += need_pages
        self._nodes[rid] = (node, need_pages, lay.prefix)
        # new chunks: protected until release (admission: until commit); cold ones first in eviction order (an
        # access promotes them)
        st.add_new(lay.new, req.seq, bpt, per, now_us, lay.cold)
        self.stats.extra["stored_chunks"] += len(lay.new)
        if self._gate:
            self.stats.extra["unstored_chunks"] += len(lay.computed) - len(lay.new)
            self._mark_seen(lay.computed)
        self.stats.extra["state_store_tokens"] += num_new if self._hybrid else 0
        self._locks[rid] = lay.used + list(lay.new)
        self._admitted[rid] = list(lay.new)
        if self._keeps and self._anc[0] is req and self._anc[1] is not None:
            self._layouts[id(req.seq)] = (req.seq, array("q", lay.bounds), array("Q", lay.fps), self._anc[1])
        b = self.resident_bytes()
        if b > self.peak_bytes:
            self.peak_bytes = b
        return True

    def commit(self, req: RequestView, now_us: int) -> None:
        for fp in self._admitted.pop(req.request_id, []):
            self._entries[fp].ready = True
        node, need_pages, num = self._nodes.get(req.request_id, (None, 0, 0))
        if self._tree is not None:
            self._reserved -= need_pages
            # (the prefix's node, locked since admit, or the root, always locked; NOTE (speed): insert_move walks
            # below it, or not at all right after this prompt's lookup and admit)
            tree = self._tree
            leaf = tree.insert_move(req.seq, now_us, num, tree.root if node is None else node)[1]
            self._nodes[req.request_id] = (leaf, 0, 0)
            if self._gate:
                # the committed prompt's KV is the prefix stage's locked leaf now: what the running request
                # holds is there; its chunks (and their recurrent states) are no longer needed by it
                self._unlock_chunks(req.request_id)

    def release(self, req: RequestView, now_us: int) -> None:
        self._admitted.pop(req.request_id, None)
        node, need_pages, _ = self._nodes.pop(req.request_id, (None, 0, 0))
        self._reserved -= need_pages
        if node is not None:
            self._tree.dec_lock(node)
        self._unlock_chunks(req.request_id)

    def _unlock_chunks(self, rid: int) -> None:
        """Unlock the request's chunks; one released without commit is dropped (its KV never materialized)."""
        self._store.unlock_all(self._locks.pop(rid, []))

    def evict(self, num_bytes: int, now_us: int) -> int:
        """Unlocked chunks and prefix-stage leaves, smallest eviction key first across both (chunks first on
        equal keys; ``prefix-first``: every unlocked chunk before any leaf), until ``num_bytes`` are freed or
        nothing is evictable; bytes freed."""
        tree, st = self._tree, self._store
        if tree is None:
            return st.evict(num_bytes, self.stats)
        if self._prefix_first:
            return self._evict_chunks_first(num_bytes)
        freed = 0
        while freed < num_bytes:
            ck, tk = st.peek(), tree.peek_key()
            if ck is None and tk is None:
                break
            if ck is not None and (tk is None or ck <= tk):
                freed += st.evict_next(self.stats)
                continue
            freed += self._evict_leaves(1)
        return freed

    def _evict_chunks_first(self, num_bytes: int) -> int:
        freed = self._store.evict(num_bytes, self.stats)
        if freed < num_bytes:
            freed += self._evict_leaves(-(-(num_bytes - freed) // self.ctx.bytes_per_token))
        return freed

    def _evict_leaves(self, num_tokens: int) -> int:
        """Evict prefix-stage leaves for at least ``num_tokens`` tokens (counted in the stats); bytes freed."""
        tree = self._tree
        before = tree.num_evicted
        b = tree.evict(num_tokens) * self.ctx.bytes_per_token
        self.stats.evictions += tree.num_evicted - before
        self.stats.evicted_bytes += b
        return b

    def resident_bytes(self) -> int:
        st, t = self._store, self._tree     # usage().total
        b = st.evictable + st.protected + self._reserved
        return b if t is None else b + t.total_tokens * self.ctx.bytes_per_token

    def usage(self) -> Usage:
        st, t, bpt = self._store, self._tree, self.ctx.bytes_per_token
        ev, pr = st.evictable, st.protected + self._reserved
        if t is not None:
            ev, pr = ev + t.evictable_tokens * bpt, pr + t.protected_tokens * bpt
        return Usage(ev, pr, ev + pr, self.ctx.capacity_bytes)

    # ---- Internal helpers -------------------------------------------------------------------------
    def _pages(self, req: RequestView, prefix: int) -> int:
        """Prompt tokens the prefix stage adds at commit beyond its ``prefix`` (whole pages; 0 without it)."""
        if self._tree is None:
            return 0
        p = self._tree.page_size
        return max(0, req.num_tokens // p * p - prefix)

    def _prefix(self, req: RequestView, now_us: int | None) -> tuple[int, Seq | None, int]:
        """``(num, src, shared)``: tokens of ``req``'s longest committed exact prefix in the prefix stage (0 without
        one), and (kept layouts only) a committed prompt ``src`` whose first ``shared`` tokens are ``req``'s (the
        source of the deepest node of the match, or of the child whose edge it ends inside; None: none)."""
        if self._tree is None:
            return 0, None, 0
        num, node = self._tree.match_prefix(req.seq, now_us, split=False)
        if not self._keeps or not num:
            return num, None, 0
        depth = node.lo + node.n
        if num > depth and self._tree.page_size == 1:
            child = node.children.get(req.seq.token(depth))
            if child is not None:
                return num, child.src, num
        return num, node.src, depth

    def _analyze(self, req: RequestView, match: tuple[int, Seq | None, int]) -> _Layout:
        """Chunk ``req``; hits are resident chunks that start at or after the prefix stage's ``prefix``
        tokens (those before are served in place by the prefix stage); every chunk not resident is new.
        ``match``: :meth:`_prefix`'s answer."""
        prefix = match[0]
        bl, fl, toks, known = self._chunks(req, match[1], match[2])
        hits: list[int] = []
        new: dict[int, tuple[int, int]] = {}
        # seen-twice: a chunk inside the prefix stage's prefix is neither computed nor stored again
        inside = prefix if self._gate else 0
        # NOTE (speed): _get's test inlined (Mooncake conversation: 588 k chunk lookups)
        get, verify = self._entries.get, self.ctx.verify
        k0 = 0
        if not verify:
            # NOTE (speed): a chunk that starts inside the prefix is never a hit: only a missing one matters
            # (most are resident: the prompt that left the prefix stored them); one C-level pass over them
            k0 = bisect_left(bl, prefix, 0, len(fl))
            # NOTE (speed): the first ``known`` chunks are a committed prompt's, each resident once it was admitted;
            # while nothing ever left the store (ungated), they still are: not asked (Mooncake conversation: ~37 %
            # of the chunks)
            k1 = min(known, k0) if not self._gate and not self._store.num_removed else 0
            for k in [k for k, e in enumerate(map(get, fl[k1:k0]), k1) if e is None]:
                b = bl[k + 1]
                if b > inside and fl[k] not in new:
                    new[fl[k]] = (bl[k], b)
        for k in range(k0, len(fl)):
            fp, a, b = fl[k], bl[k], bl[k + 1]
            e = get(fp)
            if e is None:
                if b > inside and fp not in new:
                    new[fp] = (a, b)
            elif e.ready and e.size == b - a and (not verify or self._get(fp, toks(), a, b) is not None):
                if a >= prefix:
                    hits.append(k)
        self.stats.extra["chunk_lookups"] += len(fl)
        self.stats.extra["chunk_hits"] += len(hits)
        used = list(dict.fromkeys(fl[k] for k in hits))
        if not self._gate or not new:
            return _Layout(bl, fl, prefix, hits, used, new)
        ctx = _context_tags(bl, fl, new)
        keep, cold = self._admissible(req, prefix, used, new, ctx)
        return _Layout(bl, fl, prefix, hits, used, keep, tuple(ctx.items()), cold)

    def _chunks(self, req: RequestView, src: Seq | None = None, shared: int = 0
                ) -> tuple[list[int], list[int], Callable[[], np.ndarray], int]:
        """``(bounds, fingerprints, tokens, known)`` of the prompt's CDC chunks (:func:`linearkv_layout.prompt_chunks`,
        from the kept layout of ``src`` where it shares ``shared`` tokens)."""
        bl, fl, toks, known, anc = prompt_chunks(req, self.config, self._cdc, self._marker,
                                                 self._layouts.get(id(src)) if shared else None, shared)
        self._anc = (req, anc)
        return bl, fl, toks, known

    def _admissible(self, req: RequestView, prefix: int, used: list[int], new: dict[int, tuple[int, int]],
                    ctx: dict[int, int]) -> tuple[dict[int, tuple[int, int]], frozenset[int]]:
        """The new chunks a bounded store keeps (``seen-twice``, ``prefix-first``) and which of them are cold,
        in prompt order: one whose content an admitted request last computed in another context (``ctx``;
        moved content, which only the chunk store can serve: in its old context the prefix stage holds it)
        if it fits in the free room plus what unlocked content holds (``prefix-first``: unlocked chunks
        only); any other new chunk only if it fits in the free room, stored cold (first in eviction order
        until a hit). Free room is counted after the request's own prefix-stage pages, evictable bytes after
        the locks the plan takes (every prefix-stage token counted locked), so :meth:`admit` never fails
        for a chunk kept here.

        NOTE: a chunk's recurrent state can be ~6x its KV (Qwen3-Next: 39.5 MB vs 6 MB for 256 tokens);
        storing every new chunk let one-off chunks flush the prefix stage (Mooncake conversation at 60 GiB:
        2.5 % of tokens reused against prefix's 11.6 %) and failed half the admissions."""
        bpt, per, st, entries = self.ctx.bytes_per_token, self._state_b + self._op_b, self._store, self._entries
        evictable = st.evictable - sum(e.nbytes for e in map(entries.__getitem__, used) if e.refs == 0)
        if self._tree is not None and not self._prefix_first:
            evictable += max(0, self._tree.evictable_tokens - prefix) * bpt
        free = self.ctx.capacity_bytes - self.resident_bytes() - self._pages(req, prefix) * bpt
        room, seen, keep, cold = free + evictable, self._seen, {}, set()
        for fp, (a, b) in new.items():
            cost = (b - a) * bpt + per
            tag, last = ctx[fp], seen[fp >> 42]
            if cost <= room and last >> 8 == tag >> 8 and last != tag and last:
                keep[fp] = (a, b)
            elif cost <= free:
                keep[fp] = (a, b)
                cold.add(fp)
            else:
                continue
            free -= cost
            room -= cost
        return keep, frozenset(cold)

    def _mark_seen(self, computed: tuple[tuple[int, int], ...]) -> None:
        seen = self._seen
        for fp, tag in computed:
            i = fp >> 42
            if not seen[i]:
                self._seen_n += 1
            seen[i] = tag
        if self._seen_n > _SEEN_SLOTS // 2:
            self._seen, self._seen_n = array("H", bytes(2 * _SEEN_SLOTS)), 0

    def _get(self, fp: int, toks: np.ndarray, a: int, b: int) -> Entry | None:
        e = self._entries.get(fp)
        if e is None or not e.ready or e.size != b - a:
            return None
        if self.ctx.verify:
            self.stats.verified_hits += 1
            if not np.array_equal(e.tokens, toks[a:b]):
                self.stats.collisions += 1
                return None
        return e

    def _plan(self, req: RequestView, lay: _Layout) -> Plan:
        n, bl = req.num_tokens, lay.bounds
        # the prefix stage's exact prefix: in place, with the recurrent state at its end (as the engine's
        # hybrid prefix cache keeps it), so it needs neither recompute nor a state load
        spans = [Span(0, lay.prefix, Action.REUSE)] if lay.prefix else []
        for k in lay.hits:
            a, b = bl[k], bl[k + 1]
            src = self._entries[lay.fps[k]].base_pos
            spans.append(Span(a, b, Action.REUSE if src == a else Action.REUSE_ROTATED, src))
        store = sum(b - a for a, b in lay.new.values()) if self._hybrid else 0
        k = len(lay.hits)
        if not k:                        # the prefix stage alone (or nothing): what an exact-prefix cache does
            # NOTE (speed): with no correction, the shared plans of Plan.from_prefix (NO_CORRECTION: the serving
            # model prices them on its exact-prefix path)
            return Plan.from_prefix(n, lay.prefix) if not store else \
                Plan.from_spans(n, spans, Correction(state_store_tokens=store))
        # an in-place run of chunks from position 0 is an exact prefix: its KV needs no quality recompute
        # (with a prefix-stage prefix, chunk hits start after it and none is such a run)
        lead = 0
        if not lay.prefix:
            while lead < k and lay.hits[lead] == lead and spans[lead].action == Action.REUSE:
                lead += 1
        chunks = np.array([[bl[j], bl[j + 1]] for j in lay.hits[lead:]], dtype=np.int64).reshape(-1, 2)
        sel = self._selector.select(chunks, self.config.recompute_ratio)
        exact = self.config.compose == "exact"
        corr = Correction(recompute_tokens=sel.num_tokens, probe_tokens=sel.probe_tokens,
                          state_loads=(k if exact else 1) if self._hybrid else 0,
                          state_compositions=k if exact and self._hybrid else 0, state_store_tokens=store)
        return Plan.from_spans(n, spans, corr)
