"""`oracle` — the upper bound: every run of >= 64 tokens seen before is reused, at any position.

Run: python docs/examples/oracle.py   (output: docs/examples/oracle.out)

What to look for: r2 reuses every token of SYS, DOC_B and DOC_A, each rotated by its own delta; only
HDR and Q2 (never seen) are recomputed. No chunking loses anything at the piece boundaries, which is
what makes it the bound every report measures the other policies against (oracle_share). It stores no
KV and ignores the capacity: usage() stays 0.
"""
import math

from _demo import show, three_requests

from pic.engine import policies

ctx = policies.PolicyContext(capacity_bytes=math.inf, bytes_per_token=1)
policy = policies.build("oracle", ctx, {"min_match": 64})

now = 0
for req, layout in three_requests():
    plan = policy.lookup(req, now)            # what could be reused right now
    assert policy.admit(req, plan, now)       # never refuses
    policy.commit(req, now + 1)               # prefill done: the prompt's windows are indexed
    policy.release(req, now + 2)
    show(f"r{req.request_id}", req, layout, plan)
    now += 10

u = policy.usage()
print(f"resident {u.total} tokens; indexed windows {policy.stats.extra['indexed_windows']}")
