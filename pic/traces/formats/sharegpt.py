"""ShareGPT conversations (the input of vLLM's ``benchmark_serving --dataset-name sharegpt``).

A JSON array of ``{"id": ..., "conversations": [{"from": "human", "value": "..."}, {"from": "gpt", ...}]}``
(``conversation`` and ``role``/``content`` spellings accepted), or one such object per line (JSONL).

Each conversation is a session; each assistant turn (``gpt``, ``chatgpt``, ``assistant``, ``bard``, ``bing``,
``model``) is one request whose prompt is every message before it, in order (``system`` -> system,
``human``/``user`` -> user, earlier assistant turns -> assistant, ``tool``/``function``/``observation`` ->
tool_output), and whose ``output_tokens`` is the tokenized length of that assistant message. vLLM samples only
the first (human, gpt) pair of each conversation; replaying every turn is what a cache sees in a multi-turn
chat. A conversation without an assistant turn gives no request (counted as skipped, not an error).

ShareGPT records no times: conversation ``k`` (file order) starts at ``k`` seconds and each later turn comes
:data:`TURN_GAP_US` after the previous one. Re-time with ``pic replay --rate`` / ``--time-scale``, or let
``--closed-loop`` wait for each answer. Only message text is tokenized (no chat template).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from pic.traces.formats._base import (
    TOO_DEEP,
    Progress,
    Rows,
    SkipRow,
    clean_text,
    clip,
    file_stem,
    iter_json_lines,
)
from pic.traces.schema import TraceError
from pic.traces.tokenizer import load_tokenizer

NAME = "sharegpt"
SPEAKER_KIND = {"system": "system", "human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant",
                "assistant": "assistant", "bard": "assistant", "bing": "assistant", "model": "assistant",
                "tool": "tool_output", "function": "tool_output", "observation": "tool_output"}
SESSION_GAP_US = 1_000_000    # conversation k starts at k seconds
TURN_GAP_US = 10_000_000      # a later turn follows the previous one by 10 s
_CONV_KEYS = ("conversations", "conversation")


def sniff(obj: dict) -> bool:
    """True if a parsed JSON object looks like one ShareGPT conversation."""
    return isinstance(obj, dict) and any(isinstance(obj.get(k), list) for k in _CONV_KEYS)


def sniff_head(head: bytes) -> bool:
    """True if a file starting with ``head`` is a JSON array of ShareGPT conversations."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return text.startswith(b"[") and any(f'"{k}"'.encode() in text for k in _CONV_KEYS)


def _iter_array(path: Path, progress: Progress | None) -> Iterator[tuple[int, object]]:
    """``(line, element)`` of a JSON array file; the line is where the element starts. The file is read whole
    (ShareGPT V3 is ~0.7 GB); progress is reported in bytes as elements are decoded."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise TraceError(str(path), line, "encoding", f"not valid UTF-8 (byte {e.start})") from None
    dec = json.JSONDecoder()
    n, pos, line, done = len(text), 0, 1, 0
    scale, reported = len(raw) / max(n, 1), 0

    def tick(p: int) -> None:
        nonlocal reported
        if progress is not None:
            target = len(raw) if p >= n else int(p * scale)
            progress(target - reported)
            reported = target

    def skip(p: int) -> int:
        while p < n and text[p] in " \t\r\n":
            p += 1
        return p

    def fail(p: int, what: str) -> TraceError:
        return TraceError(str(path), text.count("\n", 0, p) + 1, "json", what)

    pos = skip(pos)
    if pos >= n or text[pos] != "[":
        raise fail(pos, "expected a JSON array of conversations")
    pos = skip(pos + 1)
    if pos < n and text[pos] == "]":
        tick(n)
        return
    while True:
        line += text.count("\n", done, pos)
        done = pos
        try:
            obj, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise TraceError(str(path), e.lineno, "json",
                             f"invalid JSON ({e.msg} at column {e.colno}); the rest of the array cannot be read") from None
        except RecursionError:
            raise fail(pos, f"{TOO_DEEP}; the rest of the array cannot be read") from None
        except ValueError as e:   # e.g. an integer of more than 4300 digits
            raise fail(pos, f"invalid JSON ({clip(str(e))}); the rest of the array cannot be read") from None
        yield line, obj
        tick(end)
        pos = skip(end)
        if pos < n and text[pos] == ",":
            pos = skip(pos + 1)
        elif pos < n and text[pos] == "]":
            if skip(pos + 1) < n:
                raise fail(skip(pos + 1), "unexpected text after the array")
            tick(n)
            return
        else:
            raise fail(pos, "expected ',' or ']' after a conversation")


def _items(path: Path, rows: Rows, progress: Progress | None) -> Iterator[tuple[int, object]]:
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
        yield from _iter_array(path, progress)
    else:
        yield from iter_json_lines(path, rows, progress)


def read(path: Path, rows: Rows, *, tokenizer=None, progress: Progress | None = None) -> None:
    """Read a ShareGPT JSON (or JSONL) file at ``path`` into ``rows``."""
    texts = rows.text_segments(load_tokenizer(tokenizer))
    for k, (line, obj) in enumerate(_items(path, rows, progress)):
        try:
            if not isinstance(obj, dict):
                raise rows.bad(path, line, "json", f"expected a conversation object, got {type(obj).__name__}")
            key = next((c for c in _CONV_KEYS if c in obj), None)
            if key is None:
                raise rows.bad(path, line, "conversations", "missing field")
            turns = obj[key]
            if not isinstance(turns, list):
                raise rows.bad(path, line, key, f"expected a list, got {type(turns).__name__}")
            sid = obj.get("id", f"{file_stem(path)}#{k}")
            if isinstance(sid, bool) or not isinstance(sid, str | int):
                raise rows.bad(path, line, "id", f"expected a string, got {type(sid).__name__}")
            msgs = [_turn(t, i, key, rows, path, line) for i, t in enumerate(turns)]
        except SkipRow:
            continue
        if not any(kind == "assistant" for kind, _ in msgs):
            rows.skipped[f"{key}: no assistant turn (nothing to replay)"] += 1
            continue
        prompt: list[tuple[int, int]] = []
        turn = 0
        for kind, text in msgs:
            if kind == "assistant" and prompt:
                rows.add(session_id=clean_text(str(sid)), agent_id="default", arrival_us=k * SESSION_GAP_US + turn * TURN_GAP_US,
                         output_tokens=texts.count(text), segment_ids=[s for s, _ in prompt],
                         num_tokens=sum(n for _, n in prompt))
                turn += 1
            stored = texts.add(text, kind) if text else None
            if stored is not None:
                prompt.append(stored)


def _turn(t: object, i: int, key: str, rows: Rows, path: Path, line: int) -> tuple[str, str]:
    where = f"{key}[{i}]"
    if not isinstance(t, dict):
        raise rows.bad(path, line, where, f"expected an object, got {type(t).__name__}")
    field = "role" if "role" in t and "from" not in t else "from"
    who = t.get(field)
    if who is None:
        raise rows.bad(path, line, f"{where}.{field}", "missing field")
    if not isinstance(who, str) or who.lower() not in SPEAKER_KIND:
        raise rows.bad(path, line, f"{where}.{field}", f"unknown speaker {who!r} (known: {', '.join(SPEAKER_KIND)})")
    text = t.get("value", t.get("content"))
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise rows.bad(path, line, f"{where}.{'value' if 'value' in t else 'content'}",
                       f"expected a string, got {type(text).__name__}")
    return SPEAKER_KIND[who.lower()], text
