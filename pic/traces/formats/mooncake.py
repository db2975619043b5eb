"""Mooncake (FAST'25) JSONL: ``{"timestamp": ms, "input_length", "output_length", "hash_ids": [...]}``.

Each hash id names one 512-token block of the prompt. A block becomes an opaque segment of kind
``"block"``: it stores its hash id and length only, and its tokens are derived from the id on demand
(:mod:`traces.content`), so equal ids give equal tokens and reading never materializes them. The last
block is partial: it holds the first ``input_length - 512 * (len(hash_ids) - 1)`` tokens of its id's block. A row whose
``ceil(input_length / 512) != len(hash_ids)`` is an error (all rows of the published traces agree).
Mooncake rows carry no session: each row is its own session (``<file stem>#<row>``).
"""

from __future__ import annotations

import itertools
from pathlib import Path

from pic.traces.formats._base import (
    MAX_OUTPUT_TOKENS,
    MAX_PROMPT_TOKENS,
    Progress,
    Rows,
    SkipRow,
    file_stem,
    get_int,
    get_time_us,
    iter_json_lines,
)

NAME = "mooncake"
BLOCK_TOKENS = 512
_MAX_ID = (1 << 63) - 1


def sniff(obj: dict) -> bool:
    """True if a parsed first line looks like a Mooncake row."""
    return isinstance(obj, dict) and "hash_ids" in obj and "input_length" in obj


def _parse(obj: dict, rows: Rows, path: Path, line: int) -> tuple[int, int, int, list[tuple[int, int]]]:
    """``(arrival µs, input_length, output_length, block keys)``; a block key is ``(hash id, tokens)``."""
    ts = get_time_us(obj, (("timestamp", 1000),), rows, path, line)
    if ts is None:
        raise rows.bad(path, line, "timestamp", "missing field")
    n_in = get_int(obj, "input_length", rows, path, line, maximum=MAX_PROMPT_TOKENS)
    n_out = get_int(obj, "output_length", rows, path, line, maximum=MAX_OUTPUT_TOKENS)
    ids = obj.get("hash_ids")
    if ids is None:
        raise rows.bad(path, line, "hash_ids", "missing field")
    if not isinstance(ids, list) or not all(type(h) is int and 0 <= h <= _MAX_ID for h in ids):
        raise rows.bad(path, line, "hash_ids", "expected a list of non-negative integers")
    need = -(-n_in // BLOCK_TOKENS)
    if len(ids) != need:
        raise rows.bad(path, line, "hash_ids",
                       f"{len(ids)} ids but input_length {n_in} needs {need} blocks of {BLOCK_TOKENS}")
    if n_in == 0:
        raise rows.empty(path, line, "input_length")
    keys = [(h, BLOCK_TOKENS) for h in ids[:-1]]
    keys.append((ids[-1], n_in - BLOCK_TOKENS * (len(ids) - 1)))
    return ts, n_in, n_out, keys


def read(path: Path, rows: Rows, *, tokenizer=None, progress: Progress | None = None) -> None:
    """Stream ``path`` into ``rows`` (``tokenizer`` is unused: Mooncake has no text)."""
    session = file_stem(path)
    # Rows are independent requests (no conversation ids): each row is its own session, so
    # closed-loop replay does not serialize the whole file.
    row_no = itertools.count()
    ids: dict[tuple[int, int], int] = {}
    add = rows.segments.add_opaque
    for line, obj in iter_json_lines(path, rows, progress):
        try:
            ts, n_in, n_out, keys = _parse(obj, rows, path, line)
        except SkipRow:
            continue
        sids = []
        for k in keys:
            sid = ids.get(k)
            if sid is None:
                sid = ids[k] = add(k[0], 0, k[1], "block")
            sids.append(sid)
        rows.add(session_id=f"{session}#{next(row_no)}", agent_id="default", arrival_us=ts, output_tokens=n_out,
                 segment_ids=sids, num_tokens=n_in)
