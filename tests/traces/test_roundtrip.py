"""Property: ingest -> Parquet -> read back reproduces every request's token sequence exactly."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pic.traces.formats.openai_chat import ROLE_KIND, canonical_json
from pic.traces.ingest import ingest
from pic.traces.io import read_trace
from pic.traces.schema import KINDS
from pic.traces.tokenizer import BuiltinTokenizer

token = st.integers(min_value=0, max_value=2**31 - 1)
segment = st.fixed_dictionaries({"kind": st.sampled_from(KINDS), "tokens": st.lists(token, min_size=1, max_size=40)})
token_request = st.fixed_dictionaries({
    "segments": st.lists(segment, min_size=1, max_size=5),
    "arrival_us": st.integers(min_value=0, max_value=10**12),
    "session_id": st.sampled_from(["a", "b", "c"]),
    "output_tokens": st.integers(min_value=0, max_value=4096),
})
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _roundtrip(rows: list[dict], name: str):
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / name
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
        res = ingest([src], Path(d) / "t.parquet")
        return res.trace, read_trace(Path(d) / "t.parquet")


def _by_arrival(rows: list[dict], key) -> list[int]:
    return sorted(range(len(rows)), key=lambda i: key(rows[i]))  # sorted() is stable, like the reader


@SETTINGS
@given(st.lists(token_request, min_size=1, max_size=12))
def test_tokens_roundtrip(rows):
    """Token JSONL: every prompt, arrival, session and output length survives the Parquet round trip."""
    mem, back = _roundtrip(rows, "t.jsonl")
    order = _by_arrival(rows, lambda r: r["arrival_us"])
    t0 = min(r["arrival_us"] for r in rows)
    assert back.num_requests == len(rows)
    for new, old in enumerate(order):
        want = np.concatenate([np.asarray(s["tokens"], np.int32) for s in rows[old]["segments"]])
        assert np.array_equal(back.prompt(new), want)
        assert np.array_equal(mem.prompt(new), want)
        assert back.requests["arrival_us"][new] == rows[old]["arrival_us"] - t0
        assert back.requests["session_id"][new] == rows[old]["session_id"]
        assert back.requests["output_tokens"][new] == rows[old]["output_tokens"]


message = st.fixed_dictionaries({"role": st.sampled_from(sorted(ROLE_KIND)), "content": st.text(max_size=60)})
tools = st.lists(st.fixed_dictionaries({"name": st.text(min_size=1, max_size=10)}), min_size=1, max_size=3)
chat_request = st.fixed_dictionaries({
    "messages": st.lists(message, min_size=1, max_size=6),
    "arrival_us": st.integers(min_value=0, max_value=10**9),
}, optional={"tools": tools})


def _expected_chat_prompt(tok, row) -> np.ndarray:
    """Leading system messages, then the tools JSON, then the other messages, each tokenized alone."""
    msgs = row["messages"]
    lead = 0
    while lead < len(msgs) and ROLE_KIND[msgs[lead]["role"]] == "system":
        lead += 1
    texts = [m["content"] for m in msgs[:lead]]
    texts += [canonical_json(row["tools"])] if "tools" in row else []
    texts += [m["content"] for m in msgs[lead:]]
    parts = [tok.encode(t) for t in texts]
    return np.concatenate(parts) if parts else np.zeros(0, np.int32)


@SETTINGS
@given(st.lists(chat_request, min_size=1, max_size=8))
def test_openai_chat_roundtrip(rows):
    """Chat JSONL: each prompt read back equals its tokenized system, tools and message texts in order."""
    tok = BuiltinTokenizer()
    rows = [r for r in rows if _expected_chat_prompt(tok, r).size]
    if not rows:
        return
    _, back = _roundtrip(rows, "c.jsonl")
    order = _by_arrival(rows, lambda r: r["arrival_us"])
    assert back.num_requests == len(rows)
    for new, old in enumerate(order):
        assert np.array_equal(back.prompt(new), _expected_chat_prompt(tok, rows[old]))
