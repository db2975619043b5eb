"""The optional compiled kernels (pic.accel, numba) give exactly what the numpy paths give."""

from __future__ import annotations

import numpy as np
import pytest

from pic import accel
from pic.engine import cdc
from pic.traces.content import Segments, opaque_bases, opaque_run

pytest.importorskip("numba")


@pytest.fixture
def modes():
    """Run a function under the numpy path and under the compiled kernels; restore the mode after."""
    def both(fn):
        out = []
        for m in ("0", "1"):
            accel.set_mode(m)
            out.append(fn())
        return out
    yield both
    accel.set_mode(None)


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
            "and all(callable(getattr(b, k)) for k in ('rdr_blocks', 'rdr_greedy')) "
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


@pytest.mark.parametrize("cfg", [cdc.CDCConfig(), cdc.CDCConfig(avg_chunk=180, min_chunk=16, max_chunk=256),
                                 cdc.CDCConfig(gear="mix"),
                                 cdc.CDCConfig(avg_chunk=180, min_chunk=16, max_chunk=256, seed=5, gear="mix")])
def test_cdc_cuts_equal(modes, cfg) -> None:
    rng = np.random.default_rng(3)
    for n in [0, 1, 63, 64, 65, 66, 127, 200, 1023, 1024, 1025, 1090, 4099, 30_000]:
        for kind in ("random", "negative", "low-entropy", "periodic"):
            if kind == "random":
                t = rng.integers(0, 150_000, n, dtype=np.int32)
            elif kind == "negative":
                t = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int32)
            elif kind == "low-entropy":
                t = rng.integers(0, 3, n, dtype=np.int32)
            else:
                t = np.tile(rng.integers(0, 1000, 37, dtype=np.int32), n // 37 + 1)[:n]
            hard = np.sort(rng.choice(max(n, 1), size=min(n, 5), replace=False)) if n and rng.random() < 0.5 else None
            a, b = modes(lambda t=t, hard=hard: cdc.layout(t, cfg, hard))
            assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]), (n, kind)
            assert a[1].dtype == b[1].dtype == bool and a[0].dtype == b[0].dtype == np.int64
            # fused: layout and fingerprints in one call, the same as the two calls
            f0, f1 = modes(lambda t=t, hard=hard: cdc.layout_fps(t, cfg, hard))
            want = cdc.fingerprints(t, a[0])
            for f in (f0, f1):
                assert np.array_equal(f[0], a[0]) and np.array_equal(f[1], a[1]) and np.array_equal(f[2], want)
                assert f[2].dtype == np.uint64
            if n > 400:
                # resumed from an anchor: the tail alone, the same cuts
                bounds, anc = a
                c = int(bounds[np.flatnonzero(anc)[len(np.flatnonzero(anc)) // 2]])
                if c < n:
                    lo = max(0, c - 63)
                    x, y = modes(lambda t=t, c=c, lo=lo, n=n, hard=hard: cdc.layout_from(t[lo:], lo, n, c, cfg, hard))
                    assert np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1])
                    assert np.array_equal(x[0], bounds[bounds >= c])
                    g0, g1 = modes(lambda t=t, c=c, lo=lo, n=n, hard=hard:
                                   cdc.layout_from_fps(t[lo:], lo, n, c, cfg, hard))
                    for g in (g0, g1):
                        assert np.array_equal(g[0], x[0]) and np.array_equal(g[1], x[1])
                        assert np.array_equal(g[2], cdc.fingerprints(t, x[0]))
    for n in (0, 1, 5, 63, 64, 65, 70_000):
        t = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int32)
        a, b = modes(lambda t=t: cdc.gear_hash(t, 3, cfg.gear))
        assert a.dtype == b.dtype == np.uint64 and np.array_equal(a, b)
        assert np.array_equal(a, cdc.gear_hash_gathers(t, 3, cfg.gear))
    for n in (0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 1000):
        t = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int32)
        bounds = np.sort(np.r_[0, rng.integers(0, n + 1, 6), n])      # (empty chunks too)
        a, b = modes(lambda t=t, bounds=bounds: cdc.fingerprints(t, bounds))
        assert np.array_equal(a, b)
        assert b.tolist() == [cdc.fingerprint(t[x:y]) for x, y in zip(bounds[:-1], bounds[1:], strict=True)]
        for m in (1, 4, 16):
            (ha, ta), (hb, tb) = modes(lambda t=t, bounds=bounds, m=m: cdc.edge_keys(t, bounds, m))
            assert ha.dtype == hb.dtype == np.uint64 and np.array_equal(ha, hb) and np.array_equal(ta, tb)
            assert hb.tolist() == [cdc.fingerprint(t[x:x + m]) if n - x >= m else 0 for x in bounds[:-1]]
            assert tb.tolist() == [cdc.fingerprint(t[y - m:y]) if y - x >= m else 0
                                   for x, y in zip(bounds[:-1], bounds[1:], strict=True)]
    # a large input goes through the eight-lane path with every remainder
    for n in (4096 + 64, 4096 + 65, 4096 + 66, 4096 + 67):
        t = rng.integers(0, 2**17, n, dtype=np.int32)
        a, b = modes(lambda t=t: cdc.natural_boundaries(t, cfg))
        assert np.array_equal(a, b)


