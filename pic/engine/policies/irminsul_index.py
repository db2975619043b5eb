"""Indexes of the ``irminsul`` chunk store (:mod:`engine.policies.irminsul_store`) over its ready chunks:

* chunk trie: a radix tree over the ready chunks' tokens (:mod:`engine.flat_trie`, an index only) answering
  "the longest stored chunk whose beginning equals these tokens";
* tail trie (``tails``): the same over their reversed tokens, "the longest stored chunk whose end equals
  these tokens";
* S1 window index ``window fingerprint -> (chunk fingerprint, offset)``: every ready chunk registers its
  start- and end-aligned ``s1_window``-token windows as views into its KV.

Both tries are built lazily from a log of index operations (see :meth:`ChunkIndexes._init_indexes`).
"""

from __future__ import annotations

from array import array
from collections import Counter, _count_elements  # type: ignore[attr-defined]
from collections.abc import Callable, Iterable
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from types import ModuleType

import numpy as np

from pic import accel
from pic.engine import cdc
from pic.engine.flat_trie import FlatTrie
from pic.engine.policies.irminsul_records import NONE as _NONE
from pic.engine.policies.irminsul_records import Chunk, Run
from pic.engine.seq import Seq

_KEYS, _SIZE = attrgetter("keys"), attrgetter("size")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
# NOTE (memory): an unbounded store's prefilters past this many keys (heads and tails) turn compiled key tables
# (ChunkIndexes._compact) whatever their walks' length: a counter keeps ~72 B a key (a dict entry, a 64-bit int), a
# table 16 B a slot, at most 3/4 full (chat 10^5: 434 k keys, 312 -> ~130 B per request). Not reached on chat 10^4
# (43,717 keys at most); the Azure and Mooncake traces count none (told, or tables from their 64th lookup)
_TABLE_KEYS = 1 << 16


