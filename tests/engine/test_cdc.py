"""Content-defined chunking: Gear hash equivalence, boundary rules, shift invariance (Hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from pic.engine import cdc
from pic.engine.cdc import (
    GEARS,
    CDCConfig,
    chunk,
    fingerprint,
    fingerprints,
    gear_hash,
    gear_hash_gathers,
    natural_boundaries,
)

MASK = 2**64 - 1


def _mix(t: int, seed: int) -> int:
    """The table-free Gear value, in Python ints: ``z ^ (z >> 32)``, ``z = ((t mod 2**32) ^ (seed + 1) * golden)
    * 0xBF58476D1CE4E5B9``, mod 2**64."""
    z = (((t & 0xFFFFFFFF) ^ ((seed + 1) * 0x9E3779B97F4A7C15 & MASK)) * 0xBF58476D1CE4E5B9) & MASK
    return z ^ (z >> 32)


def _naive_gear(tokens: np.ndarray, seed: int, gear: str = "table") -> np.ndarray:
    if gear == "mix":
        vals = [_mix(t, seed) for t in tokens.tolist()]
    else:
        g = cdc.gear_table(seed)
        idx = (tokens.astype(np.uint32) * np.uint32(0x9E3779B1)) >> np.uint32(16)
        vals = [int(g[i]) for i in idx.tolist()]
    h, out = 0, []
    for v in vals:
        h = ((h << 1) + v) & MASK
        out.append(h)
    return np.array(out, dtype=np.uint64)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-2**31, 2**31 - 1), min_size=0, max_size=400), st.integers(0, 3), st.sampled_from(GEARS))
def test_gear_hash_matches_naive_recurrence(toks, seed, gear):
    """The vectorized log-doubling hash equals the per-token recurrence and the 64-gather form (both Gear
    value kinds: the seeded table, the table-free multiply-xorshift of the token id)."""
    t = np.array(toks, dtype=np.int32)
    ref = _naive_gear(t, seed, gear)
    assert np.array_equal(gear_hash(t, seed, gear), ref)
    assert np.array_equal(gear_hash_gathers(t, seed, gear), ref)


@pytest.mark.parametrize("gear", GEARS)
def test_gear_hash_blocks_match_naive(monkeypatch, gear):
    """Block seams of the blocked hash give the same values as the recurrence."""
    monkeypatch.setattr(cdc, "_BLOCK", 100)
    t = np.random.default_rng(5).integers(0, 2**31 - 1, 1000, dtype=np.int32)
    assert np.array_equal(gear_hash(t, 1, gear), _naive_gear(t, 1, gear))


def test_mix_values_differ_by_seed_and_token():
    """The table-free values: distinct tokens and seeds give distinct values (the mixer is a bijection of
    the token id); the config rejects an unknown kind."""
    t = np.arange(-5000, 5000, dtype=np.int32)
    a, b = cdc.gear_values(t, 0, "mix"), cdc.gear_values(t, 1, "mix")
    assert np.unique(a).size == t.size and not np.array_equal(a, b)
    with pytest.raises(ValueError):
        CDCConfig(gear="tabel")


@pytest.mark.parametrize("gear", GEARS)
def test_hash_depends_only_on_last_64_tokens(gear):
    """Two streams sharing their last 64 tokens have equal hashes from there on."""
    rng = np.random.default_rng(0)
    tail = rng.integers(0, 50_000, 200, dtype=np.int32)
    a = np.concatenate([rng.integers(0, 50_000, 77, dtype=np.int32), tail])
    b = np.concatenate([rng.integers(0, 50_000, 300, dtype=np.int32), tail])
    assert np.array_equal(gear_hash(a, 0, gear)[77 + 63:], gear_hash(b, 0, gear)[300 + 63:])


@pytest.mark.parametrize("gear", GEARS)
def test_min_max_respected_and_average_near_target(gear):
    """Chunks lie in [min, max] (last excepted) and average near avg_chunk on random content."""
    cfg = CDCConfig(avg_chunk=256, min_chunk=64, max_chunk=1024, gear=gear)
    t = np.random.default_rng(1).integers(0, 150_000, 400_000, dtype=np.int32)
    b = chunk(t, cfg)
    d = np.diff(b)
    assert b[0] == 0 and b[-1] == t.size and (d > 0).all()
    assert d[:-1].min() >= cfg.min_chunk and d.max() <= cfg.max_chunk
    assert 0.85 * 256 < d.mean() < 1.15 * 256


@pytest.mark.parametrize("gear", GEARS)
def test_max_split_on_constant_content(gear):
    """A stream without candidates (one token repeated: period 1) is cut into whole max_chunk pieces from
    the first full hash window on, the ends within [min_chunk, max_chunk]."""
    cfg = CDCConfig(avg_chunk=256, min_chunk=64, max_chunk=1000, gear=gear)
    b = chunk(np.full(5000, 7, np.int32), cfg)
    d = np.diff(b)
    assert d.max() <= 1000 and d.min() >= 64 and (d[1:-1] == 1000).all()


@pytest.mark.parametrize("gear", GEARS)
def test_periodic_run_is_cut_at_the_same_phase_wherever_it_sits(gear):
    """A repeated 23-token line behind headers of different lengths is cut at the same offsets from the
    run's start (whole periods), so every full piece is one chunk content, shared by both prompts. (Data
    dependent: a content-defined cut whose window straddles the run's start moves the gap's start, and the
    pieces are counted from there; over seeds 3-42 of this test it holds for 30 of 40 with the table and 25
    of 40 with the table-free values.)"""
    rng = np.random.default_rng(3)
    line = rng.integers(0, 50_000, 23, dtype=np.int32)
    run = np.tile(line, 200)
    cfg = CDCConfig(avg_chunk=256, min_chunk=64, max_chunk=1024, gear=gear)
    inside, pieces = [], []
    for head in (37, 120):
        toks = np.concatenate([rng.integers(0, 50_000, head, dtype=np.int32), run,
                               rng.integers(0, 50_000, 50, dtype=np.int32)])
        b = chunk(toks, cfg)
        assert np.diff(b).max() <= 1024
        rel = b - head
        inside.append(rel[(rel > 0) & (rel < run.size)].tolist())
        pieces.append([fingerprint(toks[x:y]) for x, y in zip(b[:-1], b[1:], strict=True)
                       if head < x and y < head + run.size])
    assert inside[0] == inside[1] and len(inside[0]) >= 4
    assert len(set(pieces[0][:-1])) == 1 and pieces[0] == pieces[1]  # 1012 = 44 periods each, then the rest


@pytest.mark.parametrize("gear", GEARS)
def test_first_63_positions_never_cut(gear):
    """No content-defined cut falls before offset 64 (the first full window)."""
    cfg = CDCConfig(avg_chunk=180, min_chunk=8, max_chunk=4096, gear=gear)
    for seed in range(20):
        t = np.random.default_rng(seed).integers(0, 1000, 300, dtype=np.int32)
        nat = natural_boundaries(t, cfg)
        assert nat.size == 0 or nat.min() >= 64


@pytest.mark.parametrize("gear", GEARS)
def test_hard_boundaries_force_cuts_and_suppress_nearby(gear):
    """S2 hard boundaries are always cuts; no content cut lies within min_chunk of one."""
    cfg = CDCConfig(gear=gear)
    t = np.random.default_rng(2).integers(0, 150_000, 20_000, dtype=np.int32)
    hard = np.array([1000, 1064, 7000, 7064, 15_003])
    b = chunk(t, cfg, hard)
    assert set(hard.tolist()) <= set(b.tolist())
    nat = natural_boundaries(t, cfg, hard)
    dist = np.abs(nat[:, None] - hard[None, :]).min(axis=1)
    assert dist.min() >= cfg.min_chunk


def test_fingerprints_are_xxh64_of_token_bytes():
    """Each fingerprint is xxh64 of the chunk's int32 little-endian bytes."""
    t = np.random.default_rng(3).integers(0, 2**31 - 1, 3000, dtype=np.int32)
    b = chunk(t)
    fp = fingerprints(t, b)
    assert fp.size == b.size - 1
    for i in (0, fp.size - 1):
        assert int(fp[i]) == xxhash.xxh64_intdigest(t[b[i]:b[i + 1]].astype("<i4").tobytes())


