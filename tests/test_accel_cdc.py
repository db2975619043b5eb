"""The compiled CDC kernels (pic.accel group "cdc": Gear scans, fused layout, gap screen, xxh64 fingerprints) give
exactly what the numpy paths give."""

from __future__ import annotations

import numpy as np
import pytest

from pic import accel
from pic.engine import cdc

pytest.importorskip("numba")


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
        for kind, t in _streams(rng, n, hot):
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
            for kind, t in _streams(rng, n, hot):
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


@pytest.mark.parametrize("gear", cdc.GEARS)
def test_gear_layout_forced_cuts_of_random_gaps(modes, gear) -> None:
    """Random content with many over-long gaps (avg_chunk near max_chunk): the fused kernel's forced cuts,
    anchors and fingerprints equal the numpy rules', resumed from an anchor too (both Gear value kinds)."""
    cfg = cdc.CDCConfig(avg_chunk=900, min_chunk=64, max_chunk=1000, gear=gear)
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


def _streams(rng, n: int, hot: int):
    """``(kind, tokens)``: ``n`` read-only tokens (a view at an odd offset) of each kind: random ids, negative
    ids, the ``hot`` token repeated (every full window a candidate), random with ``hot`` in the middle third."""
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
        t = buf[1:]
        t.flags.writeable = False
        yield kind, t
