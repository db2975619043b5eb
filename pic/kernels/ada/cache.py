"""Paged ADA cache: one byte arena of pages, each page one (sequence, KV head, PAGE tokens) block of a
single tier named by its header. Host-side allocation, the codebook tables the kernels read, and
``build_cache`` (allocate + encode) for tests and benchmarks.

Page layout (bytes; a page starts on a 64-byte unit, ``block_table`` holds page starts in units):

    [0, 16)                header: int32 tier bits (8/4/3/2; 0 = dense), page size, head_dim, magic
    coded page (tier b):   [16, 16 + 4·PAGE) radius r̃ float32 | PAGE × words(b) int32 codes | V
    dense page:            PAGE × D keys (cache dtype) | V
    V:                     PAGE × D values (cache dtype), 16-byte aligned
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from pic.engine.angle_codes import TIERS, pair_codebook, rho_codebook, theta_codebook, tier

UNIT = 64                    # page alignment in bytes; block_table entries count these (arena < 128 GiB)
HEADER = 16
MAGIC = 0x41444121           # "ADA!"
TAB_COLS = 8                 # words, pair_bits, codes_per_word, theta_bits, cs_off, rho_off, v_off_bytes, xy_off
DENSE = 0


@functools.cache
def rotation(head_dim: int, seed: int = 0) -> torch.Tensor:
    """The fixed random orthogonal Π [D, D] (float64, CPU): QR of a seeded Gaussian, sign-fixed."""
    g = torch.Generator().manual_seed(0x5EED + seed)
    a = torch.randn(head_dim, head_dim, generator=g, dtype=torch.float64)
    qm, rm = torch.linalg.qr(a)
    return qm * torch.sign(torch.diagonal(rm))[None, :]


def page_layout(bits: int, page_size: int, head_dim: int, esize: int) -> tuple[int, int]:
    """(V offset in bytes, page bytes rounded up to UNIT) of a page of tier ``bits`` (0 = dense)."""
    if bits == DENSE:
        v_off = HEADER + page_size * head_dim * esize
    else:
        v_off = HEADER + 4 * page_size + 4 * page_size * tier(bits).words(head_dim)
    v_off = -(-v_off // 16) * 16
    size = v_off + page_size * head_dim * esize
    return v_off, -(-size // UNIT) * UNIT


@functools.cache
def _tables_cpu(head_dim: int, page_size: int, esize: int):
    tab = np.zeros((9, TAB_COLS), np.int32)
    cs, rho, thr, xy = [], [], [], []
    thr_off = {}
    for b in TIERS:
        t = tier(b)
        cos, sin = theta_codebook(t.theta_bits)
        c16 = np.stack([cos, sin], 1).astype(np.float16).view(np.uint16).astype(np.uint32)
        packed = (c16[:, 0] | (c16[:, 1] << 16)).view(np.int32)
        cents, cuts = rho_codebook(head_dim, t.rho_bits)
        joint = pair_codebook(head_dim, b)
        tab[b] = (t.words(head_dim), t.pair_bits, t.codes_per_word, t.theta_bits,
                  sum(map(len, cs)), sum(map(len, rho)), page_layout(b, page_size, head_dim, esize)[0],
                  sum(map(len, xy)) if joint is not None else 0)
        if joint is not None:
            j16 = np.stack(joint, 1).astype(np.float16).view(np.uint16).astype(np.uint32)
            xy.append((j16[:, 0] | (j16[:, 1] << 16)).view(np.int32))
        thr_off[b] = sum(map(len, thr))
        cs.append(packed)
        rho.append(cents.astype(np.float32))
        thr.append(np.concatenate([cuts, np.full(2 ** t.rho_bits - len(cuts), np.inf)]).astype(np.float32))
    tab[DENSE, 6] = page_layout(DENSE, page_size, head_dim, esize)[0]
    return tab, np.concatenate(cs), np.concatenate(rho), np.concatenate(thr), thr_off, np.concatenate(xy)


@dataclass(frozen=True)
class Tables:
    """Device copies of the tier table and codebooks (``tab[bits]`` rows, LUTs concatenated per tier)."""

    tab: torch.Tensor        # int32 [9, 8]
    cs_lut: torch.Tensor     # int32: float16 cos | float16 sin << 16, per θ code
    rho_lut: torch.Tensor    # float32 ρ centroids
    rho_thr: torch.Tensor    # float32 ρ thresholds, padded with +inf to 2^rho_bits per tier
    thr_off: dict            # bits -> offset into rho_thr
    rot_x: torch.Tensor      # float32 [D, D/2] = Π[:D/2]^T   (x half of Πk is k @ rot_x)
    rot_y: torch.Tensor      # float32 [D, D/2] = Π[D/2:]^T
    xy_lut: torch.Tensor     # int32: float16 ρ̂cosθ̂ | float16 ρ̂sinθ̂ << 16 per pair code (tiers with <= 8-bit codes)
    rot: torch.Tensor        # float32 [D, D] = Π^T = (rot_x | rot_y)   (Πq = q @ rot, the decode's query)


@functools.cache
def tables(head_dim: int, page_size: int, esize: int, device: str, seed: int = 0) -> Tables:
    """Tables for one (head_dim, page size, value size) on ``device`` (cached)."""
    tab, cs, rho, thr, thr_off, xy = _tables_cpu(head_dim, page_size, esize)
    pi = rotation(head_dim, seed).to(torch.float32)
    h = head_dim // 2
    return Tables(torch.from_numpy(tab).to(device), torch.from_numpy(cs).to(device),
                  torch.from_numpy(rho).to(device), torch.from_numpy(thr).to(device), thr_off,
                  pi[:h].T.contiguous().to(device), pi[h:].T.contiguous().to(device), torch.from_numpy(xy).to(device),
                  pi.T.contiguous().to(device))


@dataclass
class AdaCache:
    """A paged cache of B sequences × H KV heads. ``block_table[b, h, j]``: start (in 64-byte units) of
    the page holding tokens [j·PAGE, (j+1)·PAGE) of sequence b, head h; unused entries point at a
    poison page (NaN radius and values). ``page_bits`` mirrors the page headers on the host."""

    arena: torch.Tensor          # uint8 [num_units * UNIT]
    block_table: torch.Tensor    # int32 [B, H, max_pages]
    seq_lens: torch.Tensor       # int32 [B]
    page_bits: torch.Tensor      # int32 [B, H, max_pages] (CPU)
    page_size: int
    head_dim: int
    dtype: torch.dtype
    seed: int = 0
    host_lens: tuple[int, ...] = ()   # seq_lens on the host (launchers never sync on the device copy)

    @property
    def esize(self) -> int:
        return torch.empty(0, dtype=self.dtype).element_size()

    def views(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The arena as int32, float32 and value-dtype elements (same memory)."""
        return self.arena.view(torch.int32), self.arena.view(torch.float32), self.arena.view(self.dtype)

    def single_tier(self) -> int | None:
        """The tier of every used page when they all share one (None when mixed); host-side, memoized."""
        if not hasattr(self, "_single"):
            u = torch.unique(self.page_bits[self.used_pages()])
            self._single = int(u[0]) if u.numel() == 1 else None
        return self._single

    def tables(self) -> Tables:
        return tables(self.head_dim, self.page_size, self.esize, str(self.arena.device), self.seed)

    def resident_bytes(self) -> int:
        """Bytes of the pages the block table uses (the poison page excluded)."""
        sizes = {b: page_layout(b, self.page_size, self.head_dim, self.esize)[1] for b in (DENSE, *TIERS)}
        used = self.used_pages()
        return int(sum(sizes[int(b)] for b in self.page_bits[used].tolist()))

    def tier_groups(self) -> list[tuple[int, torch.Tensor, torch.Tensor, int, int]]:
        """Per tier present: (bits, block table [B, H, k] of that tier's pages — full pages first, the
        sequence's partial last page last —, tokens [B, H] in them, head stride of that tensor (1),
        max tokens). Host-built once and memoized (one device -> host copy of the block table)."""
        if not hasattr(self, "_groups"):
            P = self.page_size
            bt = self.block_table.cpu()
            used = self.used_pages()
            lens = torch.tensor(self.host_lens, dtype=torch.long)
            last = (lens - 1) // P                                            # [B] last logical page
            rows_last = lens - last * P
            j = torch.arange(bt.shape[2])
            partial = (j[None, :] == last[:, None]) & (rows_last[:, None] < P)   # [B, pages]
            groups = []
            for bits in torch.unique(self.page_bits[used]).tolist():
                mine = used & (self.page_bits == bits)
                key = torch.where(mine, j + partial[:, None, :].long() * (1 << 30), 1 << 31)
                order = torch.argsort(key, dim=2, stable=True)
                count = mine.sum(2)
                k = max(1, int(count.max()))
                sub = torch.gather(bt, 2, order)[:, :, :k].contiguous()
                pad = torch.arange(k)[None, None, :] >= count[:, :, None]
                sub = torch.where(pad, bt.max(), sub)                              # poison page
                toks = count * P - (mine & partial[:, None, :]).sum(2) * (P - rows_last[:, None])
                groups.append((int(bits), sub.to(torch.int32).to(self.arena.device),
                               toks.to(torch.int32).to(self.arena.device), 1, int(toks.max())))
            self._groups = groups
        return self._groups

    def page_kinds(self) -> tuple[bool, bool]:
        """(any dense page, any coded page) among the used pages (host-side, memoized)."""
        if not hasattr(self, "_kinds"):
            used = self.page_bits[self.used_pages()]
            self._kinds = (bool((used == DENSE).any()), bool((used != DENSE).any()))
        return self._kinds

    def used_pages(self) -> torch.Tensor:
        """Boolean [B, H, max_pages] of block-table entries that hold tokens."""
        pages = -(-torch.tensor(self.host_lens, dtype=torch.long) // self.page_size)
        j = torch.arange(self.page_bits.shape[2])
        return (j[None, None, :] < pages[:, None, None]).expand_as(self.page_bits)


def allocate(seq_lens: list[int], num_heads: int, page_size: int, head_dim: int, dtype: torch.dtype,
             bits, device: str | torch.device = "cpu", seed: int = 0, shuffle: int | None = None) -> AdaCache:
    """Allocate pages (headers written, payload zero) for ``seq_lens`` × ``num_heads``.

    ``bits``: one tier for every page (8/4/3/2, 0 = dense) or an int tensor [B, H, max_pages].
    ``shuffle``: seed of a random page placement in the arena (default: pages in (b, h, j) order).
    """
    if page_size % 16 or head_dim % 16:
        raise ValueError("page_size and head_dim must be multiples of 16")
    B = len(seq_lens)
    max_pages = max(1, max(-(-n // page_size) for n in seq_lens))
    page_bits = torch.as_tensor(bits, dtype=torch.int32).expand(B, num_heads, max_pages).clone()
    esize = torch.empty(0, dtype=dtype).element_size()
    for b in torch.unique(page_bits).tolist():
        if b != DENSE:
            tier(b)
    pages = torch.tensor([-(-n // page_size) for n in seq_lens])
    used = (torch.arange(max_pages)[None, None, :] < pages[:, None, None]).expand_as(page_bits)
    size_of = {b: page_layout(b, page_size, head_dim, esize)[1] // UNIT for b in (DENSE, *TIERS)}
    units = torch.zeros(page_bits.shape, dtype=torch.int64)
    for b, u in size_of.items():
        units[(page_bits == b) & used] = u
    flat = units.flatten()
    order = torch.arange(flat.numel()) if shuffle is None else \
        torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(shuffle))
    start = torch.empty_like(flat)
    start[order] = torch.cumsum(flat[order], 0) - flat[order]
    total = int(flat.sum())
    bt = torch.where(used, start.view_as(units), torch.full_like(units, total)).to(torch.int32)
    poison_bits = int(page_bits[used][0]) if used.any() else TIERS[-1]
    arena = torch.zeros((total + size_of[poison_bits]) * UNIT, dtype=torch.uint8, device=device)
    i32 = arena.view(torch.int32)
    heads = torch.cat([bt[used].long(), torch.tensor([total])]).to(device) * (UNIT // 4)
    hb = torch.cat([page_bits[used], torch.tensor([poison_bits], dtype=torch.int32)]).to(device)
    i32[heads] = hb
    i32[heads + 1], i32[heads + 2], i32[heads + 3] = page_size, head_dim, MAGIC
    # poison page: radius / keys and values NaN (a kernel reading past seq_len shows it)
    p0 = total * UNIT
    v_off = page_layout(poison_bits, page_size, head_dim, esize)[0]
    if poison_bits == DENSE:
        arena[p0 + HEADER:p0 + HEADER + page_size * head_dim * esize].view(dtype).fill_(float("nan"))
    else:
        arena[p0 + HEADER:p0 + HEADER + 4 * page_size].view(torch.float32).fill_(float("nan"))
    arena[p0 + v_off:p0 + v_off + page_size * head_dim * esize].view(dtype).fill_(float("nan"))
    return AdaCache(arena, bt.to(device), torch.tensor(seq_lens, dtype=torch.int32, device=device),
                    page_bits, page_size, head_dim, dtype, seed, tuple(int(n) for n in seq_lens))


def destinations(cache: AdaCache, b: int, h: int, n: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(page unit, row) of tokens [start, start + n) of sequence b, head h (int32, CPU)."""
    pos = torch.arange(start, start + n)
    units = cache.block_table[b, h].cpu()[pos // cache.page_size]
    return units.to(torch.int32), (pos % cache.page_size).to(torch.int32)
