"""Host-side layout of one forward: which cache pages each attention sequence reads, where new rows go.

A Plan is executed as ONE forward over its RECOMPUTE spans. Each RECOMPUTE span x becomes one varlen
sequence of the extend kernel whose context is everything before it: the reused pages that lie before x
(read in place from the provider's pages, each page with its δ) followed by the request's own *owned* rows
up to the end of x. Attention over keys is order-free (a key's position lives in its RoPE'd k_r), so the
logical order only has to keep x's rows last for the causal mask.

Reused pieces rarely start on a page boundary of their provider (CDC chunks land anywhere): the whole pages
inside a piece are read in place; the piece's partial head/tail pages are copied into owned rows with k_r
rotated by δ on the way (a short, counted copy: at most 2·(page−1) rows per piece and layer). Owned rows
hold the copied rows and the recomputed rows in prompt order, so each sequence reads an owned prefix.

The last prompt token always runs through the model (its logits are the first output token), also when the
Plan reuses it. Everything here is numpy; ``to_device`` makes the torch ``Batch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pic.engine.plan import Plan
from pic.engine.planlog import Source


class PagePool:
    """Free list of cache page ids (host bookkeeping; the cache tensor lives with the executor)."""

    def __init__(self, num_pages: int) -> None:
        self.num_pages = num_pages
        self._free = list(range(num_pages - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def alloc(self, n: int) -> np.ndarray:
        if n > len(self._free):
            raise MemoryError(f"latent cache full: need {n} pages, {len(self._free)} of {self.num_pages} free "
                              f"(fewer --requests, a smaller --max-tokens, or --layers)")
        out = [self._free.pop() for _ in range(n)]
        return np.asarray(out, dtype=np.int32)

    def free(self, pages: np.ndarray) -> None:
        self._free.extend(int(p) for p in pages[::-1])


@dataclass
class HostBatch:
    """numpy twin of ``pic.kernels.model.layers.Batch`` plus what the accounting needs."""

    token_ids: np.ndarray        # int64 [T]
    positions: np.ndarray        # int32 [T]
    dst_rows: np.ndarray         # int64 [T]
    block_table: np.ndarray      # int32 [B, nb]
    block_delta: np.ndarray      # int32 [B, nb]
    seq_lens: np.ndarray         # int32 [B]
    cu_q: np.ndarray             # int32 [B + 1]
    logit_rows: np.ndarray       # int64 [k]
    copy_src: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    copy_dst: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    copy_delta: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    num_inplace_rows: int = 0    # reused rows read in place (all sequences, distinct)
    num_rotated_rows: int = 0    # of those, rows with δ != 0
    decode: bool = False

    @property
    def num_new(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def num_seqs(self) -> int:
        return int(self.seq_lens.shape[0])

    @property
    def max_new(self) -> int:
        return int((self.cu_q[1:] - self.cu_q[:-1]).max())


def _rows(pages: np.ndarray, pos: np.ndarray, page: int) -> np.ndarray:
    return pages[pos // page].astype(np.int64) * page + pos % page


def full_layout(tokens: np.ndarray, pages: np.ndarray, page: int, vocab: int) -> HostBatch:
    """Full prefill of ``tokens`` into ``pages`` (positions 0..N−1, one sequence)."""
    n = tokens.shape[0]
    pos = np.arange(n)
    return HostBatch(token_ids=tokens.astype(np.int64) % vocab, positions=pos.astype(np.int32),
                     dst_rows=_rows(pages, pos, page), block_table=pages[None, :].astype(np.int32),
                     block_delta=np.zeros((1, pages.shape[0]), np.int32), seq_lens=np.array([n], np.int32),
                     cu_q=np.array([0, n], np.int32), logit_rows=np.array([n - 1], np.int64))


def as_decode(hb: HostBatch) -> HostBatch:
    """The same forward with every new token as its own one-token sequence (causal: token t of sequence b
    sees the first L_b − T_b + t + 1 rows of b), for the split-KV decode kernel. A few new tokens over a long
    context fill the GPU this way; the extend kernel would give them a handful of programs."""
    if hb.decode:
        return hb
    lens = hb.cu_q[1:] - hb.cu_q[:-1]
    seq = np.repeat(np.arange(hb.num_seqs), lens)
    t = np.arange(hb.num_new) - np.repeat(hb.cu_q[:-1], lens)
    seq_lens = (hb.seq_lens[seq] - lens[seq] + t + 1).astype(np.int32)
    return HostBatch(token_ids=hb.token_ids, positions=hb.positions, dst_rows=hb.dst_rows,
                     block_table=hb.block_table[seq], block_delta=hb.block_delta[seq], seq_lens=seq_lens,
                     cu_q=np.arange(hb.num_new + 1, dtype=np.int32), logit_rows=hb.logit_rows,
                     copy_src=hb.copy_src, copy_dst=hb.copy_dst, copy_delta=hb.copy_delta,
                     num_inplace_rows=hb.num_inplace_rows, num_rotated_rows=hb.num_rotated_rows, decode=True)


def owned_rows_needed(plan: Plan, sources: list[Source], page: int) -> int:
    """Rows a Plan's execution writes into its own scratch pages (recomputed + copied partial pages)."""
    return _split(plan.num_tokens, sources, page)[2]


