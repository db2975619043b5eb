"""Standalone δ-rotation of paged k_r (un-fused comparison and precision probe)."""

from kernels.rotate.kernel import rotate
from kernels.rotate.reference import rotate_reference

__all__ = ["rotate", "rotate_reference"]
