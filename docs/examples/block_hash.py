"""`block-hash` — vLLM automatic prefix caching: chained hashes of whole 16-token blocks.

Run: python docs/examples/block_hash.py   (output: docs/examples/block_hash.out)

What to look for: r1 reuses r0's shared context like `prefix`, but only in whole blocks: 1792 of the
1800 shared tokens (112 blocks of 16); the 8 tokens of the partial block are recomputed. A block's hash
chains everything before it, so r2 (header in front) matches no block at all.
"""
import math

from _demo import show, three_requests

from pic.engine import policies

# One byte per token so that usage() reads in tokens; capacity unbounded (no eviction here).
ctx = policies.PolicyContext(capacity_bytes=math.inf, bytes_per_token=1)
policy = policies.build("block-hash", ctx, {"block_size": 16})

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
