"""Synthetic trace generator: determinism, validity and the shape each scenario promises."""

from __future__ import annotations

import collections

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pic.traces.io import read_trace, write_trace
from pic.traces.markers import BOUNDARY_MARKER, MARKER_LEN
from pic.traces.schema import KINDS, Trace, validate
from pic.traces.synth import SCENARIOS, scenario_config, summarize, synth
from pic.traces.synth.common import SHARED_KINDS

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


def test_every_segment_is_referenced(scenario):
    """No stored segment is orphaned: each one appears in some request's prompt."""
    t = synth(scenario, N, 10, markers=True)
    used = {s for ids in t.requests["segment_ids"].to_list() for s in ids}
    assert used == set(t.segments.ids.tolist())


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
    """Per-session arrivals strictly increase; 4x the `rate` starts sessions about 4x as often."""
    slow, fast = synth(scenario, 200, 8, rate=1.0), synth(scenario, 200, 8, rate=4.0)
    for sess in slow.requests.partition_by("session_id"):
        assert (np.diff(sess["arrival_us"].to_numpy()) > 0).all()

    def start_span(t: Trace) -> float:
        return float(t.requests.group_by("session_id").agg(pl.col("arrival_us").min())["arrival_us"].max())

    assert 2.5 < start_span(slow) / start_span(fast) < 6


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


def test_summarize_matches_trace():
    """summarize() totals equal the trace's own prompt lengths and segment tokens."""
    t = synth("early-variation", N, 9)
    s = summarize(t)
    assert s["requests"] == N and s["prompt_tokens"] == int(t.prompt_lengths.sum())
    assert s["distinct_tokens"] == int(t.segments.tokens.size)
    assert s["dedup_ratio"] > 1 and s["sessions"] == t.requests["session_id"].n_unique()


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


def _session_rows(t: Trace) -> dict[str, list[int]]:
    out: dict[str, list[int]] = collections.defaultdict(list)
    for i, s in enumerate(t.requests["session_id"].to_list()):
        out[s].append(i)
    return out


def _ids(t: Trace, i: int) -> list[int]:
    return t.requests["segment_ids"][i].to_list()


def _doc_orders(t: Trace) -> list[list[int]]:
    doc = KINDS.index("document")
    return [[int(s) for s in t.segments.ids[r][t.segments.kinds[r] == doc]]
            for r in (t.request_segments(i) for i in range(t.num_requests))]


# ---------------------------------------------------------------- rag-reorder

def _pair_orders(orders: list[list[int]]) -> dict[tuple[int, int], set[bool]]:
    seen: dict[tuple[int, int], set[bool]] = collections.defaultdict(set)
    for docs in orders:
        pos = {d: j for j, d in enumerate(docs)}
        for a in docs:
            for b in docs:
                if a < b:
                    seen[(a, b)].add(pos[a] < pos[b])
    return seen


def test_rag_documents_recur_in_different_orders():
    """Retrieved documents recur across requests and some pair appears in both relative orders."""
    t = synth("rag-reorder", N, 0)
    orders = _doc_orders(t)
    cfg = scenario_config("rag-reorder")
    assert all(cfg.docs_min <= len(o) <= cfg.docs_max and len(set(o)) == len(o) for o in orders)
    assert all(_kinds(t, i)[0] == "system" and _kinds(t, i)[-1] == "user" for i in range(N))
    assert any(len(v) == 2 for v in _pair_orders(orders).values())


def test_rag_popularity_bias_keeps_one_order():
    """With a huge rank_bias every pair of documents keeps one relative order in all requests."""
    orders = _doc_orders(synth("rag-reorder", N, 0, rank_bias=1e6))
    pairs = _pair_orders(orders)
    assert pairs and all(len(v) == 1 for v in pairs.values())


# ---------------------------------------------------------------- tool-reorder

def test_tool_reorder_breaks_prefix_but_reuses_outputs():
    """Some step's context is not an extension of the previous one, while its tool outputs recur."""
    t = synth("tool-reorder", 200, 0)
    out_kind = KINDS.index("tool_output")
    num_breaks = 0
    for rows in _session_rows(t).values():
        for a, b in zip(rows, rows[1:], strict=False):
            prev, cur = _ids(t, a), _ids(t, b)
            outs = [s for s, k in zip(t.segments.ids[t.request_segments(b)], t.segments.kinds[t.request_segments(b)],
                                      strict=True) if k == out_kind]
            assert len(outs) == len(set(outs)), "a tool output is duplicated inside one prompt"
            if cur[:len(prev)] != prev:
                num_breaks += 1
                assert set(prev[3:]) & set(cur[3:]), "a reordered context kept nothing"
    assert num_breaks > 0
    sessions_of = collections.defaultdict(set)
    for i, s in enumerate(t.requests["session_id"].to_list()):
        for sid, k in zip(_ids(t, i), t.segments.kinds[t.request_segments(i)], strict=True):
            if k == out_kind:
                sessions_of[sid].add(s)
    assert max(len(v) for v in sessions_of.values()) > 1


