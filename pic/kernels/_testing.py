"""Test helpers shared by the kernel tests and benchmarks/gpu_check.py (FLA ``_testing.py`` style)."""

from __future__ import annotations

import logging

import torch

log = logging.getLogger("pic.kernels.testing")


def rel_rms(ref: torch.Tensor, out: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64 (inf when out has NaN/inf)."""
    r, o = ref.detach().double().cpu(), out.detach().double().cpu()
    if not torch.isfinite(o).all():
        return float("inf")
    return float((o - r).norm() / r.norm().clamp_min(1e-30))


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, ratio: float) -> float:
    """Assert relative RMS error of ``out`` vs ``ref`` is <= ratio (NaN never passes); log and return it."""
    if ref.shape != out.shape:
        raise AssertionError(f"{name}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    err = rel_rms(ref, out)
    log.info("%s: rel rms %.3e (limit %.1e)", name, err, ratio)
    assert err <= ratio, f"{name}: relative RMS error {err:.3e} > {ratio:.1e}"
    return err


def dot_tol(dtype: torch.dtype, device: str | torch.device) -> float:
    """Relative-RMS limit for attention kernels fed ``dtype``: fp32 dots run exactly under the CPU
    interpreter but as TF32 on CUDA tensor cores (~1e-3), fp16 ~1e-3, bf16 ~1e-2."""
    if dtype == torch.float32:
        return 3e-3 if torch.device(device).type == "cuda" else 1e-4
    return 5e-3 if dtype == torch.float16 else 1e-2


def random_paged_cache(seq_lens: list[int], page_size: int, d_c: int, d_r: int, dtype: torch.dtype,
                       device: str | torch.device = "cpu", seed: int = 0, spare_pages: int = 3):
    """A cache with shuffled pages holding random rows for each sequence.

    Returns (cache [P, page, d_c + d_r], block_table [B, max_blocks] int32, seq_lens int32). Unused
    block-table entries point at a NaN page, so a kernel that reads past seq_len shows it.
    """
    g = torch.Generator().manual_seed(seed)
    blocks = [-(-n // page_size) for n in seq_lens]
    num_pages = sum(blocks) + spare_pages
    perm = torch.randperm(num_pages, generator=g)
    cache = torch.randn(num_pages, page_size, d_c + d_r, generator=g).to(dtype)
    nan_page = int(perm[-1])
    cache[nan_page] = float("nan")
    bt = torch.full((len(seq_lens), max(blocks)), nan_page, dtype=torch.int32)
    k = 0
    for b, nb in enumerate(blocks):
        bt[b, :nb] = perm[k:k + nb].to(torch.int32)
        k += nb
    return cache.to(device), bt.to(device), torch.tensor(seq_lens, dtype=torch.int32, device=device)


def random_delta(block_table: torch.Tensor, seed: int, deltas: tuple[int, ...]) -> torch.Tensor:
    """A δ table drawing each logical page's δ from ``deltas`` (mixes fresh/same-position/rotated)."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(len(deltas), tuple(block_table.shape), generator=g)
    return torch.tensor(deltas, dtype=torch.int32)[idx].to(block_table.device)
