"""``oracle`` — the upper bound: infinite capacity, any run of >= ``min_match`` tokens seen before, at any
position.

Keeps: every ``min_match``-token window of every committed prompt in a :class:`engine.oracle.WindowIndex`
(hash -> the position it was first committed at; a hash table with the compiled kernels) and the prompts in
a radix tree by their segments (index only), regardless
of the capacity: it is a bound, not a cache (``bounded = False``; ``usage()`` reports no bytes, and
nothing is ever evicted or refused).

Lookup: the longest exact prefix any committed prompt shares (any length, in place), then the prompt's
windows are hashed (vectorized rolling hash) and looked up at once; windows found form chains of
consecutive windows with one delta (target - source), and the rest of the prompt is covered left to right
by the chain reaching farthest (``REUSE`` in place, ``REUSE_ROTATED`` elsewhere). Every token in a hit
window or the prefix is reused; nothing else is. Under ``--verify`` each chain's tokens are compared with the
committed prompt it came from (collisions counted and not reused). No eviction.

The trace-level oracle of every report (``oracle_share``, :func:`engine.oracle.trace_oracle`) counts runs
seen in any *earlier request*; this policy, driven by the serving model, counts runs of prompts
*committed* before the lookup, per replica, so on one replica it reuses at most what the trace-level
oracle does (requests in flight at the same time cannot share).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from pic import accel
from pic.engine.oracle import DEFAULT_MIN_MATCH, WindowIndex
from pic.engine.oracle_lines import Layout, LineIndex, Lines, PromptHashes, line_groups
from pic.engine.plan import Action, Plan, Span
from pic.engine.policies import register
from pic.engine.policies.base import CachePolicy, Footprint, PolicyContext, RequestView, Usage
from pic.engine.policies.block_radix import in_arrival_order
from pic.engine.radix import RadixTree
from pic.engine.rolling import prefix_hashes, prefix_windows, window_hashes
from pic.traces.content import _MASK as _OPAQUE_MASK


@dataclass(frozen=True, slots=True)
class OracleConfig:
    min_match: int = field(default=DEFAULT_MIN_MATCH, metadata={
        "help": "shortest run reused (tokens); also the oracle behind every report's oracle_share"})

    def __post_init__(self) -> None:
        if self.min_match < 1:
            raise ValueError(f"oracle.min_match must be >= 1, got {self.min_match}")


@register
class OracleCache(CachePolicy):
    name = "oracle"
    Config = OracleConfig
    bounded = False

    def __init__(self, ctx: PolicyContext, config: OracleConfig | None = None) -> None:
        super().__init__(ctx, config)
        self._m = self.config.min_match
        self._index = WindowIndex()
        self._tree = RadixTree()                   # committed prompts (the exact-prefix part)
        self._prompts: list[np.ndarray] = []       # committed prompts (for --verify), by ordinal
        self._origin = WindowIndex()               # window hash -> committed prompt ordinal (verify only)
        self._num_tokens = 0
        self._commits = 0
        self._memo: tuple[RequestView, int, np.ndarray, np.ndarray, int] | None = None   # req, commits, w, hit, off
        self._lines: LineIndex | None = None       # the named windows (engine.oracle_lines), else all hashed
        self._mode = None                          # "lines" / "hashed", on the first request
        self._lay: tuple[RequestView, int, int, object] | None = None   # req, commits, off, its Layout
        self._hash_memo: PromptHashes | None = None   # the last request's (_hasher)
        self._told: _Told | None = None           # answers from the trace-level oracle (answer_from_trace)
        self.stats.extra.update(indexed_windows=0)

    # ---- Public API -------------------------------------------------------------------------------
    def lookup(self, req: RequestView, now_us: int) -> Plan:
        if self._told is not None:
            return Plan.from_prefix(req.num_tokens, self._answer(req, now_us))
        self.stats.lookups += 1
        m = self._m
        pfx = self._tree.match_prefix(req.seq, None, split=False)[0]
        # NOTE: windows inside the shared prefix were indexed with the committed prompt that had it; only
        # windows from pfx - m + 1 on are hashed and looked up
        off = max(0, pfx - m + 1)
        spans: list[Span] = [Span(0, pfx, Action.REUSE, 0)] if pfx else []
        lay = self._layout(req)
        if lay is not None:
            self._lay = (req, self._commits, off, lay)
            if lay.n > off:                        # (an empty index answers nothing)
                j, src = self._lines.lookup(lay, off, self._hasher(req))
                for a, b, delta, _, _ in _cover_at(j, src, m, pfx, off):
                    spans.append(Span(a, b, Action.REUSE if delta == 0 else Action.REUSE_ROTATED, a - delta))
            if spans:
                self.stats.hits += 1
            return Plan.from_spans(req.num_tokens, spans)
        w = self._windows(req, off)
        if w.shape[0] and len(self._index):
            hit, src = self._index.lookup(w)
            self._memo = (req, self._commits, w, hit, off)
            for a, b, delta, first, last in _cover(hit, src, m, pfx, off):
                if self.ctx.verify and not self._verified(req.tokens, w, first, last, delta, off):
                    continue
                spans.append(Span(a, b, Action.REUSE if delta == 0 else Action.REUSE_ROTATED, a - delta))
        if spans:
            self.stats.hits += 1
        return Plan.from_spans(req.num_tokens, spans)

    def admit(self, req: RequestView, plan: Plan, now_us: int) -> bool:
        return True

    def commit(self, req: RequestView, now_us: int) -> None:
        told = self._told
        if told is not None:
            k = told.pending
            if k < 0 or told.ids[k] != req.request_id:
                raise RuntimeError(f"oracle: request {req.request_id} committed out of the order of the answers "
                                   "from the trace-level oracle")
            told.pending = -1
            told.done = k + 1
            self.stats.extra["indexed_windows"] = told.windows[k]
            return
        if req.num_tokens < self._m:
            self._tree.insert(req.seq, now_us)
            return
        lay = self._layout(req)
        if lay is not None:
            memo = self._lay
            if memo is not None and memo[0] is req and memo[1] == self._commits:
                off = memo[2]
            else:
                off = max(0, self._tree.match_prefix(req.seq, None, split=False)[0] - self._m + 1)
            self._commits += 1
            self._tree.insert(req.seq, now_us)
            self._lines.commit(lay, off, self._hasher(req))
            self._num_tokens += req.num_tokens
            self.stats.extra["indexed_windows"] = len(self._lines)
            return
        memo = self._memo
        if memo is not None and memo[0] is req and memo[1] == self._commits:   # nothing added since lookup
            w, hit, off = memo[2], memo[3], memo[4]
        else:
            off = max(0, self._tree.match_prefix(req.seq, None, split=False)[0] - self._m + 1)
            w = self._windows(req, off)
            hit = self._index.lookup(w)[0]
        self._commits += 1
        self._tree.insert(req.seq, now_us)
        new = np.flatnonzero(~hit)
        self._index.add(w[new], new + off)
        if self.ctx.verify:
            self._origin.add(w[new], np.full(new.shape[0], len(self._prompts), np.int64))
            self._prompts.append(req.tokens)
        self._num_tokens += req.num_tokens
        self.stats.extra["indexed_windows"] = len(self._index)

    def release(self, req: RequestView, now_us: int) -> None:
        pass

    def evict(self, num_bytes: int, now_us: int) -> int:
        return 0

    def usage(self) -> Usage:
        return Usage(0, 0, 0, self.ctx.capacity_bytes)

    def holds(self, req: RequestView) -> bool | None:
        return True                               # nothing is ever evicted

    def footprint(self) -> Footprint:
        """Registry entries = indexed windows; it stores no KV (no runs)."""
        if self._told is not None:
            told = self._told
            return Footprint(told.windows[told.done - 1] if told.done else 0, [])
        return Footprint(len(self._lines) if self._lines is not None else len(self._index), [])

    @staticmethod
    def told(trace, work, reuse: np.ndarray, m: int, config) -> Told | bool:
        """What this policy answers from in a replay of ``config`` over ``work`` (the first requests of ``trace`` in
        arrival order), whose trace-level oracle (``min_match`` ``m``) gave ``reuse``, instead of its index
        (:meth:`tell`); False where that is not known (:func:`answers_apply`, :func:`trace_answers`)."""
        got = trace_answers(trace, work, reuse, m) if answers_apply(config) else None
        return False if got is None else Told(work.request_ids, *got)

    def tell(self, told: Told, done: bool = False) -> None:
        """Answer from :meth:`told`'s answers (:func:`answer_from_trace`); ``done``: every request looked up and
        committed (the stats and windows a replay of them leaves: :attr:`Told.twin`)."""
        answer_from_trace(self, told.ids, told.pfx, told.windows)
        if done:
            t, n = self._told, len(told.ids)
            t.next = t.done = n
            self.stats.lookups += n
            self.stats.hits += int(np.count_nonzero(told.pfx))
            if n:
                self.stats.extra["indexed_windows"] = t.windows[n - 1]

    # ---- Internal helpers -------------------------------------------------------------------------
    def _answer(self, req: RequestView, now_us: int) -> int:
        """The lookup's reuse told by the trace-level oracle (:func:`answer_from_trace`): the request's exact
        prefix (its plan ``Plan.from_prefix``), admitted (``start_prefix``: the serving model's exact-prefix path)."""
        told = self._told
        k = told.next
        if k >= len(told.ids) or told.ids[k] != req.request_id or told.pending >= 0:
            raise RuntimeError(f"oracle: request {req.request_id} looked up out of the order of the answers from "
                               "the trace-level oracle")
        told.next, told.pending = k + 1, k
        self.stats.lookups += 1
        r = told.pfx[k]
        if r:
            self.stats.hits += 1
        return r

    def _layout(self, req: RequestView):
        """The prompt's named windows (:class:`engine.oracle_lines.Layout`), or None: all windows hashed. The
        first request decides: named when the prompts come from one store of opaque segments,
        ``min_match >= _NAMED_MIN`` and ``--verify`` is off (it compares hashed windows' tokens); a later prompt from elsewhere moves the
        named windows into the hashed index (:meth:`LineIndex.to_hashed`) for good."""
        if self._mode == "hashed":
            return None
        src, rows = req.source, req.segment_rows
        if self._mode is None:
            lines = _lines_of(src) if (_NAMED and src is not None and rows is not None and not self.ctx.verify
                                       and self._m >= _NAMED_MIN) else None
            self._mode = "lines" if lines is not None else "hashed"
            if lines is None:
                return None
            # NOTE (speed): the content to index announced up front (its distinct tokens, as a chunking policy
            # does): a large trace loads the kernels now, not after AUTO_TOKENS tokens of the numpy form
            accel.kernels(int(src.offsets[-1]), "oracle")
            self._lines = LineIndex(lines, self._m)
        if src is not self._lines.lines.store or rows is None:
            self._index, self._lines, self._mode, self._memo = self._lines.to_hashed(), None, "hashed", None
            return None
        memo = self._lay
        if memo is not None and memo[0] is req:
            return memo[3]
        return Layout(self._lines.lines, rows, req.segment_bounds, self._m)

    def _hasher(self, req: RequestView) -> PromptHashes:
        """The request's :class:`engine.oracle_lines.PromptHashes` (one per request: lookup and commit share it)."""
        memo = self._hash_memo
        if memo is None or memo.req is not req:
            memo = self._hash_memo = PromptHashes(req, self._m)
        return memo

    def _prefix_hashes(self, req: RequestView) -> np.ndarray:
        """uint64 [N + 1]: :func:`engine.rolling.prefix_hashes` of the prompt (see :meth:`_windows`)."""
        src, rows = req.source, req.segment_rows
        fast = accel.kernels(req.num_tokens, "fixed") if src is not None and rows is not None else None
        if fast is None:
            return prefix_hashes(req.tokens)
        return fast.segment_prefix_hashes(src.tokens, *src.pieces(rows), _OPAQUE_MASK)

    def _windows(self, req: RequestView, off: int) -> np.ndarray:
        """uint64: the ``min_match``-token window hashes of the prompt from position ``off`` on
        (:func:`engine.rolling.window_hashes` of ``tokens[off:]``).

        NOTE (speed): with the compiled kernels, from the prefix hashes of the whole prompt made from its
        segments (stored tokens read in place, opaque ones derived: the tokens are never gathered) and
        windows ``h[i + m] - h[i] * B^m``, the same values: window hashes do not depend on where the hashing
        starts."""
        src, rows, m = req.source, req.segment_rows, self._m
        fast = accel.kernels(req.num_tokens, "fixed") if src is not None and rows is not None else None
        if fast is None:
            return window_hashes(req.tokens[off:], m)
        return prefix_windows(self._prefix_hashes(req), m, off)

    def _verified(self, toks: np.ndarray, w: np.ndarray, first: int, last: int, delta: int, off: int) -> bool:
        """Compare the chain of windows ``first..last`` (stride ``min_match``, plus the last) with the
        committed prompt each window was first seen in, at its position minus ``delta`` (``w[k - off]``
        hashes the window at ``k``)."""
        m = self._m
        ks = np.unique(np.r_[np.arange(first, last + 1, m), last])
        found, origin = self._origin.lookup(w[ks - off])
        self.stats.verified_hits += 1
        for k, f, o in zip(ks.tolist(), found.tolist(), origin.tolist(), strict=True):
            s = k - delta
            if not f or not np.array_equal(self._prompts[o][s:s + m], toks[k:k + m]):
                self.stats.collisions += 1
                return False
        return True


#: name windows from the segment structure where the prompts allow it (tests turn it off: the reference)
_NAMED = True
# NOTE: windows of fewer tokens may repeat elsewhere by chance (one pseudo-random opaque token of 2^17 matches
# another 1 time in 2^17): below this width every window is hashed. At 8, two given windows match with
# probability 2^-136 (10^8 windows: ~10^-25 for the whole index)
_NAMED_MIN = 8
_LINES_MEMO: list = []          # [(store, Lines)]: the last store's (each replica's policy shares it)
_GROUPS_MEMO: list = []         # [(store, line_groups(store))]: the last store's (trace_answers)


def _lines_of(store) -> Lines | None:
    """:class:`engine.oracle_lines.Lines` of ``store`` (made once per store), or None where nothing is named."""
    if not _LINES_MEMO or _LINES_MEMO[0][0] is not store:
        _LINES_MEMO[:] = [(store, Lines(store))]
    lines = _LINES_MEMO[0][1]
    return lines if lines.ok else None


class Told:
    """:meth:`OracleCache.told`'s answers: per workload request (its order) its id, exact prefix ``pfx`` and the
    windows indexed once it is committed (``windows``, cumulative); ``twin``: a simulation of the same workload
    whose plans were these (:meth:`see`), else None."""

    __slots__ = ("ids", "pfx", "windows", "twin")

    def __init__(self, ids: np.ndarray, pfx: np.ndarray, windows: np.ndarray) -> None:
        self.ids, self.pfx, self.windows, self.twin = ids, pfx, windows, None

    def see(self, sim) -> None:
        """Keep ``sim`` (an exact-prefix policy's simulation of this workload, ``engine.replay._Sim``: its rows and
        ``reuse`` per workload request) as :attr:`twin` where its plans were ``Plan.from_prefix(N, pfx)``: its reuse
        ``pfx``, every request admitted, nothing evicted. The serving model reads a policy only through its plans,
        admissions and evictions (and its resident bytes, for the peak), so the oracle's simulation would be
        the same: its rows, events and timeline are that one's."""
        rows = sim.rows
        if (sim.reuse is not None and np.array_equal(sim.reuse, self.pfx) and not rows["evictions"].any()
                and not rows["uncached"].any()):
            self.twin = sim


class _Told:
    """The plans of one replay told by the trace-level oracle (:func:`answer_from_trace`): per request in the
    workload's order its id, exact prefix ``pfx`` and the windows indexed once it is committed (``windows``,
    cumulative); ``next``: the next to look up; ``pending``: the one looked up, not yet committed (-1: none);
    ``done``: requests committed."""

    __slots__ = ("ids", "pfx", "windows", "next", "pending", "done")

    def __init__(self, ids: array, pfx: array, windows: array) -> None:
        self.ids, self.pfx, self.windows = ids, pfx, windows
        self.next, self.pending, self.done = 0, -1, 0


def answers_apply(config) -> bool:
    """Whether, in a replay of ``config`` (an ``engine.config.ReplayConfig``), each ``oracle`` lookup sees every
    earlier request committed and nothing else (:func:`trace_answers`): one replica, open loop (prefills one at
    a time in arrival order, each committed before the next lookup), nothing watching it (``--verify``,
    ``--check-invariants``: ``block_radix.in_arrival_order``). Its capacity does not matter: it never evicts nor
    refuses."""
    return in_arrival_order(config)


def trace_answers(trace, work, reuse: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(pfx, windows)``: the ``oracle`` policy's answers in a replay of ``work`` (the first requests of ``trace``
    in arrival order, replayed as :func:`answers_apply` says) whose trace-level oracle (``min_match`` ``m``) gave
    ``reuse``, where they are known without its index: else None.

    A lookup finds the longest prefix shared with a committed prompt (``pfx``: engine.coverage.prompt_prefixes)
    and the windows seen in one; the trace-level oracle counts the same of every earlier request. Where it
    counts the prefix alone (``reuse == pfx`` for every request: Azure and Mooncake conversation), no window
    from ``pfx - m + 1`` on was seen earlier (it would cover a token past the prefix), so every plan is
    ``Plan.from_prefix(N, pfx)`` and a commit adds that window range's distinct windows (the earlier ones lie
    in the prefix, held). On opaque content (the policy's named windows: ``_NAMED_MIN`` or more tokens, every
    row opaque) two windows are equal only where their tokens sit at the same line positions
    (engine.oracle_lines), so a prompt's windows are distinct unless two of its pieces lie in one group of
    stretches; such prompts' windows are hashed and counted (as the policy's index does). ``windows``:
    cumulative, per request."""
    if not _NAMED or m < _NAMED_MIN:
        return None
    store = trace.segments
    if not _GROUPS_MEMO or _GROUPS_MEMO[0][0] is not store:
        _GROUPS_MEMO[:] = [(store, line_groups(store))]
    group = _GROUPS_MEMO[0][1]
    if group is None:
        return None
    from pic.engine.rolling import window_hashes

    order = np.lexsort((trace.column("request_id"), trace.column("arrival_us")))[:work.num_requests]
    got = _proven(trace, order, reuse, m)
    if got is None:
        return None
    pfx, rows, item_offs = got
    L = np.diff(store.offsets)[rows]
    cnt = np.diff(item_offs)
    cum = np.zeros(L.shape[0] + 1, np.int64)
    np.cumsum(L, out=cum[1:])
    num = cum[item_offs[1:]] - cum[item_offs[:-1]]
    if not np.array_equal(num, np.asarray(work.num_prompt, np.int64)):
        return None
    off = np.maximum(pfx - (m - 1), 0)
    win = np.maximum(num - (m - 1) - off, 0)
    # prompts with two pieces in one group past ``off`` (their windows there may repeat within the prompt)
    item = np.repeat(np.arange(cnt.shape[0], dtype=np.int64), cnt)
    live = np.flatnonzero((L > 0) & (cum[1:] - cum[item_offs[:-1]][item] > off[item]))
    G = int(group.max(initial=0)) + 1
    key = item[live] * G + group[rows[live]]
    key.sort()
    twice = np.unique(key[1:][key[1:] == key[:-1]] // G)
    for k in twice[win[twice] > 0].tolist():
        win[k] = np.unique(window_hashes(work.view(k).tokens[int(off[k]):], m)).shape[0]
    return pfx, np.cumsum(win)

def proven_prefixes(trace, work, reuse: np.ndarray, m: int) -> tuple[np.ndarray, int] | None:
    """``(pfx, w)``: every workload request's longest prefix shared with an earlier one (``work``: the first requests
    of ``trace`` in arrival order) where the trace-level oracle (``min_match`` ``m``) gave ``reuse`` equal to it, and
    the smallest ``w`` for which that proves that no request holds a run of ``w`` tokens past its prefix equal to one
    of an earlier request (``m``; ``coverage.UNMET_MIN`` where every token past the prefixes is met there first:
    ``coverage.unmet_past_prefix``); else None."""
    from pic.engine.coverage import UNMET_MIN, unmet_past_prefix

    order = np.lexsort((trace.column("request_id"), trace.column("arrival_us")))[:work.num_requests]
    got = _proven(trace, order, reuse, m)
    if got is None:
        return None
    # (the oracle's own structural test where its result came from a cache: the memo or PIC_CACHE_DIR)
    return got[0], min(m, UNMET_MIN) if m >= UNMET_MIN and unmet_past_prefix(trace, order, got) else m


def _proven(trace, order: np.ndarray, reuse: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(pfx, rows, item_offs)`` (engine.coverage.prompt_prefixes) of the requests ``order`` where ``pfx`` is
    ``reuse``, else None."""
    from pic.engine import coverage

    pfx = _oracle_prefixes(trace, order)
    if pfx is None:
        got = coverage.prompt_prefixes(trace, order, reuse, m)
        return got if np.array_equal(got[0], reuse) else None
    return (pfx, *coverage._order_rows(trace, order)) if np.array_equal(pfx, reuse) else None


