"""The LinearKV benchmark's layer stack on tiny widths (float32, CPU/interpreter or GPU): running only the
tail of a prompt from the true recurrent states and the cached KV of its prefix gives the full prefill's
logits -- the partial forward's positions, KV writes, masking and state plumbing checked on real math."""

from __future__ import annotations

import torch

from pic.kernels._testing import assert_close, dot_tol
from pic.kernels.recurrent.stack import TINY, Stack, standin_spec


def test_partial_forward_from_true_states_equals_full_prefill(device):
    """Prefix [0, 40) from the full run (KV in the cache, GDN states at 40), tail [40, 96) recomputed."""
    n, cut = 96, 40
    st = Stack(TINY, n, device, torch.float32, seed=3)
    x = torch.randn(n, TINY.hidden, generator=torch.Generator().manual_seed(0)).to(device) * 0.5
    pos = torch.arange(n, device=device)
    h, _ = st.forward(x, pos, None, full=True)
    want = st.logits_last(h)
    _, states = st.forward(x[:cut], pos[:cut], None, full=True, want_states=True)   # rewrites rows < cut only
    h2, _ = st.forward(x[cut:], pos[cut:], states, full=False)
    assert_close("tail logits", want, st.logits_last(h2), dot_tol(torch.float32, device))   # TF32 on CUDA


def test_standin_spec_matches_the_stack():
    """The simulator's stand-in has the stack's layers, widths and a dense MLP."""
    m = standin_spec(TINY)
    assert m.num_layers == TINY.num_layers and m.count("gdn") == 3 and m.num_experts == 0
    assert m.intermediate_size == TINY.mlp and m.gdn_num_value_heads == TINY.gdn_vh
