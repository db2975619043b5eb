"""`prefix` — exact-prefix radix tree (SGLang RadixAttention), the baseline every policy is compared to.

Run: python docs/examples/prefix.py   (output: docs/examples/prefix.out)

What to look for: r1 shares r0's whole context (SYS + DOC_A + DOC_B) as a prefix, so all of it is
REUSE and only the question is recomputed. r2 puts a 37-token header in front: its first token already
differs from every cached prompt, so an exact-prefix cache reuses nothing, although every piece but
HDR and Q2 is resident.
"""

import math

from _demo import show, three_requests

from pic.engine import policies

# One byte per token so that usage() reads in tokens; capacity unbounded (no eviction here).
ctx = policies.PolicyContext(capacity_bytes=math.inf, bytes_per_token=1)
policy = policies.build("prefix", ctx, {"page_size": 1, "eviction": "lru"})

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
