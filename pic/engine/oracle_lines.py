"""The ``oracle`` policy's window index for prompts of opaque segments, from the segment structure: a window
is named by where its content lies, so that a request costs O(pieces), not one hash-table probe per token.

Opaque tokens (:mod:`traces.content`): token ``j`` of a segment with seed ``b = mix(key ^ salt)`` is
``mix(b + j * golden) mod 2^17``, i.e. ``mix(golden * (x + j))`` with ``x = b * golden^-1 (mod 2^64)``: every
opaque segment is the stretch ``[x, x + L)`` of one line, and a token at one line position equals a token at
another only by chance (1 in 2^17). Per store (:class:`Lines`), rows whose stretches overlap or touch are
grouped; a group whose rows all start at one ``x`` (one stream; shorter rows are prefixes of longer ones) is
**simple**. A window is named

* inside one piece of a simple stream ``s``: ``(s, offset)``;
* over exactly two pieces, both of simple streams (the left one, a row ``(s, L)``, ending; the right one,
  stream ``s'``, starting): ``((s, L, s'), o)`` with ``o = m - 1 - (tokens on the left)``;

where a window with another name (or none) holds at least :data:`SURE` of its tokens at other line positions
(so equals it with probability <= 2^-68): a piece's first part alone can sit at the same positions, so
windows running < ``SURE`` tokens past the end of a shorter row of their stream are not named, nor pair windows
with < ``SURE`` tokens on either side, past the right stream's shortest row, or whose left row has a shorter
sibling ending < ``SURE`` tokens before it (:func:`layout_ranges`). Every other window (those, windows over
three or more pieces, windows touching a group of several streams) is hashed (:func:`engine.rolling.window_hashes`)
into a :class:`~engine.oracle.WindowIndex`, as the token-level index does. A name's offsets seen form one range
``[lo, hi)`` growing at ``hi`` (less the offsets a stream's shorter rows cut out; every piece of a name holds
its offsets from ``lo`` on, the ones before the prompt's shared prefix ends seen with the prompt that shared
it), each with the position it was first committed at: ``base + offset``, one ``base`` per range added
(:class:`LineIndex`). Same answers as the hashed index of every window (``engine.oracle.WindowIndex``), tested
against it, chance-equal tokens where pieces meet included; only stores whose every non-empty row is opaque are
named (stored tokens might repeat an opaque line's), and ``min_match >= 8``.
"""

from __future__ import annotations

import numpy as np

from pic import accel
from pic.engine.oracle import WindowIndex
from pic.engine.rolling import _powers, prefix_hashes, ramp, window_hashes
from pic.traces.content import _MASK, opaque_bases, opaque_run, splitmix64

_GINV = np.uint64(pow(0x9E3779B97F4A7C15, -1, 1 << 64))
_NONE = np.iinfo(np.int64).max      # no second range (``cut``)
_EMPTY = np.zeros(0, np.int64)
#: tokens a named window must hold at line positions no other window holds (other tokens may match by
#: chance, 1 in 2^17 each: 2^-68 for four, ~10^-5 for 10^16 pairs of windows, below the 64-bit hashed index's
#: own collision odds); closer cases are hashed
SURE = 4


