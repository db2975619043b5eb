"""An unbounded ``block-hash`` cache kept as a token radix tree (:class:`RadixBlocks`), no per-block state.

A cache that never evicts holds every full block of every committed prompt, so the blocks resident along a
prompt are those of the longest prefix it shares with a committed prompt, cut to whole blocks: block ``j`` of
``q`` is resident iff ``q[:(j+1)·bs]`` is a prefix of a committed prompt's full blocks. A radix tree over the
committed prompts' full blocks (references to their segments, no token copy: :mod:`engine.radix`) answers
exactly that: the walk's length ``m`` gives ``m // bs`` blocks. It compares prompts, not chained hashes, so it
also rules out the 2^-64 hash collision the exact cache could take for a match.

Counts are those of the exact cache. An edge covers depths ``(lo, lo + n]`` of every prompt below it (its
``lo`` is its depth: prompts are inserted from position 0), so it holds the block ends
``(lo + n) // bs - lo // bs``; a commit adds ``full // bs - m // bs`` blocks (``m``: the prefix it shared);
a block is locked iff the edge holding its end is (:class:`_Tree`).

What the exact cache needs if it is ever asked to evict (``evict()`` on an unbounded cache: never in a
replay, only by callers of the policy API) is rebuilt by replaying the admissions, commits and releases
logged here (16 B per request and 24 B per event, plus each request's :class:`~engine.seq.Seq`).

NOTE (memory, speed): the exact cache keeps ~9 B per distinct block (its tree's 8 B hash and a 1 B ref) and a
chained hash per block of every prompt it sees; rag-reorder makes ~150 distinct blocks per request, ~2.7 GiB
at 10^6 requests. Here per request it keeps what the ``prefix`` policy's tree keeps (about one edge)."""

from __future__ import annotations

from array import array

import numpy as np

from pic.engine.policies.base import RequestView
from pic.engine.radix import RadixNode, RadixTree

ADMIT, COMMIT, RELEASE = 0, 1, 2


