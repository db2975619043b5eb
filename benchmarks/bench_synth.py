"""`pic synth` benchmark: generation speed and the oracle reuse each scenario offers.

Oracle reuse assumes an infinite cache and that every earlier request (by arrival) is cached:
- prefix: longest common token prefix with any earlier prompt (what an exact-prefix cache can hit);
- content: tokens in a segment whose content appeared in any earlier request, united with the prefix hit
  (what a position-independent cache with perfect segment-level matching could reuse);
- beyond = (content - prefix) / (prompt - prefix): an upper bound on ``recovery_beyond_prefix``.

    python benchmarks/bench_synth.py --requests 2000 --seed 0
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pic.traces.synth import SCENARIOS, summarize, synth


def oracle_reuse(trace) -> tuple[int, int, int]:
    """(prompt tokens, prefix-reusable tokens, content-reusable tokens) over the whole trace."""
    seg = trace.segments
    children: dict[int, set[int]] = {}
    seen = np.zeros(len(seg), dtype=bool)
    tot = pre = con = 0
    for i in range(trace.num_requests):
        rows = trace.request_segments(i)
        lens = seg.lengths[rows]
        bounds = trace.segment_bounds(i)
        h, k = 0, 0
        while k < rows.size and int(rows[k]) in children.get(h, ()):
            h = hash((h, int(rows[k])))
            k += 1
        plen = int(bounds[k])
        if k < rows.size and children.get(h):
            mine = seg.tokens[seg.offsets[rows[k]]:seg.offsets[rows[k] + 1]]
            best = 0
            for c in children[h]:
                other = seg.tokens[seg.offsets[c]:seg.offsets[c + 1]]
                n = min(other.size, mine.size)
                diff = np.nonzero(other[:n] != mine[:n])[0]
                best = max(best, int(diff[0]) if diff.size else n)
            plen += best
        reusable = np.repeat(seen[rows], lens)
        reusable[:plen] = True
        tot, pre, con = tot + int(bounds[-1]), pre + plen, con + int(reusable.sum())
        h = 0
        for r in rows:
            children.setdefault(h, set()).add(int(r))
            h = hash((h, int(r)))
        seen[rows] = True
    return tot, pre, con


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"{'scenario':18s} {'markers':7s} {'gen s':>6s} {'req/s':>8s} {'Mtok/s':>7s} {'p50':>6s} "
          f"{'dedup':>6s} {'prefix':>7s} {'content':>7s} {'beyond':>7s}")
    for name in SCENARIOS:
        for markers in (False, True):
            t0 = time.perf_counter()
            trace = synth(name, args.requests, args.seed, markers=markers)
            dt = time.perf_counter() - t0
            s = summarize(trace)
            tot, pre, con = oracle_reuse(trace)
            print(f"{name:18s} {markers!s:7s} {dt:6.2f} {args.requests / dt:8.0f} {s['prompt_tokens'] / dt / 1e6:7.1f} "
                  f"{s['prompt_p50']:6.0f} {s['dedup_ratio']:6.1f} {pre / tot:7.3f} {con / tot:7.3f} "
                  f"{(con - pre) / max(tot - pre, 1):7.3f}")


if __name__ == "__main__":
    main()
