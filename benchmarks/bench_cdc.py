"""CDC + fingerprint throughput on one core, side by side with raw xxh64 and ``np.copy`` of the same tokens.

    python benchmarks/bench_cdc.py [--num-tokens 10000000] [--prompt-tokens 4096] [--repeats 5]

Prints M tokens/s (best of ``--repeats``, process CPU seconds, so other load on the machine does not
count) for: raw xxh64 over the token bytes (one call: the reference of issue #12's "CDC + fingerprints vs
xxh64" ratio), np.copy, Gear hash by log-doubling, Gear hash by 64 shifted gathers, chunk() (hash +
boundary rules), fingerprints(), chunk+fingerprints on one long stream, and chunk+fingerprints called once
per ``--prompt-tokens`` prompt (the policy's calling pattern), the same two with the fused ``layout_fps`` (bounds,
anchors and fingerprints from one call); the chunking rows for both Gear value kinds (``[mix]``: the default,
table-free; ``[table]``: ``CDCConfig(gear="table")``, the seeded table, the default before #12's tenth round);
each as a ratio to xxh64 and to np.copy.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # this checkout's pic

import numpy as np  # noqa: E402
import xxhash  # noqa: E402
from _timing import best_cpu  # noqa: E402

from pic.engine.cdc import (  # noqa: E402
    GEARS,
    CDCConfig,
    chunk,
    fingerprints,
    gear_hash,
    gear_hash_gathers,
    layout_fps,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-tokens", type=int, default=10_000_000)
    ap.add_argument("--prompt-tokens", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--avg-chunk", type=int, default=256)
    a = ap.parse_args()
    n = a.num_tokens
    toks = np.random.default_rng(0).integers(0, 150_000, n, dtype=np.int32)
    cfg = CDCConfig(avg_chunk=a.avg_chunk)
    bounds = chunk(toks, cfg)
    prompts = [toks[s:s + a.prompt_tokens] for s in range(0, n, a.prompt_tokens)]

    def per_prompt(c: CDCConfig) -> None:
        for p in prompts:
            fingerprints(p, chunk(p, c))

    def per_prompt_fused(c: CDCConfig) -> None:
        for p in prompts:
            layout_fps(p, c)

    gsub = toks[: n // 10]
    raw = toks.tobytes()
    rows = [
        ("xxh64 of the token bytes (reference)", best_cpu(lambda: xxhash.xxh64_intdigest(raw), a.repeats), n),
        ("np.copy (reference)", best_cpu(lambda: np.copy(toks), a.repeats), n),
        ("gear hash, log-doubling", best_cpu(lambda: gear_hash(toks), a.repeats), n),
        ("gear hash, 64 shifted gathers", best_cpu(lambda: gear_hash_gathers(gsub), max(1, a.repeats // 2)),
         gsub.size),
        ("fingerprints (xxh64 per chunk)", best_cpu(lambda: fingerprints(toks, bounds), a.repeats), n),
    ]
    for gear in GEARS:
        c = replace(cfg, gear=gear)
        rows += [
            (f"[{gear}] chunk (hash + boundaries)", best_cpu(lambda c=c: chunk(toks, c), a.repeats), n),
            (f"[{gear}] chunk + fingerprints, one stream",
             best_cpu(lambda c=c: fingerprints(toks, chunk(toks, c)), a.repeats), n),
            (f"[{gear}] chunk + fingerprints, per {a.prompt_tokens}-token prompt",
             best_cpu(lambda c=c: per_prompt(c), a.repeats), n),
            (f"[{gear}] layout_fps (one call), one stream", best_cpu(lambda c=c: layout_fps(toks, c), a.repeats), n),
            (f"[{gear}] layout_fps (one call), per {a.prompt_tokens}-token prompt",
             best_cpu(lambda c=c: per_prompt_fused(c), a.repeats), n),
        ]
    xxh_rate, copy_rate = n / rows[0][1], n / rows[1][1]
    print(f"{n:,} random token ids, avg_chunk={cfg.avg_chunk} -> {bounds.size - 1:,} chunks "
          f"(mean {n / (bounds.size - 1):.0f} tokens); best of {a.repeats}, process CPU seconds")
    print(f"{'stage':58s} {'M tok/s':>10s} {'x xxh64':>10s} {'x np.copy':>10s}")
    for name, secs, num in rows:
        rate = num / secs
        print(f"{name:58s} {rate / 1e6:10.1f} {rate / xxh_rate:10.3f} {rate / copy_rate:10.3f}")


if __name__ == "__main__":
    main()
