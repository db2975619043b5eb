"""Policy throughput: lookups/s and prompt tokens/s per policy, lookup -> admit -> commit -> release
for each request in order (no serving model, no cost model: the policy's own cost only).

Streams:
  synthetic  agentic-looking prompts (variable header + shuffled shared documents + tail, a third
             continue an earlier prompt), seeded;
  mooncake   ``--mooncake PATH``: the Mooncake JSONL (``hash_ids`` of 512-token blocks), each block's
             tokens derived from its id, the last block partial (as the trace reader does).

    python benchmarks/bench_policies.py --requests 3000
    python benchmarks/bench_policies.py --mooncake ../shared/data/mooncake/conversation_trace.jsonl \
        --policies prefix,block-hash,fixed-chunk --capacity-tokens inf,2e6

Each row carries ``plans_sha256``: a digest of every plan, admit outcome and the final stats, so two
versions of a policy can be checked for identical behaviour on the same stream (compare the digests).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time

import numpy as np

from pic.engine import policies
from pic.engine.policies import PolicyContext, RequestView
from pic.engine.rolling import mix

BLOCK = 512


def synthetic(num_requests: int, seed: int = 0, vocab: int = 32_000) -> list[RequestView]:
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, vocab, int(rng.integers(200, 3000)), dtype=np.int32) for _ in range(64)]
    out: list[RequestView] = []
    for rid in range(num_requests):
        if out and rng.random() < 0.33:
            prev = out[int(rng.integers(max(0, len(out) - 50), len(out)))].tokens
            toks = np.concatenate([prev, rng.integers(0, vocab, int(rng.integers(10, 400)), dtype=np.int32)])
        else:
            head = rng.integers(0, vocab, int(rng.choice([0, 0, 7, 30, 120])), dtype=np.int32)
            picks = rng.choice(len(docs), size=int(rng.integers(1, 5)), replace=False)
            tail = rng.integers(0, vocab, int(rng.integers(10, 200)), dtype=np.int32)
            toks = np.concatenate([head, *[docs[i] for i in picks], tail])
        out.append(RequestView.from_tokens(rid, toks[:16_000]))
    return out


def mooncake(path: str, limit: int | None = None) -> list[RequestView]:
    out: list[RequestView] = []
    arange = np.arange(BLOCK, dtype=np.int64)
    with open(path) as f:
        for rid, line in enumerate(f):
            if limit is not None and rid >= limit:
                break
            row = json.loads(line)
            ids = np.asarray(row["hash_ids"], np.int64)
            toks = (mix((ids[:, None] * BLOCK + arange).ravel()) % np.uint64(100_000)).astype(np.int32)
            out.append(RequestView.from_tokens(rid, toks[:row["input_length"]]))
    return out


def run(name: str, stream: list[RequestView], capacity_tokens: float, bpt: int = 31_104) -> dict:
    cap = math.inf if math.isinf(capacity_tokens) else capacity_tokens * bpt
    policy = policies.build(name, PolicyContext(cap, bpt))
    num_tokens = sum(r.num_tokens for r in stream)
    reused = 0
    log: list = []
    t0 = time.perf_counter()
    for i, req in enumerate(stream):
        now = i * 1000
        plan = policy.lookup(req, now)
        ok = policy.admit(req, plan, now)
        log.append((plan, ok))
        if ok:
            reused += plan.num_reused
            policy.commit(req, now + 1)
            policy.release(req, now + 2)
    dt = time.perf_counter() - t0
    digest = hashlib.sha256(repr((log, sorted(policy.stats.as_dict().items()))).encode()).hexdigest()
    return {"policy": name, "capacity_tokens": capacity_tokens, "requests": len(stream),
            "requests_per_s": round(len(stream) / dt), "tokens_per_s": round(num_tokens / dt),
            "hit_rate": round(reused / num_tokens, 4), "seconds": round(dt, 3), "plans_sha256": digest[:16]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default=",".join(n for n in policies.names() if n != "none"))
    ap.add_argument("--requests", type=int, default=2000, help="synthetic requests (or Mooncake limit)")
    ap.add_argument("--mooncake", default=None, help="Mooncake JSONL path instead of the synthetic stream")
    ap.add_argument("--capacity-tokens", default="inf,200000", help="comma list; inf = unbounded")
    args = ap.parse_args()
    t0 = time.perf_counter()
    stream = mooncake(args.mooncake, None if args.requests <= 0 else args.requests) if args.mooncake \
        else synthetic(args.requests)
    print(f"# stream: {len(stream)} requests, {sum(r.num_tokens for r in stream):,} tokens "
          f"(built in {time.perf_counter() - t0:.1f} s)")
    for cap in (float(c) for c in args.capacity_tokens.split(",")):
        for name in args.policies.split(","):
            print(json.dumps(run(name, stream, cap)))


if __name__ == "__main__":
    main()
