"""OpenAI chat-completions request JSONL: one request body per line.

``{"messages": [{"role", "content", ...}], "tools": [...], "timestamp"?, "arrival_us"?, "session_id"?,
"agent_id"?, "output_tokens"? | "max_tokens"? | "max_completion_tokens"?}``; a Batch-API line
(``{"custom_id", "body": {...}}``) is read through its ``body``.

Segments, in prompt order: the leading ``system``/``developer`` messages (kind ``system``), then the
``tools`` array as canonical JSON (sorted keys, compact; kind ``tools``), then every other message:
``user`` -> user, ``assistant`` -> assistant (content plus canonical JSON of ``tool_calls``),
``tool``/``function`` -> tool_output, later system messages -> system. Content is a string or a list
of parts (text parts are concatenated; other parts become their canonical JSON). Only message content
is tokenized, no chat template. ``timestamp`` is seconds, ``arrival_us`` µs; missing -> previous row's.
"""

from __future__ import annotations

import json
from pathlib import Path

from pic.traces.formats._base import (
    MAX_OUTPUT_TOKENS,
    TOO_DEEP,
    Progress,
    Rows,
    SkipRow,
    clip,
    file_stem,
    get_int,
    get_str,
    get_time_us,
    iter_json_lines,
)
from pic.traces.tokenizer import load_tokenizer

NAME = "openai-chat"
ROLE_KIND = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
             "tool": "tool_output", "function": "tool_output"}
_TIME_KEYS = (("arrival_us", 1), ("timestamp", 1_000_000))


def canonical_json(value) -> str:
    """Stable JSON text: sorted keys, compact separators, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _content(msg: dict, rows: Rows, path: Path, line: int, i: int) -> str:
    c = msg.get("content")
    if c is None:
        text = ""
    elif isinstance(c, str):
        text = c
    elif isinstance(c, list):
        parts = []
        for part in c:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict):
                parts.append(canonical_json(part))
            else:
                raise rows.bad(path, line, f"messages[{i}].content", "list parts must be objects or strings")
        text = "".join(parts)
    else:
        raise rows.bad(path, line, f"messages[{i}].content", f"expected a string or a list, got {type(c).__name__}")
    if msg.get("tool_calls"):
        text += canonical_json(msg["tool_calls"])
    return text


def _segments(body: dict, rows: Rows, path: Path, line: int) -> list[tuple[str, str]]:
    msgs = body.get("messages")
    if msgs is None:
        raise rows.bad(path, line, "messages", "missing field")
    if not isinstance(msgs, list) or not msgs:
        raise rows.bad(path, line, "messages", "expected a non-empty list")
    out: list[tuple[str, str]] = []
    lead = True
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise rows.bad(path, line, f"messages[{i}]", f"expected an object, got {type(m).__name__}")
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLE_KIND:
            raise rows.bad(path, line, f"messages[{i}].role", f"unknown role {clip(repr(role))}")
        kind = ROLE_KIND[role]
        if kind != "system" and lead:
            lead = False
            out.extend(_tools(body, rows, path, line))
        out.append((kind, _content(m, rows, path, line, i)))
    if lead:
        out.extend(_tools(body, rows, path, line))
    return out


def _tools(body: dict, rows: Rows, path: Path, line: int) -> list[tuple[str, str]]:
    tools = body.get("tools")
    if tools is None or tools == []:
        return []
    if not isinstance(tools, list):
        raise rows.bad(path, line, "tools", f"expected a list, got {type(tools).__name__}")
    return [("tools", canonical_json(tools))]


def read(path: Path, rows: Rows, *, tokenizer=None, progress: Progress | None = None) -> None:
    """Stream chat-completions JSONL at ``path`` into ``rows``."""
    session = file_stem(path)
    texts = rows.text_segments(load_tokenizer(tokenizer))
    last = 0
    for line, obj in iter_json_lines(path, rows, progress):
        try:
            body = obj["body"] if isinstance(obj.get("body"), dict) and "messages" not in obj else obj
            ts = get_time_us(obj, _TIME_KEYS, rows, path, line)
            try:
                parts = _segments(body, rows, path, line)
            except RecursionError:   # tools / tool_calls too deep to re-serialise
                raise rows.bad(path, line, "json", TOO_DEEP) from None
            out = 0
            for key in ("output_tokens", "max_completion_tokens", "max_tokens"):
                if body.get(key) is not None or obj.get(key) is not None:
                    out = get_int(obj if obj.get(key) is not None else body, key, rows, path, line,
                                  maximum=MAX_OUTPUT_TOKENS)
                    break
            sess = get_str(obj, "session_id", rows, path, line, default=session)
            agent = get_str(obj, "agent_id", rows, path, line, default="default")
            stored = [s for s in (texts.add(text, kind) for kind, text in parts if text) if s is not None]
            if not stored:
                raise rows.empty(path, line, "messages")
        except SkipRow:
            continue
        last = last if ts is None else ts
        rows.add(session_id=sess, agent_id=agent, arrival_us=last, output_tokens=out,
                 segment_ids=[sid for sid, _ in stored], num_tokens=sum(n for _, n in stored))
