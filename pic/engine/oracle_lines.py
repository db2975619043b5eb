"""The ``oracle`` policy's window index for prompts of opaque segments, from the segment structure: a window
is named by where its content lies, so that a request costs O(pieces), not one hash-table probe per token.

Opaque tokens (:mod:`traces.content`): token ``j`` of a segment with seed ``b = mix(key ^ salt)`` is
``mix(b + j * golden) mod 2^17``, i.e. ``mix(golden * (x + j))`` with ``x = b * golden^-1 (mod 2^64)``: every
opaque segment is the stretch ``[x, x + L)`` of one line, and two windows hold the same tokens when they cover
the same line positions (otherwise only by chance: 64 pseudo-random tokens of a 2^17 vocabulary alike,
~2^-1088, as the segment-structure trace oracle assumes, :mod:`engine.coverage`). Per store
(:class:`Lines`), rows whose stretches overlap or touch are grouped; a group whose rows all start at one ``x``
(one stream; shorter rows are prefixes of longer ones) is **simple**. A window is named

* inside one piece of a simple stream ``s``: ``(s, offset)``;
* over exactly two pieces, both of simple streams (the left one, a row ``(s, L)``, ending; the right one,
  stream ``s'``, starting): ``((s, L, s'), o)`` with ``o = m - 1 - (tokens on the left)`` -- the same
  tokens occur nowhere else: the left tokens pin the left piece's end, the right ones the right stream;

and every other window (over three or more pieces, or touching a group of several streams) is hashed
(:func:`engine.rolling.window_hashes`) into a :class:`~engine.oracle.WindowIndex`, as the token-level index
does: named and hashed windows never hold the same tokens. A name's windows seen form one range
``[lo, hi)`` of offsets growing at ``hi`` (every piece of a name holds its offsets from ``lo`` on; the ones
before the prompt's shared prefix ends were seen with the prompt that shared it), each with the position it was
first committed at: ``base + offset``, one ``base`` per range added (:class:`LineIndex`). Same answers as the
hashed index of every window (``engine.oracle.WindowIndex``), tested against it; only stores whose every
non-empty row is opaque are named (stored tokens might repeat an opaque line's).
"""

from __future__ import annotations

import numpy as np

from pic import accel
from pic.engine.oracle import WindowIndex
from pic.engine.rolling import ramp, window_hashes
from pic.traces.content import opaque_bases, opaque_run

_GINV = np.uint64(pow(0x9E3779B97F4A7C15, -1, 1 << 64))
_NONE = np.iinfo(np.int64).max      # no second range (``cut``)


class Lines:
    """Per store: ``ok`` (every non-empty row opaque, no stretch wrapping past 2^64), and per row ``sid`` (its
    simple stream, -1 for none) and ``crow`` (its (stream, length), numbered: the left side of a pair name);
    per stream its seed ``base``; per crow its ``crow_sid``/``crow_len``."""

    def __init__(self, store) -> None:
        n = len(store)
        L = np.diff(store.offsets)
        t = store.token_offsets
        self.store, self.S = store, 0
        self.ok = bool(t is not None and store.keys is not None and ((np.diff(t) == 0) | (L == 0)).all())
        self.sid = np.full(n, -1, np.int64)
        self.crow = np.full(n, -1, np.int64)
        if not self.ok:
            return
        live = np.flatnonzero(L > 0)
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


