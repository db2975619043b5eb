"""Mooncake (FAST'25) JSONL: ``{"timestamp": ms, "input_length", "output_length", "hash_ids": [...]}``.

Each hash id names one 512-token block of the prompt. A block becomes an opaque segment of kind
``"block"`` whose tokens are derived from the id alone (:func:`traces.formats._base.opaque_tokens`), so
equal ids give equal tokens. The last block is partial: it holds the first
``input_length - 512 * (len(hash_ids) - 1)`` tokens of its id's block. A row whose
``ceil(input_length / 512) != len(hash_ids)`` is an error (all rows of the published traces agree).
Mooncake rows carry no session: each row is its own session (``<file stem>#<row>``).
"""

from __future__ import annotations

import itertools
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
    get_time_us,
    iter_json_lines,
    opaque_tokens,
)

NAME = "mooncake"
BLOCK_TOKENS = 512
_BATCH_LINES = 4096
_MAX_BATCH_TOKENS = 1 << 22
_MAX_ID = (1 << 63) - 1


def sniff(obj: dict) -> bool:
    """True if a parsed first line looks like a Mooncake row."""
    return isinstance(obj, dict) and "hash_ids" in obj and "input_length" in obj


class _BlockCache:
    """hash id (and partial length) -> segment id; new blocks are generated in vectorized batches."""

    def __init__(self, rows: Rows) -> None:
        self.rows = rows
        self.ids: dict[tuple[int, int], int] = {}

    def fill(self, wanted: set[tuple[int, int]]) -> None:
        new = sorted(k for k in wanted if k not in self.ids)
        full = [k for k in new if k[1] == BLOCK_TOKENS]
        step = max(1, _MAX_BATCH_TOKENS // BLOCK_TOKENS)
        for lo in range(0, len(full), step):
            self._make(full[lo:lo + step])
        self._make([k for k in new if k[1] != BLOCK_TOKENS])

    def _make(self, part: list[tuple[int, int]]) -> None:
        if not part:
            return
        keys = np.fromiter((k for k, _ in part), dtype=np.uint64, count=len(part))
        lens = np.fromiter((n for _, n in part), dtype=np.int64, count=len(part))
        toks, offs = opaque_tokens(keys, lens)
        add = self.rows.segments.add
        for n, key in enumerate(part):
            self.ids[key] = add(toks[offs[n]:offs[n + 1]], "block")


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
    cache = _BlockCache(rows)
    pending: list[tuple[int, int, int, list[tuple[int, int]]]] = []

    def flush() -> None:
        cache.fill({k for *_, keys in pending for k in keys})
        for ts, n_in, n_out, keys in pending:
            rows.add(session_id=f"{session}#{next(row_no)}", agent_id="default", arrival_us=ts, output_tokens=n_out,
                     segment_ids=[cache.ids[k] for k in keys], num_tokens=n_in)
        pending.clear()

    for line, obj in iter_json_lines(path, rows, progress):
        try:
            pending.append(_parse(obj, rows, path, line))
        except SkipRow:
            continue
        if len(pending) >= _BATCH_LINES:
            flush()
    flush()

