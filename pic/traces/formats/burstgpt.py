"""BurstGPT CSV (Azure OpenAI GPT service logs; an input of vLLM's serving benchmark):
``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``.

Arrivals and lengths only. ``Timestamp`` is seconds from the start of the log (float); arrivals become µs
relative to the first row. ``Request tokens`` is the prompt (0: an empty prompt, skipped and counted), ``Response tokens`` the output (>= 0; the
log holds failed requests with 0). Each row gets ONE unique opaque segment (kind ``"user"``) of ``Request
tokens`` tokens (key = row index, salt = xxh64 of the file name: :mod:`traces.content`, tokens derived on
demand, never stored), so no two requests share content, and is its own session (``<file stem>#<row>``);
``Model`` (``ChatGPT``, ``GPT-4``) becomes the agent id. ``Total tokens`` and ``Log Type`` are not used.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import xxhash

from pic.traces.formats._base import (
    MAX_OUTPUT_TOKENS,
    MAX_PROMPT_TOKENS,
    MAX_TIME_US,
    LineProblem,
    Progress,
    Rows,
    SkipRow,
    clip,
    csv_cells,
    file_stem,
    iter_lines,
)
from pic.traces.schema import TraceError

NAME = "burstgpt"
COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens")
_BATCH_ROWS = 8192


def sniff(first_line: str) -> bool:
    """True if ``first_line`` is a BurstGPT CSV header."""
    cols = [c.strip().lower() for c in first_line.strip().lstrip("\ufeff").split(",")]
    return all(c.lower() in cols for c in COLUMNS)


def _int(text: str, rows: Rows, path: Path, line: int, col: str, minimum: int, maximum: int) -> int:
    s = text.strip()
    try:
        v = int(s)
    except ValueError:
        try:
            f = float(s)
        except ValueError:
            raise rows.bad(path, line, col, f"expected an integer, got {clip(s)!r}") from None
        if not (math.isfinite(f) and f == int(f)):
            raise rows.bad(path, line, col, f"expected an integer, got {clip(s)!r}") from None
        v = int(f)
    if v < minimum:
        raise rows.bad(path, line, col, f"must be >= {minimum}, got {v}")
    if v > maximum:
        raise rows.bad(path, line, col, f"{v} is out of range (at most {maximum:,})")
    return v


def _seconds(text: str, rows: Rows, path: Path, line: int) -> int:
    s = text.strip()
    try:
        sec = float(s)
    except ValueError:
        raise rows.bad(path, line, "Timestamp", f"expected seconds, got {clip(s)!r}") from None
    if not math.isfinite(sec):
        raise rows.bad(path, line, "Timestamp", f"not a finite number ({s})")
    if sec < 0:
        raise rows.bad(path, line, "Timestamp", f"negative timestamp {s}")
    if sec * 1_000_000 > MAX_TIME_US:
        raise rows.bad(path, line, "Timestamp", f"{clip(s)} is out of range (arrivals are stored as int64 microseconds)")
    return int(round(sec * 1_000_000))


def read(path: Path, rows: Rows, *, tokenizer=None, progress: Progress | None = None) -> None:
    """Stream the CSV at ``path`` into ``rows`` (``tokenizer`` is unused: BurstGPT has no text)."""
    salt = xxhash.xxh64_intdigest(os.fsencode(path.name))
    session = file_stem(path)
    lines = iter_lines(path, progress)
    header = next(lines, None)
    if header is None:
        raise TraceError(str(path), None, "file", "empty file (no header)")
    hline, htext = header
    if isinstance(htext, LineProblem):
        raise TraceError(str(path), hline, htext.field, htext.message)
    header_cells = csv_cells(htext)
    if header_cells is None:
        raise TraceError(str(path), hline, "header", "not a CSV line")
    names = [c.strip().lstrip("\ufeff") for c in header_cells]
    lower = [c.lower() for c in names]
    idx = {}
    for col in COLUMNS:
        if col.lower() not in lower:
            raise TraceError(str(path), hline, col, "missing column")
        idx[col] = lower.index(col.lower())
    width = len(names)
    batch: list[tuple[int, int, str, int, int]] = []  # (row index, arrival, model, request, response)
    row_index = 0

    def flush() -> None:
        if not batch:
            return
        add = rows.segments.add_opaque
        for row, ts, model, req, resp in batch:
            sid = add(row, salt, req, "user")
            rows.add(session_id=f"{session}#{row}", agent_id=model, arrival_us=ts, output_tokens=resp,
                     segment_ids=[sid], num_tokens=req)
        batch.clear()

    for line, text in lines:
        try:
            if isinstance(text, LineProblem):
                raise rows.bad(path, line, text.field, text.message)
            cells = csv_cells(text)
            if cells is None:
                raise rows.bad(path, line, "row", "not a CSV line (a bare carriage return or quote inside a field)")
            if len(cells) != width:
                raise rows.bad(path, line, "row", f"expected {width} columns, got {len(cells)}")
            ts = _seconds(cells[idx["Timestamp"]], rows, path, line)
            model = cells[idx["Model"]].strip() or "default"
            req = _int(cells[idx["Request tokens"]], rows, path, line, "Request tokens", 0, MAX_PROMPT_TOKENS)
            resp = _int(cells[idx["Response tokens"]], rows, path, line, "Response tokens", 0, MAX_OUTPUT_TOKENS)
            if req == 0:
                raise rows.empty(path, line, "Request tokens")
        except SkipRow:
            continue
        batch.append((row_index, ts, model, req, resp))
        row_index += 1
        if len(batch) >= _BATCH_ROWS:
            flush()
    flush()
