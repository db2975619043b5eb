"""Ingest throughput on the real traces in <repo>/../shared/data, and built-in tokenizer speed.

Usage:
    python benchmarks/bench_ingest.py [--data DIR] [--repeats 3] [--bpe path/to/tokenizer.json]

Prints Markdown tables (best of ``--repeats`` runs):
1. ingest per input: read+parse+tokenize (``read_sources``), Parquet write, MB/s of input end to end;
2. the built-in tokenizer alone on every miniswe prompt and output text (cold = fresh piece cache,
   warm = cache already filled), and, with ``--bpe``, a real BPE's token count on the same text.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from pic.traces.formats.detect import expand
from pic.traces.ingest import read_sources
from pic.traces.io import write_trace
from pic.traces.tokenizer import BuiltinTokenizer, HFTokenizer

REPO = Path(__file__).resolve().parents[1]
INPUTS = [
    ("lmcache-agent miniswe (dir)", ("lmcache-agent-trace", "miniswe")),
    ("lmcache-agent taubench (dir)", ("lmcache-agent-trace", "taubench")),
    ("mooncake conversation", ("mooncake", "conversation_trace.jsonl")),
    ("azure code", ("azure-llm-2023", "AzureLLMInferenceTrace_code.csv")),
    ("azure conv", ("azure-llm-2023", "AzureLLMInferenceTrace_conv.csv")),
]


def best(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def bench_ingest(data: Path, repeats: int) -> None:
    print("| input | MB | requests | prompt tokens | distinct seg. tokens | read s | write s | MB/s (read) "
          "| MB/s (end to end) | prompt tok/s (read) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, parts in INPUTS:
        src = data.joinpath(*parts)
        if not src.exists():
            print(f"| {label} | (absent) |")
            continue
        mb = sum(os.path.getsize(p) for p, _ in expand([src])) / 1e6
        t_read, (trace, rows, _, _) = best(lambda s=src: read_sources([s]), repeats)
        with tempfile.TemporaryDirectory() as d:
            t_write, _ = best(lambda d=d, t=trace: write_trace(t, Path(d) / "t.parquet"), repeats)
        print(f"| {label} | {mb:.2f} | {trace.num_requests:,} | {rows.num_tokens:,} | "
              f"{int(trace.segments.offsets[-1]):,} | {t_read:.2f} | {t_write:.2f} | {mb / t_read:.1f} | "
              f"{mb / (t_read + t_write):.1f} | {rows.num_tokens / t_read / 1e6:.1f} M |")


def bench_tokenizer(data: Path, repeats: int, bpe: Path | None) -> None:
    folder = data / "lmcache-agent-trace" / "miniswe"
    if not folder.is_dir():
        print("(miniswe absent: tokenizer benchmark skipped)")
        return
    texts = []
    for f in sorted(folder.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            texts += [row["input"], row["output"]]
    chars = sum(map(len, texts))

    def cold():
        tok = BuiltinTokenizer()
        return sum(tok.encode(t).size for t in texts)

    warm_tok = BuiltinTokenizer()
    n = sum(warm_tok.encode(t).size for t in texts)
    t_cold, _ = best(cold, repeats)
    t_warm, _ = best(lambda: sum(warm_tok.encode(t).size for t in texts), repeats)
    print(f"\nbuilt-in tokenizer on every miniswe input+output text ({len(texts)} texts, {chars / 1e6:.1f} M chars):\n")
    print("| tokenizer | tokens | tokens/char | s | M tokens/s | M chars/s |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| built-in, cold cache | {n:,} | {n / chars:.3f} | {t_cold:.2f} | {n / t_cold / 1e6:.2f} | {chars / t_cold / 1e6:.1f} |")
    print(f"| built-in, warm cache | {n:,} | {n / chars:.3f} | {t_warm:.2f} | {n / t_warm / 1e6:.2f} | {chars / t_warm / 1e6:.1f} |")
    if bpe is not None:
        hf = HFTokenizer(bpe)
        t_hf, m = best(lambda: sum(hf.encode(t).size for t in texts), 1)
        print(f"| {hf.name} (BPE) | {m:,} | {m / chars:.3f} | {t_hf:.2f} | {m / t_hf / 1e6:.2f} | {chars / t_hf / 1e6:.1f} |")
        print(f"\nbuilt-in / BPE token count: {n / m:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO / ".." / "shared" / "data")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bpe", type=Path, default=None, help="a tokenizer.json to compare token counts with")
    args = ap.parse_args()
    bench_ingest(args.data.resolve(), args.repeats)
    bench_tokenizer(args.data.resolve(), args.repeats, args.bpe)


if __name__ == "__main__":
    main()
