"""RoPE (interleaved / NeoX, YaRN) kernel, reference and the rotate-on-load helpers for MLA."""

from pic.kernels.rope.kernel import RopeConfig, rope, split_freq
from pic.kernels.rope.reference import rope_inv_freq, rope_reference, yarn_mscale

__all__ = ["RopeConfig", "rope", "rope_inv_freq", "rope_reference", "split_freq", "yarn_mscale"]
