"""Each reader on small hand-written inputs, plus format detection and directory expansion."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pic.traces.formats.azure import _time_us
from pic.traces.formats.detect import expand, sniff
from pic.traces.formats.lmcache_agent import split_prompt
from pic.traces.formats.mooncake import BLOCK_TOKENS
from pic.traces.formats.openai_chat import canonical_json
from pic.traces.ingest import ingest, read_sources
from pic.traces.schema import KINDS, TraceError
from pic.traces.tokenizer import BuiltinTokenizer


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _kinds(trace, i):
    return [KINDS[k] for k in trace.segments.kinds[trace.request_segments(i)]]


def _read(path, fmt="auto"):
    return read_sources([path], fmt=fmt)[0]


# --- openai-chat -------------------------------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]


def test_openai_chat_segments_by_role(tmp_path):
    """system, tools JSON, user, assistant (+tool_calls), tool -> segments of the right kinds, in order."""
    msgs = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": {"name": "ls"}}]},
            {"role": "tool", "content": "a.py b.py"}]
    t = _read(_jsonl(tmp_path / "c.jsonl", [{"messages": msgs, "tools": TOOLS, "max_tokens": 7}]))
    assert _kinds(t, 0) == ["system", "tools", "user", "assistant", "tool_output"]
    tok = BuiltinTokenizer()
    expect = np.concatenate([tok.encode(s) for s in (
        "You are terse.", canonical_json(TOOLS), "list files",
        canonical_json([{"id": "1", "function": {"name": "ls"}}]), "a.py b.py")])
    assert np.array_equal(t.prompt(0), expect)
    assert t.requests["output_tokens"][0] == 7


def test_openai_chat_shared_system_dedupes(tmp_path):
    """Two requests with the same system prompt and tools store those segments once."""
    rows = [{"messages": [{"role": "system", "content": "S " * 50}, {"role": "user", "content": f"q{i}"}],
             "tools": TOOLS, "timestamp": 10.0 + i} for i in range(2)]
    t = _read(_jsonl(tmp_path / "c.jsonl", rows))
    assert len(t.segments) == 4  # system, tools, q0, q1
    assert t.requests["arrival_us"].to_list() == [0, 1_000_000]


def test_openai_chat_content_parts_and_batch_body(tmp_path):
    """List-of-parts content is concatenated; a Batch-API line is read through its body."""
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "text", "text": "cd"}]}]}
    t = _read(_jsonl(tmp_path / "b.jsonl", [{"custom_id": "x", "body": body}]))
    assert np.array_equal(t.prompt(0), BuiltinTokenizer().encode("abcd"))


# --- lmcache-agent -----------------------------------------------------------------------------

SWE = ("<pr_description>\nfix it\n\nplease\n</pr_description>\n\n<instructions>\nRules\n\nmore\n</instructions>"
       "\n\n<returncode>0</returncode>\n<output>\na\n\nb\n</output>")


def test_split_prompt_sections():
    """Tagged blocks stay whole (blank lines inside them do not cut); separators go to the next piece."""
    parts = split_prompt(SWE)
    assert "".join(p for _, p in parts) == SWE
    assert [k for k, _ in parts] == ["user", "system", "tool_output"]
    assert parts[2][1].startswith("\n\n<returncode>")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["<output>", "</output>", "<instructions>", "</instructions>", "\n", "\n\n",
                                 "x", " y", "{\"name\": 1}", "THOUGHT:"]), max_size=30).map("".join))
def test_split_prompt_is_a_partition(text):
    """Whatever the markup, the pieces are non-empty and concatenate back to the prompt."""
    parts = split_prompt(text)
    assert "".join(p for _, p in parts) == text
    assert all(p for _, p in parts) and all(k in KINDS for k, _ in parts)


def test_split_prompt_sibling_blocks():
    """Blocks that follow a closing tag directly (truncated-output notices) stay in one piece."""
    obs = "\n\n<returncode>2</returncode>\n<warning>\nlong\n</warning><output_head>\nx\n\ny\n</output_head>"
    parts = split_prompt("<pr_description>\nhi\n</pr_description>" + obs)
    assert [p for _, p in parts] == ["<pr_description>\nhi\n</pr_description>", obs]
    assert parts[1][0] == "tool_output"


def test_split_prompt_plain_turns():
    """Untagged text is cut at blank lines; JSON tool calls are assistant turns."""
    parts = split_prompt('Hi!\n\n{"name": "f", "arguments": {}}\n\nThanks')
    assert [k for k, _ in parts] == ["user", "assistant", "user"]


def test_lmcache_agent_growing_prompt_dedupes(tmp_path):
    """Later calls reuse the earlier calls' segments; output_tokens is the tokenized output length."""
    obs = "\n\n<returncode>1</returncode>\n<output>\nboom\n</output>"
    rows = [{"timestamp": 5_000_000, "input": SWE, "output": "THOUGHT: run it", "session_id": "s"},
            {"timestamp": 6_000_000, "input": SWE + obs, "output": "", "session_id": "s"}]
    t = _read(_jsonl(tmp_path / "a.jsonl", rows))
    assert len(t.segments) == 4
    assert set(t.request_segments(0)) < set(t.request_segments(1))
    assert t.requests["output_tokens"].to_list() == [BuiltinTokenizer().encode("THOUGHT: run it").size, 0]
    assert t.requests["arrival_us"].to_list() == [0, 1_000_000]


def test_lmcache_agent_session_defaults_to_file(tmp_path):
    """Without session_id the file's stem is the session."""
    t = _read(_jsonl(tmp_path / "sess42.jsonl", [{"timestamp": 1, "input": "hello", "output": "x"}]))
    assert t.requests["session_id"].to_list() == ["sess42"]