def test_gear_candidates_kernel_equals_numpy_hash() -> None:
    """The compiled candidate scan with the Gear table (8 vector lanes from 1024 tokens on: the table indices
    of 8 tokens per lane in one vector, the entries loaded one by one, a 64-step warm-up ending on each lane's
    first position, blocks of 8 steps recorded as bit masks, a scalar remainder) gives the indices where the
    numpy Gear hash is below the threshold: every length around the lane split (below, at and above the
    warm-up and the 1024-token switch), random lengths, any window ``[first, last)`` (first and last bounds),
    every position a candidate (a constant run of a hot token), negative token ids, views at an odd offset."""
    fast = accel._load("pic._accel_numba_cdc")
    assert fast is not None
    rng = np.random.default_rng(11)
    table = cdc.gear_table(0)
    thr = cdc.CDCConfig().threshold
    # a token whose constant run hashes to 2**64 - G < thr: every full window over it is a candidate
    idx = (np.arange(200_000, dtype=np.int64).astype(np.uint32) * np.uint32(0x9E3779B1)) >> np.uint32(16)
    hot = int(np.flatnonzero(table[idx] > np.uint64(2**64 - 1) - thr)[0])
    sizes = [64, 65, 100, 127, 128, 129, 1023 + 63, 1024 + 63, 1025 + 63, 1087 + 8, 1151, 1152, 1153, 1160, 1216,
             1217, 4096, 4097, 5000, 40_001] + rng.integers(64, 9000, 12).tolist()
    for n in sizes:
        for kind in ("random", "negative", "constant", "mixed"):
            if kind == "random":
                buf = rng.integers(0, 150_000, n + 1, dtype=np.int32)
            elif kind == "negative":
                buf = rng.integers(-2**31, 2**31 - 1, n + 1, dtype=np.int32)
            elif kind == "constant":
                buf = np.full(n + 1, hot, np.int32)
            else:
                buf = rng.integers(0, 150_000, n + 1, dtype=np.int32)
                buf[n // 3: 2 * n // 3] = hot
            t = buf[1:]                                  # (a view at an odd offset)
            t.flags.writeable = False
            accel.set_mode("0")
            try:
                h = cdc.gear_hash(t, 0, "table")       # (the kernel below is given the table)
            finally:
                accel.set_mode(None)
            mid = min(n - 1, 100)
            for first, last in ((63, n - 1), (63, n), (int(rng.integers(63, n)), n), (mid, max(n - 7, mid)),
                                (63, min(n, 63 + 1024)), (63, min(n, 63 + 1023)), (64, n), (63, 64)):
                want = np.flatnonzero(h[first:last] < thr) + first if last > first else np.zeros(0, np.int64)
                got = fast.gear_candidates(t, table, thr, first, last)
                assert got.dtype == np.int64 and np.array_equal(got, want), (n, kind, first, last)
                if kind == "constant" and last - first > 0 and first >= 63:
                    assert got.size == last - first


def test_fingerprint_kernel_reads_unaligned_pairs() -> None:
    """xxh64 of every slice start parity (the 8-byte lanes are unaligned loads at odd token offsets), of
    slices shorter than 8 tokens and of a view at an odd offset into a larger buffer, equal to xxhash's C."""
    fast = accel._load("pic._accel_numba_cdc")
    assert fast is not None
    rng = np.random.default_rng(5)
    buf = rng.integers(-2**31, 2**31 - 1, 4001, dtype=np.int32)
    for base in (0, 1, 2, 3):
        t = buf[base:]
        assert t.ctypes.data % 8 in (0, 4)
        bounds = np.unique(np.r_[0, rng.integers(0, t.size, 60), np.arange(0, 40), t.size]).astype(np.int64)
        want = [cdc.fingerprint(t[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        assert fast.fingerprints(t, bounds).tolist() == want
        heads, tails = fast.edge_keys(t, bounds, 9)
        assert heads.tolist() == [cdc.fingerprint(t[a:a + 9]) if t.size - a >= 9 else 0 for a in bounds[:-1]]
        assert tails.tolist() == [cdc.fingerprint(t[b - 9:b]) if b - a >= 9 else 0
                                  for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def test_fingerprint_lanes_equal_xxhash() -> None:
    """The 8-lane stripe loop (many chunks of >= 64 tokens: lanes of about equal stripes, chunks left when
    the first lane runs out, tails of 0-7 tokens read from the snapshot, chunks near the end of the buffer
    and short ones one at a time): every fingerprint equals xxhash's C, on views at odd offsets, with a
    base offset (the fused layout's call) too."""
    fast = accel._load("pic._accel_numba_cdc")
    assert fast is not None
    rng = np.random.default_rng(21)
    buf = rng.integers(-2**31, 2**31 - 1, 60_003, dtype=np.int32)
    for trial in range(60):
        t = buf[int(rng.integers(0, 4)):][:int(rng.integers(0, 60_000))]
        n = t.size
        kind = trial % 4
        if kind == 0:       # CDC-like sizes
            sizes = 64 + rng.geometric(1 / 190, n // 64 + 1)
        elif kind == 1:     # every size 0..200 (empty and short chunks among them)
            sizes = rng.integers(0, 200, n // 50 + 1)
        elif kind == 2:     # one very long chunk among short ones
            sizes = np.r_[rng.integers(64, 80, 40), [n], rng.integers(64, 80, 40)]
        else:               # equal sizes: every lane runs out together
            sizes = np.full(n // 64 + 1, 64 + int(rng.integers(0, 8)))
        bounds = np.unique(np.r_[0, np.minimum(np.cumsum(sizes), n), n]).astype(np.int64)
        want = [cdc.fingerprint(t[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        assert fast.fingerprints(t, bounds).tolist() == want, trial
    t = buf[1:40_001]
    cfg = cdc.CDCConfig(avg_chunk=180, min_chunk=64, max_chunk=512, gear="table")   # (the table below)
    b, anc = cdc.layout(t, cfg)
    c = int(b[len(b) // 2])
    got = fast.gear_layout(t[c - 63:], cdc.gear_table(0), np.uint64(0), cfg.threshold, 63, t.size - 1 - (c - 63),
                           c - 63, cfg.min_chunk, c, t.size, cfg.max_chunk, True)
    assert got[3] and got[0].tolist() == b[b >= c].tolist()
    assert got[2].tolist() == [cdc.fingerprint(t[x:y]) for x, y in zip(got[0][:-1], got[0][1:], strict=True)]


def test_gear_repeats_kernel_screens_exactly_the_gaps_with_a_triple() -> None:
    """The compiled screen of over-long gaps says True exactly where a 64-token Gear hash value of the
    windows inside the gap occurs 3 or more times (what ``_periodic_cuts`` looks for, in numpy), and True
    without looking for gaps of more than 2**16 windows."""
    fast = accel._load("pic._accel_numba_cdc")
    assert fast is not None
    rng = np.random.default_rng(9)
    table = cdc.gear_table(0)
    line = rng.integers(0, 150_000, 37, dtype=np.int32)
    parts = [rng.integers(0, 150_000, 900, dtype=np.int32),                     # random: no repeat
             np.tile(line, 40),                                                  # periodic
             (rng.random(1500) < 0.01).astype(np.int32),                        # low entropy: runs of zeros
             np.r_[rng.integers(0, 9, 200), np.tile(line, 4)[:63 + 2 * 37]].astype(np.int32),  # twice only
             np.r_[rng.integers(0, 9, 200), np.tile(line, 4)[:64 + 2 * 37]].astype(np.int32),  # 3 times
             np.full(66, 5, np.int32), np.full(67, 5, np.int32), np.zeros(0, np.int32),
             rng.integers(0, 150_000, 2**16 + 63, dtype=np.int32),                # the largest gap it screens
             rng.integers(0, 150_000, 2**16 + 64, dtype=np.int32)]                # longer: True, unread
    t = np.concatenate(parts)
    ends = np.cumsum([p.size for p in parts])
    starts = ends - [p.size for p in parts]
    got = fast.gear_repeats(t, table, np.uint64(0), starts.astype(np.int64), ends.astype(np.int64))
    want = []
    for s, e in zip(starts, ends, strict=True):
        h = cdc.gear_hash(t[s:e])[63:]
        srt = np.sort(h)
        want.append(bool(e - s > 66 and (srt[2:] == srt[:-2]).any()))
    assert want == [False, True, True, False, True, False, True, False, False, False]
    assert got.tolist() == want[:-1] + [True]
    # each gap alone, and in another order (the hash set is sized per gap)
    for g in (0, 1, 4, 8):
        one = fast.gear_repeats(t, table, np.uint64(0), starts[g:g + 1].astype(np.int64), ends[g:g + 1].astype(np.int64))
        assert one.tolist() == [want[g]]
    back = fast.gear_repeats(t, table, np.uint64(0), starts[::-1].astype(np.int64), ends[::-1].astype(np.int64))
    assert back.tolist() == got.tolist()[::-1]


def test_mix_candidates_kernel_equals_numpy_hash() -> None:
    """The table-free scan (8 vector lanes from 1024 tokens on: a 64-step warm-up ending on each lane's first
    position, blocks of 8 steps recorded as bit masks, a scalar remainder) gives the indices where the numpy
    hash with the table-free Gear values is below the threshold, for every length around the lane split,
    any window ``[first, last)``, every position a candidate (constant run of a hot token) and views at an
    odd offset."""
    fast = accel._load("pic._accel_numba_cdc")
    assert fast is not None
    rng = np.random.default_rng(12)
    thr = cdc.CDCConfig().threshold
    for seed in (0, 7):
        key = cdc.mix_key(seed)
        g = cdc.gear_values(np.arange(5000, dtype=np.int32), seed, "mix")
        hot = int(np.flatnonzero(g > np.uint64(2**64 - 1) - thr)[0])     # constant run hashes to 2**64 - G
        for n in (64, 65, 100, 1023 + 63, 1024 + 63, 1025 + 63, 1087 + 8, 1151, 1152, 1153, 1160, 1216, 1217,
                  5000, 40_001):
            for kind in ("random", "negative", "constant", "mixed"):
                if kind == "random":
                    buf = rng.integers(0, 150_000, n + 1, dtype=np.int32)
                elif kind == "negative":
                    buf = rng.integers(-2**31, 2**31 - 1, n + 1, dtype=np.int32)
                elif kind == "constant":
                    buf = np.full(n + 1, hot, np.int32)
                else:
                    buf = rng.integers(0, 150_000, n + 1, dtype=np.int32)
                    buf[n // 3: 2 * n // 3] = hot
                t = buf[1:]                                  # (a view at an odd offset)
                t.flags.writeable = False
                accel.set_mode("0")
                try:
                    h = cdc.gear_hash(t, seed, "mix")
                finally:
                    accel.set_mode(None)
                mid = min(n - 1, 100)
                for first, last in ((63, n - 1), (63, n), (int(rng.integers(63, n)), n), (mid, max(n - 7, mid))):
                    want = np.flatnonzero(h[first:last] < thr) + first if last > first else np.zeros(0, np.int64)
                    got = fast.mix_candidates(t, key, thr, first, last)
                    assert got.dtype == np.int64 and np.array_equal(got, want), (seed, n, kind, first, last)
                    if kind == "constant" and last - first > 0:
                        assert got.size == last - first
    # the kernels' table-free hash and repeat screen take the same values
    t = np.r_[rng.integers(0, 150_000, 900), np.tile(rng.integers(0, 150_000, 37), 40)].astype(np.int32)
    e = np.zeros(0, np.uint64)
    accel.set_mode("0")
    try:
        want = cdc.gear_hash(t, 3, "mix")
    finally:
        accel.set_mode(None)
    assert np.array_equal(fast.gear_hash(t, e, cdc.mix_key(3)), want)
    assert fast.gear_repeats(t, e, cdc.mix_key(3), np.array([0, 900]), np.array([900, t.size])).tolist() == [False, True]


def test_gear_layout_forced_cuts_of_random_gaps_mix(modes) -> None:
    """As above with the table-free Gear values."""
    cfg = cdc.CDCConfig(avg_chunk=900, min_chunk=64, max_chunk=1000, gear="mix")
    rng = np.random.default_rng(13)
    forced = 0
    for n in (1001, 2500, 4096, 20_000):
        t = rng.integers(0, 150_000, n, dtype=np.int32)
        a, b = modes(lambda t=t: cdc.layout_fps(t, cfg))
        for x, y in zip(a, b, strict=True):
            assert x.dtype == y.dtype and np.array_equal(x, y), n
        forced += int((~a[1]).sum())
    assert forced >= 5


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
                pol._allocate(req, pos)
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
        option, w2, size2, per, forced = fast.rdr_greedy(block_w.astype(np.float64), sizes.astype(np.int64), prot,
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


def test_gear_layout_forced_cuts_of_random_gaps(modes) -> None:
    """Random content with many over-long gaps (avg_chunk near max_chunk): the fused kernel's forced cuts,
    anchors and fingerprints equal the numpy rules', resumed from an anchor too."""
    cfg = cdc.CDCConfig(avg_chunk=900, min_chunk=64, max_chunk=1000)
    rng = np.random.default_rng(11)
    forced = 0
    for n in (1001, 2500, 4096, 20_000):
        t = rng.integers(0, 150_000, n, dtype=np.int32)
        a, b = modes(lambda t=t: cdc.layout_fps(t, cfg))
        for x, y in zip(a, b, strict=True):
            assert x.dtype == y.dtype and np.array_equal(x, y), n
        forced += int((~a[1]).sum())
        assert np.diff(a[0]).max() <= 1000
        anc = np.flatnonzero(a[1])
        c = int(a[0][anc[len(anc) // 2]])
        if 63 < c < n:
            x, y = modes(lambda t=t, c=c, n=n: cdc.layout_from_fps(t[c - 63:], c - 63, n, c, cfg))
            for u, v, w in zip(x, y, (a[0][a[0] >= c], a[1][a[0] >= c], a[2][a[0][:-1] >= c]), strict=True):
                assert np.array_equal(u, v) and np.array_equal(u, w)
    assert forced >= 5


def test_cached_kernels_load_without_refreshing_numba() -> None:
    """A fresh process loads the cached kernels without numba's context refresh (no implementation registry
    imported, no extension scan, yaml and colorama not imported) and they give what the numpy paths give."""
    import subprocess
    import sys

    code = ("import sys, numpy as np; from pic import accel; from pic.engine import cdc; accel.set_mode('1'); "
            "assert accel.kernels(1) is not None; import numba.core.entrypoints as ep; "
            "print(sorted(m for m in ('numba.np.linalg', 'numba.typed.typeddict', 'yaml', 'colorama') if m in sys.modules), "
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
    from numba.core.runtime import nrt

    calls: list[str] = []
    monkeypatch.setattr(nrt.rtsys, "initialize", lambda ctx: calls.append("nrt"))

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

    orig = caching.Cache.load_overload
    with accel._cached_overloads():
        assert caching.Cache.load_overload(Fake("cres"), (), Ctx()) == "cres" and calls == ["nrt"]
        assert caching.Cache.load_overload(Fake(None), (), Ctx()) is None and calls == ["nrt", "nrt", "refresh"]
    assert caching.Cache.load_overload is orig
