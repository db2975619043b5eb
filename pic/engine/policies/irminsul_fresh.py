"""Content of the ``irminsul`` policy's prompts that no earlier prompt holds (:class:`FreshContent`): for a store of
opaque segments (:mod:`traces.content`: tokens derived from each segment's key), a prompt whose segments from the end
of its exact prefix on are new holds nothing there that the chunk store can serve, so its lookup needs no probe of
its new chunks' fingerprints or edge keys (:meth:`~engine.policies.irminsul_lookup.ChunkWalk._analyze`)."""

from __future__ import annotations

import numpy as np

from pic import accel
from pic.engine.policies.irminsul_layout import _columns


class FreshContent:
    """Which segment keys the prompts analyzed so far hold (``key ^ salt`` per segment of one store of opaque segments,
    ``kx``, ``lens``: :func:`~engine.policies.irminsul_layout._columns`), to tell a prompt whose content from the end
    of its exact prefix on is in no earlier prompt: nothing there is stored, every stage misses it (:meth:`nothing_past`).

    A prompt's segments are noted when it is analyzed (:meth:`note`, before its admit registers anything: its rows held
    in a list) and counted in a key table at the next check (one compiled call, :func:`pic._accel_numba_irm.kt_fresh`; the table made at the
    first). An opaque segment's tokens derive from its key and offset alone, so two prompts hold equal runs of tokens
    only where they hold segments of one key (of ``min_match`` tokens or more; a shorter chunk, the last, is asked of
    the registry, as is the chunk that straddles the exact prefix's end). What is stored is of analyzed prompts: a key
    never noted is in no stored chunk (one noted, then evicted or never admitted: asked as stored; the walk decides)."""

    __slots__ = ("fast", "src", "kx", "lens", "tab", "shift", "used", "rows", "cur")
    _HELD = 1 << 16                           # prompts held back before they are counted (with a table made)

    def __init__(self, src, kx: np.ndarray, lens: np.ndarray) -> None:
        self.fast, self.src, self.kx, self.lens = None, src, kx, lens
        self.tab, self.shift, self.used = np.zeros(2 << 12, np.uint64), np.uint64(64 - 12), 0
        self.rows: list = []                      # rows of the prompts noted before the current one (held back)
        self.cur = None                           # the current one's

    def __reduce__(self) -> tuple:
        return _no_fresh, ()                # (a copy goes without: every stage asked, as the walk asks them)

    def note(self, req) -> FreshContent | None:
        """Note the prompt being analyzed; None (no longer usable) when its content is not of this store's segments."""
        rows = req.segment_rows
        if req.source is not self.src or rows is None or req._tokens is not None:
            return None
        if self.cur is not None:              # (the same prompt again too: its first admit may have stored it)
            self.rows.append(self.cur)
            if len(self.rows) > self._HELD and self.fast is not None:
                self._count(np.zeros(0, np.int64), 0, 0)
        self.cur = rows
        return self

    def nothing_past(self, req, pos: int, kc: int, k0: int, bounds: list[int], fps: list[int], m: int,
                     entries: dict) -> bool:
        """The prompt being analyzed (noted last) holds from ``pos`` on only segments no earlier prompt holds, its last
        chunk (``bounds``, ``fps``: its layout) is of ``m`` tokens or more or not registered, and so is its chunk
        ``kc`` when it straddles ``pos`` (``kc < k0``): no stage finds anything from ``pos`` on."""
        if len(fps) > kc and (kc < k0 and fps[kc] in entries or bounds[-1] - bounds[-2] < m and fps[-1] in entries):
            return False
        if self.fast is None:
            self.fast = accel.kernels(0, "irm")
            if self.fast is None:
                return False
        return self._count(req.segment_rows, pos, req.num_tokens)

    def _count(self, rows: np.ndarray, pos: int, n: int) -> bool:
        add = _NONE
        if self.rows:
            add = self.rows[0] if len(self.rows) == 1 else np.concatenate(self.rows)
            self.rows = []
            if self.used + len(add) > self.tab.shape[0] >> 2:      # (at most half full)
                bits = 64 - int(self.shift)
                while self.used + len(add) > 1 << (bits - 1):
                    bits += 1
                old, self.tab, self.shift = self.tab, np.zeros(2 << bits, np.uint64), np.uint64(64 - bits)
                self.fast.table_rehash(self.tab, self.shift, old)
        got = self.fast.kt_fresh(self.tab, self.shift, self.kx, self.lens, rows, pos, n, add)
        self.used += got >> 1
        return bool(got & 1)


_NONE = np.zeros(0, np.int64)


def _no_fresh() -> None:
    return None


def start_fresh(pol, req) -> FreshContent | None:
    """The :class:`FreshContent` of irminsul policy ``pol`` for its first analyzed prompt ``req``, where it applies: a
    store of opaque segments only, the shortcuts on, no S1 nor --verify, nothing stored yet, and chunks shorter than
    ``min_match`` only last (``min_chunk >= min_match``); else None."""
    c = pol.config
    if not pol._shortcuts or c.s1 or pol.ctx.verify or c.min_chunk < c.min_match or pol._entries or \
            req.source is None or req.segment_rows is None or req._tokens is not None:
        return None
    cols = _columns(req.source)
    if cols is None or not cols[5]:
        return None
    return FreshContent(req.source, cols[1], cols[2]).note(req)
