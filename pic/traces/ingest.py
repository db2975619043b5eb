"""Ingest raw request logs into one canonical trace Parquet (``pic ingest``'s library entry point)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pic.traces.formats._base import Rows
from pic.traces.formats.detect import READERS, check_format, expand
from pic.traces.io import write_trace
from pic.traces.outputs import check_output, is_pic_trace
from pic.traces.schema import Trace, TraceError
from pic.traces.tokenizer import Tokenizer, load_tokenizer

#: formats whose rows carry text (the tokenizer is used); the others carry token ids or lengths only
TEXT_FORMATS = frozenset({"openai-chat", "lmcache-agent", "sharegpt"})


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What :func:`ingest` did."""

    trace: Trace = field(metadata={"help": "the canonical trace that was written"})
    out: Path = field(metadata={"help": "the Parquet file written"})
    num_requests: int = field(metadata={"help": "requests kept"})
    num_prompt_tokens: int = field(metadata={"help": "prompt tokens over all kept requests"})
    skipped: dict[str, int] = field(metadata={"help": "rows skipped under skip_bad, by reason"})
    bytes_read: int = field(metadata={"help": "input bytes consumed"})
    seconds: float = field(metadata={"help": "wall time of read + write"})
    formats: dict[str, str] = field(default_factory=dict, metadata={"help": "input file -> format"})
    tokenizer: str = field(default="builtin", metadata={"help": "tokenizer name ('none' for text-free formats)"})
    num_empty: int = field(default=0, metadata={"help": "rows skipped because their prompt has no text"})

    @property
    def num_skipped(self) -> int:
        return sum(self.skipped.values())


def read_sources(sources: list[Path], *, fmt: str = "auto", tokenizer: str | Path | Tokenizer | None = None,
                 skip_bad: bool = False, progress: Callable[[int, int], None] | None = None,
                 skip_empty: bool = True) -> tuple[Trace, Rows, dict[str, str], int]:
    """Read ``sources`` into an in-memory trace: ``(trace, rows, {file: format}, bytes read)``."""
    check_format(fmt)
    return read_files(expand([Path(s) for s in sources], fmt), tokenizer=tokenizer, skip_bad=skip_bad,
                      progress=progress, skip_empty=skip_empty)


def read_files(files: list[tuple[Path, str]], *, tokenizer: str | Path | Tokenizer | None = None,
               skip_bad: bool = False, progress: Callable[[int, int], None] | None = None,
               skip_empty: bool = True) -> tuple[Trace, Rows, dict[str, str], int]:
    """:func:`read_sources` of already expanded ``(file, format)`` pairs."""
    tok = load_tokenizer(tokenizer)
    total = sum(os.path.getsize(p) for p, _ in files)
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    rows = Rows(skip_bad=skip_bad, skip_empty=skip_empty)
    for path, name in files:
        READERS[name].read(path, rows, tokenizer=tok, progress=tick)
    label = str(files[0][0].parent if len(files) > 1 else files[0][0])
    if len(rows) == 0:
        why = [f"{sum(rows.skipped.values())} bad rows skipped"] if rows.skipped else []
        why += [f"{rows.num_empty} rows with empty prompts skipped"] if rows.num_empty else []
        raise TraceError(label, None, "requests", "no valid requests in the input"
                         + (f" ({', '.join(why)})" if why else ""))
    formats = {str(p): n for p, n in files}
    used = set(formats.values())
    trace = rows.build(label, meta={"source_format": ",".join(sorted(used)),
                                    "tokenizer": tok.name if used & TEXT_FORMATS else "none"})
    return trace, rows, formats, done


def ingest(sources: list[Path], out: Path, *, fmt: str = "auto", tokenizer: str | Path | Tokenizer | None = None,
           skip_bad: bool = False, progress: Callable[[int, int], None] | None = None,
           force: bool = False, skip_empty: bool = True) -> IngestResult:
    """Read ``sources`` (files or directories) in format ``fmt`` and write the trace to ``out``.

    ``tokenizer``: None for the built-in one, or a path to a Hugging Face ``tokenizer.json``.
    ``skip_bad``: count and skip malformed rows instead of failing on the first one.
    ``skip_empty``: skip (and count) rows whose prompt has no text; off: such a row is an error.
    ``progress(bytes_done, bytes_total)`` is called as input is consumed.
    Raises :class:`~traces.schema.TraceError` (``file:line: field: problem``) on bad input; the output is
    written to a temporary name and renamed only when complete, so a failure leaves no file behind.
    ``out`` follows :func:`traces.outputs.check_output` before anything is read: never an input (a log,
    the tokenizer), and an existing file that is not a pic trace only with ``force``.
    """
    t0 = time.perf_counter()
    out = Path(out)
    check_format(fmt)
    files = expand([Path(s) for s in sources], fmt)
    inputs = [*sources, *(p for p, _ in files), tokenizer if isinstance(tokenizer, (str, Path)) else None]
    check_output(out, inputs=inputs, force=force, kind="file", own=is_pic_trace, option="--output")
    trace, rows, formats, nbytes = read_files(files, tokenizer=tokenizer, skip_bad=skip_bad, progress=progress,
                                              skip_empty=skip_empty)
    write_trace(trace, out)
    return IngestResult(trace=trace, out=out, num_requests=trace.num_requests, num_prompt_tokens=rows.num_tokens,
                        skipped=dict(rows.skipped), bytes_read=nbytes, seconds=time.perf_counter() - t0,
                        formats=formats, tokenizer=trace.meta.get("tokenizer", "builtin"), num_empty=rows.num_empty)
