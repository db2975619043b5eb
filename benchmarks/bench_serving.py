"""The serving model alone (#12): CPU seconds of ``ServingModel.run`` on a trace, with a policy's plans
recorded first and replayed by a stand-in policy (lookup = the recorded plan, admit = the recorded
answer), so the time is the serving model's own (event loop, scheduler, replicas, cost model, request
table, ITL log), not the policy's or the trace views'.

    PYTHONPATH=. python3 benchmarks/bench_serving.py TRACE [--policy prefix] [--repeats 3] [--replicas 1]

Prints the best CPU s of ``--repeats`` runs, µs per request, and a digest of the request rows and ITL
segments (equal before and after a change that keeps outputs identical). Run it from two checkouts to
compare (only ServingModel, Workload, request_frame and the policy registry are used).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import time

import numpy as np

import pic.engine.replay as R
from pic.engine import policies as registry
from pic.engine.config import ReplayConfig
from pic.engine.metrics import request_frame
from pic.engine.policies.base import PolicyContext, Usage
from pic.engine.serving import ServingModel, Workload


class _Stats:
    evictions = 0


class Recorded:
    """Replays recorded lookups and admissions by workload index (the views are the indices)."""

    def __init__(self, plans: dict, admits: dict, usage: Usage) -> None:
        self.plans, self.admits, self._usage, self.stats = plans, admits, usage, _Stats()

    def lookup(self, i, now_us):
        return self.plans[i]

    def admit(self, i, plan, now_us):
        return self.admits[i]

    def commit(self, i, now_us):
        pass

    def release(self, i, now_us):
        pass

    def usage(self):
        return self._usage


def record(work: Workload, policy: str, ctx: PolicyContext, cost, config: ReplayConfig) -> tuple[dict, dict]:
    """Each request's plan and admission under ``policy`` (one replica), by workload index."""
    pol = registry.build(policy, ctx, config.policy_options.get(policy))
    index: dict[int, int] = {}
    plans: dict[int, object] = {}
    admits: dict[int, bool] = {}

    def view(i):
        v = work.view(i)
        index[id(v)] = i
        return v

    lookup, admit = pol.lookup, pol.admit

    def rec_lookup(v, now):
        p = plans[index[id(v)]] = lookup(v, now)
        return p

    def rec_admit(v, plan, now):
        ok = admits[index[id(v)]] = admit(v, plan, now)
        return ok

    pol.lookup, pol.admit = rec_lookup, rec_admit
    ServingModel(dataclasses.replace(work, view=view), [pol], cost, token_budget=config.token_budget).run()
    return plans, admits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--policy", default="prefix")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--max-requests", type=int, default=None, help="the trace's first N requests")
    args = ap.parse_args()
    config = ReplayConfig(policies=(args.policy,))
    model, _gpu, cost, _ = R.check_config(config)
    work = R.workload_from_trace(R.read_trace_file(args.trace), args.max_requests)
    ctx = PolicyContext(config.capacity_bytes, model.kv_bytes_per_token, model, config.seed, config.verify)
    plans, admits = record(work, args.policy, ctx, cost, config)
    usage = Usage(0, 0, 0, float("inf"))
    bare = dataclasses.replace(work, view=lambda i: i)
    best, digest = float("inf"), ""
    gc.disable()
    for _ in range(args.repeats):
        pols = [Recorded(plans, admits, usage) for _ in range(args.replicas)]
        sm = ServingModel(bare, pols, cost, token_budget=config.token_budget)
        t = time.process_time()
        table = sm.run()
        best = min(best, time.process_time() - t)
        h = hashlib.sha256(request_frame("x", table).write_ipc(None).getvalue())
        for rep in sm.replicas:
            h.update(np.ascontiguousarray(rep.itl.array(), np.float64).tobytes())
        digest = h.hexdigest()[:16]
        del sm, table
        gc.collect()
    n = work.num_requests
    print(f"serving model ({args.policy} plans, {args.replicas} replica(s)): best {best:.3f} CPU s, "
          f"{1e6 * best / n:.1f} us/req, rows+itl {digest}")


if __name__ == "__main__":
    main()
