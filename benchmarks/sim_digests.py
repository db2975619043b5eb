"""Digests of every simulation output (rows, ITL segments, busy s, last finish, peak resident, events, policy
stats) for a set of serving configurations (#12, srv14): run from two checkouts, the lines must match.

    PYTHONPATH=. python3 benchmarks/sim_digests.py [0,3,5]     # all configurations, or those numbered

Each line: number, digest of every output, digest of every output but the event count, CPU s of the
simulation, ITL segments, events, trace, policy, options. (The event count is a diagnostic: a change that
drops events which did nothing, srv15's superseded SCHEDULEs, keeps the second digest and changes the first.)
"""
from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import sys
import time

import numpy as np

import pic.engine.replay as R
from pic.engine.config import ReplayConfig
from pic.engine.policies.base import PolicyContext

CONFIGS = [
    ("/tmp/bs/azure-conv.parquet", "prefix", {}),
    ("/tmp/bs/azure-conv.parquet", "block-hash", {}),
    ("/tmp/bs/azure-conv.parquet", "none", {}),
    ("/tmp/bs/mooncake-conv.parquet", "prefix", {}),
    ("/tmp/bs/mooncake-conv.parquet", "irminsul", {}),
    ("/tmp/bs/mooncake-conv.parquet", "prefix", {"replicas": 4, "router": "cache-aware"}),
    ("/tmp/bs/mooncake-conv.parquet", "prefix", {"replicas": 3, "router": "least-loaded"}),
    ("/tmp/bs/azure-conv.parquet", "prefix", {"rate": 8.0}),
    ("/tmp/bs/azure-conv.parquet", "prefix", {"rate": 30.0, "token_budget": 512}),
    ("/tmp/bs/mooncake-conv.parquet", "prefix", {"closed_loop": True}),
    ("/tmp/bs/mooncake-conv.parquet", "block-hash", {"capacity_bytes": 2e9}),
    ("/tmp/scale/chat-10000.parquet", "prefix", {}),
    ("/tmp/scale/rag-reorder-10000.parquet", "prefix", {}),
    ("/tmp/scale/rag-reorder-10000.parquet", "irminsul", {}),
    ("/tmp/scale/chat-10000.parquet", "irminsul", {"replicas": 2}),
    ("/tmp/bs/mooncake-conv.parquet", "prefix", {"model": "olmo-hybrid-7b", "max_requests": 3000}),
    ("/tmp/bs/mooncake-conv.parquet", "prefix", {"profile": "pic/engine/profiles/h200-deepseek-v2-lite.json", "max_requests": 3000}),
    ("/tmp/bs/mooncake-conv.parquet", "irminsul+rdr", {"max_requests": 3000}),
    ("/tmp/scale/chat-10000.parquet", "prefix", {"closed_loop": True}),
    ("/tmp/scale/chat-10000.parquet", "prefix", {"closed_loop": True, "replicas": 2, "router": "cache-aware", "token_budget": 1024}),
    ("/tmp/scale/chat-10000.parquet", "prefix", {"closed_loop": True, "rate": 40.0}),
]


def main() -> None:
    only = {int(x) for x in sys.argv[1].split(",")} if sys.argv[1:] else None
    traces: dict = {}
    for k, (path, pol, opts) in enumerate(CONFIGS):
        if only and k not in only:
            continue
        tr = traces.get(path) or traces.setdefault(path, R.read_trace_file(path))
        cfg = ReplayConfig(policies=(pol,), **opts)
        model, _gpu, cost, _ = R.check_config(cfg)
        work = R.workload_from_trace(tr, cfg.max_requests)
        arr, _ = R.retime(work.arrival_us, cfg.time_scale, cfg.rate)
        work = dataclasses.replace(work, arrival_us=arr)
        ctx = PolicyContext(cfg.capacity_bytes, model.kv_bytes_per_token, model, cfg.seed, cfg.verify)
        gc.disable()
        t = time.process_time()
        sim = R._simulate(pol, work, ctx, cost, cfg, None)
        dt = time.process_time() - t
        rows = sim.rows.to_polars() if hasattr(sim.rows, "to_polars") else sim.rows   # (engine.rows.RequestRows)
        h = hashlib.sha256(rows.write_ipc(None).getvalue())
        h.update(np.ascontiguousarray(sim.itl, np.float64).tobytes())
        g = h.copy()
        h.update(json.dumps([sim.busy_s, sim.last_finish_us, sim.peak_resident, sim.num_events, sim.stats,
                             sim.order[:50].tolist()]).encode())
        g.update(json.dumps([sim.busy_s, sim.last_finish_us, sim.peak_resident, sim.stats,
                             sim.order[:50].tolist()]).encode())
        print(f"{k:2d} {h.hexdigest()[:16]} {g.hexdigest()[:16]} {dt:6.3f}s itl{sim.itl.shape[0]} ev{sim.num_events} "
              f"{path.split('/')[-1]} {pol} {opts}", flush=True)
        del sim
        gc.collect()
        gc.enable()


if __name__ == "__main__":
    main()
