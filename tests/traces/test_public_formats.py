"""ShareGPT (JSON conversations) and BurstGPT (CSV): the two inputs of vLLM's serving benchmark."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pic.engine.config import ReplayConfig
from pic.engine.replay import replay
from pic.traces.formats.detect import expand, sniff
from pic.traces.formats.sharegpt import SESSION_GAP_US, TURN_GAP_US
from pic.traces.ingest import ingest, read_sources
from pic.traces.schema import KINDS
from pic.traces.tokenizer import BuiltinTokenizer

SAMPLES = Path(__file__).resolve().parents[2] / "traces" / "samples"
TOK = BuiltinTokenizer()

CONV = {"id": "c1", "conversations": [
    {"from": "system", "value": "Be brief."},
    {"from": "human", "value": "What is a KV cache?"},
    {"from": "gpt", "value": "Keys and values of past tokens, kept to skip recomputing them."},
    {"from": "human", "value": "And prefix caching?"},
    {"from": "gpt", "value": "Reusing that cache when a new prompt starts with an old one."},
]}


def _read(path, fmt="auto"):
    trace, rows, _, _ = read_sources([path], fmt=fmt)
    return trace, rows


def _kinds(trace, i):
    return [KINDS[k] for k in trace.segments.kinds[trace.request_segments(i)]]


def test_sharegpt_one_request_per_assistant_turn(tmp_path):
    """Each gpt turn is a request: the prompt is every earlier message, output = the reply's tokens."""
    p = tmp_path / "sg.json"
    p.write_text(json.dumps([CONV, {"id": "c2", "conversations": [
        {"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello there."}]}], indent=2))
    t, _ = _read(p)
    req = t.requests
    assert req["session_id"].to_list() == ["c1", "c2", "c1"]          # sorted by arrival
    assert req["arrival_us"].to_list() == [0, SESSION_GAP_US, TURN_GAP_US]
    assert _kinds(t, 0) == ["system", "user"]
    assert _kinds(t, 2) == ["system", "user", "assistant", "user"]
    first, second = t.prompt(0), t.prompt(2)
    assert np.array_equal(second[:first.size], first)                 # turn 2 extends turn 1's prompt
    reply = CONV["conversations"][2]["value"]
    assert req["output_tokens"][0] == TOK.encode(reply).size
    assert np.array_equal(second[first.size:first.size + TOK.encode(reply).size], TOK.encode(reply))


def test_sharegpt_jsonl_and_role_content_spellings_read_the_same(tmp_path):
    """One conversation per line, and role/content keys, give the same trace as the JSON array."""
    a = tmp_path / "a.json"
    a.write_text(json.dumps([CONV]))
    b = tmp_path / "b.jsonl"
    alt = {"id": "c1", "conversation": [{"role": {"human": "user", "gpt": "assistant"}.get(m["from"], m["from"]),
                                         "content": m["value"]} for m in CONV["conversations"]]}
    b.write_text(json.dumps(alt) + "\n")
    ta, tb = _read(a)[0], _read(b)[0]
    assert ta.num_requests == tb.num_requests == 2
    for i in range(2):
        assert np.array_equal(ta.prompt(i), tb.prompt(i))
    assert ta.requests["output_tokens"].to_list() == tb.requests["output_tokens"].to_list()


def test_sharegpt_conversation_without_reply_is_counted_not_fatal(tmp_path):
    """A conversation with no gpt turn gives no request and is counted as skipped; the others are kept."""
    p = tmp_path / "sg.json"
    p.write_text(json.dumps([{"id": "x", "conversations": [{"from": "human", "value": "anyone?"}]}, CONV,
                             {"id": "empty", "conversations": []}]))
    t, rows = _read(p)
    assert t.num_requests == 2 and sum(rows.skipped.values()) == 2


def test_sharegpt_sniffed_even_as_one_long_line(tmp_path):
    """A JSON array on a single line longer than the 16 MiB line limit is still detected and read."""
    p = tmp_path / "big.json"
    filler = "x" * (17 << 20)      # in a field the reader ignores, so nothing long is tokenized
    p.write_text(json.dumps([CONV, {"id": "long", "meta": filler, "conversations": [
        {"from": "human", "value": "hi"}, {"from": "gpt", "value": "ok"}]}]))
    assert p.stat().st_size > 16 << 20 and p.read_text().count("\n") == 0
    assert sniff(p) == "sharegpt"
    assert [f for _, f in expand([tmp_path])] == ["sharegpt"]
    assert _read(p)[0].num_requests == 3


def test_burstgpt_rows(tmp_path):
    """Arrivals in µs from the first row, Model as the agent, unique opaque content, 0-token replies kept."""
    p = tmp_path / "b.csv"
    p.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "10,ChatGPT,40,12,52,Conversation log\n12.5,GPT-4,40,0,40,API log\n")
    t, _ = _read(p)
    req = t.requests
    assert req["arrival_us"].to_list() == [0, 2_500_000]
    assert req["agent_id"].to_list() == ["ChatGPT", "GPT-4"]
    assert req["output_tokens"].to_list() == [12, 0]
    assert t.prompt_lengths.tolist() == [40, 40] and not np.array_equal(t.prompt(0), t.prompt(1))
    assert req["session_id"].n_unique() == 2


@pytest.mark.parametrize(("line", "fmt"), [
    ('{"id": "a", "conversations": [{"from": "human", "value": "x"}]}', "sharegpt"),
    ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type", "burstgpt"),
], ids=["sharegpt-jsonl", "burstgpt"])
def test_sniff_public_formats(tmp_path, line, fmt):
    """--format auto recognises ShareGPT JSONL and the BurstGPT header."""
    p = tmp_path / "f.txt"
    p.write_text(line + "\n")
    assert sniff(p) == fmt


def test_bundled_raw_samples_ingest_and_replay(tmp_path):
    """traces/samples/sharegpt.json and burstgpt.csv ingest (auto-detected) and replay; multi-turn ShareGPT
    gives the prefix cache real reuse."""
    sg = ingest([SAMPLES / "sharegpt.json"], tmp_path / "sg.parquet")
    bg = ingest([SAMPLES / "burstgpt.csv"], tmp_path / "bg.parquet")
    assert (sg.num_requests, sg.trace.requests["session_id"].n_unique()) == (27, 12)
    assert bg.num_requests == 60 and sg.formats[str(SAMPLES / "sharegpt.json")] == "sharegpt"
    hit = replay(sg.trace, ReplayConfig(policies=("prefix",))).summary["policies"]["prefix"]["token_hit_rate"]
    assert hit > 0.3
    assert replay(bg.trace, ReplayConfig(policies=("prefix",))).summary["policies"]["prefix"]["requests"] == 60


def test_raw_samples_are_what_make_raw_writes(tmp_path, monkeypatch):
    """The committed samples are exactly the generator's output (deterministic, hand-made content)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_raw", SAMPLES / "make_raw.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "OUT", tmp_path)
    mod.main()
    for name in ("sharegpt.json", "burstgpt.csv"):
        assert (tmp_path / name).read_bytes() == (SAMPLES / name).read_bytes(), name
