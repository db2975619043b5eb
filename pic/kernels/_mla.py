"""Host-side pieces shared by the MLA decode and extend launchers (and the default scale of their references)."""

from __future__ import annotations

import functools
import math
import os

import torch

from pic.kernels.paged_cache import delta_runs
from pic.kernels.rope.kernel import RopeConfig

LOG2E = 1.4426950408889634
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
LAUNCHED: dict = {}  # the last compiled kernel per launcher ("decode", "extend"): registers, spills, shared memory


@functools.cache
def num_sms(device: torch.device) -> int:
    """Multiprocessor count of a CUDA device, read once (132 on the H200; the CPU interpreter gets 132 too)."""
    if device.type != "cuda":
        return 132
    return torch.cuda.get_device_properties(device).multi_processor_count


def softmax_scale(sm_scale: float | None) -> float:
    """``sm_scale``, or DeepSeek's 1/√192 (qk_nope_head_dim 128 + rope_dim 64) when not given."""
    return sm_scale if sm_scale is not None else 1.0 / math.sqrt(192)


def qk_scale(sm_scale: float | None) -> float:
    """The softmax scale in the log2 domain the kernels use (exp2)."""
    return softmax_scale(sm_scale) * LOG2E


def check_operands(q_nope: torch.Tensor, q_rope: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor,
                   seq_lens: torch.Tensor, rope: RopeConfig) -> tuple[int, int]:
    """Assert the query / cache / table operands fit together; return (page_size, D_R)."""
    *lead, D_C = q_nope.shape
    P, PAGE, ROW = cache.shape
    D_R = ROW - D_C
    assert q_rope.shape == (*lead, D_R) and D_R == rope.rope_dim, "q_rope / rope_dim mismatch"
    assert q_nope.stride(2) == 1 and q_rope.stride(2) == 1 and cache.is_contiguous()
    assert q_nope.dtype == q_rope.dtype == cache.dtype
    assert block_table.dtype == torch.int32 and seq_lens.dtype == torch.int32 and block_table.stride(1) == 1
    return PAGE, D_R


def tile_config(defaults: dict, config: dict | None, page: int) -> dict:
    """``defaults`` overridden by ``config``; a default BLOCK_N is shrunk so that tiles never straddle a page."""
    cfg = {**defaults, **(config or {})}
    if not (config and "BLOCK_N" in config) and page % cfg["BLOCK_N"]:
        cfg["BLOCK_N"] = math.gcd(cfg["BLOCK_N"], page)  # small pages: tiles must not straddle a page
    assert page % cfg["BLOCK_N"] == 0 and cfg["BLOCK_N"] >= 16, \
        f"page_size {page} must be a multiple of BLOCK_N {cfg['BLOCK_N']} (>= 16)"
    return cfg


def rotation_tables(block_table: torch.Tensor, block_delta: torch.Tensor | None, run_end: torch.Tensor | None,
                    rot_side: str, pre_rope: bool) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(block_delta, run_end, q_side): δ = 0 when no table is given, its runs when not given, the rotation side."""
    if block_delta is None:
        block_delta = torch.zeros_like(block_table)
    assert block_delta.shape == block_table.shape and block_delta.dtype == torch.int32
    if rot_side not in ("auto", "q", "k") or (rot_side == "q" and pre_rope):
        raise ValueError(f"rot_side: expected auto/q/k (q only without pre_rope), got {rot_side!r}")
    q_side = rot_side == "q" or (rot_side == "auto" and not pre_rope)
    run_end = delta_runs(block_delta) if run_end is None else run_end
    assert run_end.shape == block_delta.shape and run_end.dtype == torch.int32
    return block_delta, run_end, q_side
