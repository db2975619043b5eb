"""Recurrent layers (Gated DeltaNet, Mamba-2) with initial/final states, per-chunk cache states and their
exact composition, for LinearKV (issue #13; docs/linearkv.md). fla-core kernels on CUDA, float references
elsewhere."""

from pic.kernels.recurrent.compose import compose_states
from pic.kernels.recurrent.kernel import (
    gdn_chunk,
    gdn_chunk_operators,
    gdn_chunk_states,
    have_fla,
    mamba2_chunk,
    mamba2_chunk_states,
)
from pic.kernels.recurrent.reference import (
    gdn_reference,
    gdn_transition_reference,
    mamba2_reference,
    mamba2_transition_reference,
)

__all__ = ["compose_states", "gdn_chunk", "gdn_chunk_operators", "gdn_chunk_states", "gdn_reference",
           "gdn_transition_reference", "have_fla", "mamba2_chunk", "mamba2_chunk_states", "mamba2_reference",
           "mamba2_transition_reference"]
