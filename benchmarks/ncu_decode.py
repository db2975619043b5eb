"""Driver for Nsight Compute on the decode kernels (no timing of its own).

Usage on the device machine: ``ncu --clock-control none -k regex:mla_decode --launch-skip 4 --launch-count 4
--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
python benchmarks/ncu_decode.py`` (with PYTHONPATH=.). Each shape runs twice (warm-up, then the profiled
launch): 16 heads B=32 8K (split kernel + combine), 128 heads B=64 8K.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_mla as bm  # noqa: E402

from pic.kernels.mla_decode import mla_decode  # noqa: E402

for H, B, L in ((16, 32, 8192), (128, 64, 8192)):
    qn, qr, cache, bt, lens, delta = bm.decode_inputs(B, L, H)
    for _ in range(2):
        mla_decode(qn, qr, cache, bt, lens, delta, max_seq_len=L)
    torch.cuda.synchronize()
