"""Paged latent cache helpers: write/gather round trip, span → δ table, runs of equal δ."""

from __future__ import annotations

import pytest

GPU_EXTRA = "kernel tests need the gpu extra: pip install -e '.[gpu]'"
torch = pytest.importorskip("torch", reason=GPU_EXTRA)
pytest.importorskip("triton", reason=GPU_EXTRA)

from pic.kernels.paged_cache import (
    LatentCacheConfig,
    delta_runs,
    gather_tokens,
    rotation_positions,
    span_block_delta,
    write_tokens,
)


def test_write_gather_roundtrip_exact():
    """Tokens written through a shuffled block table come back bit-exact, in logical order."""
    cfg = LatentCacheConfig(num_pages=6, page_size=4, kv_lora_rank=8, rope_dim=4)
    cache = cfg.alloc(torch.float32)
    bt = torch.tensor([[5, 0, 3], [1, 4, 2]], dtype=torch.int32)
    ckv, kr = torch.randn(10, 8), torch.randn(10, 4)
    write_tokens(cache, bt, 1, 0, ckv[:6], kr[:6])
    write_tokens(cache, bt, 1, 6, ckv[6:], kr[6:])
    assert torch.equal(gather_tokens(cache, bt, 1, 10), torch.cat([ckv, kr], 1))
    assert torch.isnan(cache[5]).all()  # pages of sequence 0 were never written


def test_span_block_delta_table():
    """Spans set δ on their pages; misaligned or overlapping spans are refused."""
    t = span_block_delta([[(0, 70, 5), (128, 10, -9)], []], num_blocks=4, page_size=64)
    assert t.tolist() == [[5, 5, -9, 0], [0, 0, 0, 0]]
    with pytest.raises(ValueError, match="multiple of 64"):
        span_block_delta([[(10, 5, 1)]], 4, 64)
    with pytest.raises(ValueError, match="overlaps"):
        span_block_delta([[(0, 100, 1), (64, 10, 2)]], 4, 64)


def test_rotation_positions_modes():
    """Stored-rotated: δ of the page; pre-RoPE: logical index + δ."""
    d = torch.tensor([[3, -2]], dtype=torch.int32)
    assert rotation_positions(d, 0, 5, 4, pre_rope=False).tolist() == [3, 3, 3, 3, -2]
    assert rotation_positions(d, 0, 5, 4, pre_rope=True).tolist() == [3, 4, 5, 6, 2]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_delta_runs_matches_loop(seed):
    """run_end[j] is the first later page with a different δ (exact vs a plain loop)."""
    g = torch.Generator().manual_seed(seed)
    d = torch.randint(0, 3, (3, 17), generator=g).to(torch.int32)
    got = delta_runs(d)
    for b in range(3):
        for j in range(17):
            k = j + 1
            while k < 17 and d[b, k] == d[b, j]:
                k += 1
            assert got[b, j] == k
