"""The counterfactual full prefill of each request (its ``nocache_prefill_joules``), priced in batches.

A request whose plan reuses something is also priced as if it had prefilled every token in the batch it met
(``Replica.prefill_share(n, n)``, before its own prefill changes the batch). Nothing in the simulation reads
that value, so :class:`ShareBook` notes the steps that prefill would take (chunk, decoders, their context) as
the request starts, and prices a batch of them at once (``cost_fns.prefill_shares_fn``: the same floats as
``prefill_step`` one step at a time), writing the joules into the request columns when full and at the end.
NOTE (speed): Mooncake conversation ``prefix``: ~2 steps per request at ~1.2 us each, plus the loop.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

import numpy as np

_FLUSH = 1 << 14        # steps noted before they are priced (bounded memory)


class ShareBook:
    """Notes counterfactual full prefills (:meth:`add`), prices them (:meth:`flush`) into ``cols``."""

    def __init__(self, shares: Callable[..., np.ndarray], watts: float, cols: tuple[array, ...]) -> None:
        self._shares, self._watts, self._cols = shares, watts, cols
        # one entry per prefill: the request, its tokens, the decoders, their context at the first step, the
        # chunk of every step but the last
        self._req, self._tok, self._nd, self._ctx, self._chunk = (array("q") for _ in range(5))
        # ... and where a decoder leaves the batch between its steps: the request, its number of steps, and each
        # step's (chunk, cached tokens, decoders, their context) in order (Replica.prefill_steps)
        self._xreq, self._xnum, self._xsteps = array("q"), array("q"), array("q")

    def add(self, rep: Any, i: int, num_tokens: int) -> float:
        """Request ``i``'s full prefill of ``num_tokens`` tokens on replica ``rep`` as it stands now: the steps
        ``rep.prefill_share(num_tokens, num_tokens)`` prices, noted (returns -1.0): as their shape, or one by one
        where a decoder of the batch would finish between them (changing the later steps; NOTE (speed): Mooncake
        conversation, 9% of requests: priced there one step at a time, ~10 us each)."""
        nd = rep.num_decode
        m = rep.token_budget - nd       # every step's chunk but the last: min(rest, max(1, budget - nd))
        if m < num_tokens:
            if m < 1:
                m = 1
            dec = rep.decoding          # (a decoder leaving after step j < last, finish step <= s + j + 1)
            if dec and dec[0][0] < rep.steps + (num_tokens + m - 1) // m:
                steps = rep.prefill_steps(num_tokens, num_tokens)
                self._xreq.append(i)
                self._xnum.append(len(steps))
                x = self._xsteps
                for st in steps:
                    x.extend(st)
                if len(x) >= 4 * _FLUSH:
                    self.flush()
                return -1.0
        req = self._req
        req.append(i)
        self._tok.append(num_tokens)
        self._nd.append(nd)
        self._ctx.append(rep.ctx_base + nd * rep.steps if nd else 0)
        self._chunk.append(m)
        if len(req) >= _FLUSH:
            self.flush()
        return -1.0

    def flush(self) -> None:
        """Price the noted prefills; each request's joules ``watts * share`` (its steps' shares summed in order,
        from 0.0, as ``prefill_share`` adds them) into every column of ``cols``."""
        if self._xreq:
            self._flush_steps()
        if not self._req:
            return
        tok = np.frombuffer(self._tok, np.int64)
        m = np.minimum(np.frombuffer(self._chunk, np.int64), tok)
        steps = np.maximum(-(-tok // np.maximum(m, 1)), 1)     # (0 tokens: no step; here one of 0, share 0.0)
        first = np.zeros(steps.shape[0] + 1, np.int64)
        np.cumsum(steps, out=first[1:])
        owner = np.repeat(np.arange(steps.shape[0]), steps)
        j = np.arange(first[-1]) - first[owner]      # step j of its prefill: j chunks of m before it
        mo = m[owner]
        cached = j * mo
        chunk = np.minimum(mo, tok[owner] - cached)
        nd = np.frombuffer(self._nd, np.int64)[owner]
        ctx = np.frombuffer(self._ctx, np.int64)[owner] + nd * j
        live = chunk > 0
        sh = np.zeros(chunk.shape[0])
        sh[live] = self._shares(chunk[live], cached[live], nd[live], ctx[live])
        total = sh[first[:-1]]                    # (0.0 + the first step's share: that share)
        for k in range(1, int(steps.max())):      # later steps added in order
            at = np.flatnonzero(j == k)
            total[owner[at]] += sh[at]
        joules = self._watts * total
        who = np.frombuffer(self._req, np.int64).copy()
        del tok, m        # (the buffers' views, before the arrays are emptied)
        for col in self._cols:
            np.frombuffer(col, np.float64)[who] = joules
        for a in (self._req, self._tok, self._nd, self._ctx, self._chunk):
            del a[:]


    def _flush_steps(self) -> None:
        """:meth:`flush` of the prefills noted step by step."""
        num = np.frombuffer(self._xnum, np.int64)
        st = np.frombuffer(self._xsteps, np.int64).reshape(-1, 4)
        sh = self._shares(st[:, 0], st[:, 1], st[:, 2], st[:, 3]) if st.shape[0] else np.zeros(0)
        first = np.zeros(num.shape[0], np.int64)
        np.cumsum(num[:-1], out=first[1:])
        total = np.zeros(num.shape[0])            # (0.0 + each step's share in order, as prefill_share adds them)
        for k in range(int(num.max())):
            at = np.flatnonzero(num > k)
            total[at] += sh[first[at] + k]
        joules = self._watts * total
        who = np.frombuffer(self._xreq, np.int64).copy()
        del num, st
        for col in self._cols:
            np.frombuffer(col, np.float64)[who] = joules
        for a in (self._xreq, self._xnum, self._xsteps):
            del a[:]


class TermsBook:
    """An exact-prefix plan's priced columns (``one_chunk_terms`` of its one chunk: FLOPs, HBM bytes, cache read,
    attention seconds; and of the full prefill: its attention seconds), noted as the request starts
    (:meth:`add`) and priced in batches (:meth:`flush`, ``cost_fns.one_chunk_terms_np``: the same floats) into
    ``cols`` (flops, hbm, read, attn, nocache attn). NOTE (speed): two ``one_chunk_terms`` per request, ~1 us
    each, on Mooncake conversation (its prompt lengths seldom repeat: the full prefill's memo seldom answers)."""

    def __init__(self, terms: Callable[..., tuple], cols: tuple[array, ...]) -> None:
        self._terms, self._cols = terms, cols
        self._req, self._tok, self._new, self._start, self._full = (array("q") for _ in range(5))

    def add(self, i: int, num_tokens: int, num_new: int, start: int, n: int) -> None:
        """Request ``i``: a plan of ``num_tokens`` recomputing ``[start, start + num_new)``; its prompt ``n``."""
        req = self._req
        req.append(i)
        self._tok.append(num_tokens)
        self._new.append(num_new)
        self._start.append(start)
        self._full.append(n)
        if len(req) >= _FLUSH:
            self.flush()

    def flush(self) -> None:
        if not self._req:
            return
        q = np.int64
        full = np.frombuffer(self._full, q)
        flops, hbm, _, read, attn_s = self._terms(np.frombuffer(self._tok, q), np.frombuffer(self._new, q),
                                                  np.frombuffer(self._start, q))
        nc_attn = self._terms(full, full, np.zeros_like(full))[4]
        who = np.frombuffer(self._req, q).copy()
        del full
        for col, v in zip(self._cols, (flops, hbm, read, attn_s, nc_attn), strict=True):
            np.frombuffer(col, np.float64)[who] = v
        for a in (self._req, self._tok, self._new, self._start, self._full):
            del a[:]
