"""Shared reader plumbing: streamed lines with line numbers, typed field access, request rows.

Every reader in ``traces.formats`` streams its file through :func:`iter_json_lines` (or a CSV batch
reader), turns each row into segments added to a shared :class:`~traces.schema.SegmentTable`, and
appends one request to a shared :class:`Rows`. :meth:`Rows.build` then sorts by arrival, numbers the
requests 0..R-1 and returns a validated :class:`~traces.schema.Trace`.

Bad rows raise :class:`~traces.schema.TraceError` (``file:line: field: problem``, ending with the hint
:data:`SKIP_BAD_HINT`) unless the :class:`Rows` was made with ``skip_bad=True``, in which case they are
counted by reason and skipped. A row whose prompt has no tokens at all (real logs hold image-only turns
with the image stripped) is not malformed: it is skipped and counted (:meth:`Rows.empty`) unless the
Rows was made with ``skip_empty=False``.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pic.traces.content import OPAQUE_VOCAB, opaque_tokens  # noqa: F401 - re-exported for readers
from pic.traces.schema import SegmentTable, Trace, TraceError, requests_frame

#: a single input line longer than this is rejected (it would otherwise sit in memory whole)
MAX_LINE_BYTES = 16 * 1024 * 1024
#: what the canonical schema holds: arrival_us is int64 µs, output_tokens int32
MAX_TIME_US = (1 << 63) - 1
MAX_OUTPUT_TOKENS = (1 << 31) - 1
#: longest prompt pic reads (tokens); far above any model's context window, small enough to allocate
MAX_PROMPT_TOKENS = 1 << 24
#: message for JSON nested deeper than Python's parser goes (RecursionError)
TOO_DEEP = "nested too deeply to read (JSON depth over ~1000)"
UTF8_BOM = b"\xef\xbb\xbf"
#: the end of every row error: the way to go on past bad rows
SKIP_BAD_HINT = "pass --skip-bad to skip bad rows"

Progress = Callable[[int], None]  # called with the number of NEW bytes consumed


class SkipRow(Exception):
    """Raised inside a reader to abandon the current row after it was counted as skipped."""


class Rows:
    """Column lists of request rows from one or more input files, plus skip accounting."""

    def __init__(self, *, skip_bad: bool = False, skip_empty: bool = True) -> None:
        self.skip_bad = skip_bad
        self.skip_empty = skip_empty
        self.skipped: Counter[str] = Counter()
        self.num_empty = 0  # rows skipped because their prompt has no tokens
        self.segments = SegmentTable()
        self.session_id: list[str] = []
        self.agent_id: list[str] = []
        self.arrival_us: list[int] = []
        self.output_tokens: list[int] = []
        self.segment_ids: list[list[int]] = []
        self.num_tokens = 0  # prompt tokens over all kept rows
        self._texts: TextSegments | None = None

    def text_segments(self, tokenizer) -> TextSegments:
        """The text -> segment cache shared by every file of this ingest (made on first use)."""
        if self._texts is None or self._texts.tokenizer is not tokenizer:
            self._texts = TextSegments(self, tokenizer)
        return self._texts

    def __len__(self) -> int:
        return len(self.arrival_us)

    def bad(self, path: str | Path, line: int | None, field: str, message: str) -> SkipRow:
        """Raise the TraceError for a bad row (ending with :data:`SKIP_BAD_HINT`), or count it and return
        :class:`SkipRow` to raise."""
        if not self.skip_bad:
            raise TraceError(str(path), line, field, f"{message}; {SKIP_BAD_HINT}")
        self.skipped[f"{field}: {message}"] += 1
        return SkipRow(f"{path}:{line}: {field}: {message}")

    def empty(self, path: str | Path, line: int | None, field: str) -> SkipRow:
        """A row whose prompt has no tokens: counted and skipped (return :class:`SkipRow` to raise), or an
        error when ``skip_empty`` is off."""
        if not self.skip_empty:
            raise self.bad(path, line, field, "empty prompt (no text)")
        self.num_empty += 1
        return SkipRow(f"{path}:{line}: {field}: empty prompt")

    def add(self, *, session_id: str, agent_id: str, arrival_us: int, output_tokens: int,
            segment_ids: list[int], num_tokens: int) -> None:
        """Append one request row (segments already stored in :attr:`segments`)."""
        self.session_id.append(session_id)
        self.agent_id.append(agent_id)
        self.arrival_us.append(int(arrival_us))
        self.output_tokens.append(int(output_tokens))
        self.segment_ids.append(segment_ids)
        self.num_tokens += int(num_tokens)

    def build(self, source: str, meta: dict[str, str] | None = None) -> Trace:
        """Sort by arrival (stable), shift arrivals to start at 0, number requests 0..R-1, validate."""
        arrival = np.asarray(self.arrival_us, dtype=np.int64)
        origin = int(arrival.min()) if arrival.size else 0
        order = np.argsort(arrival, kind="stable").tolist()
        df = requests_frame({
            "request_id": list(range(len(order))),
            "session_id": [self.session_id[i] for i in order],
            "agent_id": [self.agent_id[i] for i in order],
            "arrival_us": (arrival[order] - origin).tolist() if order else [],
            "output_tokens": [self.output_tokens[i] for i in order],
            "segment_ids": [self.segment_ids[i] for i in order],
        })
        counts = {"empty_prompts_skipped": str(self.num_empty)} if self.num_empty else {}
        if self.skipped:
            counts["bad_rows_skipped"] = str(sum(self.skipped.values()))
        return Trace(self.segments.build(), df, source=source,
                     meta={"arrival_origin_us": str(origin), **counts, **(meta or {})})


@dataclass(frozen=True, slots=True)
class LineProblem:
    """Stands in for a line that could not be read (over-long or not UTF-8)."""

    field: str
    message: str


def iter_lines(path: Path, progress: Progress | None = None,
               max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str | LineProblem]]:
    """Yield ``(line_number, text)`` for every non-blank line, decoded as UTF-8, streamed.

    A line that is not UTF-8, or longer than ``max_line_bytes``, is yielded as a :class:`LineProblem`
    (the long line is never held whole: it is read in bounded pieces and discarded), so the reader can
    raise it or count it under skip-bad.
    """
    with open(path, "rb") as f:
        lineno = 0
        while True:
            raw = f.readline(max_line_bytes + 1)
            if not raw:
                return
            lineno += 1
            if progress is not None:
                progress(len(raw))
            if lineno == 1 and raw.startswith(UTF8_BOM):
                raw = raw[len(UTF8_BOM):]
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                size = len(raw)
                while raw and not raw.endswith(b"\n"):  # drain the rest of the long line
                    raw = f.readline(1 << 20)
                    size += len(raw)
                    if progress is not None:
                        progress(len(raw))
                yield lineno, LineProblem("line", f"{size} bytes, over the {max_line_bytes}-byte limit")
                continue
            if not raw.strip():
                continue
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield lineno, LineProblem("encoding", f"not valid UTF-8 (byte {e.start})")


def iter_json_lines(path: Path, rows: Rows, progress: Progress | None = None,
                    max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, object)`` for each JSONL line; bad lines raise or are skipped via ``rows``."""
    for lineno, text in iter_lines(path, progress, max_line_bytes):
        try:
            if isinstance(text, LineProblem):
                raise rows.bad(path, lineno, text.field, text.message)
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise rows.bad(path, lineno, "json", f"invalid JSON ({e.msg} at column {e.colno})") from None
            except RecursionError:
                raise rows.bad(path, lineno, "json", TOO_DEEP) from None
            except ValueError as e:   # e.g. an integer of more than 4300 digits
                raise rows.bad(path, lineno, "json", f"invalid JSON ({clip(str(e))})") from None
            if not isinstance(obj, dict):
                raise rows.bad(path, lineno, "json", f"expected an object, got {type(obj).__name__}")
        except SkipRow:
            continue
        yield lineno, obj


