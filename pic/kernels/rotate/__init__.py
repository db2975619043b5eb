"""Standalone δ-rotation of paged k_r (un-fused comparison and precision probe)."""

from pic.kernels.rotate.kernel import rotate
from pic.kernels.rotate.reference import rotate_reference

__all__ = ["rotate", "rotate_reference"]