class Lines:
    """Per store: ``ok`` (every non-empty row opaque, no stretch wrapping past 2^64), and per row ``sid`` (its
    simple stream, -1 for none) and ``crow`` (its (stream, length), numbered: the left side of a pair name);
    per stream its seed ``base``; per crow its ``crow_sid``/``crow_len``."""

    def __init__(self, store) -> None:
        n = len(store)
        self.len_ptr = self.crow_len = self.crow_ok = np.zeros(1, np.int64)
        L = np.diff(store.offsets)
        t = store.token_offsets
        self.store, self.S = store, 0
        self.ok = bool(t is not None and store.keys is not None and ((np.diff(t) == 0) | (L == 0)).all())
        self.names = np.full((2, n), -1, np.int64)            # rows: sid, crow
        self.sid, self.crow = self.names[0], self.names[1]
        if not self.ok:
            return
        live = np.flatnonzero(L > 0)
        self.keyx = store.keys ^ store.salts                # (the kernels' token seeds, per row)
        base = opaque_bases(store.keys[live], store.salts[live])
        with np.errstate(over="ignore"):
            x = base * _GINV
            ln = L[live].astype(np.uint64)
            if (x > ~ln).any():                  # a stretch past 2^64: (never, in practice) no names
                self.ok = False
                return
            order = np.argsort(x, kind="stable")
            xs, ends = x[order], x[order] + ln[order]
        new = np.ones(xs.shape[0], bool)
        new[1:] = xs[1:] > np.maximum.accumulate(ends)[:-1]        # (touching stretches: one group)
        first = np.flatnonzero(new)
        last = np.r_[first[1:], xs.shape[0]] - 1
        simple = xs[first] == xs[last]
        sid_g = np.where(simple, np.cumsum(simple) - 1, -1)
        rows = live[order]
        sid = sid_g[np.cumsum(new) - 1]
        self.sid[rows] = sid
        self.S = int(simple.sum())
        self.base = base[order][first[simple]]
        ok = np.flatnonzero(sid >= 0)
        key = sid[ok] * (int(L.max()) + 1) + L[rows[ok]]
        u, inv = np.unique(key, return_inverse=True)
        self.crow[rows[ok]] = inv.reshape(-1)
        self.crow_sid, self.crow_len = u // (int(L.max()) + 1), u % (int(L.max()) + 1)
        # a stream's row lengths, ascending (crows are numbered by stream, then length): lens[ptr[s]:ptr[s + 1]]
        self.len_ptr = np.searchsorted(self.crow_sid, np.arange(self.S + 1)).astype(np.int64)
        # a row is a pair's left side only when no shorter row of its stream ends within SURE - 1 tokens of it
        near = np.zeros(u.shape[0], bool)
        near[1:] = (self.crow_sid[1:] == self.crow_sid[:-1]) & (self.crow_len[:-1] > self.crow_len[1:] - SURE)
        self.crow_ok = (~near).astype(np.int64)


def line_groups(store) -> np.ndarray | None:
    """int64 per row of ``store``: its group of overlapping or touching stretches, as :class:`Lines` groups them
    (-1: an empty row), or None where :class:`Lines` names nothing (``ok`` False). Tokens of two groups sit at
    distinct line positions (equal only by chance, 1 in 2^17 a token), as do a piece's own tokens."""
    L = np.diff(store.offsets)
    t = store.token_offsets
    if t is None or store.keys is None or not ((np.diff(t) == 0) | (L == 0)).all():
        return None
    live = np.flatnonzero(L > 0)
    with np.errstate(over="ignore"):
        x = opaque_bases(store.keys[live], store.salts[live]) * _GINV
        ln = L[live].astype(np.uint64)
        if (x > ~ln).any():
            return None
        order = np.argsort(x)                 # (rows of one start: one group, in any order)
        xs = x[order]
        ends = xs + ln[order]
    new = np.ones(xs.shape[0], bool)
    new[1:] = xs[1:] > np.maximum.accumulate(ends)[:-1]
    group = np.full(L.shape[0], -1, np.int64)
    group[live[order]] = np.cumsum(new) - 1
    return group


class Layout:
    """One prompt's named window ranges: the first ``ins`` inside pieces, then the pairs, each in position order:
    ``key`` (stream id, or the pair's packed key), offsets ``a..b`` (inclusive) at positions ``pos + a .. pos +
    b``, ``a`` the name's lowest offset (rows 0-3 of ``z``, its first ``nr`` columns); the hashed windows'
    position ranges ``ha..hb`` (inclusive; the last one ends at ``hmax``, -1: none); ``n``: the prompt's
    windows."""

    __slots__ = ("z", "nr", "nh", "ins", "hmax", "n")

    def __init__(self, lines: Lines, rows: np.ndarray, bounds: np.ndarray, m: int) -> None:
        K = rows.shape[0]
        N = int(bounds[-1])
        self.n = max(0, N - m + 1)
        fast = accel.kernels(N, "oracle")
        make = fast.line_layout if fast is not None else layout_ranges
        rows, bounds = np.ascontiguousarray(rows, np.int64), np.ascontiguousarray(bounds, np.int64)
        cap = 2 * K + 8
        while True:
            # NOTE (speed): compiled, one pass for the ~25 numpy calls of a vectorized form (~40 us a Mooncake
            # prompt); room for the ranges grows where a piece is cut by its stream's shorter rows
            z = np.empty((6, cap), np.int64)
            c = make(rows, bounds, lines.names, lines.S, m, lines.len_ptr, lines.crow_len, lines.crow_ok, z)
            if c >= 0:
                break
            cap *= 4
        nr, nh = c >> 42, c & 0x1FFFFF
        self.z, self.nr, self.nh, self.ins = z, nr, nh, nr - ((c >> 21) & 0x1FFFFF)
        self.hmax = int(z[5, nh - 1]) if nh else -1

    @property
    def key(self) -> np.ndarray:
        return self.z[0, :self.nr]

    @property
    def a(self) -> np.ndarray:
        return self.z[1, :self.nr]

    @property
    def b(self) -> np.ndarray:
        return self.z[2, :self.nr]

    @property
    def pos(self) -> np.ndarray:
        return self.z[3, :self.nr]

    @property
    def ha(self) -> np.ndarray:
        return self.z[4, :self.nh]

    @property
    def hb(self) -> np.ndarray:
        return self.z[5, :self.nh]


