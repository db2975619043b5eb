"""--verify stress: drive ``irminsul`` directly with near-duplicate content and count hash collisions.

    python benchmarks/stress_verify.py [--lookups 10000000] [--workers 2] [--avg-chunk 64 --min-chunk 16]

Each worker builds its own policy (verify=True, S1 on, bounded capacity so eviction runs) and serves a
seeded stream of prompts: a random header, 1-4 documents drawn from a pool in which a third of the
documents are one-token mutations of another (so near-identical chunks are looked up all the time), and
a random tail. Every fingerprint hit (chunk, S1 window, prefix chunk) is token-compared. Workers stop when
their chunk + window lookups reach ``--lookups / --workers``; the totals are printed.
"""

from __future__ import annotations

import argparse
import time
from multiprocessing import Pool

import numpy as np

from pic.engine.policies import PolicyContext, RequestView, build


def _pool(rng: np.random.Generator, num_docs: int, vocab: int) -> list[np.ndarray]:
    docs = [rng.integers(0, vocab, int(rng.integers(200, 3000)), dtype=np.int32) for _ in range(num_docs)]
    for _ in range(num_docs // 2):
        d = docs[int(rng.integers(len(docs)))].copy()
        d[int(rng.integers(d.size))] = int(rng.integers(vocab))
        docs.append(d)
    return docs


def worker(args: tuple[int, int, int, int, int]) -> dict[str, int]:
    seed, target, avg, mn, cap_tokens = args
    rng = np.random.default_rng(seed)
    docs = _pool(rng, 400, 50_000)
    pol = build("irminsul", PolicyContext(cap_tokens * 2, 2, seed=seed, verify=True),
                {"avg_chunk": avg, "min_chunk": mn, "max_chunk": 16 * avg, "s1": True})
    ex, rid, toks_total = pol.stats.extra, 0, 0
    t0 = time.perf_counter()
    while ex["chunk_lookups"] + ex["window_lookups"] < target:
        head = rng.integers(0, 50_000, int(rng.integers(0, 300)), dtype=np.int32)
        picks = rng.integers(len(docs), size=int(rng.integers(1, 5)))
        tail = rng.integers(0, 50_000, int(rng.integers(1, 200)), dtype=np.int32)
        req = RequestView.from_tokens(rid, np.concatenate([head, *[docs[i] for i in picks], tail]))
        plan = pol.lookup(req, rid)
        if pol.admit(req, plan, rid):
            pol.commit(req, rid)
            pol.release(req, rid)
        pol.usage().check()
        rid += 1
        toks_total += req.num_tokens
    s = pol.stats.as_dict()
    return {"requests": rid, "tokens": toks_total, "seconds": time.perf_counter() - t0,
            **{k: s[k] for k in ("chunk_lookups", "chunk_hits", "window_lookups", "window_hits",
                                 "verified_hits", "collisions", "evictions", "prefix_tokens")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lookups", type=int, default=10_000_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--avg-chunk", type=int, default=64)
    ap.add_argument("--min-chunk", type=int, default=16)
    ap.add_argument("--capacity-tokens", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    per = -(-a.lookups // a.workers)
    jobs = [(a.seed + i, per, a.avg_chunk, a.min_chunk, a.capacity_tokens) for i in range(a.workers)]
    t0 = time.perf_counter()
    with Pool(a.workers) as p:
        res = p.map(worker, jobs)
    tot = {k: sum(r[k] for r in res) for k in res[0]}
    print(f"workers={a.workers} avg_chunk={a.avg_chunk} min_chunk={a.min_chunk} "
          f"capacity={a.capacity_tokens:,} tokens  wall={time.perf_counter() - t0:.1f}s")
    for k in ("requests", "tokens", "chunk_lookups", "chunk_hits", "window_lookups", "window_hits",
              "verified_hits", "collisions", "evictions"):
        print(f"{k:>16s} {tot[k]:>14,}")
    print(f"{'lookups total':>16s} {tot['chunk_lookups'] + tot['window_lookups']:>14,}")


if __name__ == "__main__":
    main()
