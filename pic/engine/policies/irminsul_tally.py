"""``irminsul`` told, not asked (#12; ``prefix_twin``'s ``tally``): the state a replay in arrival order leaves where
the trace-level oracle proves that no request meets content past its exact prefix, without asking it request by
request.

Where that holds (one replica, open loop, unbounded, no S1, irminsul's ``min_match >= m``), each lookup serves the
exact prefix ``pfx`` from the chunks of the committed prompt that had it, in place, and the walk from there finds
nothing (every run it could match, of ``min_match`` tokens or more past the prefix, would be content met earlier);
admit registers the prompt's chunks not yet registered and stores its tokens past the prefix once. So, with every
prompt laid out as irminsul lays it out (its whole-prompt CDC layout: a resumed one has the same cuts):

* **stats**: ``lookups``; ``hits`` the requests with ``pfx > 0``; ``prefix_tokens`` the sum of ``pfx``;
  ``chunk_lookups`` the chunks starting at or after ``pfx``; every other counter 0;
* **footprint**: ``registry_entries`` the distinct fingerprints of every layout (each chunk of a prompt is
  registered once: the straddling one, those between a resumed anchor and ``pfx``, a short last one);
  stored tokens (``usage().total``, the peak: an unbounded run never frees) ``sum(N - pfx)``; duplicate stored
  tokens 0: across requests a window past one request's prefix held by another's stored run would be met again
  (the proof), within one only two of its pieces past the prefix on one opaque line repeat a window
  (:func:`_repeats`: declined there; the store's runs are its chunks cut where later prefixes end, and a count
  would follow those cuts).

It is exact only where each chunk is registered where it is first met and nowhere else, which one ordered pass of
the registry checks (:func:`_registry`): a chunk ending past its prompt's prefix must be new (else a fingerprint hit
past the prefix, a short last chunk equal to a stored one, or a fingerprint repeated in the new chunks: stored
once), and a registered one must start where it was first registered (else later prompts sharing it would reuse it
rotated). Anything else declines (False): a prompt of other than a store's opaque segments, possible S2 markers,
``min_match`` or the duplicate count's window below ``m``, a prompt of no token. The tally's state: the stats, the
store's resident bytes, and ``footprint`` (an instance attribute: the registry entries, duplicates 0, no runs).

NOTE (speed): one compiled call (:mod:`pic._accel_numba_tally`) derives, lays out and registers every prompt
(Mooncake conversation: 145 M tokens); the numpy reference (:func:`_reference`) is the policy's own layout per
prompt and a dict.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from pic import accel
from pic.engine import cdc
from pic.engine.policies.base import Footprint
from pic.engine.policies.irminsul_layout import _columns, _may_mark
from pic.traces.content import _MASK, opaque_bases

_GINV = np.uint64(pow(0x9E3779B97F4A7C15, -1, 1 << 64))


def tally(self, work, pfx: np.ndarray, m: int, window: int) -> bool:
    """``prefix_twin``'s ``tally`` of :class:`~engine.policies.irminsul.Irminsul` (bound there)."""
    c, n = self.config, work.num_requests
    if c.s1 or c.min_match < m or window < m or self.stats.lookups or not math.isinf(self.ctx.capacity_bytes) \
            or pfx.shape[0] != n or not n:
        return False
    ntok = np.ascontiguousarray(work.num_prompt, np.int64)
    pfx = np.ascontiguousarray(pfx, np.int64)
    if ntok.min() <= 0 or (pfx < 0).any() or (pfx > ntok).any():
        return False
    got = _prompts(work, c)
    if got is None or _repeats(*got, pfx).shape[0]:
        return False
    reg = _registry(c.cdc, *got, ntok, pfx, work)
    if reg is None:
        return False
    entries, looks = reg
    s, ex, stored = self.stats, self.stats.extra, int((ntok - pfx).sum())
    s.lookups, s.hits = n, int(np.count_nonzero(pfx))
    ex["prefix_tokens"], ex["chunk_lookups"] = int(pfx.sum()), looks
    self._store.evictable = stored * self.ctx.bytes_per_token      # (all released: evictable)
    self.footprint = partial(Footprint, entries, None, 0)       # (no runs: the count known)
    return True