class ChunkIndexes:
    """The chunk store's token indexes (mixed into :class:`~engine.policies.irminsul_store.ChunkStore`,
    which holds the registry ``entries`` they name chunks from, and ``s1_window``)."""

    entries: dict[int, Chunk]
    s1_window: int
    chunk_of: Callable[[Chunk | Run, int], Chunk]
    chunks_of: Callable[[Run], list[Chunk]]
    run_paths: Callable[[list], tuple[list, list]]
    lean: bool

    def _init_indexes(self, tails: bool, min_match: int, keep_keys: bool = False) -> None:
        self.windows: dict[int, tuple[int, int]] = {}       # window fp -> (chunk fp, offset)
        # NOTE (speed): a store that evicts unindexes chunks (cut, drop): it keeps each indexed chunk's keys,
        # so that unindexing does not derive its last min_match tokens again (Mooncake conversation at
        # 60 GiB: ~520k unindexes); an unbounded store drops them once indexed (memory)
        self._keep_keys = keep_keys
        # NOTE (memory): flat columns (engine.flat_trie: ~65 B per node, was ~1.5 KB of RadixNodes, children dicts
        # and boxed ints per chat request for both tries); a chunk's end node is an int id
        self.trie = FlatTrie()                              # index of ready chunks' tokens
        self.rtrie = FlatTrie(rev=True) if tails else None  # index of ready chunks' reversed tokens
        # NOTE: the tries are built lazily. Indexing a chunk appends to ``_log``; the log is replayed into the
        # tries (same operations, same order, so the same trees) only when a lookup needs them: a walk whose
        # first (last) ``min_match`` tokens begin (end) some indexed chunk (``_heads``/``_tails``: how many
        # indexed chunks of >= min_match tokens begin / end with each such run), or a hit chunk that another
        # indexed chunk may extend. Without content reuse beyond the exact prefix no trie is ever built.
        self.min_match = min_match
        # keys: cdc.fingerprint of the run (a hash: a collision at worst walks a trie for nothing)
        self._heads: KeyCounts | KeyTable = KeyCounts()
        self._tails: KeyCounts | KeyTable = KeyCounts()
        self._table_at = 0 if keep_keys else _TABLE_KEYS     # (0: no turn to tables for memory)
        self._log: list = []        # index?, chunk, how many of its tokens; flat (no tuple per entry: fewer GC objects)

    # ---- Public API --------------------------------------------------------------------------------------
    def use_tables(self, fast: ModuleType, bits: int = 12) -> None:
        """Keep the prefilters in compiled key tables (``fast``: the kernels of :mod:`pic._accel_numba_irm`; room for
        ``2^(bits - 1)`` keys each before they grow) from now on: same counts, moved; lookups then ask them in one
        call (:meth:`hot`)."""
        self._table_at = 0
        if isinstance(self._heads, KeyTable):
            return
        self._heads = KeyTable(fast, [k for k, n in self._heads.items() for _ in range(n)], bits)
        self._tails = KeyTable(fast, [k for k, n in self._tails.items() for _ in range(n)], bits)

    def hot(self, heads: np.ndarray, tails: np.ndarray, base: int) -> list[int]:
        """``base + i`` for each ``i`` where ``heads[i]`` begins or ``tails[i]`` ends an indexed chunk of at least
        ``min_match`` tokens (the tails asked only with a tail trie), ascending: one compiled call (with the
        counts held back since the last one, read where they are held). The prefilters are key tables
        (:meth:`use_tables`)."""
        h, t = self._heads, self._tails
        hp, tp = h.pending, t.pending
        if hp:
            h.reserve(len(hp))
        if tp:
            t.reserve(len(tp))
        got = h.fast.kt_hot(h.tab, h.shift, t.tab, t.shift, self.rtrie is not None, heads, tails, base, hp, tp).tolist()
        if hp:
            del hp[:]
        if tp:
            del tp[:]
        t.used += got.pop()
        h.used += got.pop()
        return got

    def make_ready(self, chunks: list[Chunk], now_us: int, windows: bool) -> None:
        """The chunks' KV exists: index their tokens in the trie(s) (and their S1 windows when ``windows``),
        in order (:meth:`_index`, inline: one call per request)."""
        m, keep = self.min_match, self._keep_keys
        if self._table_at and len(self._heads) + len(self._tails) > self._table_at:
            self._compact()
        if 0 < len(chunks) < 3 and not windows and not keep:
            # NOTE (speed): a lean store's request of one run of chunks, none made (Azure conversation: most), or of the
            # chunk straddling the reused prefix's end (its keys known, >= min_match tokens) and such a run (Mooncake
            # conversation: most), as _ready_each makes them ready: the keys counted from the chunk and the run's
            # lists, a log entry each
            r = chunks[-1]
            c = chunks[0] if len(chunks) == 2 else None
            if type(r) is Run and not r.short and r.cs is None and (
                    c is None or type(c) is Chunk and c.keys is not None and c.size >= m):
                r.ready = True
                log = self._log
                if c is None:
                    self._heads.update(r.heads)
                    self._tails.update(r.tails)
                else:
                    c.ready = True
                    c.indexed = n = c.size
                    hk, tk = c.keys
                    c.keys = None             # (lean: no head kept, see _flush)
                    hks, tks = [hk], [tk]
                    hks += r.heads
                    tks += r.tails
                    self._heads.update(hks)
                    self._tails.update(tks)
                    log += (True, c, n)
                r.heads = r.tails = None
                log += (True, r, r.size)
                self._log_bounded()
                return
        if not windows and chunks and Run not in map(type, chunks):
            # NOTE (speed): the common case (admit gave every chunk its keys, each has >= min_match tokens) in
            # C-level passes and one loop of three stores per chunk: the same state, log and counts
            keys, sizes = [*map(_KEYS, chunks)], [*map(_SIZE, chunks)]
            if None not in keys and min(sizes) >= m:
                hks, tks = [*map(_FIRST, keys)], [*map(_SECOND, keys)]
                if keep:
                    for c, n, hk in zip(chunks, sizes, hks, strict=True):
                        c.ready = True
                        c.indexed = n
                        c.head = hk
                else:
                    lean = self.lean
                    for c, n, hk in zip(chunks, sizes, hks, strict=True):
                        c.ready = True
                        c.indexed = n
                        if not lean:
                            c.head = hk
                        c.keys = None
                self._heads.update(hks)
                self._tails.update(tks)
                self._log += chain.from_iterable(zip(repeat(True), chunks, sizes))
                self._log_bounded()
                return
        self._ready_each(chunks, windows)

    def _ready_each(self, chunks: list, windows: bool) -> None:
        """:meth:`make_ready` beyond its common case (S1 windows, a chunk without its keys or shorter than
        ``min_match``, runs): a run (:class:`~engine.policies.irminsul_records.Run`) is made ready whole (its keys
        counted from its lists, logged as one entry: :meth:`_flush` indexes its chunks), the other chunks one by
        one, in order. NOTE (speed): the prefilter counts in two C-level passes (Counter.update), the log in one
        extend."""
        m, hks, tks, keep = self.min_match, [], [], self._keep_keys
        for c in chunks:
            if type(c) is Run:
                c.ready = True
                if c.short:
                    hks += [k for k in c.heads if k is not None]
                    tks += [k for k in c.tails if k is not None]
                else:
                    hks += c.heads
                    tks += c.tails
                if c.cs is not None:          # its chunks made so far turn ready as make_ready would
                    for i, d in enumerate(c.cs):
                        if d is not None:
                            d.ready = True
                            d.indexed = d.size
                            if d.size >= m:
                                d.keys = (c.heads[i], c.tails[i]) if keep else None
                            else:
                                d.keys = None
                if not keep:
                    c.heads = c.tails = None
                continue
            c.ready = True
            if windows:
                self._add_windows(c)
            c.indexed = n = c.size
            if n >= m:
                hk, tk = c.keys if c.keys is not None else _keys(c, n, m)
                if not self.lean:
                    c.head = hk
                hks.append(hk)
                tks.append(tk)
                c.keys = (hk, tk) if keep else None
            else:
                c.keys = None
        self._heads.update(hks)
        self._tails.update(tks)
        log = self._log
        if len(chunks) < 4:                   # (a lean store's request: a run, a chunk or two)
            for c in chunks:
                log += (True, c, c.size)
        else:
            log += chain.from_iterable(zip(repeat(True), chunks, map(_SIZE, chunks)))
        self._log_bounded()

    def longest(self, toks: np.ndarray, short: bool = False, head: int | None = None) -> tuple[int, Chunk | None]:
        """Longest leading run of ``toks`` that equals the beginning of a stored chunk (trie walk). Unless
        ``short``, a run under ``min_match`` tokens may be reported as ``(0, None)`` (the walk is skipped
        when no indexed chunk begins with the first ``min_match`` tokens; ``head``: their key, if known)."""
        if not short:
            m = self.min_match
            if toks.shape[0] < m or (cdc.fingerprint(toks[:m]) if head is None else head) not in self._heads:
                return 0, None
        self._flush()
        num, fp = self.trie.longest(Seq.of_array(toks))     # (any live chunk at or below the match shares its tokens)
        return (0, None) if fp is None else (num, self.chunk_of(self.entries[fp], fp))

    def longest_tail(self, toks: np.ndarray, tail: int | None = None) -> tuple[int, Chunk | None]:
        """Longest trailing run of ``toks`` that equals the end of a stored chunk (tail-trie walk over the
        reversed tokens); (0, None) without a tail trie, and for a run under ``min_match`` tokens (the walk
        is skipped when no indexed chunk ends with the last ``min_match`` tokens; ``tail``: their key, if known)."""
        m = self.min_match
        if self.rtrie is None or toks.shape[0] < m or (cdc.fingerprint(toks[-m:]) if tail is None else tail) not in self._tails:
            return 0, None
        self._flush()
        num, fp = self.rtrie.longest(Seq.of_array(toks))     # (a reversed trie: read from the end)
        return (0, None) if fp is None else (num, self.chunk_of(self.entries[fp], fp))

    def extendable(self, c: Chunk) -> bool:
        """Whether another indexed chunk may begin with all of ready chunk ``c``'s tokens (``c``'s end node
        in the chunk trie has children)."""
        m = self.min_match
        if c.size >= m and self._heads.get(c.head if c.head is not None else cdc.fingerprint(c.part(0, m)), 0) < 2:
            return False                      # c is the only indexed chunk beginning with its first m tokens
        self._flush()
        node = c.node if c.node is not None or not self.lean else self.trie.node_of(c.src, c.fp, c.pos, c.pos + c.indexed)
        return node is not None and self.trie.kid[node] >= 0

    def window(self, toks: np.ndarray) -> tuple[Chunk, int] | None:
        """The ready chunk and offset holding the S1 window ``toks`` (by fingerprint), if any."""
        ref = self.windows.get(cdc.fingerprint(toks))
        c = self.entries.get(ref[0]) if ref is not None else None
        if c is None or not c.ready:
            return None
        return c, ref[1]

    # ---- Internal helpers --------------------------------------------------------------------------------
    def _index(self, c: Chunk) -> None:
        """Put a ready chunk's tokens in the trie (and reversed in the tail trie), each end node locked
        and naming it; a path another chunk already names (same tokens) stays that chunk's. Logged now,
        done in :meth:`_flush`."""
        c.indexed = n = c.size
        if n >= self.min_match:
            hk, tk = c.keys if c.keys is not None else _keys(c, n, self.min_match)
            c.head = hk
            self._heads.add(hk)
            self._tails.add(tk)
            c.keys = (hk, tk) if self._keep_keys else None
        else:
            c.keys = None
        self._log += (True, c, n)
        self._log_bounded()

    def _compact(self) -> None:
        """The prefilters as compiled key tables from now on (:meth:`use_tables`, sized for their keys), where the
        kernels are loaded; else they stay counters."""
        fast = accel.kernels(0, "irm")
        self._table_at = 0
        if fast is not None:
            self.use_tables(fast)

    def _log_bounded(self) -> None:
        """Keep the trie log bounded: replay it (:meth:`_flush`) once it outgrows the registry."""
        if len(self._log) > 3 * (2 * len(self.entries) + 4096):
            self._flush()

    def _unindex(self, c: Chunk) -> None:
        n = c.indexed
        if n is None:
            return
        c.indexed = None
        if n >= self.min_match:
            tk = c.keys[1] if c.keys is not None else cdc.fingerprint(c.part(n - self.min_match, n))
            self._heads.remove(c.head)
            self._tails.remove(tk)
        self._log += (False, c, n)

    def _flush(self) -> None:
        """Replay the logged index operations into the tries, in order."""
        log, self._log = self._log, []
        runs = None
        if Run in map(type, log[1::3]):       # a run: each of its chunks (RunChunks.run_paths)
            log, runs = self.run_paths(log)
        trie, rtrie, lean = self.trie, self.rtrie, self.lean
        for i in range(0, len(log), 3):
            add, c, n = log[i], log[i + 1], log[i + 2]
            if add:
                # NOTE (memory): edges refer to the chunk's prompt, by reference: no token copy (was ~4.5 KB per
                # request on chat); the tail trie reads the same prompt backwards (FlatTrie rev: no reversed Seq
                # per request, ~260 B per chat request)
                src, pos = c.src, c.pos
                # NOTE (memory): a lean store's chunks keep neither end node nor head key (ints of ~28-36 B each, ~92 B
                # per chat request): releasing reads them, never while lean (ChunkStore._exact finds them then);
                # extendable, the one reader while lean (~1 call per 1,000 chat requests), walks and hashes
                nd = trie.claim(src, c.fp, pos, pos + n)
                rn = rtrie.claim(src, c.fp, pos, pos + n) if rtrie is not None else None
                if not lean:
                    c.node, c.rnode = nd, rn
                continue
            # NOTE (speed): the trie keeps only locked paths, so what this release unlocked (the node and
            # the ancestors it alone held) is all a full eviction would free: FlatTrie.release prunes that path
            node = c.node
            if node is not None:
                self.trie.release(node, c.fp)
                c.node = None
            node = c.rnode
            if node is not None:
                self.rtrie.release(node, c.fp)
                c.rnode = None
        # NOTE (memory): a lean store's runs keep no end nodes (an int32 array per run was ~90 B per chat request): a
        # chunk made of a run later finds its own by a walk (FlatTrie.node_of; chat 10^4: 4 chunks of 7,146 runs)
        for r, _ in runs or ():
            r.nodes = True

    def _add_windows(self, c: Chunk) -> None:
        w, n, toks = self.s1_window, c.size, c.tokens
        if c.windows is _NONE:
            c.windows = []
        offs = set(range(0, n - w + 1, w)) | set(range(n - w, -1, -w))
        for off in sorted(offs):
            wfp = cdc.fingerprint(toks[off:off + w])
            if wfp not in self.windows:
                self.windows[wfp] = (c.fp, off)
                c.windows.append(wfp)


