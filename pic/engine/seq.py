"""Token sequences by reference: a prompt as its trace segments, compared without materializing tokens.

A :class:`Seq` is a prompt ``[0, end)`` described by the trace segments it concatenates (``rows`` into a
:class:`~pic.traces.content.Segments`, ``bounds`` their prompt offsets) or by one private token array.
:meth:`Seq.sub` gives a run of a prompt as a Seq of its own over the same segments (no token copy);
:func:`lcp_rev` compares two runs read backwards (a tail trie's edges) without reversing them.
:func:`lcp` compares two sequences piece by piece: a piece of the same segment at the same offset on both
sides is equal without looking at a token, so an exact-prefix walk over prompts that share segments costs
O(segments), and tokens are read (or, for opaque segments, derived) only where two different segments
meet. The radix tree (:mod:`engine.radix`) stores edges as ``(Seq, offset, length)`` references: no
token is ever copied into the tree.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right

import numpy as np

_M64 = (1 << 64) - 1
_GOLD, _M1, _M2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_PRIVATE = -1       # piece id of a Seq's own token array
_PROBE = 32         # tokens compared first where two different pieces meet
_I32 = 1 << 31


class Seq:
    """Prompt ``[0, end)`` as pieces: ``rows[i]`` (a segment row of ``store``, or -1 = ``arr``) covers
    ``[bounds[i], bounds[i+1])``. Build with :meth:`of_array` or :meth:`of_segments`.

    ``bounds`` are where each segment would start and end: a piece may begin before 0 or end after ``end``
    (a run cut from a prompt, :meth:`sub`), so that the same segment at the same offset reads as such in any
    Seq."""

    __slots__ = ("rows", "bounds", "store", "arr", "end")

    def __init__(self, rows, bounds, store, arr, end: int) -> None:
        self.rows, self.bounds, self.store, self.arr, self.end = rows, bounds, store, arr, end

    @staticmethod
    def of_array(tokens: np.ndarray) -> Seq:
        n = int(tokens.shape[0])
        return Seq((_PRIVATE,), (0, n), None, tokens, n)

    @staticmethod
    def of_segments(store, rows: np.ndarray, bounds: np.ndarray) -> Seq:
        """``rows`` int [k] segment rows of ``store`` (a Segments), ``bounds`` int [k+1] prompt offsets.

        NOTE (memory): a radix tree keeps the Seq of every prompt that added an edge (chat 10^6: ~10^6,
        ~10 pieces each); both arrays are int32 where the values fit, made at their exact size: 212 B
        instead of ~330 B of int64 arrays per prompt."""
        end = int(bounds[-1]) if bounds.shape[0] else 0
        wide = end >= _I32 or len(store) >= _I32
        code = "q" if wide else "i"
        return Seq(array(code, rows.tolist()), array(code, bounds.tolist()), store, None, end)

    @staticmethod
    def of_segment(store, row: int, n: int) -> Seq:
        """:meth:`of_segments` of one segment row ``row`` of ``n`` tokens (the same Seq)."""
        code = "q" if n >= _I32 or len(store) >= _I32 else "i"
        return Seq(array(code, (row,)), array(code, (0, n)), store, None, n)

    def prefix(self, n: int) -> Seq:
        """The first ``n`` tokens (shares the pieces)."""
        return Seq(self.rows, self.bounds, self.store, self.arr, min(n, self.end))

    def sub(self, lo: int, hi: int) -> Seq:
        """Tokens ``[lo, hi)`` as a Seq of their own, over the same pieces (no token copied)."""
        if self.arr is not None:
            return Seq.of_array(self.arr[lo:hi])
        b = self.bounds
        i, j = bisect_right(b, lo) - 1, bisect_left(b, hi)
        if hi <= lo or i < 0:
            return Seq.of_array(np.zeros(0, np.int32))
        return Seq(self.rows[i:j], array(b.typecode, [x - lo for x in b[i:j + 1]]), self.store, None, hi - lo)

    def tokens(self, lo: int, hi: int) -> np.ndarray:
        """int32 tokens ``[lo, hi)`` (a view when they lie in one stored piece)."""
        if self.arr is not None:
            return self.arr[lo:hi]
        if lo >= hi:
            return np.zeros(0, np.int32)
        b = self.bounds
        i = bisect_right(b, lo) - 1
        parts = []
        while lo < hi:
            e = min(hi, b[i + 1])
            parts.append(_piece(self, i, lo - b[i], e - b[i]))
            lo, i = e, i + 1
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def token(self, pos: int) -> int:
        if self.arr is not None:
            return int(self.arr[pos])
        b = self.bounds
        i = bisect_right(b, pos) - 1
        r = self.rows[i]
        if pos == b[i]:
            store = self.store
            last = _LAST_FIRST
            return (last[1] if last[0] is store else first_tokens(store))[r]
        return token_at(self.store, r, pos - b[i])


def first_tokens(store) -> array:
    """Every segment's first token, as a list (made once per Segments, vectorized).

    NOTE (speed): the last store's answer first, without the cache's look-up (every radix walk over a prompt of
    segments asks it, most often for the store it asked last)."""
    last = _LAST_FIRST
    if last[0] is store:
        return last[1]
    got = _FIRST.get(id(store))
    if got is None or got[0] is not store:
        n = len(store)
        first = store.tokens_at(np.arange(n), np.zeros(n, np.int64))
        got = _FIRST[id(store)] = (store, array("q", first.tobytes()))   # (8 B per row, not a list of ints)
        if len(_FIRST) > 8:
            del _FIRST[next(iter(_FIRST))]
    _LAST_FIRST[0], _LAST_FIRST[1] = got     # NOTE (speed): Seq.token's child keys read the last store's first
    return got[1]


_FIRST: dict[int, tuple[object, array]] = {}
_LAST_FIRST: list = [None, None]     # the (store, first tokens) first_tokens last gave (a walk's store)


def token_at(store, row: int, j: int) -> int:
    """Token ``j`` of segment ``row`` of ``store`` (derived for an opaque segment, no array made)."""
    if store.token_offsets is not None:
        # NOTE (speed): a store with opaque segments keeps each row's seed (0: stored) in an array made once
        # (irminsul's chunk tries ask ~2 M child keys on Mooncake under a capacity limit: no numpy scalar read)
        got = _BASES.get(id(store))
        if got is None or got[0] is not store:
            got = _opaque_bases(store)
        if got[1][row]:
            z = (got[2][row] + j * _GOLD) & _M64
            z ^= z >> 30
            z = (z * _M1) & _M64
            z ^= z >> 27
            z = (z * _M2) & _M64
            z ^= z >> 31
            return z & 0x1FFFF
        return int(store.tokens[int(store.token_offsets[row]) + j])
    return int(store.tokens[int(store.offsets[row]) + j])      # (no token_offsets: every segment is stored)


def _opaque_bases(store) -> tuple[object, bytes, array]:
    """``(store, opaque, bases)``: per row whether it is opaque (1) and its base ``mix(key ^ salt)`` (:func:`traces.content.opaque_bases`; 9 B per row,
    vectorized; the last 8 stores' kept)."""
    from pic.traces.content import opaque_bases
    t = store.token_offsets
    opq = t[1:] <= t[:-1]
    bases = np.zeros(opq.shape[0], np.uint64)
    bases[opq] = opaque_bases(store.keys[opq], store.salts[opq])
    got = _BASES[id(store)] = (store, opq.astype(np.uint8).tobytes(), array("Q", bases.tobytes()))
    if len(_BASES) > 8:
        del _BASES[next(iter(_BASES))]
    return got


_BASES: dict[int, tuple[object, bytes, array]] = {}


def lcp(A: Seq, a: int, B: Seq, b: int, m: int) -> int:
    """Length of the common prefix of ``A[a:a+m]`` and ``B[b:b+m]`` (at most ``m``)."""
    if A is B and a == b:
        return m
    ba, bb = A.bounds, B.bounds
    i = bisect_right(ba, a) - 1
    j = bisect_right(bb, b) - 1
    if a == b and ba[i] == bb[j] and A.arr is None and B.arr is None:
        # NOTE (speed): pieces of equal rows and equal bounds (the same segment at the same offset, both
        # prompts in the same coordinates: a radix tree's edges and queries) are equal without a look; the
        # leading run of such pieces is found with slice comparisons (C loops), not piece by piece. An edge
        # its query continues (most of an exact-prefix walk: a conversation's earlier turns) is one check.
        k = bisect_left(ba, a + m, i) - i          # pieces i .. i+k-1 of A hold [a, a+m)
        if A.rows[i:i + k] == B.rows[j:j + k] and ba[i:i + k + 1] == bb[j:j + k + 1]:
            return m
        return lcp_aligned(A, i, B, j, a, m, k)
    return _lcp_pieces(A, i, a, B, j, b, m, 0)


def lcp_at(A: Seq, a: int, B: Seq, j: int, b: int, m: int) -> int:
    """:func:`lcp` ``(A, a, B, b, m)`` for a radix walk over a prompt of segments ``B`` whose piece ``j`` holds
    ``b`` (the walk found it for its child key). NOTE (speed): lcp's first check with B's piece known: an edge at
    the query's own position whose pieces' rows are the query's from the same start is equal without a look
    (their bounds too: a piece's bounds span its segment); :func:`lcp_aligned` only where that check fails."""
    if a == b and A.arr is None and A.store is B.store:
        ba = A.bounds
        i = bisect_right(ba, a) - 1
        if ba[i] == B.bounds[j]:
            k = bisect_left(ba, a + m, i) - i
            return m if A.rows[i:i + k] == B.rows[j:j + k] else lcp_aligned(A, i, B, j, a, m, k)
    return lcp(A, a, B, b, m)


def lcp_aligned(A: Seq, i: int, B: Seq, j: int, a: int, m: int, k: int) -> int:
    """:func:`lcp` ``(A, a, B, a, m)`` where piece ``i`` of A and piece ``j`` of B (both of segments) hold
    ``a`` and start at the same offset, the ``k`` pieces of A from ``i`` hold ``[a, a + m)``, and they are
    not all equal to B's (rows and bounds): the first check :func:`lcp` makes, made by its caller (a radix
    walk)."""
    ra, ba, rb, bb = A.rows, A.bounds, B.rows, B.bounds
    lo, hi = 0, k          # the run's length t: the first lo pieces are such pieces, not all hi are
    if k > 2:              # (most often all but the last: the query goes on with another segment)
        if ra[i:i + k - 1] == rb[j:j + k - 1] and ba[i:i + k] == bb[j:j + k]:
            lo = k - 1
        else:
            hi = k - 1
    while hi - lo > 1:
        t = (lo + hi) >> 1
        if ra[i:i + t] == rb[j:j + t] and ba[i:i + t + 1] == bb[j:j + t + 1]:
            lo = t
        else:
            hi = t
    if not lo:
        return _lcp_pieces(A, i, a, B, j, a, m, 0)
    done = ba[i + lo] - a
    return _lcp_pieces(A, i + lo, a + done, B, j + lo, a + done, m, done)


def _lcp_pieces(A: Seq, i: int, a: int, B: Seq, j: int, b: int, m: int, done: int) -> int:
    """:func:`lcp` piece by piece from piece ``i`` of A (holding ``a``) and ``j`` of B (holding ``b``),
    ``done`` of ``m`` tokens already equal."""
    ra, ba, rb, bb = A.rows, A.bounds, B.rows, B.bounds
    while done < m:
        ea, eb = ba[i + 1], bb[j + 1]
        x = ra[i]
        step = m - done
        if x == rb[j] and x != _PRIVATE and a - ba[i] == b - bb[j]:
            if ea - a < step:                 # the same segment at the same offset (same direction): equal
                step = ea - a
        else:
            if ea - a < step:
                step = ea - a
            if eb - b < step:
                step = eb - b
            c = _compare(A, i, a - ba[i], B, j, b - bb[j], step)
            if c < step:
                return done + c
        done += step
        a += step
        b += step
        if a == ea:
            i += 1
        if b == eb:
            j += 1
    return m


def lcp_rev(A: Seq, a: int, B: Seq, b: int, m: int) -> int:
    """Length of the common prefix of ``A[a-m:a]`` and ``B[b-m:b]`` both read backwards (``A[a-1]``, ``A[a-2]``,
    ... against ``B[b-1]``, ...; at most ``m``, ``m <= a, b``): :func:`lcp` of the reversed runs without making them
    (a tail trie whose edges are runs of forward prompts, :class:`~engine.flat_trie.FlatTrie` ``rev``).

    Pieces of the same segment at the same offset are equal without a look, as in :func:`lcp`; where both sides
    hold ``[a - m, a)`` in the same coordinates (``a == b``: two prompts of a conversation) with the same rows
    from the same starts, it is one check."""
    if A is B and a == b:
        return m
    ba, bb = A.bounds, B.bounds
    i = bisect_right(ba, a - 1) - 1            # the pieces holding a - 1 and b - 1
    j = bisect_right(bb, b - 1) - 1
    ra, rb = A.rows, B.rows
    if a == b and A.arr is None and B.arr is None and A.store is B.store:
        i0 = bisect_right(ba, a - m) - 1
        j0 = bisect_right(bb, a - m) - 1
        if ra[i0:i + 1] == rb[j0:j + 1] and ba[i0:i + 1] == bb[j0:j + 1]:
            return m
    done = 0
    while done < m:
        while ba[i] >= a:                      # (an empty piece)
            i -= 1
        while bb[j] >= b:
            j -= 1
        sa, sb = ba[i], bb[j]
        x = ra[i]
        step = m - done
        if a - sa < step:
            step = a - sa
        if not (x == rb[j] and x != _PRIVATE and a - sa == b - sb):
            if b - sb < step:                  # (else the same segment at the same offset: equal)
                step = b - sb
            c = _compare_rev(A, i, a - sa, B, j, b - sb, step)
            if c < step:
                return done + c
        done += step
        a -= step
        b -= step
    return m


def _compare_rev(A: Seq, i: int, oa: int, B: Seq, j: int, ob: int, n: int) -> int:
    """First index ``t`` where piece ``i`` of A at local offset ``oa - 1 - t`` and piece ``j`` of B at ``ob - 1 - t``
    differ (``t < n``), or ``n``: :func:`_compare` reading both backwards."""
    if _first(A, i, oa - 1) != _first(B, j, ob - 1):
        return 0
    if n == 1 or _first(A, i, oa - 2) != _first(B, j, ob - 2):
        return 1
    done = 0
    step = min(_PROBE, n)
    while done < n:
        ta = _piece(A, i, oa - done - step, oa - done)[::-1]
        tb = _piece(B, j, ob - done - step, ob - done)[::-1]
        neq = ta != tb
        k = int(neq.argmax())
        if neq[k]:
            return done + k
        done += step
        step = min(n - done, 4 * step)
    return n


def _compare(A: Seq, i: int, oa: int, B: Seq, j: int, ob: int, n: int) -> int:
    """First index where piece ``i`` of A (from ``oa``) and piece ``j`` of B (from ``ob``) differ, or ``n``."""
    if _first(A, i, oa) != _first(B, j, ob):
        return 0
    # NOTE (speed): the radix tree compares only pieces whose first tokens matched (its child key), and
    # most of those differ at the next token: one scalar look each side before deriving any array
    if n == 1 or _first(A, i, oa + 1) != _first(B, j, ob + 1):
        return 1
    done = 0
    step = min(_PROBE, n)
    while done < n:
        ta = _piece(A, i, oa + done, oa + done + step)
        tb = _piece(B, j, ob + done, ob + done + step)
        neq = ta != tb
        k = int(neq.argmax())
        if neq[k]:
            return done + k
        done += step
        step = min(n - done, 4 * step)
    return n


def _first(S: Seq, i: int, o: int) -> int:
    """Token at local offset ``o`` of piece ``i``."""
    if S.arr is not None:
        return int(S.arr[o])
    r = S.rows[i]
    if o == 0:
        store = S.store
        last = _LAST_FIRST
        return (last[1] if last[0] is store else first_tokens(store))[r]
    return token_at(S.store, r, o)


def _piece(S: Seq, i: int, lo: int, hi: int) -> np.ndarray:
    """Tokens at local offsets ``[lo, hi)`` of piece ``i``."""
    if S.arr is not None:
        return S.arr[lo:hi]
    return S.store.segment(S.rows[i], lo, hi)
