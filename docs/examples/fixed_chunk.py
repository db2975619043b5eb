"""`fixed-chunk` — LMCache / CacheBlend-style position-independent baseline on a fixed 256-token grid.

Run: python docs/examples/fixed_chunk.py   (output: docs/examples/fixed_chunk.out)

What to look for: r1 is an in-place hit (REUSE) of r0's first 7 grid chunks (1792 tokens). In r2 the
same content sits at other offsets: every stored chunk that lies whole inside r2 is found at any offset
and reused as REUSE_ROTATED, with delta = target - source position (the RoPE rotation). Chunks of r0
that straddle a piece boundary (SYS|DOC_A, DOC_A|DOC_B) do not occur in r2, so those tokens are
recomputed: the grid is positional, the content is not.
"""
import math

from _demo import show, three_requests

from pic.engine import policies

# One byte per token so that usage() reads in tokens; capacity unbounded (no eviction here).
ctx = policies.PolicyContext(capacity_bytes=math.inf, bytes_per_token=1)
policy = policies.build("fixed-chunk", ctx, {"chunk_size": 256, "eviction": "lru"})

now = 0
for req, layout in three_requests():
    plan = policy.lookup(req, now)            # what could be reused right now
    assert policy.admit(req, plan, now)       # lock it, reserve room for the new KV
    policy.commit(req, now + 1)               # prefill done: the prompt's KV is reusable
    policy.release(req, now + 2)              # request finished: unlocked, stays resident
    show(f"r{req.request_id}", req, layout, plan)
    now += 10

u = policy.usage()
print(f"resident {u.total} tokens (evictable {u.evictable}, protected {u.protected})")
print(f"lookups {policy.stats.lookups}, hits {policy.stats.hits}")
