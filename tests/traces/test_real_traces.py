"""The published third-party traces in <repo>/../shared/data ingest to the documented counts."""

from __future__ import annotations

import csv
import json
from collections import Counter

import numpy as np
import pytest

from pic.traces.formats.lmcache_agent import split_prompt
from pic.traces.ingest import ingest, read_sources
from pic.traces.io import read_trace
from pic.traces.tokenizer import BuiltinTokenizer
from tests.conftest import shared_file


def test_miniswe_directory(tmp_path):
    """miniswe: 402 calls in 20 sessions; Parquet read-back prompts equal the tokenized input sections."""
    src = shared_file("lmcache-agent-trace", "miniswe")
    res = ingest([src], tmp_path / "m.parquet")
    back = read_trace(tmp_path / "m.parquet")
    assert res.num_requests == back.num_requests == 402
    assert back.requests["session_id"].n_unique() == 20
    assert int(back.prompt_lengths.sum()) == res.num_prompt_tokens
    first = sorted(src.glob("*.jsonl"))[0]
    rows = sorted((json.loads(line) for line in first.read_text().splitlines()), key=lambda r: r["timestamp"])
    tok = BuiltinTokenizer()
    mine = back.requests.with_row_index("i").filter(back.requests["session_id"] == first.stem)
    assert mine.height == len(rows)
    for i, row in zip(mine["i"].to_list()[:5], rows[:5], strict=False):  # files are not in time order
        want = np.concatenate([tok.encode(p) for _, p in split_prompt(row["input"])])
        assert np.array_equal(back.prompt(i), want)


def test_miniswe_dedup():
    """Shared instructions and earlier observations are stored once: distinct tokens << total."""
    trace = read_sources([shared_file("lmcache-agent-trace", "miniswe")])[0]
    assert int(trace.segments.offsets[-1]) * 10 < int(trace.prompt_lengths.sum())


def test_taubench_directory():
    """taubench: 471 calls; its one empty file is skipped, leaving 24 sessions."""
    trace = read_sources([shared_file("lmcache-agent-trace", "taubench")])[0]
    assert trace.num_requests == 471
    assert trace.requests["session_id"].n_unique() == 24


@pytest.mark.parametrize(("name", "count"), [("conversation_trace.jsonl", 12_031), ("synthetic_trace.jsonl", 3_993)])
def test_mooncake(name, count):
    """Mooncake: every row kept, prompt length == input_length, equal hash ids give equal blocks."""
    src = shared_file("mooncake", name)
    trace, rows, _, _ = read_sources([src])
    raw = [json.loads(line) for line in src.read_text().splitlines()]
    assert trace.num_requests == len(raw) == count
    assert trace.prompt_lengths.tolist() == [r["input_length"] for r in raw]  # file is in arrival order
    assert trace.requests["output_tokens"].to_list() == [r["output_length"] for r in raw]
    firsts = Counter(r["hash_ids"][0] for r in raw if r["input_length"] > 512)
    common = firsts.most_common(1)[0][0]
    a, b = [i for i, r in enumerate(raw) if r["input_length"] > 512 and r["hash_ids"][0] == common][:2]
    assert np.array_equal(trace.prompt(a)[:512], trace.prompt(b)[:512])


@pytest.mark.parametrize(("name", "count"), [("AzureLLMInferenceTrace_code.csv", 8_819),
                                              ("AzureLLMInferenceTrace_conv.csv", 19_366)])
def test_azure(name, count):
    """Azure: every row kept with its context and generated lengths; arrivals start at 0 and increase."""
    src = shared_file("azure-llm-2023", name)
    trace = read_sources([src])[0]
    with open(src, newline="") as f:
        raw = list(csv.DictReader(f))
    assert trace.num_requests == len(raw) == count
    assert trace.prompt_lengths.tolist() == [int(r["ContextTokens"]) for r in raw]
    assert trace.requests["output_tokens"].to_list() == [int(r["GeneratedTokens"]) for r in raw]
    arrival = trace.requests["arrival_us"].to_numpy()
    assert arrival[0] == 0 and (np.diff(arrival) >= 0).all() and arrival[-1] > 3_000_000_000