# --- mooncake ----------------------------------------------------------------------------------

def test_mooncake_blocks(tmp_path):
    """Equal hash ids give equal block tokens; the last block is a prefix of its id's full block."""
    rows = [{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [7, 8, 9]},
            {"timestamp": 3, "input_length": 1100 + 512, "output_length": 6, "hash_ids": [7, 8, 9, 10]}]
    t = _read(_jsonl(tmp_path / "m.jsonl", rows))
    assert t.prompt_lengths.tolist() == [1100, 1612]
    a, b = t.prompt(0), t.prompt(1)
    assert np.array_equal(a, b[:1100])
    assert not np.array_equal(b[:512], b[512:1024])
    assert _kinds(t, 1) == ["block"] * 4
    assert t.requests["arrival_us"].to_list() == [0, 3000]
    assert t.requests["output_tokens"].to_list() == [5, 6]


def test_mooncake_tokens_deterministic(tmp_path):
    """The same file ingested twice gives identical tokens."""
    p = _jsonl(tmp_path / "m.jsonl", [{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [123, 4]}])
    assert np.array_equal(_read(p).prompt(0), _read(p).prompt(0))
    assert _read(p).segments.lengths.tolist() == [BLOCK_TOKENS, 600 - BLOCK_TOKENS]


# --- azure -------------------------------------------------------------------------------------

def test_azure_rows(tmp_path):
    """Arrivals become µs after the first row; each row is one unique user segment of its length."""
    p = tmp_path / "az.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:17:03.9799600,40,10\n2023-11-16 18:17:04.0319600,40,8\n")
    t = _read(p)
    assert t.requests["arrival_us"].to_list() == [0, 52_000]
    assert t.prompt_lengths.tolist() == [40, 40]
    assert len(t.segments) == 2 and not np.array_equal(t.prompt(0), t.prompt(1))
    assert _kinds(t, 0) == ["user"]


@pytest.mark.parametrize(("stamp", "us"), [
    ("2023-11-16 18:17:03.9799600", 1_700_158_623_979_960),  # 2023 trace: 7 fraction digits, no zone
    ("2024-05-10 02:00:00.009930+02:00", 1_715_299_200_009_930),  # 2024 style: UTC offset
    ("12.5", 12_500_000),  # plain seconds
], ids=["2023", "offset", "seconds"])
def test_azure_timestamp_forms(stamp, us):
    """Azure TIMESTAMP forms parse to exact integer µs since the epoch."""
    assert _time_us(stamp) == us


# --- tokens ------------------------------------------------------------------------------------

def test_tokens_format(tmp_path):
    """Token JSONL keeps ids, kinds, sessions and arrivals exactly."""
    rows = [{"segments": [{"kind": "system", "tokens": [1, 2, 3]}, {"kind": "user", "tokens": [9]}],
             "arrival_us": 50, "session_id": "a", "agent_id": "planner", "output_tokens": 4},
            {"tokens": [1, 2, 3, 9], "arrival_us": 20, "session_id": "b"}]
    t = _read(_jsonl(tmp_path / "t.jsonl", rows))
    assert t.requests["session_id"].to_list() == ["b", "a"]  # sorted by arrival
    assert t.prompt(0).tolist() == [1, 2, 3, 9] and t.prompt(1).tolist() == [1, 2, 3, 9]
    assert _kinds(t, 1) == ["system", "user"]
    assert t.requests["agent_id"].to_list() == ["default", "planner"]


# --- detection ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "fmt"), [
    ('{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [1]}', "mooncake"),
    ('{"messages": [{"role": "user", "content": "x"}]}', "openai-chat"),
    ('{"timestamp": 1, "input": "x", "output": "", "session_id": "s"}', "lmcache-agent"),
    ('{"tokens": [1, 2]}', "tokens"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens", "azure"),
], ids=["mooncake", "openai-chat", "lmcache-agent", "tokens", "azure"])
def test_sniff(tmp_path, line, fmt):
    """--format auto recognises each format from its first non-blank line."""
    p = tmp_path / "f.txt"
    p.write_text("\n\n" + line + "\n")
    assert sniff(p) == fmt


def test_directory_one_session_per_file(tmp_path):
    """A directory ingests its data files in name order, one session per file when rows have none."""
    for name in ("b", "a"):
        _jsonl(tmp_path / f"{name}.jsonl", [{"tokens": [1, 2]}, {"tokens": [3]}])
    (tmp_path / "README.md").write_text("not data")
    (tmp_path / "empty.jsonl").write_text("")
    assert [p.name for p, _ in expand([tmp_path])] == ["a.jsonl", "b.jsonl"]
    t = _read(tmp_path)
    assert t.num_requests == 4 and sorted(set(t.requests["session_id"])) == ["a", "b"]


def test_directory_mixed_formats(tmp_path):
    """A directory whose files have different formats is refused, naming both."""
    _jsonl(tmp_path / "a.jsonl", [{"tokens": [1]}])
    (tmp_path / "b.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,5,1\n")
    with pytest.raises(TraceError, match=r"format: mixed formats in one directory \(b.csv is azure, a.jsonl is tokens\)"):
        expand([tmp_path])


def test_progress_reaches_total(tmp_path):
    """The progress callback ends at (total, total) and bytes_read is the input size."""
    p = _jsonl(tmp_path / "t.jsonl", [{"tokens": [i + 1]} for i in range(100)])
    seen = []
    res = ingest([p], tmp_path / "t.parquet", progress=lambda done, total: seen.append((done, total)))
    size = p.stat().st_size
    assert seen[-1] == (size, size) and res.bytes_read == size
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
