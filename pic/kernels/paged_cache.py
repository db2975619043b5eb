"""Paged latent cache for MLA: one packed row of 576 values per token (512 cKV | 64 k_r) in pages.

Layout ``cache[num_pages, page_size, kv_lora_rank + rope_dim]``. cKV and k_r are packed in one row
because every attention step reads both for the same token: one 1152-byte bf16 row is one contiguous
burst (FlashMLA / SGLang use the same layout), one block-table lookup serves both, and a standalone
δ-rotation pass can still address k_r alone (a strided view of the last 64 columns).

A request's logical token n lives in row ``block_table[b, n // page_size] * page_size + n % page_size``.
The δ table ``block_delta[b, j]`` (int32, one entry per logical page) says how to rotate the k_r of
logical page j when it is loaded:

* ``pre_rope=False`` (k_r stored already rotated at the position it was computed at, p0):
  δ = p_target − p0 — 0 for fresh tokens and same-position reuse, non-zero for rotated reuse.
* ``pre_rope=True`` (k_r stored before RoPE, position-free like cKV): token n is rotated to
  position n + δ (δ = 0 when positions are the logical indices).

A span (a reused chunk) must therefore start on a page boundary; its tail page may be partial and
is followed by fresh pages. ``span_block_delta`` builds the table from spans and refuses misaligned ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True, slots=True)
class LatentCacheConfig:
    """Shape of the paged MLA latent cache."""

    num_pages: int = field(metadata={"help": "pages in the pool"})
    page_size: int = field(default=64, metadata={"help": "tokens per page (a multiple of the kernel tile)"})
    kv_lora_rank: int = field(default=512, metadata={"help": "cKV width"})
    rope_dim: int = field(default=64, metadata={"help": "k_r width"})

    @property
    def row(self) -> int:
        """Values per token row (cKV + k_r)."""
        return self.kv_lora_rank + self.rope_dim

    def alloc(self, dtype: torch.dtype = torch.bfloat16, device: str | torch.device = "cpu") -> torch.Tensor:
        """A NaN-filled cache tensor (so unwritten rows are never silently zero)."""
        return torch.full((self.num_pages, self.page_size, self.row), float("nan"), dtype=dtype, device=device)


def token_rows(block_table: torch.Tensor, b: int, tokens: torch.Tensor, page_size: int) -> torch.Tensor:
    """Flat row index (into cache.view(-1, row)) of logical ``tokens`` of sequence ``b``."""
    return block_table[b, tokens // page_size].long() * page_size + tokens % page_size


def write_tokens(cache: torch.Tensor, block_table: torch.Tensor, b: int, start: int,
                 ckv: torch.Tensor, k_r: torch.Tensor) -> None:
    """Write T tokens' cKV [T, 512] and k_r [T, 64] at logical positions start..start+T of sequence b."""
    page, row = cache.shape[1], cache.shape[2]
    if ckv.shape[0] != k_r.shape[0] or ckv.shape[1] + k_r.shape[1] != row:
        raise ValueError(f"write_tokens: ckv {tuple(ckv.shape)} + k_r {tuple(k_r.shape)} do not fill rows of {row}")
    rows = token_rows(block_table, b, torch.arange(start, start + ckv.shape[0], device=block_table.device), page)
    flat = cache.view(-1, row)
    flat[rows] = torch.cat([ckv, k_r], dim=1).to(cache.dtype)


def gather_tokens(cache: torch.Tensor, block_table: torch.Tensor, b: int, seq_len: int) -> torch.Tensor:
    """The dense [seq_len, row] latent rows of sequence ``b`` (for references)."""
    page, row = cache.shape[1], cache.shape[2]
    rows = token_rows(block_table, b, torch.arange(seq_len, device=block_table.device), page)
    return cache.view(-1, row)[rows]


def rotation_positions(block_delta: torch.Tensor | None, b: int, seq_len: int, page_size: int,
                       pre_rope: bool) -> torch.Tensor:
    """Per-token rotation applied at load (int64 [seq_len]): δ of its page, plus n when pre_rope."""
    n = torch.arange(seq_len)
    delta = torch.zeros(seq_len, dtype=torch.int64) if block_delta is None else \
        block_delta[b].cpu().long()[n // page_size]
    return delta + n if pre_rope else delta


def span_block_delta(spans: list[list[tuple[int, int, int]]], num_blocks: int, page_size: int) -> torch.Tensor:
    """δ table [B, num_blocks] int32 from per-sequence spans ``(start_token, num_tokens, delta)``.

    Tokens outside every span get δ = 0 (fresh or same-position). A span must start on a page
    boundary and no two spans may share a page.
    """
    table = torch.zeros(len(spans), num_blocks, dtype=torch.int32)
    for b, seq in enumerate(spans):
        owner = torch.full((num_blocks,), -1, dtype=torch.int64)
        for k, (start, length, delta) in enumerate(seq):
            if start % page_size:
                raise ValueError(f"span_block_delta: seq {b} span {k}: start {start} not a multiple of {page_size}")
            j0, j1 = start // page_size, -(-(start + length) // page_size)
            if j1 > num_blocks or (owner[j0:j1] >= 0).any():
                raise ValueError(f"span_block_delta: seq {b} span {k}: overlaps another span or the table end")
            owner[j0:j1] = k
            table[b, j0:j1] = delta
    return table


def delta_runs(block_delta: torch.Tensor) -> torch.Tensor:
    """run_end[b, j]: first logical page after j whose δ differs from page j's (int32, same device).

    The attention kernels rotate q by −δ once per run of equal δ and stream the run's tiles with a
    loop-invariant query; computed with tensor ops only, so it can sit inside a CUDA graph.
    """
    nb = block_delta.shape[1]
    ks = torch.arange(nb, device=block_delta.device, dtype=torch.int32)
    brk = torch.full_like(block_delta, nb)
    brk[:, 1:] = torch.where(block_delta[:, 1:] != block_delta[:, :-1], ks[1:], brk[:, 1:])
    nxt = torch.cat([brk[:, 1:], torch.full_like(brk[:, :1], nb)], dim=1)
    return nxt.flip(1).cummin(1).values.flip(1).to(torch.int32).contiguous()
