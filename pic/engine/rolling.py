"""Vectorized polynomial hashes over token arrays (no Python loop per token).

Tokens are first mixed to 64-bit words (splitmix64 finalizer), then hashed as a polynomial in an odd
base ``B`` modulo 2^64: ``H[i] = sum_{j<i} x_j * B^(i-1-j)``. numpy uint64 arithmetic wraps modulo 2^64,
so ``H`` is computed in closed form as ``H[i] = B^i * S[i]`` with ``S = cumsum(x_j * B^-(j+1))`` (``B``
is odd, hence invertible mod 2^64). Then

* ``prefix_hashes(t)[i]`` hashes the whole prefix ``t[:i]`` (a chained block hash is ``H`` at block ends);
* ``window_hashes(t, w)[i]`` hashes ``t[i:i+w]`` for every offset: ``H[i+w] - H[i] * B^w`` — O(1) each.

Equal windows always get equal hashes; distinct ones collide with probability ~2^-64 for non-adversarial
data, and callers that promise "no false hit" verify tokens under ``--verify``.
"""

from __future__ import annotations

import numpy as np

from pic.traces.content import splitmix64

_M64 = (1 << 64) - 1
BASE = 0x9E3779B97F4A7C15 | 1
BASE_INV = pow(BASE, -1, 1 << 64)
_pow = np.ones(1, np.uint64)      # B^i, grown on demand
_ipow = np.ones(1, np.uint64)     # B^-i
_CACHE_MAX = 1 << 20              # power-table entries kept between calls (2 x 8 MiB)


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """B^i and B^-i for i in [0, n] (cached up to ``_CACHE_MAX`` entries, grown geometrically; a longer
    table is made for the call and not kept)."""
    global _pow, _ipow
    if _pow.shape[0] > n:
        return _pow, _ipow
    if n >= _CACHE_MAX:
        return _table(BASE, n + 1), _table(BASE_INV, n + 1)
    m = min(max(n + 1, 2 * _pow.shape[0]), _CACHE_MAX)
    _pow, _ipow = _table(BASE, m), _table(BASE_INV, m)
    return _pow, _ipow


def _table(base: int, m: int) -> np.ndarray:
    return np.cumprod(np.r_[np.uint64(1), np.full(m - 1, base, np.uint64)], dtype=np.uint64)