def _oracle_prefixes(trace, order: np.ndarray) -> np.ndarray | None:
    """The prefixes of the requests ``order`` of ``trace`` that its last trace-level oracle (``coverage.prompt_oracle``
    of that order) found (``coverage.resident_prefixes`` of the same rows: the values ``prompt_prefixes`` gives), else
    None. NOTE (speed, memory): not made again for the proof (chat 10^5: 0.25 CPU s, +53 MB of RSS; chat 10^6: its
    structure pass was most of the ~4.9 CPU s and the +0.8 GB high point before irminsul's simulation)."""
    from pic.engine.coverage import kept_points

    got = kept_points(trace, order)
    return None if got is None else got[1]


def answer_from_trace(cache: OracleCache, request_ids: np.ndarray, pfx: np.ndarray, windows: np.ndarray) -> None:
    """Make ``cache`` (a fresh, unverified ``oracle`` policy) answer from :func:`trace_answers`' ``(pfx,
    windows)`` instead of its index: its lookups are exact-prefix plans (``start_prefix``: the serving model's
    exact-prefix path, no Plan made) in the workload's order; a request out of that order raises."""
    if cache.stats.lookups or cache._commits or cache.ctx.verify:
        raise ValueError("oracle: only a fresh unverified cache answers from the trace-level oracle")
    cache._told = _Told(_int64s(request_ids), _int64s(pfx), _int64s(windows))
    cache.start_prefix = cache._answer