def test_config_rejects_impossible_sizes():
    """Configs whose sizes cannot be met raise ValueError."""
    with pytest.raises(ValueError):
        CDCConfig(avg_chunk=100, min_chunk=64)
    with pytest.raises(ValueError):
        CDCConfig(min_chunk=64, max_chunk=100)


_tok = st.integers(0, 2**31 - 1)


def _region_cuts(prefix: np.ndarray, region: np.ndarray, cfg: CDCConfig, nat: bool) -> np.ndarray:
    t = np.concatenate([prefix, region]).astype(np.int32)
    b = natural_boundaries(t, cfg) if nat else chunk(t, cfg)[1:-1]
    return b[b >= prefix.size] - prefix.size


@settings(max_examples=60, deadline=None)
@given(prefix=st.lists(_tok, max_size=300), region=st.lists(_tok, min_size=64, max_size=1500),
       at=st.integers(0, 300), ins=st.lists(_tok, max_size=200), delete=st.integers(0, 200),
       use_max=st.booleans(), gear=st.sampled_from(GEARS))
def test_edit_before_region_keeps_region_cuts(prefix, region, at, ins, delete, use_max, gear):
    """Inserting/deleting tokens before a region keeps every region cut >= 64 tokens after the edit
    (with max-size splits: every cut from the first content-defined cut >= 64 after the edit); for both
    Gear value kinds."""
    cfg = CDCConfig(avg_chunk=200, min_chunk=32, max_chunk=512 if use_max else 10**9, gear=gear)
    p = np.array(prefix, dtype=np.int64)
    at = min(at, p.size)
    edited = np.concatenate([p[:at], np.array(ins, dtype=np.int64), p[min(p.size, at + delete):]])
    r = np.array(region, dtype=np.int64)
    # the edit ends where the unchanged suffix of the prefix starts; region cuts >= 64 past that are stable
    lead_a = p.size - min(p.size, at + delete)          # unchanged prefix tokens before the region
    lead_b = edited.size - (at + len(ins))
    assert lead_a == lead_b
    stable_from = 64 - lead_a
    ca = _region_cuts(p, r, cfg, nat=False)
    cb = _region_cuts(edited, r, cfg, nat=False)
    if use_max:
        na = _region_cuts(p, r, cfg, nat=True)
        first = na[na >= stable_from]
        if first.size == 0:
            return
        stable_from = int(first[0])
    assert np.array_equal(ca[ca >= stable_from], cb[cb >= stable_from])


