"""Segment content: stored tokens, and opaque segments whose tokens are derived on demand.

A trace stores each distinct segment once (:class:`Segments`). Most segments carry their token ids
(text that was tokenized, token JSONL). Inputs without content — Mooncake hash-id blocks, Azure rows of
lengths only — give **opaque** segments: a ``(key, salt, length)`` triple from which the tokens are
derived deterministically (:func:`opaque_tokens`): token ``j`` is ``mix(mix(key ^ salt) + j * golden) mod
2**17`` (``mix`` = the splitmix64 finalizer). Equal triples give equal tokens, a shorter segment of the
same key is a prefix of a longer one, and nothing is materialized until a policy asks for token content
(CDC needs it; an exact-prefix cache compares segments and only derives the tokens where two different
segments meet).

In memory: ``offsets`` are the *virtual* CSR offsets (``offsets[i+1] - offsets[i]`` = segment ``i``'s
length, whether stored or not); stored tokens live in ``tokens`` at ``token_offsets`` (``None`` when
every segment is stored, then ``token_offsets == offsets``); an opaque segment has an empty stored range
and its key/salt in ``keys``/``salts``. ``tokens`` is uint16 where a trace read from a file has every stored
token in ``[0, 65536)`` (:func:`narrow_tokens`), else int32; what the methods hand out is int32 either way
(values, not bytes, are what every hash reads).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xxhash

from pic import accel

#: opaque tokens are drawn from [0, OPAQUE_VOCAB); a power of two (a realistic vocabulary size)
OPAQUE_VOCAB = 1 << 17
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MASK = np.uint64(OPAQUE_VOCAB - 1)
_OPAQUE_ID_SEED = 0x6F70617175650000  # "opaque": opaque ids never hash token bytes with seed 0


#: stored tokens are kept as uint16 where every one fits (:func:`narrow_tokens`); False keeps int32 (tests)
NARROW = True
_U16 = np.dtype(np.uint16)


def narrow_tokens(tokens: np.ndarray) -> np.ndarray:
    """``tokens`` (int32) as uint16 where every value lies in ``[0, 65536)`` (and :data:`NARROW`), else as given.

    NOTE (memory): a trace's stored tokens are its largest array (chat 10^6: 1.71 GB as int32); a vocabulary of
    up to 65,536 ids (chat: 50,000) holds them in half of it."""
    if NARROW and tokens.dtype != _U16 and fits_u16(tokens):
        return tokens.astype(np.uint16)
    return tokens


def fits_u16(tokens: np.ndarray) -> bool:
    """Whether every value of an int32 (or narrower) array lies in ``[0, 65536)`` (one pass: a negative one reads
    as a large uint32)."""
    if not tokens.shape[0] or tokens.dtype == _U16:
        return True
    return int(tokens.view(np.uint32).max()) < 1 << 16 if tokens.dtype.itemsize == 4 else \
        bool(tokens.min() >= 0 and tokens.max() < 1 << 16)


def splitmix64(z: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer, in place on a uint64 array (returned); the one copy every module uses."""
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


def opaque_bases(keys: np.ndarray, salts: np.ndarray | int = 0) -> np.ndarray:
    """uint64 [n]: ``mix(key ^ salt)`` per opaque segment (the per-segment seed of its tokens)."""
    k = np.asarray(keys, dtype=np.uint64)
    s = np.asarray(salts, dtype=np.uint64) if not isinstance(salts, int) else np.uint64(salts & (2**64 - 1))
    with np.errstate(over="ignore"):
        return splitmix64(k ^ s)


