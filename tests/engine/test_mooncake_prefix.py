"""On the real Mooncake traces, the replayed `prefix` hit rate equals the trace's own prefix reuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pic.engine.config import ReplayConfig
from pic.engine.replay import replay
from tests.conftest import shared_file


def _trace_own_prefix_reuse(path: Path) -> float:
    """Per request: leading run of hash ids seen in any earlier request x 512, capped by input_length."""
    seen: set[int] = set()
    reused = total = 0
    for line in path.read_text().splitlines():
        row = json.loads(line)
        ids, k = row["hash_ids"], 0
        while k < len(ids) and ids[k] in seen:
            k += 1
        reused += min(512 * k, row["input_length"])
        total += row["input_length"]
        seen.update(ids)
    return reused / total


#: replayed prefix hit rates before the compact trace format (#12): the format must not move them
REPLAYED = {"conversation_trace.jsonl": 0.37362528234370884, "synthetic_trace.jsonl": 0.6512447791985924}


@pytest.mark.parametrize("name", ["conversation_trace.jsonl", "synthetic_trace.jsonl"])
def test_prefix_hit_rate_equals_trace_prefix_reuse(name):
    """Infinite capacity: prefix token hit rate within 0.5 points of the trace's own prefix reuse."""
    path = shared_file("mooncake", name)
    from pic.traces.ingest import read_sources
    trace = read_sources([path])[0]
    s = replay(trace, ReplayConfig(policies=("prefix",))).summary["policies"]["prefix"]
    expected = _trace_own_prefix_reuse(path)
    assert expected > 0.3
    assert abs(s["token_hit_rate"] - expected) < 0.005
    assert s["token_hit_rate"] == pytest.approx(REPLAYED[name], rel=1e-12)
    assert s["prefix_hit_rate"] == s["token_hit_rate"] and s["uncached"] == 0 and s["evictions"] == 0
