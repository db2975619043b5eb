"""Absorbed-MLA extend/prefill over the paged latent cache with k_r rotated on load."""

from pic.kernels.mla_extend.kernel import mla_extend
from pic.kernels.mla_extend.reference import mla_extend_reference

__all__ = ["mla_extend", "mla_extend_reference"]