def _int64s(a: np.ndarray) -> array:
    """``a`` as an ``array('q')`` (its items read as Python ints)."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(a, np.int64).tobytes())
    return out


def _cover(hit: np.ndarray, src: np.ndarray, m: int, start: int = 0,
           off: int = 0) -> list[tuple[int, int, int, int, int]]:
    """``[(start, end, delta, first, last)]``: the positions from ``start`` on covered by hit windows (window
    ``j`` of ``hit``/``src`` starts at ``off + j``), split into runs of one delta (target - source) taken
    greedily from the chain of consecutive equal-delta windows reaching farthest; ``first``/``last``: that
    chain's first and last window (absolute positions)."""
    idx = np.flatnonzero(hit)
    return _cover_at(idx, src[idx], m, start, off)


def _cover_at(idx: np.ndarray, src: np.ndarray, m: int, start: int = 0,
              off: int = 0) -> list[tuple[int, int, int, int, int]]:
    """:func:`_cover` of the hit windows ``idx`` (ascending) with their sources ``src``."""
    if not idx.shape[0]:
        return []
    delta = idx + off - src
    idx = idx + off
    brk = np.flatnonzero((np.diff(idx) != 1) | (np.diff(delta) != 0)) + 1
    firsts = idx[np.r_[0, brk]].tolist()
    lasts = idx[np.r_[brk - 1, idx.shape[0] - 1]].tolist()
    deltas = delta[np.r_[0, brk]].tolist()
    out: list[tuple[int, int, int, int, int]] = []
    pos, i, n = start, 0, len(firsts)
    while i < n:
        if lasts[i] + m <= pos:
            i += 1
            continue
        pos = max(pos, firsts[i])
        best, j = i, i + 1
        while j < n and firsts[j] <= pos:
            if lasts[j] > lasts[best]:
                best = j
            j += 1
        end = lasts[best] + m
        out.append((pos, end, deltas[best], firsts[best], lasts[best]))
        pos, i = end, j
    return out


__all__ = ["OracleCache", "OracleConfig", "Told", "answer_from_trace", "answers_apply", "trace_answers"]
