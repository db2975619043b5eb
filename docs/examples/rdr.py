"""`rdr` — rate–distortion retention over a reuse policy: what is reused is the reuse policy's answer;
how the new KV is kept (ADA precision tier per page of every layer/KV head, or evicted) is rdr's.

Run: python docs/examples/rdr.py   (output: docs/examples/rdr.out)

What to look for: `irminsul+rdr` answers the same plans as `irminsul` (compare irminsul.out), plus one
re-encode per recomputed token (the ADA encode pass). The model is Llama-3.1-8B (32 layers x 8 KV heads
x 128, 131,072 dense bytes/token); at a 60 % budget the reuse policy is charged 78,644 bytes/token, so
the same capacity holds 1/0.6 as many tokens. The per-request lines show where the bytes went: the
first 4 tokens (attention sinks) are forced to tier 8, the rest split between tier 8, 4, 3 and eviction
by marginal distortion per byte (tier 2 never pays off while values stay bf16: see docs/policies.md).
"""
import math

from _demo import show, three_requests

from pic.engine import policies
from pic.engine.specs import model_from_name

model = model_from_name("llama-3.1-8b")
ctx = policies.PolicyContext(capacity_bytes=math.inf, bytes_per_token=model.kv_bytes_per_token, model=model)
policy = policies.build("irminsul+rdr", ctx, {"budget": 0.6, "avg_chunk": 256, "min_chunk": 64})
print(f"dense {model.kv_bytes_per_token:,} B/token -> charged {policy.kv_bytes_per_token:,} B/token "
      f"(x{model.kv_bytes_per_token / policy.kv_bytes_per_token:.2f} tokens in the same capacity)")

now, units = 0, policy.num_layers * policy.num_heads
for req, layout in three_requests():
    before = dict(policy.stats.extra)
    plan = policy.lookup(req, now)            # the reuse policy's plan + the encode of new tokens
    assert policy.admit(req, plan, now)
    policy.commit(req, now + 1)               # prefill done: new tokens get their tiers
    policy.release(req, now + 2)
    show(f"r{req.request_id}", req, layout, plan)
    got = {k: policy.stats.extra[k] - before.get(k, 0) for k in policy.stats.extra}
    tiers = ", ".join(f"{'evicted' if b == 0 else f'b{b}'} {got[f'rdr_unit_tokens_b{b}'] / units:.0f}"
                      for b in policy.opts.bits)
    print(f"  re-encoded {plan.correction.reencode_tokens}; tokens per tier (mean over layer x head): {tiers}")
    if got["rdr_tokens"]:
        print(f"  resident {got['rdr_bytes'] / got['rdr_tokens']:,.0f} B/token "
              f"({got['rdr_bytes'] / got['rdr_tokens'] / model.kv_bytes_per_token:.1%} of dense)")
    now += 10

summary = type(policy).merged_summary([policy])
print(f"mean relative distortion {summary['rdr_distortion']:.4f} (0 = lossless, 1 = all evicted)")