def get_int(obj: dict, key: str, rows: Rows, path: Path, line: int, *, default: int | None = None,
            minimum: int = 0, maximum: int = MAX_TIME_US) -> int:
    """``obj[key]`` as an int in ``[minimum, maximum]`` (integral floats accepted); bad/missing -> rows.bad."""
    if key not in obj or obj[key] is None:
        if default is not None:
            return default
        raise rows.bad(path, line, key, "missing field")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise rows.bad(path, line, key, f"expected a number, got {type(v).__name__}")
    if isinstance(v, float):
        if not math.isfinite(v):
            raise rows.bad(path, line, key, f"not a finite number ({v})")
        if v != int(v):
            raise rows.bad(path, line, key, f"expected an integer, got {v}")
        v = int(v)
    if v < minimum:
        raise rows.bad(path, line, key, f"must be >= {minimum}, got {v}")
    if v > maximum:
        raise rows.bad(path, line, key, f"{v} is out of range (at most {maximum:,})")
    return v


def get_time_us(obj: dict, keys: tuple[tuple[str, float], ...], rows: Rows, path: Path, line: int) -> int | None:
    """First present timestamp among ``(key, scale_to_us)`` pairs, as int µs >= 0; None if absent."""
    for key, scale in keys:
        if key in obj and obj[key] is not None:
            v = obj[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise rows.bad(path, line, key, f"expected a number, got {type(v).__name__}")
            if not math.isfinite(v):
                raise rows.bad(path, line, key, f"not a finite number ({v})")
            if v < 0:
                raise rows.bad(path, line, key, f"negative timestamp {v}")
            us = int(v) * int(scale) if isinstance(v, int) and scale >= 1 else v * scale
            if us > MAX_TIME_US:
                raise rows.bad(path, line, key, f"{v} is out of range (arrivals are stored as int64 microseconds)")
            return int(us) if isinstance(us, int) else int(round(us))
    return None


def csv_cells(text: str) -> list[str] | None:
    """The cells of one CSV line, or None when it is not one (a bare carriage return inside a field, ...)."""
    try:
        return next(csv.reader([text]), [])
    except csv.Error:
        return None


def clip(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters (with ``...``), for quoting user values in one-line errors."""
    return text if len(text) <= limit else text[:limit] + "..."


def clean_text(text: str) -> str:
    """``text`` storable as UTF-8: a lone surrogate (JSON allows ``"\\udcff"``) becomes U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)


def file_stem(path: Path) -> str:
    """``path.stem`` as printable UTF-8 (bytes of an undecodable file name become U+FFFD)."""
    return path.stem.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def get_str(obj: dict, key: str, rows: Rows, path: Path, line: int, *, default: str | None = None) -> str:
    """``obj[key]`` as a string (ints accepted for ids); bad/missing -> rows.bad."""
    if key not in obj or obj[key] is None:
        if default is not None:
            return default
        raise rows.bad(path, line, key, "missing field")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise rows.bad(path, line, key, f"expected a string, got {type(v).__name__}")
    return clean_text(str(v))


class TextSegments:
    """Tokenize text segments once: ``text -> (segment id, num tokens)`` cache over a whole ingest.

    Agent prompts repeat the same system text, tool schemas and earlier turns call after call, so only
    new text reaches the tokenizer. The cache is dropped when it holds more than ``max_chars`` of text.
    """

    def __init__(self, rows: Rows, tokenizer, max_chars: int = 256 << 20) -> None:
        self.rows, self.tokenizer, self.max_chars = rows, tokenizer, max_chars
        self._cache: dict[tuple[str, str], tuple[int, int]] = {}
        self._chars = 0

    def add(self, text: str, kind: str) -> tuple[int, int] | None:
        """Store ``text`` as a segment of ``kind``; ``(segment id, num tokens)``, or None if no tokens."""
        key = (kind, text)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        toks = self.tokenizer.encode(text)
        out = (self.rows.segments.add(toks, kind), int(toks.size)) if toks.size else None
        if out is not None:
            if self._chars + len(text) > self.max_chars:
                self._cache.clear()
                self._chars = 0
            self._cache[key] = out
            self._chars += len(text)
        return out

    def count(self, text: str) -> int:
        """Number of tokens in ``text`` (not stored)."""
        return int(self.tokenizer.encode(text).size) if text else 0
