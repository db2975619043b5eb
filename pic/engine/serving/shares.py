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
        # five values per prefill: the request, its tokens, the decoders, their context at the first step, the
        # chunk of every step but the last (one array: one extend per prefill)
        self._notes = array("q")
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
        notes = self._notes
        notes.fromlist([i, num_tokens, nd, rep.ctx_base + nd * rep.steps if nd else 0, m])
        if len(notes) >= 5 * _FLUSH:
            self.flush()
        return -1.0

    def flush(self) -> None:
        """Price the noted prefills; each request's joules ``watts * share`` (its steps' shares summed in order,
        from 0.0, as ``prefill_share`` adds them) into every column of ``cols``."""
        if self._xreq:
            self._flush_steps()
        if not self._notes:
            return
        notes = np.frombuffer(self._notes, np.int64).reshape(-1, 5)
        tok = notes[:, 1]
        m = np.minimum(notes[:, 4], tok)
        steps = np.maximum(-(-tok // np.maximum(m, 1)), 1)     # (0 tokens: no step; here one of 0, share 0.0)
        first = np.zeros(steps.shape[0] + 1, np.int64)
        np.cumsum(steps, out=first[1:])
        owner = np.repeat(np.arange(steps.shape[0]), steps)
        j = np.arange(first[-1]) - first[owner]      # step j of its prefill: j chunks of m before it
        mo = m[owner]
        cached = j * mo
        chunk = np.minimum(mo, tok[owner] - cached)
        nd = notes[:, 2][owner]
        ctx = notes[:, 3][owner] + nd * j
        live = chunk > 0
        sh = np.zeros(chunk.shape[0])
        sh[live] = self._shares(chunk[live], cached[live], nd[live], ctx[live])
        total = sh[first[:-1]]                    # (0.0 + the first step's share: that share)
        for k in range(1, int(steps.max())):      # later steps added in order
            at = np.flatnonzero(j == k)
            total[owner[at]] += sh[at]
        joules = self._watts * total
        who = notes[:, 0].copy()
        del notes, tok        # (the buffer's views, before the array is emptied)
        for col in self._cols:
            np.frombuffer(col, np.float64)[who] = joules
        del self._notes[:]


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

    def __init__(self, terms: Callable[..., tuple], cols: tuple[array, ...], num_prompt: array, reused: array) -> None:
        self._terms, self._cols = terms, cols
        self._notes = array("q")         # (request, num_tokens, num_new, start, n) per request
        # NOTE (speed): request i's plan is Plan.from_prefix(n, r), n its prompt, r its reused tokens (the model's
        # columns ``num_prompt`` and ``reused``, read at :meth:`flush`): ``marks[i] = 1`` instead of a note (an
        # item stored, not a call and five values appended: ~0.5 us a request; 1 B a request)
        self.marks = bytearray(len(num_prompt))
        self._prompt, self._reused = num_prompt, reused

    def add(self, i: int, num_tokens: int, num_new: int, start: int, n: int) -> None:
        """Request ``i``: a plan of ``num_tokens`` recomputing ``[start, start + num_new)``; its prompt ``n``."""
        notes = self._notes
        notes.fromlist([i, num_tokens, num_new, start, n])
        if len(notes) >= 5 * _FLUSH:
            self.flush()

    def flush(self) -> None:
        """Price the noted plans and the marked ones (unmarked then) into ``cols``."""
        marks = np.frombuffer(self.marks, np.uint8)
        q = np.int64
        for lo in range(0, marks.shape[0], _FLUSH):       # (bounded memory: a slice of requests at a time)
            who = lo + np.flatnonzero(marks[lo:lo + _FLUSH])
            if who.shape[0]:
                n, r = np.frombuffer(self._prompt, q)[who], np.frombuffer(self._reused, q)[who]
                self._write(who, self._terms(n, n - r, r), self._terms(n, n, np.zeros_like(n))[4])
                marks[who] = 0
        if not self._notes:
            return
        notes = np.frombuffer(self._notes, np.int64).reshape(-1, 5)
        full = notes[:, 4]
        terms = self._terms(notes[:, 1], notes[:, 2], notes[:, 3])
        nc_attn = self._terms(full, full, np.zeros_like(full))[4]
        who = notes[:, 0].copy()
        del notes, full
        self._write(who, terms, nc_attn)
        del self._notes[:]

    def _write(self, who: np.ndarray, terms: tuple, nc_attn: np.ndarray) -> None:
        """Requests ``who``'s columns from their plans' ``terms`` and their full prefills' attention seconds."""
        flops, hbm, _, read, attn_s = terms
        for col, v in zip(self._cols, (flops, hbm, read, attn_s, nc_attn), strict=True):
            np.frombuffer(col, np.float64)[who] = v