class Layout:
    """One prompt's named window ranges: the first ``ins`` inside pieces, then the pairs, each in position order:
    ``key`` (stream id, or the pair's packed key), offsets ``a..b`` (inclusive) at positions ``pos + a .. pos +
    b``, ``a`` the name's lowest offset; the hashed windows' position ranges ``ha..hb`` (inclusive); ``n``: the
    prompt's windows."""

    __slots__ = ("key", "a", "b", "pos", "ins", "ha", "hb", "n")

    def __init__(self, lines: Lines, rows: np.ndarray, bounds: np.ndarray, m: int) -> None:
        K = rows.shape[0]
        fast = accel.kernels(int(bounds[-1]), "oracle") if K < 1 << 20 else None
        if fast is not None:
            # NOTE (speed): one compiled pass (~2 us) for the ~25 numpy calls below (~40 us a Mooncake prompt)
            z = np.empty((6, 2 * K + 1), np.int64)
            c = fast.line_layout(np.ascontiguousarray(rows, np.int64), np.ascontiguousarray(bounds, np.int64),
                                 lines.sid, lines.crow, lines.S, m, *z)
            nr, npair, nh = c >> 42, (c >> 21) & 0x1FFFFF, c & 0x1FFFFF
            self.key, self.a, self.b, self.pos = z[0, :nr], z[1, :nr], z[2, :nr], z[3, :nr]
            self.ha, self.hb, self.ins, self.n = z[4, :nh], z[5, :nh], nr - npair, max(0, int(bounds[-1]) - m + 1)
            return
        L = bounds[1:] - bounds[:-1]
        if not L.all():
            keep = L > 0
            rows, L = rows[keep], L[keep]
            bounds = np.zeros(L.shape[0] + 1, np.int64)
            L.cumsum(out=bounds[1:])
            K = rows.shape[0]
        self.n = max(0, int(bounds[-1]) - m + 1)
        sid = lines.sid[rows]
        i = ((sid >= 0) & (L >= m)).nonzero()[0]
        self.ins = i.shape[0]
        if K > 1 and m > 1:
            # (over exactly two pieces: a window holds >= 1 token of each, <= m - 1 of either)
            j = ((sid[:-1] >= 0) & (sid[1:] >= 0) & (L[:-1] + L[1:] >= m)).nonzero()[0]
            self.key = np.concatenate((sid[i], lines.crow[rows[j]] * lines.S + sid[j + 1]))
            self.a = np.concatenate((np.zeros(i.shape[0], np.int64), np.maximum(0, m - 1 - L[j])))
            self.b = np.concatenate((L[i] - m, np.minimum(m - 2, L[j + 1] - 1)))
            self.pos = np.concatenate((bounds[i], bounds[j + 1] - (m - 1)))
        else:
            self.key, self.a, self.b, self.pos = sid[i], np.zeros(i.shape[0], np.int64), L[i] - m, bounds[i]
        # hashed: the window positions no name covers (the named ranges are disjoint)
        p0 = self.pos + self.a
        order = p0.argsort()
        p0, p1 = p0[order], (self.pos + self.b)[order]
        gs = np.empty(p0.shape[0] + 1, np.int64)
        ge = np.empty(p0.shape[0] + 1, np.int64)
        gs[0], gs[1:] = 0, p1 + 1
        ge[:-1], ge[-1] = p0 - 1, self.n - 1
        g = (ge >= gs).nonzero()[0]
        self.ha, self.hb = gs[g], ge[g]


