"""`irminsul` — content-defined chunks (CDC), stored once by content, reused at any position.

Run: python docs/examples/irminsul.py   (output: docs/examples/irminsul.out)

What to look for: r1 extends r0's exact prefix to all 1800 shared tokens (token-granular, unlike the
block/chunk grids). In r2 chunk boundaries follow the content, so each piece is cut the same way as in
r0 wherever it sits: nearly all of SYS, DOC_B and DOC_A come back as REUSE_ROTATED (delta = target -
source). What is lost is the start of each piece right after a boundary that r0 did not have (the
64-token gear-hash window has to resynchronise): compare r2's reused tokens with fixed-chunk.out.
The last line shows the policy's own counters (stats.extra).
"""
import math

from _demo import show, three_requests

from pic.engine import policies

# One byte per token so that usage() reads in tokens; capacity unbounded (no eviction here).
ctx = policies.PolicyContext(capacity_bytes=math.inf, bytes_per_token=1)
policy = policies.build("irminsul", ctx, {"avg_chunk": 256, "min_chunk": 64, "s1": True})

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
print("extra", " ".join(f"{k}={v}" for k, v in sorted(policy.stats.extra.items())))