def _keys(c: Chunk, n: int, m: int) -> tuple[int, int]:
    """Keys (:func:`engine.cdc.fingerprint`) of the first and last ``m`` of chunk ``c``'s first ``n`` tokens
    (``c.head`` once known)."""
    return c.head if c.head is not None else cdc.fingerprint(c.part(0, m)), cdc.fingerprint(c.part(n - m, n))


class KeyCounts(Counter):
    """A multiset of keys (how many indexed chunks begin / end with each key) as a Counter: the prefilters'
    numpy path (:class:`KeyTable` is the compiled one, with the same methods)."""

    def update(self, keys=None, /, **kwds) -> None:   # type: ignore[override]
        # NOTE (speed): a list (make_ready: twice per commit) straight to the C counting loop
        if type(keys) is list and not kwds:
            _count_elements(self, keys)
        else:
            super().update(keys, **kwds)

    def add(self, key: int) -> None:
        self[key] = self.get(key, 0) + 1

    def remove(self, key: int) -> None:
        """Count ``key`` once less (deleted at 0); it must be counted."""
        if self[key] == 1:
            del self[key]
        else:
            self[key] -= 1


class KeyTable:
    """:class:`KeyCounts` as an open-addressing hash table of ``uint64`` keys (``tab``: ``(key, count)`` pairs,
    :mod:`pic._accel_numba_irm`; its kernels are ``fast``): ``in``, :meth:`get`, :meth:`update`, :meth:`add`,
    :meth:`remove`, :meth:`items` as a Counter answers them. Kept at most 3/4 full (grows by doubling).

    NOTE (speed): what :meth:`update` and :meth:`add` count is held back (``pending``, an ``array('Q')``: one
    C-level extend) and counted at the next read, or by the store's next lookup (:meth:`take`): one compiled call
    per lookup, not one per commit."""

    __slots__ = ("fast", "tab", "shift", "used", "pending", "_count")

    def __init__(self, fast: ModuleType, keys: Iterable[int] = (), bits: int = 12) -> None:
        self.fast = fast
        self.tab = np.zeros(2 << bits, np.uint64)
        self.shift = np.uint64(64 - bits)
        self.used = 0
        self._count = fast.kt_count
        self.pending = array("Q", keys)

    def __reduce__(self) -> tuple:
        # (copies and pickles: the kernels by their module's name, the counts as arrays)
        return _key_table, (self.fast.__name__, self.tab, self.shift, self.used, self.pending)

    def __contains__(self, key: int) -> bool:
        if self.pending:
            self.flush()
        return self._count(self.tab, self.shift, key) > 0

    def __len__(self) -> int:
        self.flush()
        return self.used

    def get(self, key: int, default: int = 0) -> int:
        if self.pending:
            self.flush()
        n = self._count(self.tab, self.shift, key)
        return n if n else default

    def update(self, keys: Iterable[int]) -> None:
        """Count each of ``keys`` once more (as ``Counter.update`` of a list)."""
        if type(keys) is list:
            self.pending.fromlist(keys)       # (NOTE (speed): ~2x less than extend's item by item growth)
        else:
            self.pending.extend(keys)

    def add(self, key: int) -> None:
        self.pending.append(key)

    def remove(self, key: int) -> None:
        """Count ``key`` once less (deleted at 0)."""
        self.flush()
        self.used -= self.fast.kt_remove(self.tab, self.shift, np.array([key], np.uint64))

    def flush(self) -> None:
        """Count what is held back."""
        if self.pending:
            keys = self.take()
            self.used += self.fast.kt_add(self.tab, self.shift, keys)

    def take(self) -> np.ndarray:
        """The keys held back (uint64), no longer held: the caller counts them (with room for them made)."""
        keys, self.pending = np.frombuffer(self.pending, np.uint64), array("Q")
        self.reserve(keys.shape[0])
        return keys

    def reserve(self, more: int) -> None:
        """Room for ``more`` new keys at most 3/4 full (rehashed into a table of twice the slots or more)."""
        cap = self.tab.shape[0] >> 1
        if 4 * (self.used + more) <= 3 * cap:
            return
        bits = 64 - int(self.shift) + 1
        while 4 * (self.used + more) > 3 << bits:
            bits += 1
        old, self.tab, self.shift = self.tab, np.zeros(2 << bits, np.uint64), np.uint64(64 - bits)
        self.fast.table_rehash(self.tab, self.shift, old)

    def items(self) -> list[tuple[int, int]]:
        """``(key, count)`` of every counted key (slot order)."""
        self.flush()
        pairs = self.tab.reshape(-1, 2)
        used = pairs[pairs[:, 1] != 0]
        return list(zip(used[:, 0].tolist(), used[:, 1].tolist(), strict=True))


def _key_table(module: str, tab: np.ndarray, shift: np.uint64, used: int, pending: array) -> KeyTable:
    """A :class:`KeyTable` as :meth:`KeyTable.__reduce__` gives it."""
    from importlib import import_module

    t = KeyTable(import_module(module), pending)           # (its own arrays: a copy is one)
    t.tab, t.shift, t.used = tab.copy(), shift, used
    return t
