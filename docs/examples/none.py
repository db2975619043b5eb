"""`none` — no cache: every prompt token is prefilled, every time. The floor for "energy saved vs none".

Run: python docs/examples/none.py   (output: docs/examples/none.out)

What to look for: every plan is one RECOMPUTE span over the whole prompt, even r1, whose context was
seen one request earlier; nothing is ever resident.
"""
import math

from _demo import show, three_requests

from pic.engine import policies

# One byte per token so that usage() reads in tokens; capacity unbounded (no eviction here).
ctx = policies.PolicyContext(capacity_bytes=math.inf, bytes_per_token=1)
policy = policies.build("none", ctx)

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
