"""`linearkv` — PIC for hybrid models: whole CDC chunks reused, recurrent layers started from cached states.

Run: python docs/examples/linearkv.py   (output: docs/examples/linearkv.out)

What to look for: the model is OLMo-Hybrid-7B (24 Gated DeltaNet + 8 attention layers). Reuse is whole
content-defined chunks (a recurrent state exists only at a chunk's end, so no partial chunk is reused), so
chunks are smaller here (128) than irminsul's. r1 is an exact prefix hit: its in-place chunks keep their
KV (U = 0) and one state is loaded. r2's shifted documents come back as REUSE_ROTATED chunks, fewer than
irminsul finds (compare irminsul.out): the chunk straddling each document edge differs. The "correction"
line is what the cost model prices beyond the spans: U = 20 % of the moved tokens recomputed (EPIC: each
chunk's first tokens), one state loaded for S_init (single-block; `compose=exact` folds every matched
chunk), and the new chunks' zero-start states made for the cache. "resident" counts each stored chunk's
state too: one sequence state of this model weighs as much as ~230 tokens of its KV.
"""
import math

from _demo import show, three_requests

from pic.engine import policies
from pic.engine.specs import model_from_name

# One byte per KV token so that usage() reads in token units (states are scaled alike); unbounded capacity.
model = model_from_name("olmo-hybrid-7b")
ctx = policies.PolicyContext(capacity_bytes=math.inf, bytes_per_token=1, model=model)
policy = policies.build("linearkv", ctx, {"avg_chunk": 128, "min_chunk": 32, "compose": "single-block",
                                          "selector": "epic", "recompute_ratio": 0.2})

now = 0
for req, layout in three_requests():
    plan = policy.lookup(req, now)            # what could be reused right now
    assert policy.admit(req, plan, now)       # lock it, reserve room for the new KV + states
    policy.commit(req, now + 1)               # prefill done: the chunks (and their states) are reusable
    policy.release(req, now + 2)              # request finished: unlocked, stays resident
    show(f"r{req.request_id}", req, layout, plan)
    c = plan.correction
    print(f"  correction: recompute(U)={c.recompute_tokens} state_loads={c.state_loads} "
          f"compositions={c.state_compositions} probe={c.probe_tokens} state_store_tokens={c.state_store_tokens}")
    now += 10

u = policy.usage()
chunks = policy.stats.extra["stored_chunks"]
print(f"resident {u.total} token units = KV + {chunks} chunk states x {round(model.state_bytes / model.kv_bytes_per_token)}")
print(f"lookups {policy.stats.lookups}, hits {policy.stats.hits}")
print("extra", " ".join(f"{k}={v}" for k, v in sorted(policy.stats.extra.items())))
