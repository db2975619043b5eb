"""`pic ingest`: raw request logs -> one canonical trace Parquet (thin wrapper over ``traces.ingest.ingest``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from pic.cli.choices import Format, parser
from pic.cli.errors import console, err_console, user_errors
from pic.traces.ingest import IngestResult, ingest


def command(
    sources: Annotated[list[Path], typer.Argument(help="Input files or directories (a directory = its data files).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Trace to write (.parquet).")],
    *,
    fmt: Annotated[Format, typer.Option("--format", "-f", parser=parser(Format),
                                        help="Input format (auto: detected from each file).")] = Format.auto,
    tokenizer: Annotated[Path | None, typer.Option(
        help="Hugging Face tokenizer.json (default: the built-in GPT-2-style tokenizer, no download).")] = None,
    skip_bad: Annotated[bool, typer.Option(
        "--skip-bad", help="Skip malformed rows (counted and reported) instead of stopping at the first.")] = False,
    fail_empty: Annotated[bool, typer.Option(
        "--fail-empty", help="Stop at a prompt with no text instead of skipping it (skipped and counted by "
             "default: real logs hold image-only turns with the image stripped).")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing OUTPUT that pic did not write (never an input).")] = False,
) -> None:
    """Ingest request logs into a canonical trace (segments stored once + requests).

    Formats: openai-chat (chat-completions JSONL), lmcache-agent (LMCache agent-trace JSONL),
    mooncake (FAST'25 JSONL with hash_ids), azure (Azure LLM inference CSV), tokens (token-id JSONL),
    sharegpt (ShareGPT conversations, JSON or JSONL: one request per assistant turn), burstgpt (BurstGPT
    CSV). auto detects the format from each file's first line.

    Examples:

      pic ingest ../shared/data/lmcache-agent-trace/miniswe -o miniswe.parquet

      pic ingest conversation_trace.jsonl --format mooncake -o mooncake.parquet

      pic ingest AzureLLMInferenceTrace_code.csv -o azure-code.parquet

      pic ingest ShareGPT_V3_unfiltered_cleaned_split.json -o sharegpt.parquet

      pic ingest traces/samples/burstgpt.csv -o burstgpt.parquet

      pic ingest requests.jsonl --format openai-chat --tokenizer tokenizer.json --skip-bad -o chat.parquet
    """
    with user_errors():
        if any(str(s) == "-" for s in sources):
            raise ValueError("-: source: reading a log from stdin is not supported; write it to a file first "
                             "(`... > log.jsonl`) and pass that path")
        columns = (TextColumn("[bold]ingest"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                   TimeRemainingColumn())
        with Progress(*columns, console=err_console, transient=True) as bar:
            task = bar.add_task("ingest", total=None)
            last = [0]

            def progress(done: int, total: int) -> None:
                if done - last[0] >= (1 << 20) or done >= total:
                    last[0] = done
                    bar.update(task, completed=done, total=total)

            result = ingest(list(sources), output, fmt=fmt.value, tokenizer=tokenizer, skip_bad=skip_bad,
                            progress=progress, force=force, skip_empty=not fail_empty)
        _print_summary(result)


def _print_summary(r: IngestResult) -> None:
    seg = r.trace.segments
    fmts = ", ".join(sorted(set(r.formats.values())))
    table = Table(title=f"{len(r.formats)} file(s) ({fmts}) -> {r.out}", show_header=False)
    table.add_column(justify="left")
    table.add_column(justify="right")
    table.add_row("requests", f"{r.num_requests:,}")
    table.add_row("sessions", f"{r.trace.requests['session_id'].n_unique():,}")
    table.add_row("prompt tokens (total)", f"{r.num_prompt_tokens:,}")
    table.add_row("distinct segments / tokens", f"{len(seg):,} / {int(seg.offsets[-1]):,}")
    table.add_row("tokenizer", r.tokenizer)
    mb = r.bytes_read / 1e6
    table.add_row("input read", f"{mb:,.1f} MB in {r.seconds:.2f} s ({mb / max(r.seconds, 1e-9):,.1f} MB/s)")
    table.add_row("skipped rows (bad / empty prompt)", f"{r.num_skipped:,} / {r.num_empty:,}")
    console.print(table)
    if r.num_empty:
        console.print(f"skipped {r.num_empty:,} rows with empty prompts")
    if r.skipped:
        console.print(f"skipped {r.num_skipped:,} bad row(s):")
        for reason, n in sorted(r.skipped.items(), key=lambda kv: -kv[1]):
            console.print(f"  {n:>8,}  {reason}")
