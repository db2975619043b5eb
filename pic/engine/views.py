"""The replay's request views: ``view(i) -> RequestView`` of request ``i`` in arrival order (engine.replay).

A view refers to the trace's segments (its rows into the trace's :class:`~pic.traces.content.Segments`) and
makes nothing per segment until a policy reads it (its bounds, ids, kinds, tokens: :class:`RequestView`), except
a prompt's :class:`~engine.seq.Seq` (what every exact-prefix walk reads: the ``prefix`` baseline of every
replay, ``block-hash``, ``irminsul``'s prompt index). The views are made from *blocks* of ``_BLOCK`` consecutive
requests, each made with a few numpy calls for all of them: their ids, sessions, token counts and segment
ranges as lists, and their prompts' segment rows and offsets (the bounds) as one flat ``array.array`` each, of
which a Seq takes two slices (C copies). NOTE (speed): made one request at a time (a gather, a cumsum into a new
array, two ``tolist`` and two arrays of them, the ids and kinds gathered) a view cost ~9 us on Mooncake
conversation (24 segments per prompt), ~15% of a ``prefix`` simulation; a one-segment prompt's Seq (Azure) two
arrays made from tuples, ~1 us. The same values: ``Seq.of_segments`` / ``Seq.of_segment`` of the rows and bounds
(int32 where they fit, as they choose).

NOTE (memory): a block's arrays live while some of its requests have not been viewed yet (each simulation
views every request once, roughly in order), at most ``_OPEN`` blocks at once (the oldest is dropped and made
again if needed: closed-loop replays view out of order); nothing per segment occurrence is kept for the
whole trace (chat 10^6: ~10 M occurrences).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Sequence

import numpy as np

from pic.engine.policies.base import RequestView, segment_view
from pic.engine.request import Labels
from pic.engine.seq import Seq

_SHIFT = 11
_BLOCK = 1 << _SHIFT       # requests per block
_MASK = _BLOCK - 1
_OPEN = 16                 # blocks kept at once
_I32 = 1 << 31


def make_view(order: np.ndarray, offs: np.ndarray, seg_idx: np.ndarray, runs: np.ndarray, seg,
              rid: np.ndarray, sess: Sequence[str], num_tok: np.ndarray) -> Callable[[int], RequestView]:
    """``view(i)`` of the request in row ``order[i]`` of a trace whose request ``r`` has segment rows
    ``seg_idx[offs[r]:offs[r+1]]`` (``runs[r]``: they are consecutive), ``rid``/``sess``/``num_tok`` in
    arrival order."""
    seg_len = np.diff(seg.offsets)
    seg_off, seg_ids, seg_kinds = seg.offsets, seg.ids, seg.kinds
    n = int(order.shape[0])
    wide_store = len(seg) >= _I32
    labels = isinstance(sess, Labels)
    blocks: dict[int, list] = {}

    def block(k: int) -> list:
        """``[left, rids, sessions, num_tokens, s0, s1, rows, bounds, starts]`` of the requests ``[k·B, (k+1)·B)``,
        ``left`` of them not viewed yet. Request ``t`` of the block has segment rows ``seg_idx[s0[t]:s1[t]]``;
        its Seq's rows ``rows[starts[t]:starts[t+1]]`` and bounds ``bounds[starts[t]+t:starts[t+1]+t+1]``
        (rows None: the block's prompts are too long for int32; they take ``Seq.of_segments``)."""
        lo = k << _SHIFT
        hi = min(lo + _BLOCK, n)
        m = hi - lo
        r = order[lo:hi]
        s0, s1 = offs[r], offs[r + 1]
        cnt = s1 - s0
        starts = np.zeros(m + 1, np.int64)
        np.cumsum(cnt, out=starts[1:])
        tot = int(starts[-1])
        which = np.repeat(np.arange(m), cnt)
        flat = np.arange(tot) + (s0 - starts[:-1])[which]
        rows = seg_idx[flat]
        ext = np.zeros(tot + m, np.int64)          # each request's segment lengths after a 0 of its own
        ext[np.arange(tot) + which + 1] = seg_len[rows]
        cum = np.cumsum(ext)
        bounds = cum - np.repeat(cum[starts[:-1] + np.arange(m)], cnt + 1)
        if labels:
            names = sess.names
            who = [names[c] for c in sess.codes[lo:hi].tolist()]
        else:
            who = list(sess[lo:hi])
        got = [m, rid[lo:hi].tolist(), who, _shared(num_tok[lo:hi]), s0.tolist(), s1.tolist(), None, None,
               starts.tolist()]
        if not wide_store and not (tot and int(bounds.max()) >= _I32):
            got[6] = array("i", rows.astype(np.int32).tobytes())
            got[7] = array("i", bounds.astype(np.int32).tobytes())
        if len(blocks) >= _OPEN:
            del blocks[next(iter(blocks))]
        blocks[k] = got
        return got

    def view(i: int) -> RequestView:
        k = i >> _SHIFT
        got = blocks.get(k)
        if got is None:
            got = block(k)
        got[0] -= 1
        if not got[0]:
            del blocks[k]
        t = i & _MASK
        s0, s1 = got[4][t], got[5][t]
        ra = got[6]
        if ra is None or s1 == s0:
            rows = seg_idx[s0:s1]
            if s1 - s0 == 1:     # (its ids, kinds and bounds made when read: RequestView)
                return RequestView(got[1][t], got[2][t], None, None, None, None, rows, seg, got[3][t])
            row = order.item(i)
            if runs.item(row):
                a = seg_idx.item(s0)
                b = a + s1 - s0
                return RequestView(got[1][t], got[2][t], None, seg_off[a:b + 1] - seg_off.item(a),
                                   seg_ids[a:b], seg_kinds[a:b], rows, seg, got[3][t])
            bounds = np.zeros(s1 - s0 + 1, np.int64)
            np.cumsum(seg_len[rows], out=bounds[1:])
            return RequestView(got[1][t], got[2][t], None, bounds, seg_ids[rows], seg_kinds[rows], rows, seg)
        st = got[8]
        a, b = st[t], st[t + 1]
        end = got[3][t]           # (its bounds' end: the prompt's length)
        return segment_view(got[1][t], got[2][t], (seg_idx, s0, s1), seg, end,
                            Seq(ra[a:b], got[7][a + t:b + t + 1], seg, None, end))

    return view


def _shared(num_tok: np.ndarray) -> list[int]:
    """``num_tok.tolist()``, as the shared int objects of irminsul's records where that module is loaded (a policy
    that keeps prompts' Seqs is replayed) and every value is below its ``SMALL``.

    NOTE (memory): a Seq's ``end`` is then one of those objects, not a 32 B int of its own: irminsul keeps every
    prompt's Seq (chat 10^6: ~32 MB); a replay without irminsul does not import the table (2.6 MB) for it."""
    out = num_tok.tolist()
    rec = sys.modules.get("pic.engine.policies.irminsul_records")
    ints = getattr(rec, "INTS", None)
    if ints is not None and out and 0 <= min(out) and max(out) < len(ints):
        return list(map(ints.__getitem__, out))
    return out