def plan_layout(tokens: np.ndarray, plan: Plan, sources: list[Source], provider_pages: dict[int, np.ndarray],
                scratch: np.ndarray, page: int, vocab: int) -> HostBatch:
    """Layout of ``plan`` executed over providers' pages (``provider_pages[log index]``, page-aligned at
    position 0) with ``scratch`` pages for the owned rows (``owned_rows_needed`` of them)."""
    if plan.correction.recompute_tokens or plan.correction.state_compositions or plan.correction.reencode_tokens:
        raise ValueError("plan has correction work (quality recompute / state composition / re-encode); "
                         "the MLA executor runs span plans only")
    n = plan.num_tokens
    pieces, recompute, num_owned = _split(n, sources, page)
    if scratch.shape[0] * page < num_owned:
        raise ValueError(f"plan_layout: {scratch.shape[0]} scratch pages hold fewer than {num_owned} rows")
    # owned rows in prompt order: copied rows (target pos, provider, provider pos, δ) and recomputed rows
    own_pos, own_src, own_delta = [], [], []
    inplace: list[tuple[int, np.ndarray, int]] = []         # (target start, provider pages, δ)
    for a, b, prov, s, f0, f1 in pieces:
        pp = provider_pages[prov]
        for lo, hi in ((s, min(f0 * page, s + b - a)), (max(f1 * page, f0 * page), s + b - a)):
            if hi > lo:
                p = np.arange(lo, hi)
                own_pos.append(p - s + a)
                own_src.append(_rows(pp, p, page))
                own_delta.append(np.full(hi - lo, a - s, np.int64))
        if f1 > f0:
            inplace.append((a, pp[f0:f1], a - s))
    rec_pos = np.concatenate([np.arange(x, y) for x, y in recompute]) if recompute else np.zeros(0, np.int64)
    all_pos = np.concatenate([*own_pos, rec_pos]) if own_pos else rec_pos
    order = np.argsort(all_pos, kind="stable")
    owned_pos = all_pos[order]                              # prompt position of owned row k
    assert owned_pos.shape[0] == num_owned
    owned_flat = _rows(scratch, np.arange(num_owned), page)
    pos_to_owned = np.full(n, -1, np.int64)
    pos_to_owned[owned_pos] = np.arange(num_owned)
    # sequences: one per recompute span
    bts, bds, lens, cu = [], [], [], [0]
    for x, y in recompute:
        before = [(pg, d) for a, pg, d in inplace if a < x]
        pages_in = np.concatenate([pg for pg, _ in before]) if before else np.zeros(0, np.int32)
        deltas_in = np.concatenate([np.full(pg.shape[0], d, np.int32) for pg, d in before]) if before else \
            np.zeros(0, np.int32)
        owned_end = int(np.searchsorted(owned_pos, y))
        n_own_pages = -(-owned_end // page)
        bts.append(np.concatenate([pages_in, scratch[:n_own_pages]]).astype(np.int32))
        bds.append(np.concatenate([deltas_in, np.zeros(n_own_pages, np.int32)]))
        lens.append(pages_in.shape[0] * page + owned_end)
        cu.append(cu[-1] + (y - x))
    nb = max(b.shape[0] for b in bts)
    bt = np.zeros((len(bts), nb), np.int32)
    bd = np.zeros((len(bts), nb), np.int32)
    for i, (t, d) in enumerate(zip(bts, bds, strict=True)):
        bt[i, :t.shape[0]], bd[i, :d.shape[0]] = t, d
    dst = owned_flat[pos_to_owned[rec_pos]]
    copy_pos = np.concatenate(own_pos) if own_pos else np.zeros(0, np.int64)
    num_inplace = sum(pg.shape[0] for _, pg, _ in inplace) * page
    return HostBatch(
        token_ids=tokens[rec_pos].astype(np.int64) % vocab, positions=rec_pos.astype(np.int32), dst_rows=dst,
        block_table=bt, block_delta=bd, seq_lens=np.asarray(lens, np.int32), cu_q=np.asarray(cu, np.int32),
        logit_rows=np.array([rec_pos.shape[0] - 1], np.int64),
        copy_src=np.concatenate(own_src) if own_src else np.zeros(0, np.int64),
        copy_dst=owned_flat[pos_to_owned[copy_pos]] if own_pos else np.zeros(0, np.int64),
        copy_delta=np.concatenate(own_delta) if own_delta else np.zeros(0, np.int64),
        num_inplace_rows=num_inplace,
        num_rotated_rows=sum(pg.shape[0] for _, pg, d in inplace if d != 0) * page)


def _split(n: int, sources: list[Source], page: int) -> tuple[list, list[tuple[int, int]], int]:
    """(pieces, recompute spans, owned rows). A piece is (start, end, provider, provider_pos, f0, f1) with
    provider pages [f0, f1) read in place; the last token is taken out of any piece (always computed)."""
    pieces = []
    for src in sorted(sources, key=lambda s: s.start):
        a, b = src.start, min(src.end, n - 1)
        if b <= a:
            continue
        s = src.provider_pos
        f0, f1 = -(-s // page), (s + b - a) // page
        pieces.append((a, b, src.provider, s, f0, max(f1, f0)))
    recompute, pos = [], 0
    for a, b, *_ in pieces:
        if a > pos:
            recompute.append((pos, a))
        pos = b
    if pos < n:
        recompute.append((pos, n))
    owned = sum(y - x for x, y in recompute)
    owned += sum((b - a) - (f1 - f0) * page for a, b, _, _, f0, f1 in pieces)
    return pieces, recompute, owned