def mix(tokens: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer of each token id: uint64 [N]."""
    return splitmix64(tokens.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15))


def prefix_hashes(tokens: np.ndarray) -> np.ndarray:
    """uint64 [N+1]: ``out[i]`` hashes ``tokens[:i]`` (``out[0] == 0``)."""
    n = tokens.shape[0]
    out = np.zeros(n + 1, np.uint64)
    # NOTE (memory): in pieces of < _CACHE_MAX tokens, H[o + k] = H[o] * B^k + (hash of the piece's first
    # k tokens), so the power tables stay bounded (a 2^23-token oracle batch grew them to 2 x 2^24
    # entries, 256 MiB kept for the rest of the process); the values are the same modulo 2^64
    step = min(n, _CACHE_MAX - 1)
    pw, ipw = _powers(step)
    for o in range(0, n, max(step, 1)):
        k = min(step, n - o)
        part = pw[1:k + 1] * np.cumsum(mix(tokens[o:o + k]) * ipw[1:k + 1], dtype=np.uint64)
        if o:
            part += out[o] * pw[1:k + 1]
        out[o + 1:o + k + 1] = part
    return out


def window_hashes(tokens: np.ndarray, width: int, h: np.ndarray | None = None) -> np.ndarray:
    """uint64 [max(N - width + 1, 0)]: ``out[i]`` hashes ``tokens[i:i+width]`` (pass ``h`` =
    :func:`prefix_hashes` of ``tokens`` to reuse it)."""
    if tokens.shape[0] < width:
        return np.zeros(0, np.uint64)
    return prefix_windows(prefix_hashes(tokens) if h is None else h, width)


def prefix_windows(h: np.ndarray, width: int, start: int = 0) -> np.ndarray:
    """uint64: the hashes of the ``width``-token windows starting at ``start`` and later, from the prefix hashes
    ``h`` (:func:`prefix_hashes`, ``N + 1`` values): window ``i`` is ``h[i + width] - h[i] * B^width``, the
    same value wherever the hashing started (empty when no window starts at ``start`` or later)."""
    n = h.shape[0] - width              # windows in all: N - width + 1
    if n <= start:
        return np.zeros(0, np.uint64)
    pw, _ = _powers(width)
    return h[start + width:] - h[start:n] * pw[width]


def ramp(lens: np.ndarray) -> np.ndarray:
    """int64: ``0 .. len - 1`` for each length, concatenated."""
    lens = np.asarray(lens, np.int64)
    return np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)


def sorted_unique(x: np.ndarray, kind: str = "quicksort") -> np.ndarray:
    """``np.unique`` by sort + mask (numpy 2's hash-based unique costs ~0.1 ms a call even on a few thousand
    values, and is ~5x slower on large key arrays)."""
    s = np.sort(x, kind=kind)
    keep = np.ones(s.shape[0], bool)
    keep[1:] = s[1:] != s[:-1]
    return s[keep]


def unique_inverse(x: np.ndarray, first: bool = False) -> tuple[np.ndarray, ...]:
    """``np.unique(x, return_inverse=True)`` (inverse int64: each entry's rank among the distinct values) by one
    sort, numpy 2's hash-based unique being the slower path; with ``first``, also the index of each distinct
    value's first entry (then a stable sort; without, the default one: the ranks do not depend on how ties are
    ordered, and numpy's stable argsort of int64 keys costs ~5x)."""
    order = np.argsort(x, kind="stable" if first else None)
    s = x[order]
    head = np.ones(s.shape[0], bool)
    head[1:] = s[1:] != s[:-1]
    inv = np.empty(s.shape[0], np.int64)
    inv[order] = np.cumsum(head) - 1
    return (s[head], inv, order[head]) if first else (s[head], inv)


def range_window_hashes(h: np.ndarray, starts: np.ndarray, nwin: np.ndarray, width: int
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hashes of ``nwin[r]`` consecutive ``width``-token windows from offset ``starts[r]`` of the tokens
    whose :func:`prefix_hashes` are ``h``, for every range ``r``: ``(hashes, range of each, its window
    index in the range)``, all ranges concatenated in order."""
    rng = np.repeat(np.arange(nwin.shape[0]), nwin)
    j = ramp(nwin)
    p = starts[rng] + j
    return h[p + width] - h[p] * _powers(width)[0][width], rng, j


def span_hashes(h: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """uint64: the hash of ``tokens[s:s+m]`` for each ``(s, m)`` from ``h`` = :func:`prefix_hashes` of
    ``tokens`` (same values as :func:`window_hashes` at width ``m``)."""
    starts, lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)
    pw, _ = _powers(int(lengths.max()) if lengths.size else 0)
    return h[starts + lengths] - h[starts] * pw[lengths]


class BlockHasher:
    """Chained block hashes of prompts made of trace segments, without hashing a prompt token by token.

    ``hashes(view)[k]`` is the hash of the prompt's first ``(k + 1) * block`` tokens: with
    ``S(e) = sum_{j<e} x_j B^-(j+1)`` it is ``B^e S(e)`` (= :func:`prefix_hashes` at ``e``), and for a
    prompt of segments at offsets ``s_i``, ``S(s_i + o) = S(s_i) + B^-s_i g_i(o)`` where ``g_i`` sums segment
    ``i``'s own tokens. ``g`` at the block ends a segment can hold (they depend on ``s_i mod block``) is
    computed once per segment and phase into one pool, so a request costs O(blocks + segments).

    Stored segments use their tokens (the values equal :func:`prefix_hashes` bit for bit). An opaque
    segment (:mod:`traces.content`) starting on a block boundary uses one pseudo-random value per
    ``block`` of its ``(key, salt)`` stream instead of its tokens (equal streams give equal values, so
    equal content still gives equal hashes; opaque content equal to other content by chance is not
    equal here); one starting off the grid is derived and hashed as tokens.
    """

    def __init__(self, block: int) -> None:
        self.block = block
        self._store = None

    def hashes(self, view) -> np.ndarray:
        """uint64 [N // block]: chained hashes at every full block end of ``view``'s prompt."""
        bs, store = self.block, getattr(view, "source", None)
        rows = getattr(view, "segment_rows", None)
        if store is None or rows is None:
            return prefix_hashes(view.tokens)[bs::bs]
        if store is not self._store:
            self._reset(store)
        b = view.segment_bounds
        n = int(b[-1])
        nb = n // bs
        pw, ipw = _powers(n)
        k = rows.shape[0]
        if k == 1 and self._kphase[rows[0]] == 0:
            # NOTE (speed): a one-segment prompt (every request of a lengths-only trace such as Azure's) whose
            # values are pooled at phase 0: the general path below reduces to this product exactly
            st = int(self._kstart[rows[0]])
            return pw[bs:nb * bs + 1:bs] * self._pool[st:st + nb]
        b0 = b[:-1]
        phase = b0 % bs
        # NOTE (speed): a segment's partial sums at the first phase it is met at sit in per-row arrays
        # (opaque ones at phase 0 from the start), read in one gather; only other phases use a dict
        start, full = self._kstart[rows], self._kfull[rows]
        # NOTE (speed): array methods, not the np.* wrappers (repeat, cumsum, flatnonzero: ~0.7-0.9 us each of
        # Python-level dispatch per call; ~4 of ~19 us per Mooncake prompt)
        miss = (self._kphase[rows] != phase).nonzero()[0]
        if miss.shape[0]:
            self._fill(store, rows, phase, miss, start, full)
        if not nb:
            return np.zeros(0, np.uint64)
        iw = ipw[b0]
        s = (iw * full).cumsum()                         # s[i] = S(b_{i+1}); S(b_0) = 0
        s[1:] = s[:-1]
        s[0] = 0
        # block ends per segment: those in (b_i, b_i+1], q_{i+1} - q_i of them (q = b // block), the first
        # (the prompt's block q_i) at pool value start_i; b_0 = 0
        q = b // bs
        q0 = q[:-1]
        cnt = q[1:] - q0
        start -= q0
        g = self._pool[start.repeat(cnt) + np.arange(nb)]
        g *= iw.repeat(cnt)
        g += s.repeat(cnt)
        g *= pw[bs:nb * bs + 1:bs]
        return g

    # ---- Internal helpers -------------------------------------------------------------------------
    def _reset(self, store) -> None:
        """Pool the opaque segments' block values (all of them at once, vectorized)."""
        bs = self.block
        self._store = store
        n = len(store)
        # per row, the phase its values were pooled at first (-1: none yet), their pool start and g(L);
        # NOTE (memory): 20 B per segment row (a dict entry per row was ~150 B)
        self._kphase = np.full(n, -1, np.int32)
        self._kstart = np.zeros(n, np.int64)
        self._kfull = np.zeros(n, np.uint64)
        # row * block + phase -> pool start * 2^64 + g(L), for other phases. NOTE (memory): one int per entry, not
        # a tuple of two (~100 of ~180 B per entry; rag-reorder meets ~1.3 segments per request at a new phase)
        self._other: dict[int, int] = {}
        lens = np.diff(store.offsets)
        t = store.token_offsets
        rows = np.flatnonzero(t[1:] == t[:-1]) if t is not None else np.zeros(0, np.int64)
        self._pool = np.zeros(0, np.uint64)
        self._pool_n = 0
        if not rows.shape[0]:
            return
        nblk = lens[rows] // bs
        base = splitmix64(store.keys[rows] ^ (store.salts[rows] * np.uint64(0x9E3779B97F4A7C15)))
        has = nblk > 0
        starts = np.cumsum(nblk) - nblk
        # block value k (1-based) of a row: splitmix64(base + k * C). NOTE (speed): as base + (1 - start) * C
        # repeated, plus (global block index) * C: the same sums mod 2^64 in 4 passes over the pool, not 9
        # (in place, in cache-sized pieces: one pool-sized array, no pool-sized temporaries)
        C = np.uint64(0xD1B54A32D192ED03)
        y = np.repeat(base + (np.uint64(1) - starts.astype(np.uint64)) * C, nblk)
        step = 1 << 15
        for lo in range(0, y.shape[0], step):
            part = y[lo:lo + step]
            part += np.arange(lo, lo + part.shape[0], dtype=np.uint64) * C
            splitmix64(part)
        # per-row cumulative sums in one cumsum: each row's first value less the previous rows' sum
        nz = starts[has]
        if nz.shape[0] > 1:
            sums = np.add.reduceat(y, nz)
            y[nz[1:]] -= sums[:-1]
        self._pool = np.cumsum(y, out=y)
        self._pool_n = self._pool.shape[0]
        last = np.zeros(rows.shape[0], np.uint64)
        last[has] = self._pool[starts[has] + nblk[has] - 1]
        tail = splitmix64((base ^ lens[rows].astype(np.uint64)) * np.uint64(0xA24BAED4963EE407))
        self._kphase[rows] = 0
        self._kstart[rows] = starts
        self._kfull[rows] = np.where(lens[rows] % bs != 0, last + tail, last)

    def _fill(self, store, rows: np.ndarray, phase: np.ndarray, miss: np.ndarray, start: np.ndarray,
              full: np.ndarray) -> None:
        """``start`` / ``full`` of the segments ``rows[miss]``, whose phase is not their first one's (or who
        have none yet): from the dict, else pooled now (:meth:`_add_stored`)."""
        bs, other = self.block, self._other
        keys = (rows[miss] * bs + phase[miss]).tolist()
        new: dict[int, int] = {}                       # key -> index in miss, of keys pooled by nobody yet
        for j, x in enumerate(keys):
            if x not in other and x not in new:
                r = x // bs
                if self._kphase[r] != x - r * bs:
                    new[x] = j
        if new:
            at = miss[list(new.values())]
            self._add_stored(store, rows[at], phase[at], list(new))
        kp = self._kphase
        for j, x in enumerate(keys):
            r = x // bs
            if kp[r] == x - r * bs:
                start[miss[j]], full[miss[j]] = self._kstart[r], self._kfull[r]
            else:
                v = other[x]
                start[miss[j]], full[miss[j]] = v >> 64, v & _M64

    def _add_stored(self, store, rows: np.ndarray, phases: np.ndarray, keys: list[int]) -> None:
        """Token partial sums of segments ``rows`` at ``phases`` (one vectorized pass), appended to the pool."""
        bs = self.block
        lens = store.offsets[rows + 1] - store.offsets[rows]   # (not a diff over the whole store)
        _, ipw = _powers(int(lens.max()))
        if rows.shape[0] <= 8:
            # NOTE (speed): a request brings one or two new segments: their views (or derived tokens) and
            # weight slices, concatenated, cost ~10 us; gather + ramp cost ~50 us at any size
            ls = lens.tolist()
            parts = [store.segment(r) for r in rows.tolist()]
            toks = parts[0] if len(parts) == 1 else np.concatenate(parts)
            w = ipw[1:ls[0] + 1] if len(ls) == 1 else np.concatenate([ipw[1:x + 1] for x in ls])
        else:
            toks = store.gather(rows)
            w = ipw[ramp(lens) + 1]
        c = np.cumsum(mix(toks) * w, dtype=np.uint64)
        ends = np.cumsum(lens).tolist()
        first = ((bs - phases) % bs).tolist()
        out = []
        pos = self._pool_n
        kp, other, prev = self._kphase, self._other, 0
        for j, r in enumerate(rows.tolist()):
            e = ends[j]
            before = int(c[prev - 1]) if prev else 0
            seg = c[prev + (first[j] or bs) - 1:e:bs] - np.uint64(before)
            val = (pos, (int(c[e - 1]) - before) % (1 << 64))
            if kp[r] < 0:
                kp[r] = int(phases[j])
                self._kstart[r], self._kfull[r] = val
            else:
                other[keys[j]] = (val[0] << 64) | val[1]
            out.append(seg)
            pos += seg.shape[0]
            prev = e
        if pos > self._pool.shape[0]:          # NOTE: grow geometrically, in place (no views are kept)
            self._pool.resize(max(pos, self._pool.shape[0] * 17 // 16 + 4096), refcheck=False)
        if out:
            self._pool[self._pool_n:pos] = np.concatenate(out)
        self._pool_n = pos

