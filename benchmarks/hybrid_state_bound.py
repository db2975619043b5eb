"""How much of the exact-prefix reuse a hybrid model's engine can really serve, offline, per trace.

On a hybrid (attention + Mamba-2 / Gated DeltaNet) model, reusing a cached prefix needs the recurrent state at
the prefix's end. ``prefix`` (and ``linearkv``'s prefix stage) assume it is there wherever the match ends.
SGLang's MambaRadixCache without a checkpoint interval holds a state only where a cached request ended, and
a match falls back to the deepest such point. Per request, in arrival order, with every earlier prompt cached
(unbounded, no in-flight timing):

* L: the longest prefix it shares with any earlier prompt (what ``prefix`` credits);
* S: the longest earlier prompt that is a whole prefix of it (where a state was saved).

Printed: sum L and sum S as shares of all prompt tokens, and S / L.

    python benchmarks/hybrid_state_bound.py traces/samples/multi-agent.parquet miniswe.parquet ...
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pic.engine.replay import read_trace_file, workload_from_trace  # noqa: E402

_MIX, _SALT, _POS = np.uint64(0x9E3779B97F4A7C15), np.uint64(0x632BE59BD9B4E019), np.uint64(0xBF58476D1CE4E5B9)


def prefix_keys(tokens: np.ndarray) -> list[int]:
    """A 64-bit key of every prefix ``tokens[:k + 1]`` (position-weighted sum of mixed tokens, mod 2**64)."""
    x = tokens.astype(np.uint64) * _MIX + _SALT
    x ^= x >> np.uint64(29)
    return np.cumsum(x * (np.arange(1, tokens.size + 1, dtype=np.uint64) * _POS), dtype=np.uint64).tolist()


def state_bound(path: str) -> tuple[int, int, int, int]:
    """(requests, prompt tokens, sum L, sum S) of one trace."""
    work = workload_from_trace(read_trace_file(path))
    prefixes: set[int] = set()
    ends: set[int] = set()
    total = shared = at_end = 0
    for i in range(work.num_requests):
        keys = prefix_keys(work.view(i).tokens)
        lo, hi = 0, len(keys)
        while lo < hi:                       # shared prefixes are downward closed: binary search
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if keys[mid - 1] in prefixes else (lo, mid - 1)
        s = next((k for k in range(lo, 0, -1) if keys[k - 1] in ends), 0)
        total, shared, at_end = total + len(keys), shared + lo, at_end + s
        prefixes.update(keys)
        if keys:
            ends.add(keys[-1])
    return work.num_requests, total, shared, at_end


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print("| trace | requests | prompt tokens | prefix-shared (L) | at an earlier prompt's end (S) | S / L |")
    print("|---|---:|---:|---:|---:|---:|")
    for path in sys.argv[1:]:
        n, total, shared, at_end = state_bound(path)
        print(f"| {Path(path).stem} | {n:,} | {total:,} | {shared / total:.1%} | {at_end / total:.1%} | "
              f"{at_end / max(shared, 1):.1%} |", flush=True)


if __name__ == "__main__":
    main()