def layout_ranges(rows, bounds, names, S, m, len_ptr, lens, crow_ok, z):
    """The ranges of :class:`Layout` (this plain-Python form is the reference; ``accel``'s ``line_layout`` is it
    compiled): named ranges in rows 0-3 of ``z`` (key, a, b, pos: inside pieces first, then the pairs, each in
    position order) and the hashed windows' ranges in rows 4-5; returns ``ranges * 2^42 + pairs * 2^21 + hashed
    ranges``, or -1 when ``z`` has too few columns. A piece's windows that run ``1 .. SURE - 1`` tokens past the
    end of a shorter row of its stream, and a pair's windows holding fewer than ``SURE`` tokens of either
    piece (or reaching past the shortest row of the right stream; all of them where the left row's stream has
    a row ending within ``SURE - 1`` tokens of it), are hashed: only ``< SURE`` tokens would tell them apart
    from another window."""
    sid, crow = names[0], names[1]
    key, a, b, pos, ha, hb = z[0], z[1], z[2], z[3], z[4], z[5]
    K, cap = rows.shape[0], z.shape[1]
    half = cap // 2
    n = bounds[K] - m + 1
    ni, np_, nh = 0, 0, 0
    nxt = 0                          # the first window position no range covers yet
    prev = -1                        # the last non-empty piece
    s, e, sk = 0, 0, -1
    for k in range(K + 1):
        if k < K:
            s, e = bounds[k], bounds[k + 1]
            if e == s:
                continue
            sk = sid[rows[k]]
        if prev >= 0 and m > 1 and k < K:
            # the pair (prev, k): over exactly these two pieces, >= SURE tokens of each
            La, Lb = bounds[prev + 1] - bounds[prev], e - s
            sa = sid[rows[prev]]
            if sa >= 0 and sk >= 0 and crow_ok[crow[rows[prev]]] != 0:
                lo = max(SURE - 1, m - 1 - La)
                hi = min(m - 1 - SURE, Lb - 1, lens[len_ptr[sk]] - 1)
                if lo <= hi:
                    if np_ >= half or nh + 2 > cap:
                        return -1
                    p = s - (m - 1)
                    j = half + np_
                    key[j], a[j], b[j], pos[j] = crow[rows[prev]] * S + sk, lo, hi, p
                    np_ += 1
                    if p + lo > nxt:
                        ha[nh], hb[nh] = nxt, p + lo - 1
                        nh += 1
                    nxt = p + hi + 1
        if k == K:
            break
        if sk >= 0 and e - s >= m:
            last = e - s - m
            cur = 0
            for q in range(len_ptr[sk], len_ptr[sk + 1] + 1):
                g0 = lens[q] - m + 1 if q < len_ptr[sk + 1] else last + 1
                g1 = min(lens[q] - m + SURE - 1, last) if q < len_ptr[sk + 1] else last
                if g0 > last + 1:
                    g0, g1 = last + 1, last
                if g0 > cur:
                    if ni >= half or nh + 2 > cap:
                        return -1
                    key[ni], a[ni], b[ni], pos[ni] = sk, cur, g0 - 1, s
                    ni += 1
                    if s + cur > nxt:
                        ha[nh], hb[nh] = nxt, s + cur - 1
                        nh += 1
                    nxt = s + g0
                cur = max(cur, g1 + 1)
                if cur > last:
                    break
        prev = k
    if n - 1 >= nxt:
        if nh >= cap:
            return -1
        ha[nh], hb[nh] = nxt, n - 1
        nh += 1
    for j in range(np_):
        key[ni + j], a[ni + j], b[ni + j], pos[ni + j] = key[half + j], a[half + j], b[half + j], pos[half + j]
    return ((ni + np_) << 42) + (np_ << 21) + nh