def _low_entropy(reps: int) -> np.ndarray:
    """Random text around one 23-token sentence repeated ``reps`` times (no content cut inside)."""
    rng = np.random.default_rng(42)
    sentence = rng.integers(0, 50_000, 23, dtype=np.int32)
    return np.concatenate([rng.integers(0, 50_000, 600, dtype=np.int32), np.tile(sentence, reps)])


@pytest.mark.parametrize("gear", GEARS)
def test_forced_cuts_do_not_flap_when_a_run_grows(gear):
    """Forced (max-size) cuts inside a long low-entropy run are anchored where the run's gap starts:
    one more repetition of the sentence (the next turn's prompt) moves no earlier cut (#10)."""
    cfg = CDCConfig(avg_chunk=256, min_chunk=64, max_chunk=1024, gear=gear)
    a, b = chunk(_low_entropy(300), cfg), chunk(_low_entropy(301), cfg)
    assert np.diff(a).max() <= 1024 and np.diff(b).max() <= 1024
    same = np.intersect1d(a, b)
    assert same.size >= a.size - 2, f"{a.size - same.size} of {a.size} cuts moved"


@pytest.mark.parametrize("gear", GEARS)
def test_forced_cuts_in_several_long_gaps(gear):
    """Two over-long gaps in one prompt (two runs apart) are each cut within [min_chunk, max_chunk]."""
    rng = np.random.default_rng(5)
    toks = np.concatenate([np.full(3000, 7, np.int32), rng.integers(0, 50_000, 700, dtype=np.int32),
                           np.full(2500, 9, np.int32), rng.integers(0, 50_000, 300, dtype=np.int32)])
    d = np.diff(chunk(toks, CDCConfig(avg_chunk=256, min_chunk=64, max_chunk=1000, gear=gear)))
    assert d.max() <= 1000 and d[:-1].min() >= 64


@pytest.mark.parametrize("gear", GEARS)
def test_forced_pieces_stay_within_min_and_max(gear):
    """Left-anchored forced pieces keep every chunk but the prompt's last in [min_chunk, max_chunk]."""
    cfg = CDCConfig(avg_chunk=256, min_chunk=64, max_chunk=1000, gear=gear)
    for n in (2001, 2020, 2999, 3000, 3063, 3064, 3065):
        d = np.diff(chunk(np.full(n, 7, np.int32), cfg))
        assert d.max() <= 1000 and d.min() >= 64, (n, d)
