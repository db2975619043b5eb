"""``linearkv``'s tally in one compiled pass (``linearkv_tally._compiled``, :mod:`pic._accel_numba_lkvtally`): the
same answer as the reference (``linearkv_tally._reference``: each prompt laid out in Python, the fingerprints'
first occurrences by ``np.unique``), with the kernels and without them, where it is told and where it declines (a
hit); its sources are ``linearkv_tally.sources``; the prompts it leaves to the numpy rules and a table and kept
bounds that grow give the same answers."""

from __future__ import annotations

import numpy as np
import pytest

from pic import accel
from pic.engine.policies import linearkv_tally as T
from pic.engine.policies.fixed_chunk_tally import prompt_rows
from pic.engine.replay import workload_from_trace
from tests.policies.test_block_answers import _trace
from tests.policies.test_fixed_chunk_tally import _policy, _prefixes, fresh_trace
from tests.policies.test_linearkv_resume import OPTS, _conversations
from tests.policies.test_oracle_lines import _opaque_trace
from tests.policies.test_oracle_told import _grown_trace

#: chunks at most 32 tokens: a prompt of 33 to 64 tokens takes the numpy rules (one chunk of it is too long)
SMALL = {"avg_chunk": "12", "min_chunk": "4", "max_chunk": "32"}


@pytest.fixture
def compiled():
    accel.set_mode("1")
    if accel.kernels(0, "lkvtally") is None:
        accel.set_mode(None)
        pytest.skip("no compiled kernels here")
    yield
    accel.set_mode(None)


def _answers(trace, opts=None) -> tuple:
    """``(compiled, reference with kernels, reference numpy only)`` of the trace's tally counts."""
    work = workload_from_trace(trace)
    pfx = np.ascontiguousarray(_prefixes(work), np.int64)
    num = np.ascontiguousarray(work.num_prompt, np.int64)
    pol = _policy("linearkv", opts)
    fast = T._compiled(pol, prompt_rows(work), num, pfx)
    ref = T._reference(pol, work, prompt_rows(work), pfx)
    accel.set_mode("0")
    try:
        slow = T._reference(pol, work, prompt_rows(work), pfx)
    finally:
        accel.set_mode("1")
    return fast, ref, slow


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("make", [fresh_trace, _grown_trace, lambda s: _conversations(s, 150),
                                  lambda s: fresh_trace(s, 200)])
@pytest.mark.parametrize("opts", [None, OPTS, SMALL])
def test_compiled_equals_reference(compiled, seed, make, opts):
    """Fresh content past the prefixes, resumed layouts, default, small and tiny chunks: the same counts."""
    fast, ref, slow = _answers(make(seed), opts)
    assert fast is not None and fast == ref == slow


@pytest.mark.parametrize("seed", range(6))
def test_compiled_declines_where_the_reference_does(compiled, seed):
    """Content met again past the prefix (rows at other positions; fresh prompts with a row repeated, a line shorter,
    overlapping, an earlier prompt's row): the compiled pass declines (False) exactly where the reference does."""
    got = []
    for trace in (_opaque_trace(seed, 120), fresh_trace(seed, 90, "row"), fresh_trace(seed, 90, "earlier"),
                  fresh_trace(seed, 90, "overlap"), fresh_trace(seed, 90, "shorter")):
        for opts in (None, OPTS):
            fast, ref, slow = _answers(trace, opts)
            assert fast == ref == slow
            got.append(fast)
    assert False in got or seed % 2       # (some decline)


def test_not_compiled_where_it_does_not_apply(compiled):
    """Prompts of stored tokens (not opaque segments only): None, the reference decides."""
    work = workload_from_trace(_trace(150, 0))
    pfx = np.ascontiguousarray(_prefixes(work), np.int64)
    assert T._compiled(_policy("linearkv"), prompt_rows(work), np.asarray(work.num_prompt, np.int64), pfx) is None


@pytest.mark.parametrize("seed", range(3))
def test_sources_as_numpy(compiled, seed):
    """The kernel's sources (made on its first call) are ``linearkv_tally.sources``'s."""
    work = workload_from_trace(_conversations(seed, 200))
    store, rows, offs, _ = prompt_rows(work)
    pfx = np.ascontiguousarray(_prefixes(work), np.int64)
    num = np.ascontiguousarray(work.num_prompt, np.int64)
    cfg = _policy("linearkv").config.cdc
    fast = accel.kernels(0, "lkvtally")
    st, tab, lb, la = T._buffers(num, pfx, cfg)
    n = num.shape[0]
    src, shared, loff = np.empty(n, np.int64), np.empty(n, np.int64), np.zeros(n + 1, np.int64)
    table, key = T.cdc._kernel_gear(cfg.seed, cfg.gear)
    cols = T._columns(store)
    fast.lkv_pass(cols[1], cols[2], rows, offs, num, pfx, src, shared, loff, st, tab, lb, la, T._NO_BOUNDS,
                  T._NO_FPS, T._MASK, table, key, cfg.threshold, cfg.min_chunk, cfg.max_chunk)
    want_src, want_shared = T.sources(rows, offs, np.diff(store.offsets), pfx)
    assert np.array_equal(src, want_src) and np.array_equal(shared, want_shared) and (shared > 0).sum() > 50


def test_numpy_rules_and_growth(compiled, monkeypatch):
    """Prompts laid out by the numpy rules between compiled calls (chunks of at most 32 tokens, prompts of 33 to 64
    tokens), a table of 16 slots and 4 kept bounds grown in the kernel: the reference's counts."""
    asked = []
    layout = T.cdc.layout_fps

    def spy(*a, **k):
        asked.append(1)
        return layout(*a, **k)

    monkeypatch.setattr(T.cdc, "layout_fps", spy)
    real = T._buffers

    def tiny(num, pfx, cfg):
        st, _, _, _ = real(num, pfx, cfg)
        st[1] = 60
        return st, np.zeros(32, np.uint64), np.empty(4, np.int64), np.empty(4, np.uint8)

    for seed in range(3):
        trace = fresh_trace(seed, 120)
        fast, ref, slow = _answers(trace, SMALL)
        monkeypatch.setattr(T, "_buffers", tiny)
        small, _, _ = _answers(trace, SMALL)
        monkeypatch.setattr(T, "_buffers", real)
        assert fast is not None and fast == small == ref == slow
    assert asked