class LineIndex:
    """Named windows (:class:`Layout`) with, per name id (streams ``0 .. S-1``, then pairs in the order met),
    ``lo``/``hi`` (offsets seen) and the positions first committed: ``base + o`` below ``cut``, above it the
    ranges of ``ext[id]`` (their starts and bases); the hashed windows in ``hashed``."""

    def __init__(self, lines: Lines, m: int) -> None:
        self.lines, self.m = lines, m
        cap = lines.S + 1024
        self._lo, self._hi, self._base = (np.zeros(cap, np.int64) for _ in range(3))
        self._cut = np.full(cap, _NONE, np.int64)
        self._ids = lines.S
        # NOTE (speed): pair key -> id in a dict: a prompt meets ~20 pairs, a lookup of each costs ~50 ns here
        # (a WindowIndex call ~30 us)
        self._pairs: dict[int, int] = {}
        self._pair_pack: list[int] = []
        self._ext: dict[int, tuple[list[int], list[int]]] = {}
        self.hashed = WindowIndex()
        self.count = 0                           # named windows held

    def __len__(self) -> int:
        return self.count + len(self.hashed)

    def ids(self, lay: Layout, v: np.ndarray, add: bool) -> np.ndarray:
        """int64 name id per range ``v`` (ascending) of ``lay`` (-1: a pair never committed; with ``add``, new
        ids for them)."""
        ids = lay.key[v]
        t = int(np.count_nonzero(v < lay.ins))
        if t == v.shape[0]:
            return ids
        packs = ids[t:].tolist()
        get = self._pairs.get
        got = [get(pk, -1) for pk in packs]
        if add and -1 in got:
            d, nxt, new = self._pairs, self._ids, []
            for j, pk in enumerate(packs):
                if got[j] < 0:
                    i = got[j] = d.setdefault(pk, nxt)
                    if i == nxt:
                        nxt += 1
                        new.append(j)
            self._pair_pack.extend(packs[j] for j in new)
            self._grow(nxt)
            self._lo[self._ids:nxt] = self._hi[self._ids:nxt] = lay.a[v[t:]][new]
            self._ids = nxt
        ids[t:] = got
        return ids

    def lookup(self, lay: Layout, off: int, hashes) -> tuple[np.ndarray, np.ndarray]:
        """``(j, src)``: the prompt's windows from position ``off`` on that are held (``j``: position - ``off``,
        ascending) and their values (as ``WindowIndex.lookup`` of their hashes, where found); ``hashes(p)``: the
        hashes of the windows at positions ``p``."""
        js, vs = [], []
        v = (lay.pos + lay.b >= off).nonzero()[0]          # (the ranges reaching past the shared prefix)
        ids = self.ids(lay, v, False)
        pos, qa = lay.pos[v], np.maximum(lay.a[v], off - lay.pos[v])
        ok = ids >= 0
        cb = np.where(ok, np.minimum(lay.b[v], self._hi[np.maximum(ids, 0)] - 1), -1)
        k = (ok & (qa <= cb)).nonzero()[0]
        if k.shape[0]:
            cnt = cb[k] - qa[k] + 1
            o = np.repeat(qa[k], cnt) + ramp(cnt)
            js.append(np.repeat(pos[k] - off, cnt) + o)
            src = np.repeat(self._base[ids[k]], cnt) + o
            late = np.flatnonzero(cb[k] >= self._cut[ids[k]])
            if late.shape[0]:
                at = np.cumsum(cnt) - cnt
                for i in late.tolist():
                    starts, bases = self._ext[int(ids[k[i]])]
                    sl = slice(int(at[i]), int(at[i] + cnt[i]))
                    oo = o[sl]
                    r = np.searchsorted(np.asarray(starts), oo, side="right") - 1
                    src[sl] = np.where(r >= 0, np.asarray(bases)[np.maximum(r, 0)] + oo, src[sl])
            vs.append(src)
        p = _positions(lay, off)
        if p.shape[0]:
            f, val = self.hashed.lookup(hashes(p))
            f = f.nonzero()[0]
            js.append(p[f] - off)
            vs.append(val[f])
        if not js:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        j, src = (js[0], vs[0]) if len(js) == 1 else (np.concatenate(js), np.concatenate(vs))
        if j.shape[0] > 1 and (j[1:] < j[:-1]).any():
            order = j.argsort()
            j, src = j[order], src[order]
        return j, src

    def commit(self, lay: Layout, off: int, hashes) -> None:
        """Add the prompt's windows from position ``off`` on (those not held yet, the first position of each)."""
        if lay.n - off <= 0:
            return
        v = (lay.pos + lay.b >= off).nonzero()[0]
        ids = self.ids(lay, v, True)
        b, pos = lay.b[v], lay.pos[v]
        qa = np.maximum(lay.a[v], off - pos)
        hi = self._hi[ids]
        na = np.maximum(hi, qa)
        v = (na <= b).nonzero()[0]
        ids, qa, b, pos, hi, na = ids[v], qa[v], b[v], pos[v], hi[v], na[v]
        srt = np.sort(ids)
        if (hi == self._lo[ids]).all() and (srt[1:] != srt[:-1]).all():
            self._base[ids], self._hi[ids] = pos, b + 1
            self.count += int((b - na + 1).sum())
        else:
            for i, a_, b_, p_ in zip(ids.tolist(), qa.tolist(), b.tolist(), pos.tolist(), strict=True):
                h = int(self._hi[i])
                a_ = max(h, a_)
                if a_ > b_:
                    continue
                if h == self._lo[i]:
                    self._base[i] = p_
                else:
                    starts, bases = self._ext.setdefault(i, ([], []))
                    if not starts:
                        self._cut[i] = a_
                    starts.append(a_)
                    bases.append(p_)
                self._hi[i] = b_ + 1
                self.count += b_ - a_ + 1
        p = _positions(lay, off)
        if p.shape[0]:
            w = hashes(p)
            new = np.flatnonzero(~self.hashed.lookup(w)[0])
            self.hashed.add(w[new], p[new])

    def to_hashed(self) -> WindowIndex:
        """Every window held, in one hashed index (the named ones' hashes from their line tokens)."""
        m, lines, out = self.m, self.lines, self.hashed
        packs = self._pair_pack
        for i in np.flatnonzero(self._hi[:self._ids] > self._lo[:self._ids]).tolist():
            lo, hi = int(self._lo[i]), int(self._hi[i])
            if i < lines.S:
                toks = opaque_run(lines.base[i:i + 1], np.zeros(1, np.int64), np.array([hi + m - 1]))
            else:
                pack = packs[i - lines.S]
                c, sb = pack // lines.S, pack % lines.S
                sa, La = int(lines.crow_sid[c]), int(lines.crow_len[c])
                left = La - (m - 1) + lo
                toks = np.r_[opaque_run(lines.base[sa:sa + 1], np.array([left]), np.array([La - left])),
                             opaque_run(lines.base[sb:sb + 1], np.zeros(1, np.int64), np.array([hi]))]
            o = np.arange(lo, hi)
            val = self._base[i] + o
            if i in self._ext:
                starts, bases = (np.asarray(x) for x in self._ext[i])
                r = np.searchsorted(starts, o, side="right") - 1
                val = np.where(r >= 0, bases[np.maximum(r, 0)] + o, val)
            w = window_hashes(toks, m)[:hi - lo]
            new = np.flatnonzero(~out.lookup(w)[0])
            out.add(w[new], val[new])
        return out

    def _grow(self, n: int) -> None:
        if n <= self._lo.shape[0]:
            return
        cap = max(n, 2 * self._lo.shape[0])
        for name, fill in (("_lo", 0), ("_hi", 0), ("_base", 0), ("_cut", _NONE)):
            old = getattr(self, name)
            new = np.full(cap, fill, np.int64)
            new[:old.shape[0]] = old
            setattr(self, name, new)


def _positions(lay: Layout, off: int) -> np.ndarray:
    """int64: the hashed windows' positions from ``off`` on."""
    a = np.maximum(lay.ha, off)
    k = (a <= lay.hb).nonzero()[0]
    if not k.shape[0]:
        return np.zeros(0, np.int64)
    cnt = lay.hb[k] - a[k] + 1
    return np.repeat(a[k], cnt) + ramp(cnt)
