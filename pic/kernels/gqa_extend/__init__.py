"""GQA attention for queries at arbitrary positions over a dense KV cache (LinearKV's attention layers)."""

from pic.kernels.gqa_extend.kernel import gqa_extend
from pic.kernels.gqa_extend.reference import gqa_extend_reference

__all__ = ["gqa_extend", "gqa_extend_reference"]
