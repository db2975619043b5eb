"""engine.cost_fns: the closures the serving model prices with give exactly the floats of the CostModel methods
they stand for (prefill_step, _one_chunk_terms), for MoE (MLA), dense (GQA) and MoE-with-few-experts models, in
and out of their memos."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pic.engine.cost import CostConfig, CostModel
from pic.engine.cost_fns import one_chunk_terms_fn, prefill_step_fn
from pic.engine.specs import gpu_from_name, model_from_name

PROFILES = Path(__file__).resolve().parents[2] / "pic" / "engine" / "profiles"


@pytest.mark.parametrize("kv_read", [None, 77.5])     # (compressed KV read by decode attention: rdr)
@pytest.mark.parametrize("name", ["deepseek-v2-lite", "llama-3.1-8b", "deepseek-v3", "qwen2.5-7b"])
def test_closures_equal_the_methods(name, kv_read):
    rng = np.random.default_rng(7)
    gpu = gpu_from_name("h200")
    ref = CostModel(model_from_name(name), gpu, CostConfig(step_overhead_s=7e-4), kv_read_bytes=kv_read)
    fast = CostModel(model_from_name(name), gpu, CostConfig(step_overhead_s=7e-4), kv_read_bytes=kv_read)
    step, terms = fast.prefill_step_fn(), fast.one_chunk_terms
    assert step is not fast.prefill_step and terms is not None
    args = [(int(a), int(b), int(c), int(d)) for a, b, c, d in zip(
        rng.integers(0, 9000, 3000), rng.integers(0, 40000, 3000), rng.integers(0, 300, 3000),
        rng.integers(0, 10**7, 3000), strict=True)]
    args += [(1, 0, 0, 0), (1, 5, 1, 7), (2, 0, 0, 0), (0, 3, 2, 9), (-1, 0, 4, 4), (400, 0, 0, 0)]
    args += [(np.int64(a), np.int64(b), c, d) for a, b, c, d in args[:50]]      # numpy ints given
    for rep in range(2):                      # second pass: the memos answer
        for a in args:
            assert step(*a) == ref.prefill_step(*a), a
            n_tok = a[0] + a[1]
            new = min(a[0], n_tok)
            want = ref._one_chunk_terms(n_tok, new, n_tok - new)
            got = terms(n_tok, new, n_tok - new)
            assert got == want and type(got[-1]) is type(want[-1]), (a, rep)
    # a fresh closure over the same (now filled) memos
    assert prefill_step_fn(fast)(*args[0]) == ref.prefill_step(*args[0])
    assert one_chunk_terms_fn(fast)(100, 0, 100) == ref._one_chunk_terms(100, 0, 100)


def test_profile_and_hybrid_take_the_methods():
    from pic.engine.calibration import load_profile

    gpu, m = gpu_from_name("h200"), model_from_name("deepseek-v2-lite")
    prof = CostModel(m, gpu, profile=load_profile(str(PROFILES / "h200-deepseek-v2-lite.json")))
    assert prof.prefill_step_fn() == prof.prefill_step and prof.one_chunk_terms is None
    hyb = CostModel(model_from_name("olmo-hybrid-7b"), gpu)
    assert hyb.one_chunk_terms is None
    assert hyb.prefill_step_fn()(300, 20, 3, 900) == hyb.prefill_step(300, 20, 3, 900)