def test_tool_reorder_without_reorders_extends_prefix():
    """With reorder_prob=0 and never-repeating outputs, each step extends the previous prompt."""
    t = synth("tool-reorder", 60, 0, reorder_prob=0.0, zipf_a=0.0, pool_size=100_000, history_max=64,
              tool_out_min=5, tool_out_max=10)
    for rows in _session_rows(t).values():
        for a, b in zip(rows, rows[1:], strict=False):
            assert _ids(t, b)[:len(_ids(t, a))] == _ids(t, a)


# ---------------------------------------------------------------- multi-agent

def test_multi_agent_role_headers_and_shared_tools():
    """Each agent has its own role header; all share one tools segment; orchestrator speaks first."""
    t = synth("multi-agent", 200, 0)
    agents = t.requests["agent_id"].to_list()
    first = [_ids(t, i)[0] for i in range(t.num_requests)]
    role_of = dict(zip(agents, first, strict=True))
    assert len(role_of) >= 3 and len(set(role_of.values())) == len(role_of)
    assert all(role_of[a] == f for a, f in zip(agents, first, strict=True))
    assert len({_ids(t, i)[1] for i in range(t.num_requests)}) == 1
    assert all(_kinds(t, i)[:3] == ["system", "tools", "user"] for i in range(t.num_requests))
    for rows in _session_rows(t).values():
        assert agents[rows[0]] == "orchestrator"


def test_multi_agent_transcript_shared_across_agents():
    """A later step of another agent sees the earlier step's transcript verbatim after its own header."""
    t = synth("multi-agent", 200, 1)
    agents = t.requests["agent_id"].to_list()
    num_checked = 0
    for rows in _session_rows(t).values():
        for a, b in zip(rows, rows[1:], strict=False):
            assert agents[a] != agents[b] and "orchestrator" in (agents[a], agents[b])
            assert _ids(t, b)[1:len(_ids(t, a))] == _ids(t, a)[1:]
            num_checked += 1
    assert num_checked > 50


# ---------------------------------------------------------------- chat

def test_chat_each_turn_extends_previous_prompt():
    """Every turn's prompt starts with the previous turn's prompt, token for token, plus answer and message."""
    t = synth("chat", N, 0)
    num_pairs = 0
    for rows in _session_rows(t).values():
        assert _kinds(t, rows[0]) == ["system", "user"]
        for a, b in zip(rows, rows[1:], strict=False):
            pa, pb = t.prompt(a), t.prompt(b)
            assert np.array_equal(pb[:pa.size], pa) and pb.size > pa.size
            assert _kinds(t, b)[-2:] == ["assistant", "user"]
            assert t.segments.lengths[t.request_segments(b)[-2]] == t.requests["output_tokens"][a]
            num_pairs += 1
    assert num_pairs > 10


# ---------------------------------------------------------------- knob ranges (property)

@settings(max_examples=15, deadline=None)
@given(
    header=st.tuples(st.integers(1, 120), st.integers(0, 120)),
    docs=st.tuples(st.integers(0, 4), st.integers(0, 4)),
    pool_size=st.integers(4, 40),
    common=st.integers(0, 3),
    seed=st.integers(0, 2**32),
)
def test_early_variation_respects_any_knob_ranges(header, docs, pool_size, common, seed):
    """For any valid knob ranges, header and document counts/lengths stay inside them and the trace validates."""
    h_lo, h_hi = max(header[0], common + 1), max(header[0], common + 1) + header[1]
    d_lo, d_hi = min(docs), max(docs)
    t = synth("early-variation", 12, seed, header_min=h_lo, header_max=h_hi, header_common=common,
              docs_min=d_lo, docs_max=d_hi, pool_size=pool_size, doc_min=5, doc_max=50,
              system_min=10, system_max=20, tools_min=10, tools_max=20)
    validate(t)
    for i in range(12):
        rows = t.request_segments(i)
        assert h_lo <= t.segments.lengths[rows[0]] <= h_hi
        assert KINDS[t.segments.kinds[rows[0]]] == "user"
    docs_per_session = {len(o) for o in _doc_orders(t)}
    assert all(d_lo <= k <= d_hi for k in docs_per_session)
    first = t.prompt(0)
    assert all(np.array_equal(t.prompt(i)[:common], first[:common]) for i in range(12))


def test_progress_callback_counts_up_and_changes_nothing():
    """progress() sees increasing request counts up to N, and the trace equals one made without it."""
    seen: list[int] = []
    t = synth("tool-reorder", 3000, 0, progress=seen.append)
    assert seen and seen == sorted(seen) and seen[-1] <= 3000 and len(seen) == 3000 // 1024
    assert t.requests.equals(synth("tool-reorder", 3000, 0).requests)