class LineIndex:
    """Named windows (:class:`Layout`): per name id (streams ``0 .. S-1``, then pairs in the order met: their
    packed key in ``pack``, ``splitmix64(pack) -> id`` in ``pairs``) the offsets seen ``lo .. hi - 1`` and the
    position each was first committed at: ``base + o`` below ``cut``, from there the extension list (``head``
    .. ``tail`` through ``ext_next``: ranges from ``ext_o`` on at ``ext_b + o``). The hashed windows in
    ``hashed``. One state for the compiled kernels (``line_lookup``, ``line_commit``) and the numpy form."""

    _COLS = (("lo", 0), ("hi", 0), ("base", 0), ("cut", _NONE), ("head", -1), ("tail", -1), ("pack", 0))

    def __init__(self, lines: Lines, m: int) -> None:
        self.lines, self.m = lines, m
        self.state = np.zeros((len(self._COLS), 0), np.int64)      # rows: _COLS, per name id
        self.ext = np.zeros((3, 0), np.int64)                      # rows: ext_o, ext_b, ext_next
        self.ids, self.n_ext = lines.S, 0
        self._grow(lines.S + 1024, 1024)
        self._out = np.zeros((2, 0), np.int64)                     # the lookup kernel's answers (reused)
        self.pairs = WindowIndex()
        self.hashed = WindowIndex()
        self.count = 0                           # named windows held

    def __len__(self) -> int:
        return self.count + len(self.hashed)

    def lookup(self, lay: Layout, off: int, prompt: PromptHashes) -> tuple[np.ndarray, np.ndarray]:
        """``(j, src)``: the prompt's windows from position ``off`` on that are held (``j``: position - ``off``,
        ascending) and their values (as ``WindowIndex.lookup`` of their hashes, where found)."""
        fast = self._fast(lay)
        if fast is None:
            return self._lookup_np(lay, off, prompt)
        nw = lay.n - off
        if self._out.shape[1] < nw:
            self._out = np.empty((2, max(nw, 2 * self._out.shape[1])), np.int64)
        out = self._out
        k = fast.line_lookup(lay.z, lay.nr, lay.ins, off, self.pairs._table, self.pairs._shift, self.state, self.ext,
                             out)
        if lay.hmax >= off:
            hs, ps = prompt.buffers(nw)
            c = fast.hashed_lookup(*prompt.pieces(self.lines), lay.z, lay.nh, off, self.m, _MASK, _bm(self.m),
                                   self.hashed._table, self.hashed._shift, out, k, hs, ps)
            k, prompt.done = c >> 32, (off, c & 0xFFFFFFFF)
        j, src = out[0, :k], out[1, :k]
        if k > 1 and (j[1:] < j[:-1]).any():
            order = j.argsort()
            j, src = j[order], src[order]
        return j, src

    def commit(self, lay: Layout, off: int, prompt: PromptHashes) -> None:
        """Add the prompt's windows from position ``off`` on (those not held yet, the first position of each)."""
        if lay.n - off <= 0:
            return
        R = lay.nr
        self._grow(self.ids + R - lay.ins, self.n_ext + R)
        fast = self._fast(lay)
        if fast is None:
            return self._commit_np(lay, off, prompt)
        self.pairs._reserve(self.pairs._n + R - lay.ins)
        st = np.array([self.ids, self.n_ext, 0, 0], np.int64)
        fast.line_commit(lay.z, R, lay.ins, off, self.pairs._table, self.pairs._shift, self.state, self.ext, st)
        self.ids, self.n_ext = int(st[0]), int(st[1])
        self.count += int(st[2])
        self.pairs._n += int(st[3])
        if lay.hmax >= off:
            self.hashed._reserve(self.hashed._n + lay.n - off)
            if prompt.done is not None and prompt.done[0] == off:          # (hashed by the lookup)
                n = prompt.done[1]
                self.hashed._n += fast.hashed_insert(self.hashed._table, self.hashed._shift, prompt.hs[:n],
                                                     prompt.ps[:n])
            else:
                self.hashed._n += fast.hashed_add(*prompt.pieces(self.lines), lay.z, lay.nh, off, self.m, _MASK, _bm(self.m),
                                                  self.hashed._table, self.hashed._shift)

    def to_hashed(self) -> WindowIndex:
        """Every window held, in one hashed index (the named ones' hashes from their line tokens)."""
        m, lines, out = self.m, self.lines, self.hashed
        for i in np.flatnonzero(self.hi[:self.ids] > self.lo[:self.ids]).tolist():
            lo, hi = int(self.lo[i]), int(self.hi[i])
            if i < lines.S:
                toks = opaque_run(lines.base[i:i + 1], np.zeros(1, np.int64), np.array([hi + m - 1]))
            else:
                c, sb = divmod(int(self.pack[i]), lines.S)
                sa, La = int(lines.crow_sid[c]), int(lines.crow_len[c])
                left = La - (m - 1) + lo
                toks = np.r_[opaque_run(lines.base[sa:sa + 1], np.array([left]), np.array([La - left])),
                             opaque_run(lines.base[sb:sb + 1], np.zeros(1, np.int64), np.array([hi]))]
            o = np.arange(lo, hi)
            w = window_hashes(toks, m)[:hi - lo]
            val = self._values(i, o)
            new = np.flatnonzero(~out.lookup(w)[0])
            out.add(w[new], val[new])
        return out

    # ---- Internal helpers -------------------------------------------------------------------------
    def _fast(self, lay: Layout):
        """The compiled kernels, with the pair index in its table form (None: the numpy form)."""
        fast = accel.kernels(lay.n, "oracle")
        if fast is not None and self.pairs._table is None:
            self.pairs._to_table()
        if fast is not None and self.hashed._table is None:
            self.hashed._to_table()
        return fast

    def _values(self, i: int, o: np.ndarray) -> np.ndarray:
        """The values of name ``i``'s offsets ``o`` (held; ascending)."""
        val = self.base[i] + o
        e = int(self.head[i])
        while e >= 0:
            val = np.where(o >= self.ext_o[e], self.ext_b[e] + o, val)
            e = int(self.ext_next[e])
        return val

    def _ids(self, lay: Layout, v: np.ndarray, add: bool) -> np.ndarray:
        """int64 name id per range ``v`` (ascending) of ``lay`` (-1: a pair never committed; with ``add``, new
        ids for them, in order)."""
        ids = lay.key[v]
        t = int(np.count_nonzero(v < lay.ins))
        if t == v.shape[0]:
            return ids
        keys = splitmix64(ids[t:].astype(np.uint64))
        found, got = self.pairs.lookup(keys)
        if add and not found.all():
            miss = np.flatnonzero(~found)
            u, first, inv = np.unique(keys[miss], return_index=True, return_inverse=True)
            order = np.argsort(first, kind="stable")          # new ids in order of first use
            rank = np.empty(u.shape[0], np.int64)
            rank[order] = np.arange(u.shape[0])
            new = self.ids + np.arange(u.shape[0])
            self.pairs.add(u[order], new)
            got[miss] = self.ids + rank[inv.reshape(-1)]
            at = v[t:][miss[first[order]]]
            self.lo[new] = self.hi[new] = lay.a[at]
            self.pack[new] = lay.key[at]
            self.ids += u.shape[0]
        ids[t:] = got
        return ids

    def _lookup_np(self, lay: Layout, off: int, prompt: PromptHashes) -> tuple[np.ndarray, np.ndarray]:
        js, vs = [], []
        v = (lay.pos + lay.b >= off).nonzero()[0]          # (the ranges reaching past the shared prefix)
        ids = self._ids(lay, v, False)
        pos, qa = lay.pos[v], np.maximum(lay.a[v], off - lay.pos[v])
        ok = ids >= 0
        cb = np.where(ok, np.minimum(lay.b[v], self.hi[np.maximum(ids, 0)] - 1), -1)
        k = (ok & (qa <= cb)).nonzero()[0]
        if k.shape[0]:
            cnt = cb[k] - qa[k] + 1
            o = np.repeat(qa[k], cnt) + ramp(cnt)
            js.append(np.repeat(pos[k] - off, cnt) + o)
            src = np.repeat(self.base[ids[k]], cnt) + o
            at = np.cumsum(cnt) - cnt
            for i in np.flatnonzero(cb[k] >= self.cut[ids[k]]).tolist():
                sl = slice(int(at[i]), int(at[i] + cnt[i]))
                src[sl] = self._values(int(ids[k[i]]), o[sl])
            vs.append(src)
        p, w = prompt.hashed(lay, off)
        if p.shape[0]:
            f, val = self.hashed.lookup(w)
            f = f.nonzero()[0]
            js.append(p[f] - off)
            vs.append(val[f])
        if not js:
            return _EMPTY, _EMPTY
        j, src = np.concatenate(js), np.concatenate(vs)
        order = j.argsort(kind="stable")
        return j[order], src[order]

    def _commit_np(self, lay: Layout, off: int, prompt: PromptHashes) -> None:
        v = (lay.pos + lay.b >= off).nonzero()[0]
        ids = self._ids(lay, v, True)
        for i, a_, b_, p_ in zip(ids.tolist(), lay.a[v].tolist(), lay.b[v].tolist(), lay.pos[v].tolist(),
                                 strict=True):
            h = int(self.hi[i])
            na = max(h, a_, off - p_)
            if na > b_:
                continue
            if h == self.lo[i]:
                self.base[i] = p_
            else:
                e = self.n_ext
                self.ext_o[e], self.ext_b[e], self.ext_next[e] = na, p_, -1
                if self.head[i] < 0:
                    self.head[i], self.cut[i] = e, na
                else:
                    self.ext_next[self.tail[i]] = e
                self.tail[i] = e
                self.n_ext += 1
            self.hi[i] = b_ + 1
            self.count += b_ - na + 1
        p, w = prompt.hashed(lay, off)
        if p.shape[0]:
            new = (~self.hashed.lookup(w)[0]).nonzero()[0]
            self.hashed.add(w[new], p[new])

    def _grow(self, ids: int, ext: int) -> None:
        """Room for ``ids`` name ids and ``ext`` extension entries (the row views renamed)."""
        if ids > self.state.shape[1]:
            old = self.state
            self.state = np.empty((old.shape[0], max(ids, 2 * old.shape[1])), np.int64)
            for r, (name, fill) in enumerate(self._COLS):
                self.state[r, old.shape[1]:] = fill
                self.state[r, :old.shape[1]] = old[r]
                setattr(self, name, self.state[r])
        if ext > self.ext.shape[1]:
            old = self.ext
            self.ext = np.zeros((3, max(ext, 2 * old.shape[1])), np.int64)
            self.ext[:, :old.shape[1]] = old
            self.ext_o, self.ext_b, self.ext_next = self.ext


