"""The optional compiled kernels (pic.accel, numba) give exactly what the numpy paths give."""

from __future__ import annotations

import numpy as np
import pytest

from pic import accel
from pic.engine import cdc
from pic.traces.content import Segments, opaque_bases, opaque_run

pytest.importorskip("numba")


def test_other_policies_kernels_load_on_first_use() -> None:
    """Loading the kernels loads none of the groups (CDC's, fixed-chunk's, rdr's: a fresh process loads only
    what its policies call), nor cffi or scipy; ``accel.kernels(n, group)`` loads a group with its kernels."""
    import subprocess
    import sys

    code = ("import sys; from pic import accel; accel.set_mode('1'); mod = accel.kernels(1); "
            "print(sorted(m for m in sys.modules if m.startswith('pic._accel_numba_') or m in ('cffi', 'scipy'))); "
            "a, b, c = accel.kernels(1, 'fixed'), accel.kernels(1, 'rdr'), accel.kernels(1, 'cdc'); "
            "import pic._accel_numba_fixed, pic._accel_numba_rdr, pic._accel_numba_cdc; "
            "print(a is pic._accel_numba_fixed and b is pic._accel_numba_rdr and c is pic._accel_numba_cdc "
            "and mod is sys.modules['pic._accel_numba'] "
            "and all(callable(getattr(a, k)) for k in ('window_candidates', 'prefix_hashes', 'segment_prefix_hashes', 'filter_add')) "
            "and all(callable(getattr(b, k)) for k in ('rdr_request', 'rdr_greedy')) "
            "and all(callable(getattr(c, k)) for k in ('gear_layout', 'gear_candidates', 'fingerprints')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and out[1] == "True"
    # the modules hidden while numba loads (pic.accel._HIDDEN) are importable afterwards
    code = ("import importlib.util, sys; from pic import accel; accel._load(); "
            "print(all(sys.modules.get(m, 0) is not None for m in accel._HIDDEN)); "
            "print(importlib.util.find_spec('scipy') is None or bool(__import__('scipy.linalg').linalg))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["True", "True"]
    from pic import _accel_numba
    with pytest.raises(AttributeError):
        _accel_numba.no_such_kernel  # noqa: B018


def test_cdc_kernels_load_one_by_one_on_first_use() -> None:
    """The "cdc" group (and the xxh64 module it serves from) loads no kernel at import: a kernel is compiled (its
    cached code loaded) when first asked for, with its signature (a writable array converts to the read-only
    argument type), once; the kernels other kernels call are not loaded with them; unknown names raise."""
    import subprocess
    import sys

    code = ("import numpy as np; from pic import accel; accel.set_mode('1'); c = accel.kernels(1, 'cdc'); "
            "import numba, pic._accel_numba_xxh as x; "
            "names = ('gear_candidates', 'mix_candidates', 'gear_cuts', 'gear_hash', 'gear_repeats', 'gear_layout', "
            "'prompt_layout', 'fingerprints', 'edge_keys'); "
            "print(sorted(k for k in names if k in vars(c) or k in vars(x))); "
            "k = c.prompt_layout; print(k is c.prompt_layout, isinstance(k, numba.core.registry.CPUDispatcher), "
            "sorted(k for k in names if k in vars(c) or k in vars(x)), len(k.signatures)); "
            "t = np.arange(300, dtype=np.int32); f = c.fingerprints(t, np.array([0, 100, 300])); "
            "print(f.tolist() == accel._state['groups']['cdc'].fingerprints(t.copy(), np.array([0, 100, 300])).tolist(), "
            "len(c.fingerprints.signatures), c.fingerprints is x.fingerprints, 'edge_keys' in vars(x))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "True True ['prompt_layout'] 1"
    assert out[2] == "True 1 True False"
    accel.set_mode("1")
    try:
        with pytest.raises(AttributeError):
            accel.kernels(1, "cdc").no_such_kernel  # noqa: B018
    finally:
        accel.set_mode(None)


def test_a_policy_group_that_fails_to_load_falls_back_to_numpy(monkeypatch) -> None:
    """A group module that raises on import (a compiler failure) answers None, the numpy path, as the main
    module does; the policies' results do not change."""
    import sys

    from pic.engine.policies.fixed_chunk import _Filters

    accel.set_mode("1")
    try:
        assert accel.kernels(1, "fixed") is sys.modules["pic._accel_numba_fixed"]
        monkeypatch.setitem(accel._state, "groups", {})
        monkeypatch.setitem(sys.modules, "pic._accel_numba_fixed", None)     # import raises ImportError
        assert accel.kernels(1, "fixed") is None
        assert accel.kernels(1) is not None and accel.kernels(1, "rdr") is not None
        from pic.engine.rolling import prefix_hashes, window_hashes

        f = _Filters()
        toks = np.random.default_rng().integers(0, 200_000, 5000, dtype=np.int32)
        w = window_hashes(toks, 8)
        f.add(w[::7])                                                      # numpy path
        got = f.candidates(prefix_hashes(toks), 8, 3)                      # numpy path
        monkeypatch.setitem(accel._state, "groups", {})
        monkeypatch.delitem(sys.modules, "pic._accel_numba_fixed")
        again = f.candidates(prefix_hashes(toks), 8, 3)                    # compiled
        assert all(np.array_equal(a, b) for a, b in zip(got, again, strict=True))
        assert got[0].shape[0] >= w.shape[0] // 7 - 1
    finally:
        accel.set_mode(None)


def test_cdc_group_that_fails_to_load_falls_back_to_numpy(monkeypatch) -> None:
    """CDC's kernel group failing to load (a compiler failure) leaves chunking and fingerprints on the numpy
    paths with the same results; the main module still loads."""
    import sys

    t = np.random.default_rng(4).integers(0, 150_000, 9000, dtype=np.int32)
    accel.set_mode("1")
    try:
        want = cdc.layout_fps(t)
        assert accel.kernels(1, "cdc") is sys.modules["pic._accel_numba_cdc"]
        monkeypatch.setitem(accel._state, "groups", {})
        monkeypatch.setitem(sys.modules, "pic._accel_numba_cdc", None)     # import raises ImportError
        assert accel.kernels(1, "cdc") is None and accel.kernels(1) is not None
        got = cdc.layout_fps(t)
        assert all(np.array_equal(x, y) for x, y in zip(got, want, strict=True)) and want[0].size > 20
        monkeypatch.setitem(accel._state, "groups", {})
        monkeypatch.delitem(sys.modules, "pic._accel_numba_cdc")
    finally:
        accel.set_mode(None)


def test_auto_mode_waits_for_enough_tokens() -> None:
    accel.set_mode("auto")
    try:
        assert accel.kernels(10) is None or accel._state["mod"] is not None
        accel.set_mode("0")
        assert accel.kernels(10**9) is None
        accel.set_mode("1")
        assert accel.kernels(1) is not None
        with pytest.raises(ValueError):
            accel.set_mode("fast")
    finally:
        accel.set_mode(None)


def test_opaque_tokens_equal(modes) -> None:
    rng = np.random.default_rng(7)
    for _ in range(30):
        k = int(rng.integers(1, 12))
        bases = opaque_bases(rng.integers(0, 2**63, k).astype(np.uint64), rng.integers(0, 2**63, k).astype(np.uint64))
        starts = rng.integers(0, 5000, k)
        lengths = rng.integers(0, 700, k)
        if rng.random() < 0.3:
            starts[:] = 0
            lengths[:] = lengths[0]
        a, b = modes(lambda b=bases, s=starts, n=lengths: opaque_run(b, s, n))
        assert a.dtype == b.dtype == np.int32 and np.array_equal(a, b)
        out = np.full(int(lengths.sum()), -1, np.int32)
        c, _ = modes(lambda b=bases, s=starts, n=lengths, out=out: opaque_run(b, s, n, out=out).copy())
        assert np.array_equal(c, a)
    n = 3
    segs = Segments(np.arange(n, dtype=np.uint64), np.zeros(n, np.uint8), np.array([0, 100, 700, 2000]),
                    np.zeros(0, np.int32), np.zeros(n + 1, np.int64), rng.integers(0, 2**63, n).astype(np.uint64),
                    rng.integers(0, 2**63, n).astype(np.uint64))
    for i, lo, hi in ((0, 0, 100), (1, 17, 600), (2, 0, 1300), (2, 1299, 1300)):
        a, b = modes(lambda i=i, lo=lo, hi=hi: segs.segment(i, lo, hi))
        assert np.array_equal(a, b)
    a, b = modes(lambda: segs.gather(np.array([2, 0, 1, 2])))
    assert np.array_equal(a, b)


@pytest.mark.parametrize("model", ["deepseek-v2-lite", "llama-3.1-8b"])
@pytest.mark.parametrize("opts", [{}, {"head_sigma": 0.0, "budget": 0.6}, {"budget": 1.0}, {"budget": 0.05},
                                  {"tiers": "4", "block_tokens": 7, "protect": ""}])
def test_rdr_allocation_equal(modes, model, opts) -> None:
    """rdr's tiers from the compiled passes equal the numpy path's: every counter and both distortion sums,
    bit for bit, on random requests (jumps in the new positions, protected kinds and sinks; equal keys
    everywhere with head_sigma=0)."""
    from pic.engine import policies
    from pic.engine.policies import PolicyContext, RequestView
    from pic.engine.specs import MODELS
    from pic.traces.schema import KIND_CODE

    m = MODELS[model]
    kinds = np.array(sorted(set(KIND_CODE.values())), np.uint8)

    def run():
        rng = np.random.default_rng(9)
        pol = policies.build("rdr", PolicyContext(float("inf"), m.kv_bytes_per_token, model=m, seed=4), opts)
        for rid in range(25):
            nseg = int(rng.integers(1, 6))
            lens = rng.integers(1, 400, nseg)
            bounds = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            req = RequestView(rid, "s", np.zeros(int(bounds[-1]), np.int32), bounds,
                              np.arange(nseg, dtype=np.uint64), rng.choice(kinds, nseg))
            n = int(bounds[-1])
            keep = rng.random(n) < rng.choice([0.3, 0.9, 1.0])
            pos = np.flatnonzero(keep).astype(np.int64)
            if pos.size:
                cut = np.flatnonzero(np.diff(pos) != 1) + 1          # runs of consecutive positions: the spans
                pol._allocate(req, np.stack([pos[np.r_[0, cut]], pos[np.r_[cut - 1, pos.size - 1]] + 1], 1))
        return dict(pol.stats.extra), list(pol._dist)

    (sa, da), (sb, db) = modes(run)
    assert sa == sb and da == db
    assert sa["rdr_tokens"] > 0


def test_rdr_greedy_breaks_ties_as_the_stable_sort() -> None:
    """Equal keys from unequal units (density equal, sizes not) are taken in unit order, as allocate's stable
    sort takes them: the chosen option of every unit is the same, for budgets that cut inside the ties."""
    from pic.engine.rdr_alloc import allocate, gqa_options, make_options

    accel.set_mode("1")
    try:
        fast = accel.kernels(1, "rdr")
    finally:
        accel.set_mode(None)
    # dyadic options: step efficiencies 2, 1, 1/4, so equal keys also fall across steps (d * 2 == 2d * 1)
    dyadic = make_options((0, 2, 4, 8), np.array([0, 0.25, 0.5, 1.0]), np.array([1, 0.5, 0.25, 0.125]))
    rng = np.random.default_rng(2)
    for trial in range(60):
        opts = dyadic if trial % 3 else gqa_options(128, (8, 4, 3, 2))
        B, H = int(rng.integers(1, 30)), int(rng.integers(1, 6))
        sizes = rng.integers(1, 65, B)
        block_w = sizes * rng.choice([0.5, 0.25, 1.0, 2.0], B)       # few distinct densities: many ties
        head = rng.choice([1.0, 2.0], H) if trial % 2 else np.ones(H)
        prot = rng.random(B) < 0.2
        budget = float(rng.uniform(0.05, 0.8) * sizes.sum() * H)
        w = (block_w[:, None] * head[None, :]).ravel()
        size = np.repeat(sizes.astype(np.float64), H)
        ref = allocate(opts, w, size, np.repeat(prot, H), budget)
        option, w2, size2, per, forced, _ = fast.rdr_greedy(block_w.astype(np.float64), sizes.astype(np.int64), prot,
                                                         head, opts.hull, opts.step_frac, opts.efficiency(),
                                                         opts.frac, len(opts.bits), budget)
        assert np.array_equal(option, ref.option), trial
        assert np.array_equal(w2, w) and np.array_equal(size2, size) and forced == ref.forced
        assert np.array_equal(per, np.bincount(ref.option, weights=size, minlength=len(opts.bits)))


def test_rdr_greedy_equal_products_of_unequal_densities() -> None:
    """Two densities one ulp apart whose products with a step's efficiency round to the same key: the stable
    sort takes the lower unit first, although its density is the smaller."""
    from pic.engine.rdr_alloc import allocate, make_options

    accel.set_mode("1")
    try:
        fast = accel.kernels(1, "rdr")
    finally:
        accel.set_mode(None)
    opts = make_options((0, 4, 8), np.array([0, 0.5, 1.0]), np.array([1, 0.25, 0.0]))   # efficiencies 1.5, 0.5
    d0 = 1.341950975487744
    d1 = float(np.nextafter(d0, 2))
    assert d0 * 1.5 == d1 * 1.5 and d0 < d1
    block_w, sizes = np.array([d0, 2 * d1]), np.array([1, 2])
    budget = 0.5                                           # room for unit 0's first step only
    ref = allocate(opts, block_w.copy(), sizes.astype(np.float64), np.zeros(2, bool), budget)
    option = fast.rdr_greedy(block_w, sizes, np.zeros(2, bool), np.ones(1), opts.hull, opts.step_frac,
                             opts.efficiency(), opts.frac, len(opts.bits), budget)[0]
    assert list(ref.option) == [1, 0] and np.array_equal(option, ref.option)


def test_cached_kernels_load_without_refreshing_numba() -> None:
    """A fresh process loads the cached kernels without numba's context refresh (no implementation registry
    imported, no extension scan, yaml and colorama not imported, nor ``numba.np.arrayobj`` for the kernels'
    environments) and they give what the numpy paths give."""
    import subprocess
    import sys

    code = ("import sys, numpy as np; from pic import accel; from pic.engine import cdc; accel.set_mode('1'); "
            "assert accel.kernels(1) is not None; import numba.core.entrypoints as ep; "
            "print(sorted(m for m in ('numba.np.linalg', 'numba.typed.typeddict', 'numba.np.arrayobj', 'yaml', 'colorama') if m in sys.modules), "
            "ep._already_initialized); "
            "t = np.random.default_rng(3).integers(0, 50, 40000).astype(np.int32); "
            "b, a, f = cdc.layout_fps(t); h, e = cdc.edge_keys(t, b, 16); "
            "accel.set_mode('0'); b0, a0, f0 = cdc.layout_fps(t); h0, e0 = cdc.edge_keys(t, b0, 16); "
            "print(all(np.array_equal(x, y) for x, y in ((b, b0), (a, a0), (f, f0), (h, h0), (e, e0))), b.shape[0] > 50)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["[] False", "True True"]


def test_a_cache_miss_refreshes_numba_contexts(monkeypatch) -> None:
    """Under ``accel._cached_overloads`` a cache hit initializes numba's runtime only; a miss refreshes the
    contexts (numba then compiles as usual); numba's own loader is back afterwards."""
    from contextlib import nullcontext

    from numba.core import caching

    calls: list[str] = []
    monkeypatch.setattr(accel, "_runtime", lambda ctx: calls.append("nrt"))

    class Ctx:
        def refresh(self) -> None:
            calls.append("refresh")

    class Fake:
        def __init__(self, got) -> None:
            self.got = got

        def _guard_against_spurious_io_errors(self):
            return nullcontext()

        def _load_overload(self, sig, ctx):
            return self.got

    from numba.core import environment

    orig, orig_env = caching.Cache.load_overload, environment._rebuild_env
    with accel._cached_overloads():
        assert caching.Cache.load_overload(Fake("cres"), (), Ctx()) == "cres" and calls == ["nrt"]
        assert caching.Cache.load_overload(Fake(None), (), Ctx()) is None and calls == ["nrt", "nrt", "refresh"]
        # a cached environment of a module not imported: empty globals, the module not imported (none such here)
        env = environment._rebuild_env("pic._no_such_module", [1, "c"], "_test_env_foot16")
        assert env.globals == {} and list(env.consts) == [1, "c"] and env.env_name == "_test_env_foot16"
        assert environment._rebuild_env("pic._no_such_module", [], "_test_env_foot16") is env     # (memoized)
        assert environment._rebuild_env("pic.accel", [], "_test_env2_foot16").globals is accel.__dict__
    assert caching.Cache.load_overload is orig and environment._rebuild_env is orig_env


def test_runtime_machine_code_cached(tmp_path) -> None:
    """numba's runtime is compiled once and its machine code kept (``accel._runtime``): a second process loads it
    instead of compiling; the kernels then give what the numpy paths give, and a function compiled in that process
    (a cache miss: linked against the loaded runtime, allocating an array) runs."""
    import subprocess
    import sys

    code = ("import os, numpy as np; from pic import accel; from pic.traces import content; "
            "from numba.core.runtime import nrtdynmod; "
            f"accel._RUNTIME_DIR = {str(tmp_path)!r}; made = []; orig = nrtdynmod.create_nrt_module; "
            "nrtdynmod.create_nrt_module = lambda ctx: made.append(1) or orig(ctx); "
            "b = np.arange(1, 6, dtype=np.uint64) * np.uint64(977); s = np.arange(5) * 3; n = np.full(5, 700); "
            "accel.set_mode('1'); got = content.opaque_run(b, s, n); assert accel.kernels(1) is not None; "
            "accel.set_mode('0'); ref = content.opaque_run(b, s, n); "
            "from numba import njit; f = njit(lambda n: np.arange(n) * 3); "
            "print(len(made), bool(np.array_equal(got, ref)), int(f(4).sum()), len(os.listdir(accel._RUNTIME_DIR)))")
    got = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
           for _ in range(2)]
    assert got == [["1", "True", "18", "1"], ["0", "True", "18", "1"]]


def test_kernel_calls_do_not_import_numpy_ma() -> None:
    """A fresh process's kernel calls type their plain arrays without importing ``numpy.ma`` (accel._plain_typeof), and
    give what the numpy path gives; a MaskedArray is still refused as numba refuses it (where numba types it: one of a
    kind of array not met yet); ``np.ma`` works afterwards."""
    import subprocess
    import sys

    code = ("import sys, numpy as np; from pic import accel; from pic.traces.content import opaque_run; "
            "b = np.arange(1, 4, dtype=np.uint64); s = np.array([0, 3, 9], np.int64); n = np.array([5, 0, 7], np.int64); "
            "accel.set_mode('1'); got = opaque_run(b, s, n); "
            "print('numpy.ma' in sys.modules, 'ma' in vars(np), accel.loaded()); "
            "accel.set_mode('0'); print(np.array_equal(got, opaque_run(b, s, n)), got.shape[0]); accel.set_mode('1'); "
            "m = np.ma.masked_array(np.arange(6)[::2], mask=[0, 1, 0])\n"
            "try:\n    accel.kernels(1).opaque_fill(b, False, m, n, np.uint64(1023), got); print('accepted')\n"
            "except Exception as e:\n    print(type(e).__name__, 'MaskedArray' in str(e))\n"
            "print(type(np.ma.masked_array([1])).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:4] == ["False False True", "True 12", "NumbaTypeError True", "MaskedArray"]


def test_opaque_fill_loads_on_first_use() -> None:
    """The main kernel module's opaque-token kernel is compiled/loaded on its first use, not by a group that does not
    call it (the serve group)."""
    import subprocess
    import sys

    code = ("import sys; from pic import accel; accel.set_mode('1'); accel.kernels(1, 'serve').serve_one; "
            "m = sys.modules['pic._accel_numba']; print('opaque_fill' in vars(m)); "
            "f = accel.kernels(1).opaque_fill; print(type(f).__name__, vars(m)['opaque_fill'] is f)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["False", "CPUDispatcher True"]