def _prompts(work, c) -> tuple | None:
    """``(columns, rows, offsets)``: every prompt's segment rows (CSR) and their store's columns
    (:func:`~engine.policies.irminsul_layout._columns`) where every prompt is made of one store's opaque (or empty)
    segments that hold no S2 marker; else None."""
    from pic.engine.policies.fixed_chunk_tally import prompt_rows

    got = prompt_rows(work)
    if got is None or any(v._tokens is not None for v in got[3]):
        return None
    src, rows, roffs, _ = got
    cols = _columns(src)
    if cols is None or not cols[5] or (c.s2 and _may_mark(src, c.marker)):
        return None
    return cols, rows, roffs


def _registry(cfg: cdc.CDCConfig, cols: tuple, rows: np.ndarray, roffs: np.ndarray, ntok: np.ndarray, pfx: np.ndarray,
              work) -> tuple[int, int] | None:
    """``(entries, chunk lookups)`` of the ordered registry pass (see the module), or None where it is not exact."""
    fast = accel.kernels(int(ntok.sum()), "tally")
    if fast is None:
        return _reference(cfg, work, pfx)
    table, key = cdc._kernel_gear(cfg.seed, cfg.gear)
    tab, shift, used, looks, i = np.zeros(1 << 17, np.uint64), np.uint64(48), 0, 0, 0
    while True:
        status, i, tab, shift, used, got = fast.tally_pass(cols[1], cols[2], rows, roffs, ntok, pfx, i, _MASK, table,
                                                           key, cfg.threshold, cfg.min_chunk, cfg.max_chunk, tab,
                                                           shift, used)
        looks += got
        if status == fast.NUMPY:        # (its layout by the numpy rules, then on from the next prompt)
            bounds, _, fps = cdc.layout_fps(work.view(i).tokens, cfg)
            status, _, tab, shift, used, got = fast.tally_chunks(bounds, fps, int(pfx[i]), tab, shift, used)
            looks += got
            i += 1
        if status == fast.INEXACT:
            return None
        if status == fast.DONE and i >= ntok.shape[0]:
            return used, looks


def _reference(cfg: cdc.CDCConfig, work, pfx: np.ndarray) -> tuple[int, int] | None:
    """:func:`_registry` by the policy's own layout of each prompt (:func:`engine.cdc.layout_fps`) and a dict: each
    prompt's chunks in order against the fingerprints registered before."""
    first: dict[int, int] = {}
    looks = 0
    for i, p in enumerate(pfx.tolist()):
        bounds, _, fps = cdc.layout_fps(work.view(i).tokens, cfg)
        bl = bounds.tolist()
        for k, f in enumerate(fps.tolist()):
            a, b = bl[k], bl[k + 1]
            looks += a >= p
            at = first.get(f)
            if at is None:
                first[f] = a
            elif b > p or at != a:
                return None
    return len(first), looks


def _repeats(cols: tuple, rows: np.ndarray, roffs: np.ndarray, pfx: np.ndarray) -> np.ndarray:
    """Requests with a piece past the exact prefix whose stretch of its opaque line overlaps another such piece's
    (a window may repeat inside the prompt's stored tokens; two requests' overlapping: content met again, which the
    proof excludes) or wraps past 2^64 (ascending). NOTE (speed): one sort of all the pieces by line position, each
    compared with the next (an overlap anywhere shows there), not a sort per request."""
    cnt = np.diff(roffs)
    item = np.repeat(np.arange(cnt.shape[0], dtype=np.int64), cnt)
    ln = cols[2][rows]
    g = np.cumsum(ln) - ln
    start = g - g[roffs[:-1][item]]                 # (within its prompt)
    end = start + ln
    lo = np.maximum(start, pfx[item])
    keep = np.flatnonzero(end > lo)
    if not keep.shape[0]:
        return keep
    item, lo, start, end = item[keep], lo[keep], start[keep], end[keep]
    with np.errstate(over="ignore"):
        x = opaque_bases(cols[1][rows[keep]]) * _GINV + (lo - start).astype(np.uint64)
        e = x + (end - lo).astype(np.uint64)
    o = np.argsort(x)
    x, e, it = x[o], e[o], item[o]
    clash = np.flatnonzero(x[1:] < e[:-1])
    return np.unique(np.concatenate((it[e < x], it[clash], it[clash + 1])))