class PromptHashes:
    """One request's prompt as the hashed windows need it: its pieces for the kernels (``pieces()``), or the
    hashes of its hashed windows from a position on from its prefix hashes, made once (``hashed()``)."""

    __slots__ = ("req", "m", "_h", "_pieces", "hs", "ps", "done")

    def __init__(self, req, m: int) -> None:
        self.req, self.m, self._h, self._pieces = req, m, None, None
        self.hs = self.ps = self.done = None     # the kernels' hashed windows: hashes, positions, (from, count)

    def buffers(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Room for ``n`` hashed windows' hashes and positions."""
        if self.hs is None or self.hs.shape[0] < n:
            self.hs, self.ps = np.empty(n, np.uint64), np.empty(n, np.int64)
        return self.hs, self.ps

    def pieces(self, lines: Lines) -> tuple:
        """``(key ^ salt per row, rows, bounds)``: the prompt's opaque pieces as the kernels derive their tokens."""
        if self._pieces is None:
            req = self.req
            self._pieces = (lines.keyx, np.ascontiguousarray(req.segment_rows, np.int64),
                            np.ascontiguousarray(req.segment_bounds, np.int64))
        return self._pieces

    def hashed(self, lay: Layout, off: int) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, hashes)`` of the hashed windows of ``lay`` from ``off`` on."""
        if lay.hmax < off:
            return _EMPTY, np.zeros(0, np.uint64)
        a = np.maximum(lay.ha, off)
        k = (a <= lay.hb).nonzero()[0]
        a, b = a[k], lay.hb[k]
        cnt = b - a + 1
        p = np.repeat(a, cnt) + ramp(cnt)
        if self._h is None:
            self._h = prefix_hashes(self.req.tokens)
        return p, self._h[p + self.m] - self._h[p] * _bm(self.m)


def _bm(m: int) -> np.uint64:
    """``B^m`` (:mod:`engine.rolling`)."""
    return _powers(m)[0][m]
