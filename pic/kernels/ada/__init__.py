"""Angle-domain attention (ADA): keys stored as a radius + packed polar angle codes, decode attention
computed from the codes in registers. See README.md."""

from pic.kernels.ada.cache import AdaCache, allocate, rotation
from pic.kernels.ada.encode import ada_encode, store
from pic.kernels.ada.kernel import ada_decode, dense_decode, rotate_queries
from pic.kernels.ada.reference import (
    cache_keys_values,
    decode_attention_reference,
    decode_reference,
    dense_attention_reference,
    encode_reference,
)

__all__ = ["AdaCache", "allocate", "rotation", "ada_encode", "store", "ada_decode", "dense_decode", "rotate_queries",
           "encode_reference", "decode_reference", "cache_keys_values", "decode_attention_reference",
           "dense_attention_reference"]
