"""Absorbed-MLA decode over the paged latent cache with the δ-rotation of k_r fused into the load."""

from pic.kernels.mla_decode.kernel import mla_decode
from pic.kernels.mla_decode.reference import mla_decode_reference

__all__ = ["mla_decode", "mla_decode_reference"]
