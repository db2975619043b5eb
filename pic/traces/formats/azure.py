"""Azure LLM inference trace CSV (2023/2024): ``TIMESTAMP,ContextTokens,GeneratedTokens``.

Arrivals and lengths only. ``TIMESTAMP`` is a date-time (``2023-11-16 18:17:03.9799600`` read as UTC,
fractions beyond µs truncated; a UTC offset such as ``+00:00`` is honoured) or a number of seconds;
arrivals become µs relative to the first row.
Each row gets ONE unique opaque segment (kind ``"user"``) of ``ContextTokens`` tokens: key = the row
index, salt = xxh64 of the file name (:mod:`traces.content`; tokens derived on demand, never stored), so
no two requests share content. Each row is its own session (``<file stem>#<row>``).
"""

from __future__ import annotations

import math
import os
from datetime import datetime, timedelta, timezone
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

NAME = "azure"
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_BATCH_ROWS = 8192
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def sniff(first_line: str) -> bool:
    """True if ``first_line`` is an Azure trace CSV header."""
    cols = [c.strip().lower() for c in first_line.strip().lstrip("\ufeff").split(",")]
    return all(c.lower() in cols for c in COLUMNS)


def _time_us(text: str) -> int:
    text = text.strip()
    try:
        sec = float(text)
    except ValueError:
        sec = None
    if sec is not None:
        if not math.isfinite(sec):
            raise ValueError(f"not a finite number ({text})")
        if sec < 0:
            raise ValueError(f"negative timestamp {text}")
        if sec * 1_000_000 > MAX_TIME_US:
            raise ValueError(f"{text} is out of range (arrivals are stored as int64 microseconds)")
        return int(round(sec * 1_000_000))
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:  # Python 3.10 reads only 3 or 6 fraction digits: cut longer fractions to 6
        date, _, rest = text.partition(".")
        digits = len(rest) - len(rest.lstrip("0123456789"))
        try:
            dt = datetime.fromisoformat(f"{date}.{rest[:min(digits, 6)].ljust(6, '0')}{rest[digits:]}" if rest else date)
        except ValueError:
            raise ValueError(f"not a date-time or number: {clip(text)!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return (dt - _EPOCH) // timedelta(microseconds=1)


def _int(text: str, rows: Rows, path: Path, line: int, col: str, minimum: int, maximum: int) -> int:
    try:
        v = int(text.strip())
    except ValueError:
        raise rows.bad(path, line, col, f"expected an integer, got {clip(text.strip())!r}") from None
    if v < minimum:
        raise rows.bad(path, line, col, f"must be >= {minimum}, got {v}")
    if v > maximum:
        raise rows.bad(path, line, col, f"{v} is out of range (at most {maximum:,})")
    return v


def read(path: Path, rows: Rows, *, tokenizer=None, progress: Progress | None = None) -> None:
    """Stream the CSV at ``path`` into ``rows`` (``tokenizer`` is unused: Azure has no text)."""
    session = file_stem(path)
    # Rows are independent requests (no conversation ids): each row is its own session, so
    # closed-loop replay does not serialize the whole file.
    salt = xxhash.xxh64_intdigest(os.fsencode(path.name))
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
    batch: list[tuple[int, int, int, int]] = []  # (row index, arrival, context, generated)
    row_index = 0

    def flush() -> None:
        if not batch:
            return
        add = rows.segments.add_opaque
        for row, ts, ctx, gen in batch:
            sid = add(row, salt, ctx, "user")
            rows.add(session_id=f"{session}#{row}", agent_id="default", arrival_us=ts, output_tokens=gen,
                     segment_ids=[sid], num_tokens=ctx)
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
            try:
                ts = _time_us(cells[idx["TIMESTAMP"]])
            except ValueError as e:
                raise rows.bad(path, line, "TIMESTAMP", str(e)) from None
            ctx = _int(cells[idx["ContextTokens"]], rows, path, line, "ContextTokens", 0, MAX_PROMPT_TOKENS)
            gen = _int(cells[idx["GeneratedTokens"]], rows, path, line, "GeneratedTokens", 0, MAX_OUTPUT_TOKENS)
            if ctx == 0:
                raise rows.empty(path, line, "ContextTokens")
        except SkipRow:
            continue
        batch.append((row_index, ts, ctx, gen))
        row_index += 1
        if len(batch) >= _BATCH_ROWS:
            flush()
    flush()

