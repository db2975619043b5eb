"""Raw token JSONL: one request per line, already tokenized.

``{"tokens": [int, ...]}`` (one segment of kind ``user``) or
``{"segments": [{"kind": "system", "tokens": [...]}, ...]}``; optional ``arrival_us`` (or
``timestamp_us``) int µs, ``session_id``, ``agent_id``, ``output_tokens``. Token ids must be int32
(``0 <= id < 2**31``). A missing arrival repeats the previous row's (file order is kept).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pic.traces.formats._base import (
    MAX_OUTPUT_TOKENS,
    MAX_PROMPT_TOKENS,
    Progress,
    Rows,
    SkipRow,
    file_stem,
    get_int,
    get_str,
    get_time_us,
    iter_json_lines,
)
from pic.traces.schema import KINDS

NAME = "tokens"
_TIME_KEYS = (("arrival_us", 1), ("timestamp_us", 1))


def _token_array(v, rows: Rows, path: Path, line: int, field: str) -> np.ndarray:
    if not isinstance(v, list) or not v:
        raise rows.bad(path, line, field, "expected a non-empty list of token ids")
    if not all(type(t) is int for t in v):
        raise rows.bad(path, line, field, "token ids must be integers")
    if len(v) > MAX_PROMPT_TOKENS:
        raise rows.bad(path, line, field, f"{len(v):,} tokens, over the {MAX_PROMPT_TOKENS:,} a prompt may hold")
    try:
        arr = np.asarray(v, dtype=np.int64)
    except OverflowError:
        raise rows.bad(path, line, field, "token id outside [0, 2**31)") from None
    if arr.min() < 0 or arr.max() >= 2**31:
        raise rows.bad(path, line, field, "token id outside [0, 2**31)")
    return arr.astype(np.int32)


def _segments(obj: dict, rows: Rows, path: Path, line: int) -> list[tuple[str, np.ndarray]]:
    if "segments" in obj:
        segs = obj["segments"]
        if not isinstance(segs, list) or not segs:
            raise rows.bad(path, line, "segments", "expected a non-empty list")
        out = []
        for i, s in enumerate(segs):
            if not isinstance(s, dict):
                raise rows.bad(path, line, f"segments[{i}]", "expected an object")
            kind = s.get("kind", "user")
            if kind not in KINDS:
                raise rows.bad(path, line, f"segments[{i}].kind", f"unknown kind {kind!r}")
            out.append((kind, _token_array(s.get("tokens"), rows, path, line, f"segments[{i}].tokens")))
        return out
    if "tokens" not in obj:
        raise rows.bad(path, line, "tokens", "missing field (need tokens or segments)")
    return [("user", _token_array(obj["tokens"], rows, path, line, "tokens"))]


def read(path: Path, rows: Rows, *, tokenizer=None, progress: Progress | None = None) -> None:
    """Stream token JSONL at ``path`` into ``rows``."""
    session = file_stem(path)
    last = 0
    for line, obj in iter_json_lines(path, rows, progress):
        try:
            ts = get_time_us(obj, _TIME_KEYS, rows, path, line)
            segs = _segments(obj, rows, path, line)
            out = get_int(obj, "output_tokens", rows, path, line, default=0, maximum=MAX_OUTPUT_TOKENS)
            sess = get_str(obj, "session_id", rows, path, line, default=session)
            agent = get_str(obj, "agent_id", rows, path, line, default="default")
        except SkipRow:
            continue
        last = last if ts is None else ts
        ids = [rows.segments.add(t, k) for k, t in segs]
        rows.add(session_id=sess, agent_id=agent, arrival_us=last, output_tokens=out,
                 segment_ids=ids, num_tokens=sum(t.size for _, t in segs))
