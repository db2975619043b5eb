"""Format registry, ``--format auto`` sniffing, and expansion of directory arguments.

A file's format is read from its first non-blank line: a CSV header with ``TIMESTAMP, ContextTokens,
GeneratedTokens`` is ``azure``, with ``Timestamp, Model, Request tokens, Response tokens`` is ``burstgpt``;
a JSON object with ``hash_ids`` is ``mooncake``, with ``messages`` is ``openai-chat``, with
``conversations`` is ``sharegpt``, with a text ``input`` is ``lmcache-agent``, with ``tokens``/``segments``
is ``tokens``. A file that opens a JSON array (``[``) with ``"conversations"`` in its first 64 KiB is
``sharegpt`` (its first line may be the whole file).
A directory stands for the data files directly inside it (``*.jsonl, *.ndjson, *.json, *.csv``, sorted
by name, empty files skipped); all must have the same format.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import ModuleType

from pic.traces.formats import azure, burstgpt, lmcache_agent, mooncake, openai_chat, sharegpt, tokens
from pic.traces.formats._base import MAX_LINE_BYTES, TOO_DEEP, UTF8_BOM
from pic.traces.outputs import PARQUET_MAGIC, is_parquet, is_pic_trace, is_stream
from pic.traces.schema import TraceError

#: format name -> reader module (each has NAME, read(path, rows, *, tokenizer, progress))
READERS: dict[str, ModuleType] = {m.NAME: m for m in (openai_chat, lmcache_agent, mooncake, azure, tokens,
                                                       sharegpt, burstgpt)}
FORMATS: tuple[str, ...] = ("auto", *READERS)
DATA_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv")


def check_format(fmt: str) -> str:
    """Return ``fmt`` if known, else raise ValueError listing the known formats."""
    if fmt not in FORMATS:
        raise ValueError(f"format: unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    return fmt


def sniff_line(text: str) -> str | None:
    """The format a first line belongs to, or None. Raises RecursionError on JSON nested too deeply."""
    text = text.lstrip("\ufeff")
    if azure.sniff(text):
        return azure.NAME
    if burstgpt.sniff(text):
        return burstgpt.NAME
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    if mooncake.sniff(obj):
        return mooncake.NAME
    if "messages" in obj or (isinstance(obj.get("body"), dict) and "messages" in obj["body"]):
        return openai_chat.NAME
    if sharegpt.sniff(obj):
        return sharegpt.NAME
    if isinstance(obj.get("input"), str):
        return lmcache_agent.NAME
    if "tokens" in obj or "segments" in obj:
        return tokens.NAME
    return None


def first_line(path: Path) -> tuple[int, str] | None:
    """``(line number, text)`` of the first non-blank line (a UTF-8 BOM dropped), or None for an empty file."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if lineno == 1 and raw.startswith(UTF8_BOM):
                raw = raw[len(UTF8_BOM):]
            if lineno == 1 and raw.startswith(PARQUET_MAGIC) and is_parquet(path):
                what = "already a pic trace: pass it to `pic replay`/`pic inspect` directly" if is_pic_trace(path) \
                    else "a Parquet file, not a raw log (pic ingest reads JSONL and CSV)"
                raise TraceError(str(path), None, "format", what)
            if len(raw) > MAX_LINE_BYTES:
                raise TraceError(str(path), lineno, "format",
                                 f"first line is over {MAX_LINE_BYTES} bytes; cannot detect the format")
            if raw.strip():
                try:
                    return lineno, raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise TraceError(str(path), lineno, "encoding", f"not valid UTF-8 (byte {e.start})") from None
    return None


def sniff(path: Path) -> str:
    """Detect the format of one file; raise TraceError when it is empty or unrecognised."""
    return _sniff_array(path) or _sniff_first(path, first_line(path))


def _sniff_array(path: Path) -> str | None:
    """``sharegpt`` for a JSON array of conversations (checked on the first 64 KiB, before any line is read:
    such a file may be one line of any length); None for anything else."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    return sharegpt.NAME if sharegpt.sniff_head(head) else None


def _sniff_first(path: Path, found: tuple[int, str] | None) -> str:
    """:func:`sniff` given the file's already-read :func:`first_line`."""
    if found is None:
        raise TraceError(str(path), None, "file", "empty file")
    lineno, text = found
    try:
        fmt = sniff_line(text)
    except RecursionError:
        raise TraceError(str(path), lineno, "json", TOO_DEEP) from None
    if fmt is None:
        raise TraceError(str(path), lineno, "format",
                         "cannot detect the format from the first line (pass --format)")
    return fmt


def expand(sources: list[Path], fmt: str = "auto") -> list[tuple[Path, str]]:
    """Files to read with their formats: directories expanded, ``auto`` resolved, mixtures refused."""
    check_format(fmt)
    if not sources:
        raise ValueError("sources: no input given")
    out: list[tuple[Path, str]] = []
    for src in map(Path, sources):
        if src.is_dir():
            files = sorted(p for p in src.iterdir()
                           if p.is_file() and p.suffix.lower() in DATA_SUFFIXES and not p.name.startswith("."))
            arrays = {p: _sniff_array(p) for p in files}
            firsts = [(p, None if arrays[p] else first_line(p)) for p in files]
            firsts = [(p, line) for p, line in firsts if line is not None or arrays[p]]
            if not firsts:
                raise TraceError(str(src), None, "directory", f"no non-empty {'/'.join(DATA_SUFFIXES)} files")
            found = [(p, fmt if fmt != "auto" else arrays[p] or _sniff_first(p, line)) for p, line in firsts]
            kinds = sorted({f for _, f in found})
            if len(kinds) > 1:
                examples = ", ".join(f"{next(p.name for p, g in found if g == k)} is {k}" for k in kinds)
                raise TraceError(str(src), None, "format", f"mixed formats in one directory ({examples})")
            out.extend(found)
        elif src.is_file():
            out.append((src, fmt if fmt != "auto" else sniff(src)))
        elif is_stream(src):
            if fmt == "auto":
                raise TraceError(str(src), None, "pipe", "is a pipe, not a file: --format auto reads the start "
                                 "twice; pass --format FORMAT to read it in one pass, or save it to a file")
            out.append((src, fmt))
        elif os.path.lexists(src):
            raise TraceError(str(src), None, "path", "not a regular file or directory")
        else:
            raise TraceError(str(src), None, "path", "no such file or directory")
    return out
