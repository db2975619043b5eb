"""LMCache agent-trace JSONL: ``{"timestamp": µs, "input": prompt text, "output": text, "session_id"}``.

``input`` is the whole prompt as flat text, so it is cut into segments at the section markers these
prompts really contain (checked on the published miniswe and taubench traces):

- mini-swe-agent prompts are ``<pr_description>...</pr_description>\\n\\n<instructions>...</instructions>``
  followed by one ``\\n\\n<returncode>N</returncode>\\n<output>...</output>`` block per tool call;
- tau-bench prompts are turns (user text, agent JSON tool calls) joined by blank lines.

Rule: a tag opening a line (``<name>``) starts a block that runs to its ``</name>`` (and on through
sibling blocks that follow directly, e.g. ``</warning><output_head>``); outside such blocks
the text is cut at every blank line (``\\n\\n``), the separator going to the FOLLOWING piece so a piece
reads the same in every later call. Kind by leading tag: instructions/system -> system, returncode/
output/observation -> tool_output, tools -> tools, documents -> document; untagged JSON with a
``"name"`` key or a ``THOUGHT:`` text -> assistant; anything else -> user.
``output_tokens`` is the tokenized length of ``output``. Missing ``session_id`` -> the file's stem.
"""

from __future__ import annotations

import bisect
import re
from pathlib import Path

from pic.traces.formats._base import (
    Progress,
    Rows,
    SkipRow,
    clean_text,
    file_stem,
    get_str,
    get_time_us,
    iter_json_lines,
)
from pic.traces.tokenizer import load_tokenizer

NAME = "lmcache-agent"
_OPEN_LINE = re.compile(r"^<([A-Za-z_][\w.-]*)>", re.M)
_CLOSE = re.compile(r"</([A-Za-z_][\w.-]*)>")
_OPEN_NEXT = re.compile(r"[ \t]*\n?<([A-Za-z_][\w.-]*)>")
_BREAK = re.compile(r"\n\n+")
_LEAD_TAG = re.compile(r"\s*<([A-Za-z_][\w.-]*)>")
_TAG_KIND = {
    "instructions": "system", "system": "system", "system_prompt": "system",
    "returncode": "tool_output", "output": "tool_output", "observation": "tool_output",
    "tool_output": "tool_output", "tool_response": "tool_output", "tool_result": "tool_output",
    "tools": "tools", "functions": "tools",
    "documents": "document", "document": "document", "context": "document",
}


def split_prompt(text: str) -> list[tuple[str, str]]:
    """``[(kind, piece), ...]`` with ``"".join(pieces) == text``; see the module docstring for the rule."""
    starts, ends = _blocks(text)
    cuts = [0]
    for m in _BREAK.finditer(text):
        p = m.start()
        k = bisect.bisect_right(starts, p) - 1
        if k >= 0 and p < ends[k]:
            continue  # inside a tagged block
        if p > cuts[-1]:
            cuts.append(p)
    cuts.append(len(text))
    return [(_kind(text[a:b]), text[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]


def _blocks(text: str) -> tuple[list[int], list[int]]:
    """Spans of tagged blocks: a tag opening a line up to its closing tag, plus any sibling blocks that
    follow it directly (``</warning><output_head>...``, ``</returncode>\n<output>...``).

    Linear in the text (plus a log factor): the closing tags are indexed by name in one pass, so a tag
    that is never closed costs a binary search, not a scan to the end of the prompt.
    """
    closes: dict[str, list[int]] = {}
    for c in _CLOSE.finditer(text):
        closes.setdefault(c.group(1), []).append(c.start())

    def close_after(name: str, pos: int) -> int:
        at = closes.get(name)
        if not at:
            return -1
        k = bisect.bisect_left(at, pos)
        return at[k] if k < len(at) else -1

    starts, ends = [], []
    pos = 0
    while (m := _OPEN_LINE.search(text, pos)) is not None:
        close = close_after(m.group(1), m.end())
        if close < 0:
            pos = m.end()
            continue
        end = close + len(m.group(1)) + 3
        while (n := _OPEN_NEXT.match(text, end)) is not None:
            close = close_after(n.group(1), n.end())
            if close < 0:
                break
            end = close + len(n.group(1)) + 3
        starts.append(m.start())
        ends.append(end)
        pos = end
    return starts, ends


def _kind(piece: str) -> str:
    m = _LEAD_TAG.match(piece)
    if m:
        return _TAG_KIND.get(m.group(1).lower(), "user")
    body = piece.lstrip()
    if body.startswith("THOUGHT:") or (body.startswith("{") and '"name"' in body[:200]):
        return "assistant"
    return "user"


def read(path: Path, rows: Rows, *, tokenizer=None, progress: Progress | None = None) -> None:
    """Stream an LMCache agent trace at ``path`` into ``rows``."""
    session = file_stem(path)
    texts = rows.text_segments(load_tokenizer(tokenizer))
    for line, obj in iter_json_lines(path, rows, progress):
        try:
            ts = get_time_us(obj, (("timestamp", 1),), rows, path, line)
            if ts is None:
                raise rows.bad(path, line, "timestamp", "missing field")
            prompt = obj.get("input")
            if prompt is None:
                raise rows.bad(path, line, "input", "missing field")
            if not isinstance(prompt, str):
                raise rows.bad(path, line, "input", f"expected a string, got {type(prompt).__name__}")
            output = obj.get("output", "")
            if output is None:
                output = ""
            if not isinstance(output, str):
                raise rows.bad(path, line, "output", f"expected a string, got {type(output).__name__}")
            sess = get_str(obj, "session_id", rows, path, line, default=session)
            stored = [s for s in (texts.add(p, k) for k, p in split_prompt(prompt)) if s is not None]
            if not stored:
                raise rows.empty(path, line, "input")
        except SkipRow:
            continue
        rows.add(session_id=sess, agent_id=clean_text(obj["agent_id"]) if isinstance(obj.get("agent_id"), str)
                 else "default", arrival_us=ts, output_tokens=texts.count(output),
                 segment_ids=[sid for sid, _ in stored], num_tokens=sum(n for _, n in stored))