def opaque_run(bases: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray | None = None
               ) -> np.ndarray:
    """int32 [sum(lengths)]: tokens ``starts[i] .. starts[i] + lengths[i]`` of each opaque segment ``i``
    (given by its base, :func:`opaque_bases`), concatenated. Vectorized over all pieces."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    fast = accel.kernels(total)
    if fast is not None and (out is None or (out.dtype == np.int32 and out.flags.c_contiguous)):
        res = np.empty(total, np.int32) if out is None else out
        fast.opaque_fill(np.ascontiguousarray(bases, np.uint64).ravel(), False,
                         np.ascontiguousarray(np.broadcast_to(starts, lengths.shape), np.int64),
                         np.ascontiguousarray(lengths), _MASK, res)
        return res
    with np.errstate(over="ignore"):
        if lengths.size == 1 or (lengths.size and (lengths == lengths[0]).all()
                                 and (np.asarray(starts) == 0).all()):
            n = int(lengths[0])
            step = (np.arange(n, dtype=np.uint64) + np.uint64(int(np.asarray(starts).ravel()[0]))) * _GOLDEN
            z = (np.asarray(bases, np.uint64)[:, None] + step[None, :]).ravel()
        else:
            offs = np.zeros(lengths.size + 1, np.int64)
            np.cumsum(lengths, out=offs[1:])
            seg = np.repeat(np.arange(lengths.size), lengths)
            z = np.arange(total, dtype=np.uint64)
            z -= (offs[:-1] - np.asarray(starts, np.int64))[seg].astype(np.uint64)
            z *= _GOLDEN
            z += np.asarray(bases, np.uint64)[seg]
        splitmix64(z)
    z &= _MASK
    if out is None:
        return z.astype(np.int32)
    out[:] = z
    return out


def opaque_tokens(keys: np.ndarray, lengths: np.ndarray, salt: np.ndarray | int = 0
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of opaque segments ``(keys, salt, lengths)``, vectorized over all of them.

    Returns ``(tokens int32 [sum(lengths)], offsets int64 [n+1])``; ``salt`` is one int or one per key.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if lengths.size == 0:
        return np.zeros(0, np.int32), offsets
    bases = opaque_bases(keys, salt)
    return opaque_run(bases, np.zeros(lengths.size, np.int64), lengths), offsets


def opaque_segment_id(key: int, salt: int, length: int) -> int:
    """Content id of an opaque segment: xxh64 of ``key, salt, length`` (uint64 LE) under a seed of its own."""
    raw = np.array([key & (2**64 - 1), salt & (2**64 - 1), length], dtype="<u8").tobytes()
    return xxhash.xxh64_intdigest(raw, seed=_OPAQUE_ID_SEED)


@dataclass(frozen=True, slots=True)
class Segments:
    """Distinct content. ``offsets`` [S+1]: virtual CSR offsets (lengths); stored tokens of segment ``i``
    are ``tokens[token_offsets[i]:token_offsets[i+1]]`` (``token_offsets`` None = ``offsets``); an opaque
    segment stores nothing and has ``keys[i]``/``salts[i]`` (None when there are no opaque segments)."""

    ids: np.ndarray                          # uint64 [S], unique
    kinds: np.ndarray                        # uint8 [S], index into KINDS
    offsets: np.ndarray                      # int64 [S+1]
    tokens: np.ndarray                       # int32 or uint16 [stored tokens] (:func:`narrow_tokens`)
    token_offsets: np.ndarray | None = None  # int64 [S+1]
    keys: np.ndarray | None = None           # uint64 [S]
    salts: np.ndarray | None = None          # uint64 [S]

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def num_opaque(self) -> int:
        return 0 if self.token_offsets is None else int(np.count_nonzero(self.opaque_mask))

    @property
    def opaque_mask(self) -> np.ndarray:
        """bool [S]: segments whose tokens are derived, not stored."""
        if self.token_offsets is None:
            return np.zeros(len(self), bool)
        return np.diff(self.token_offsets) == 0

    def stored_range(self, i: int) -> tuple[int, int]:
        t = self.offsets if self.token_offsets is None else self.token_offsets
        return int(t[i]), int(t[i + 1])

    def tokens_at(self, rows: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """int64: token ``pos[k]`` of segment row ``rows[k]`` for every ``k`` (read where stored, derived where
        opaque), vectorized."""
        out = np.zeros(rows.shape[0], np.int64)
        t = self.offsets if self.token_offsets is None else self.token_offsets
        st = t[rows + 1] > t[rows]
        k = np.flatnonzero(st)
        out[k] = self.tokens[t[rows[k]] + pos[k]]
        k = np.flatnonzero(~st)
        if k.shape[0]:
            out[k] = opaque_run(opaque_bases(self.keys[rows[k]], self.salts[rows[k]]), pos[k],
                                np.ones(k.shape[0], np.int64))
        return out

    def segment(self, i: int, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """int32: tokens ``[lo, hi)`` of segment ``i`` (a view for stored ones, a copy where they are kept as
        uint16, derived for opaque ones)."""
        n = int(self.offsets[i + 1] - self.offsets[i])
        hi = n if hi is None else hi
        a, b = self.stored_range(i)
        if b > a:
            got = self.tokens[a + lo:a + hi]
            return got if got.dtype == np.int32 else got.astype(np.int32)
        if hi <= lo:                  # (nothing to derive: an empty segment is stored as nothing, opaque or not)
            return np.zeros(0, np.int32)
        fast = accel.kernels(hi - lo)
        if fast is not None:          # NOTE (speed): one call, no per-call numpy set-up (one per prompt)
            out = np.empty(hi - lo, np.int32)
            fast.opaque_fill(self.keys[i:i + 1] ^ self.salts[i:i + 1], True, np.array([lo], np.int64),
                             np.array([hi - lo], np.int64), _MASK, out)
            return out
        base = opaque_bases(self.keys[i:i + 1], self.salts[i:i + 1])
        return opaque_run(base, np.array([lo]), np.array([hi - lo]))

    def pieces(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(lo, hi, keys, lengths)`` int64/int64/uint64/int64 per segment row of ``rows``: where
        :meth:`gather` takes its tokens from: ``tokens[lo:hi]`` when ``hi > lo`` (stored), else derived from
        ``keys`` (``key ^ salt``; :func:`opaque_run` of ``splitmix64(key ^ salt)``) for ``lengths`` tokens:
        what a compiled consumer needs to read a prompt's tokens itself, without gathering them."""
        rows = np.asarray(rows, np.int64)
        t = self.offsets if self.token_offsets is None else self.token_offsets
        keys = (np.zeros(rows.shape[0], np.uint64) if self.keys is None
                else self.keys[rows] ^ self.salts[rows])
        return t[rows], t[rows + 1], keys, self.offsets[rows + 1] - self.offsets[rows]

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """int32: the tokens of segment rows ``rows`` concatenated (a view when ``rows`` is one stored
        segment; opaque pieces derived in one vectorized call)."""
        rows = np.asarray(rows, dtype=np.int64)
        t = self.offsets if self.token_offsets is None else self.token_offsets
        if rows.size == 1:
            return self.segment(int(rows[0]))
        lens = self.offsets[rows + 1] - self.offsets[rows]
        out = np.empty(int(lens.sum()), np.int32)
        a, b = t[rows], t[rows + 1]
        opq = (b == a) & (lens > 0)            # (an empty row holds nothing to derive, stored or not)
        fast = accel.kernels(out.shape[0])
        if fast is not None and opq.all():     # NOTE (speed): all opaque (Mooncake blocks): one kernel call
            fast.opaque_fill(self.keys[rows] ^ self.salts[rows], True, np.zeros(rows.size, np.int64), lens, _MASK,
                             out)
            return out
        pos = np.zeros(rows.size + 1, np.int64)
        np.cumsum(lens, out=pos[1:])
        for k in np.flatnonzero(~opq).tolist():
            out[pos[k]:pos[k + 1]] = self.tokens[a[k]:b[k]]
        if opq.any():
            k = np.flatnonzero(opq)
            r = rows[k]
            toks = opaque_run(opaque_bases(self.keys[r], self.salts[r]), np.zeros(k.size, np.int64), lens[k])
            if k.size == rows.size:
                return toks
            dst = np.repeat(pos[k] - np.r_[0, np.cumsum(lens[k])[:-1]], lens[k]) + np.arange(toks.size)
            out[dst] = toks
        return out

    def materialized(self) -> Segments:
        """The same segments with every token stored (opaque ones derived now)."""
        if self.token_offsets is None:
            return self
        return Segments(self.ids, self.kinds, self.offsets, self.gather(np.arange(len(self))))

    def take(self, lo: int, hi: int) -> Segments:
        """Rows ``[lo, hi)`` as a Segments of their own (offsets rebased)."""
        t = self.token_offsets
        tl = self.offsets if t is None else t
        sub_tok = self.tokens[tl[lo]:tl[hi]]
        return Segments(self.ids[lo:hi], self.kinds[lo:hi], self.offsets[lo:hi + 1] - self.offsets[lo], sub_tok,
                        None if t is None else t[lo:hi + 1] - t[lo],
                        None if self.keys is None else self.keys[lo:hi],
                        None if self.salts is None else self.salts[lo:hi])