class _Tree(RadixTree):
    """A radix tree (pages of one token, no eviction) that also counts the block ends on locked edges."""

    def __init__(self, block: int) -> None:
        super().__init__(1, evicts=False)
        self.block = block
        self.locked_blocks = 0

    def lock_point(self, tokens, num: int, now_us: int | None = None) -> tuple[int, RadixNode]:
        """:meth:`RadixTree.lock_point`; also right after a walk of ``tokens`` that found more than ``num``
        (a lookup's match cut to whole blocks): up from where that walk stopped, not down again from the root
        (an edge's ``lo`` is its depth here)."""
        m = self._memo
        if m is None or m[0] is not tokens or m[1] != now_us or m[2] != self._version or num > m[3]:
            return super().lock_point(tokens, num, now_us)
        node = m[4] if m[5] is None else m[5]
        while node.lo >= num and node is not self.root:
            node = node.parent
        if node is self.root or num == node.lo + node.n:
            return num, node
        return num, self._memo_split(node, num - node.lo)

    def lock_blocks(self, q, n: int) -> tuple[int, RadixNode]:
        """``num = match_prefix(q, None, split=False, hi=n)[0] // block * block``, then ``lock_point(q, num)`` and
        ``inc_lock`` of its node (a lookup and the admit of all it found): ``(num, node)``."""
        pos = self._walk(q, 0, n, self.root, 0, None, False, True)[0]
        num, node = self.lock_point(q, pos // self.block * self.block, None)
        self._lock_up(node, self.root)
        return num, node

    def _lock_up(self, node: RadixNode, above: RadixNode) -> None:
        """:meth:`RadixTree._lock_up` (behind inc_lock and move_lock), counting the blocks too."""
        bs, k, b = self.block, 0, 0
        while node is not above:
            if node.lock_ref == 0:
                k += node.n
                b += (node.lo + node.n) // bs - node.lo // bs
            node.lock_ref += 1
            node = node.parent
        self.evictable_tokens -= k
        self.protected_tokens += k
        self.locked_blocks += b

    def dec_lock(self, node: RadixNode) -> None:
        root, bs, k, b = self.root, self.block, 0, 0
        while node is not root:
            if node.lock_ref <= 0:
                raise ValueError("dec_lock on an unlocked node")
            node.lock_ref -= 1
            if node.lock_ref == 0:
                k += node.n
                b += (node.lo + node.n) // bs - node.lo // bs
            node = node.parent
        self.evictable_tokens += k
        self.protected_tokens -= k
        self.locked_blocks -= b


class RadixBlocks:
    """The state of an unbounded, unverified ``block-hash`` cache (see the module docstring). Blocks are
    counted in blocks; the policy turns them into bytes."""

    __slots__ = ("block", "tree", "num_resident", "reserved", "live", "rids", "seqs", "ops")

    def __init__(self, block: int) -> None:
        self.block = block
        self.tree = _Tree(block)
        self.num_resident = 0            # distinct full blocks committed
        self.reserved = 0                # blocks reserved by admitted requests, not yet committed
        self.live: dict[int, tuple[RadixNode, int, int, int]] = {}   # request_id -> (locked node, reserved, log index, its depth)
        self.rids = array("q")           # the log: each admitted request once, with its prompt
        self.seqs: list = []
        self.ops = array("q")            # (event, request's log index, now_us, blocks wanted) per event

    @property
    def num_locked(self) -> int:
        return self.tree.locked_blocks

    def lookup(self, req: RequestView) -> int:
        """Tokens of ``req``'s resident leading blocks."""
        bs = self.block
        n = req.num_tokens // bs * bs
        return self.tree.match_prefix(req.seq, None, split=False, hi=n)[0] // bs * bs if n else 0

    def start(self, req: RequestView, now_us: int) -> int:
        """:meth:`lookup`, then :meth:`admit` of all it found: its tokens. NOTE (speed): one walk and one lock
        (:meth:`_Tree.lock_blocks`); ``req`` must not be live."""
        bs = self.block
        n = req.num_tokens // bs * bs
        if not n:
            self.admit(req, 0, now_us)
            return 0
        q = req.seq
        num, node = self.tree.lock_blocks(q, n)
        want = num // bs
        need = req.num_tokens // bs - want
        self.reserved += need
        k = len(self.seqs)
        self.rids.append(req.request_id)
        self.seqs.append(q)
        self.ops.fromlist([ADMIT, k, now_us, want])
        self.live[req.request_id] = (node, need, k, num)
        return num

    def admit(self, req: RequestView, want: int, now_us: int) -> int:
        """Lock ``req``'s first ``want`` blocks and reserve the rest; returns the blocks resident along it
        (fewer than ``want``: nothing was done). ``want`` <= what :meth:`lookup` found."""
        bs = self.block
        num, node = self.tree.lock_point(req.seq, want * bs, None)
        if num < want * bs:
            return num // bs
        self.tree.inc_lock(node)
        need = req.num_tokens // bs - want
        self.reserved += need
        k = len(self.seqs)
        self.rids.append(req.request_id)
        self.seqs.append(req.seq)
        self.ops.fromlist([ADMIT, k, now_us, want])
        self.live[req.request_id] = (node, need, k, num)
        return want

    def commit(self, req: RequestView, now_us: int) -> None:
        """Store ``req``'s full blocks; it holds all of them until :meth:`release`."""
        node, need, k, num = self.live[req.request_id]
        self.reserved -= need
        bs = self.block
        full = req.num_tokens // bs * bs
        # (node: locked since admit; insert_below, then move_lock(leaf, node))
        num_new, leaf = self.tree.insert_move(req.seq, now_us, num, node, full)
        self.num_resident += full // bs - (full - num_new) // bs
        self.live[req.request_id] = (leaf, 0, k, full)
        self.ops.fromlist([COMMIT, k, now_us, 0])

    def release(self, req: RequestView, now_us: int) -> None:
        node, need, k, _ = self.live.pop(req.request_id)
        self.reserved -= need
        self.tree.dec_lock(node)
        self.ops.fromlist([RELEASE, k, now_us, 0])

    def replay(self, cache) -> None:
        """Apply the logged events, in order, to ``cache`` (an exact ``block-hash`` cache, empty): it ends in
        the state it would have reached had it served them itself."""
        from pic.engine.plan import Plan

        views: dict[int, RequestView] = {}
        ops = np.frombuffer(self.ops, np.int64).reshape(-1, 4).tolist()
        bs = self.block
        for ev, k, now, want in ops:
            req = views.get(k)
            if req is None:
                req = views[k] = _view(self.rids[k], self.seqs[k])
            if ev == ADMIT:
                if not cache.admit(req, Plan.from_prefix(req.num_tokens, want * bs), now):
                    raise RuntimeError("block-hash: the exact cache refused a logged admission")
            elif ev == COMMIT:
                cache.commit(req, now)
            else:
                cache.release(req, now)
                del views[k]


class RadixAnswers:
    """:class:`RadixBlocks`' counts and answers for one replay whose answers are known in advance: the
    requests are admitted in the workload's order, each committed before the next is admitted, and ``reuse[k]``
    is the ``prefix`` policy's reuse of request ``k`` (an unbounded tree of pages dividing the block) in a
    replay of that order. The block tree's walk of a prompt ``q`` finds the longest
    ``min(lcp(q, p), full(q), full(p))`` over the committed prompts ``p`` (``full``: whole blocks), and since
    ``lcp(q, p) <= len(p)``, its whole blocks are ``lcp(q, p) // block`` blocks: the answer is
    ``reuse[k] // block * block``, and a commit adds ``full(q) // block`` less that many blocks. (One replica,
    open loop: prefills run one at a time in arrival order, :mod:`engine.serving`.) No tree is built; a request
    out of that order raises. Locks are not counted: ``num_locked`` is asked only with nothing live (the end)."""

    __slots__ = ("block", "ids", "reuse", "next", "pending", "num_resident", "reserved", "live")

    def __init__(self, block: int, request_ids: array, reuse: array) -> None:
        self.block = block
        self.ids, self.reuse = request_ids, reuse
        self.next = 0                    # the next request to admit (its index in the workload)
        self.pending = -1                # the index of the one admitted, not yet committed (-1: none)
        self.num_resident = 0
        self.reserved = 0
        self.live: dict[int, tuple[int, int]] = {}     # request_id -> (blocks reserved, answer's blocks)

    @property
    def num_locked(self) -> int:
        if self.live:
            raise RuntimeError("block-hash: a cache answering from the prefix replay does not count locks")
        return 0

    def _answer(self, req: RequestView) -> int:
        k = self.next
        if k >= len(self.ids) or self.ids[k] != req.request_id or self.pending >= 0:
            raise RuntimeError(f"block-hash: request {req.request_id} out of the order the answers were made for")
        return self.reuse[k] // self.block

    def lookup(self, req: RequestView) -> int:
        return self._answer(req) * self.block

    def start(self, req: RequestView, now_us: int) -> int:
        """:meth:`lookup`, then :meth:`admit` of all it found."""
        b = self._answer(req)
        self._hold(req, b, b)
        return b * self.block

    def admit(self, req: RequestView, want: int, now_us: int) -> int:
        b = self._answer(req)
        if b < want:
            return b
        self._hold(req, want, b)
        return want

    def _hold(self, req: RequestView, want: int, b: int) -> None:
        """Reserve ``req``'s whole blocks past ``want`` (its answer: ``b`` blocks) until its commit."""
        need = req.num_tokens // self.block - want
        self.reserved += need
        self.pending = self.next
        self.next += 1
        self.live[req.request_id] = (need, b)

    def commit(self, req: RequestView, now_us: int) -> None:
        need, b = self.live[req.request_id]
        self.reserved -= need
        self.num_resident += req.num_tokens // self.block - b
        self.live[req.request_id] = (0, b)
        self.pending = -1

    def release(self, req: RequestView, now_us: int) -> None:
        self.reserved -= self.live.pop(req.request_id)[0]

    def replay(self, cache) -> None:
        raise RuntimeError("block-hash: a cache answering from the prefix replay cannot evict")

    def answer_all(self, request_ids: np.ndarray, ntok: np.ndarray, out: np.ndarray) -> np.ndarray | None:
        """:meth:`start`, :meth:`commit` and :meth:`release` of every request in the order the answers were made for
        (``request_ids``, ``ntok``: their ids and token counts), at once: their answers (tokens) into ``out``, the
        state those calls leave; returned: each one's answer in blocks. None (nothing done) where some were asked
        already or the requests are not those."""
        n = len(self.ids)
        if self.next or self.pending >= 0 or self.live or ntok.shape[0] != n \
                or not np.array_equal(np.frombuffer(self.ids, np.int64), request_ids):
            return None
        b = np.frombuffer(self.reuse, np.int64) // self.block
        np.multiply(b, self.block, out=out)
        self.num_resident += int((np.asarray(ntok, np.int64) // self.block - b).sum())
        self.next = n
        return b


def answer_from_prefix(cache, request_ids: np.ndarray, reuse: np.ndarray) -> None:
    """Make ``cache`` (a fresh, unbounded, unverified ``block-hash`` cache) answer from the ``prefix`` policy's
    reuse of each request in a replay of one replica, open loop (:class:`RadixAnswers`) instead of a tree."""
    r = cache._radix
    if not isinstance(r, RadixBlocks) or r.seqs or cache.stats.lookups:
        raise ValueError("block-hash: only a fresh unbounded cache answers from a prefix replay")
    cache._radix = RadixAnswers(r.block, _int64s(request_ids), _int64s(reuse))


def answer_all(cache, request_ids: np.ndarray, ntok: np.ndarray, out: np.ndarray) -> bool:
    """``cache``'s (``block-hash`` answering from a prefix replay, :class:`RadixAnswers`) ``start_prefix``, ``commit`` and
    ``release`` of every request of the workload in order (``request_ids``, ``ntok``: its columns) at once, as
    ``engine.serving.timeline`` asks them one by one: the answers into ``out``; its counts, peak and state as those
    calls leave them (its resident bytes never fall: the peak is the end's). False (nothing done) where the cache was
    asked already or a call is watched. NOTE (speed): ~1.5 us a request of Python calls (Mooncake conversation:
    ~0.018 CPU s of each replay's block-hash baseline)."""
    r = cache._radix
    if type(r) is not RadixAnswers or cache.stats.lookups or _WATCHED & vars(cache).keys():
        return False
    b = r.answer_all(request_ids, ntok, out)
    if b is None:
        return False
    cache.stats.lookups += b.shape[0]
    cache.stats.hits += int(np.count_nonzero(b))
    if b.shape[0]:
        cache.peak_bytes = max(cache.peak_bytes, (r.num_resident + r.reserved) * cache._bpb)
    return True


_WATCHED = {"lookup", "admit", "commit", "release", "start_prefix"}


def in_arrival_order(config) -> bool:
    """Whether a replay of ``config`` (an ``engine.config.ReplayConfig``) asks each cache in arrival order, each
    lookup seeing every earlier request committed and nothing else: one replica, open loop (prefills one at a time
    in arrival order, each committed before the next lookup), nothing watching (``--verify``,
    ``--check-invariants``). What block-hash (:func:`answers_apply`), oracle and irminsul answering from a replay or
    the trace-level oracle start from."""
    return config.replicas == 1 and not (config.closed_loop or config.verify or config.check_invariants)


def answers_apply(config, capacity_tokens: float, resolved: dict) -> bool:
    """Whether, in a replay of ``config`` (an ``engine.config.ReplayConfig``; ``resolved``: its policies' configs),
    ``block-hash``'s reuse of each request is ``prefix``'s cut to whole blocks (:class:`RadixAnswers`): one replica,
    open loop (prefills one at a time in arrival order, each committed before the next lookup), both caches
    unbounded, prefix's pages dividing the block, nothing watching them (``--verify``, ``--check-invariants``)."""
    return (in_arrival_order(config) and capacity_tokens == float("inf")
            and resolved["block-hash"].block_size % resolved["prefix"].page_size == 0)


class Asked:
    """What a cache answering from a prefix replay reads of a request (:class:`RadixAnswers`: its id and token
    count): the serving model's view of it there (:func:`asked_views`), no prompt made."""

    __slots__ = ("request_id", "num_tokens")

    def __init__(self, request_id: int, num_tokens: int) -> None:
        self.request_id, self.num_tokens = request_id, num_tokens

    def __repr__(self) -> str:
        return f"Asked(request_id={self.request_id}, N={self.num_tokens})"


def asked_views(request_ids: np.ndarray, num_tokens: np.ndarray):
    """``view(i) -> Asked`` of the workload's request ``i`` (its columns ``request_ids`` and ``num_prompt``: the
    views' ids and token counts, ``engine.views``). NOTE (speed): ~3 us less a request than a RequestView with
    its Seq (Mooncake conversation)."""
    ids, ntok = _int64s(request_ids), _int64s(num_tokens)

    def view(i: int) -> Asked:
        return Asked(ids[i], ntok[i])

    return view


def _view(request_id: int, seq) -> RequestView:
    """A view of the prompt ``seq`` describes (its segments, or its own tokens)."""
    if seq.arr is not None:
        return RequestView(request_id, "", seq.arr[:seq.end], np.array([0, seq.end], np.int64),
                           np.zeros(1, np.uint64), np.zeros(1, np.uint8))
    k = len(seq.rows)
    return RequestView(request_id, "", None, np.asarray(seq.bounds, np.int64), np.zeros(k, np.uint64),
                       np.zeros(k, np.uint8), np.asarray(seq.rows, np.int64), seq.store)


def _int64s(a: np.ndarray) -> array:
    """``a`` as an ``array('q')`` (8 B an item; its items read as Python ints)."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(a, np.int64).tobytes())
    return out
