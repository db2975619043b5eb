"""Synthetic trace generator: determinism, validity and the shape each scenario promises."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from traces.io import read_trace, write_trace
from traces.markers import BOUNDARY_MARKER, MARKER_LEN
from traces.schema import KINDS, Trace, validate
from traces.synth import SCENARIOS, scenario_config, summarize, synth
from traces.synth.common import SHARED_KINDS

N = 60


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def scenario(request) -> str:
    return request.param


def _kinds(t: Trace, i: int) -> list[str]:
    return [KINDS[k] for k in t.segments.kinds[t.request_segments(i)]]


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.size, b.size)
    diff = np.nonzero(a[:n] != b[:n])[0]
    return int(diff[0]) if diff.size else n


# ---------------------------------------------------------------- every scenario

def test_same_seed_same_bytes(scenario, tmp_path):
    """Two runs with one seed write byte-identical Parquet files."""
    a = write_trace(synth(scenario, N, 7), tmp_path / "a.parquet").read_bytes()
    b = write_trace(synth(scenario, N, 7), tmp_path / "b.parquet").read_bytes()
    assert a == b


def test_different_seed_differs(scenario):
    """A different seed gives different content."""
    a, b = synth(scenario, N, 1), synth(scenario, N, 2)
    assert not np.array_equal(a.segments.ids, b.segments.ids)


def test_valid_and_round_trips(scenario, tmp_path):
    """The trace validates, has exactly N requests, and survives write/read with identical prompts."""
    t = synth(scenario, N, 3)
    validate(t)
    assert t.num_requests == N
    back = read_trace(write_trace(t, tmp_path / "t.parquet"))
    assert back.requests.equals(t.requests)
    for i in (0, N // 2, N - 1):
        assert np.array_equal(back.prompt(i), t.prompt(i))
    assert back.meta["synth.scenario"] == scenario


def test_tokens_in_vocab_and_arrivals_sorted(scenario):
    """Non-marker tokens lie in [0, 50000); requests are in arrival order with ids 0..N-1."""
    t = synth(scenario, N, 4)
    seg = t.segments
    non_marker = np.repeat(seg.kinds != KINDS.index("marker"), seg.lengths)
    toks = seg.tokens[non_marker]
    assert toks.min() >= 0 and toks.max() < 50_000
    arr = t.requests["arrival_us"].to_numpy()
    assert (np.diff(arr) >= 0).all()
    assert t.requests["request_id"].to_list() == list(range(N))


def test_markers_bracket_every_shared_region(scenario):
    """With markers, every system/tools/document/tool_output segment has a marker on both sides."""
    t = synth(scenario, N, 5, markers=True)
    marker_rows = np.nonzero(t.segments.kinds == KINDS.index("marker"))[0]
    assert marker_rows.size == 1
    m = int(marker_rows[0])
    assert np.array_equal(t.segments.tokens[t.segments.offsets[m]:t.segments.offsets[m + 1]], BOUNDARY_MARKER)
    num_shared = 0
    for i in range(N):
        rows, kinds = t.request_segments(i), _kinds(t, i)
        for j, k in enumerate(kinds):
            if k in SHARED_KINDS:
                num_shared += 1
                assert j > 0 and rows[j - 1] == m, (i, j, kinds)
                assert j + 1 < len(rows) and rows[j + 1] == m, (i, j, kinds)
            if k == "marker" and j > 0:
                assert kinds[j - 1] != "marker", "two markers in a row"
    assert num_shared > 0


def test_markers_only_add_marker_tokens(scenario):
    """Markers change nothing else: removing marker segments gives the marker-free trace's prompts."""
    plain, marked = synth(scenario, 20, 6), synth(scenario, 20, 6, markers=True)
    for i in range(20):
        rows = marked.request_segments(i)
        keep = marked.segments.ids[rows[marked.segments.kinds[rows] != KINDS.index("marker")]]
        assert keep.tolist() == plain.requests["segment_ids"][i].to_list()
        assert marked.prompt_lengths[i] > plain.prompt_lengths[i]
        assert (marked.prompt_lengths[i] - plain.prompt_lengths[i]) % MARKER_LEN == 0


def test_arrivals_monotone_per_session_and_rate_knob(scenario):
    """Per-session arrivals strictly increase; doubling `rate` roughly halves the arrival span."""
    slow, fast = synth(scenario, 200, 8, rate=1.0), synth(scenario, 200, 8, rate=4.0)
    for sess in slow.requests.partition_by("session_id"):
        assert (np.diff(sess["arrival_us"].to_numpy()) > 0).all()
    assert summarize(fast)["span_s"] < 0.6 * summarize(slow)["span_s"]


def test_unknown_knob_and_bad_values_raise(scenario):
    """Unknown knobs, unparsable values and impossible ranges are ValueErrors naming the knob."""
    with pytest.raises(ValueError, match="no_such_knob"):
        synth(scenario, 5, 0, no_such_knob=1)
    with pytest.raises(ValueError, match="rate"):
        synth(scenario, 5, 0, rate="fast")
    with pytest.raises(ValueError, match="query"):
        synth(scenario, 5, 0, query_min=50, query_max=10)
    with pytest.raises(ValueError, match="num_requests"):
        synth(scenario, 0, 0)


def test_string_knobs_are_parsed():
    """CLI-style string knob values are converted by field type."""
    cfg = scenario_config("early-variation", rate="2.5", pool_size="7", docs_max="3")
    assert cfg.rate == 2.5 and cfg.pool_size == 7 and cfg.docs_max == 3


def test_unknown_scenario_raises():
    """An unknown scenario name lists the known ones."""
    with pytest.raises(ValueError, match="early-variation"):
        synth("nope", 5, 0)


# ---------------------------------------------------------------- early-variation

def test_early_variation_prefix_is_short_but_content_recurs():
    """Headers break the exact common prefix after a few tokens while shared segments recur in every request."""
    t = synth("early-variation", N, 0)
    cfg = scenario_config("early-variation")
    first = t.prompt(0)
    longest = max(_common_prefix(first, t.prompt(i)) for i in range(1, N))
    assert longest < cfg.header_common + 4
    counts = collections.Counter(sid for ids in t.requests["segment_ids"].to_list() for sid in ids)
    kinds = dict(zip(t.segments.ids.tolist(), t.segments.kinds.tolist(), strict=True))
    for k in ("system", "tools"):
        sids = [s for s, c in kinds.items() if KINDS[c] == k]
        assert len(sids) == 1 and counts[sids[0]] == N
    doc_counts = [counts[s] for s, c in kinds.items() if KINDS[c] == "document"]
    assert max(doc_counts) > 1


def test_early_variation_header_lengths_vary_in_range():
    """Header (first segment) lengths span the configured range and are unique per request."""
    t = synth("early-variation", N, 1, header_min=30, header_max=90)
    rows = [t.request_segments(i)[0] for i in range(N)]
    lens = t.segments.lengths[rows]
    assert lens.min() >= 30 and lens.max() <= 90 and np.unique(lens).size > 10
    assert len(set(rows)) == N
    assert all(_kinds(t, i)[:3] == ["user", "system", "tools"] for i in range(N))


def test_early_variation_proportions_documented_defaults():
    """Default lengths fall in the documented ranges (system 1-2k, tools 1-4k, docs 0.3-2k)."""
    t = synth("early-variation", 30, 2)
    seg = t.segments
    for kind, lo, hi in (("system", 1000, 2000), ("tools", 1000, 4000), ("document", 300, 2000)):
        lens = seg.lengths[seg.kinds == KINDS.index(kind)]
        assert lens.size and lens.min() >= lo and lens.max() <= hi, kind
