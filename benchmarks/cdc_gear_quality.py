"""irminsul's token hit rate with each Gear value kind (``mix``, the default; ``table``), side by side (#12).

    pic ingest ../shared/data/lmcache-agent-trace/miniswe -o miniswe.parquet
    python benchmarks/cdc_gear_quality.py /tmp/bs/mooncake-conv.parquet /tmp/bs/azure-conv.parquet miniswe.parquet
    python benchmarks/cdc_gear_quality.py --seeds 0,1,2,3 traces/samples/rag-reorder.parquet

For each trace, Gear seed (``irminsul.gear_seed``) and Gear value kind (``irminsul.gear``): a ``replay()`` of
``irminsul`` (token hit rate, process CPU seconds of the replay), and every prompt chunked on its own
(:func:`pic.engine.cdc.layout_fps`): chunks, mean chunk size, and the share of prompt tokens in chunks whose
fingerprint an earlier prompt already had (content reuse the chunking exposes, without any policy or
capacity). With several seeds, a last line per trace and kind gives the hit rates' mean and range: the
seed-to-seed spread is the yardstick for a difference between the kinds (cut points move with either).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # this checkout's pic

from pic import accel  # noqa: E402
from pic.engine import cdc  # noqa: E402
from pic.engine.config import ReplayConfig, parse_size  # noqa: E402
from pic.engine.replay import read_trace_file, replay, workload_from_trace  # noqa: E402


def chunk_stats(trace, cfg: cdc.CDCConfig, max_requests: int | None) -> dict:
    work = workload_from_trace(trace, max_requests)
    seen: set[int] = set()
    chunks = tokens = reused = 0
    t0 = time.process_time()
    for i in range(work.num_requests):
        toks = work.view(i).tokens
        b, _, fps = cdc.layout_fps(toks, cfg)
        sizes = (b[1:] - b[:-1]).tolist()
        for f, s in zip(fps.tolist(), sizes, strict=True):
            if f in seen:
                reused += s
            else:
                seen.add(f)
        chunks += len(sizes)
        tokens += int(toks.shape[0])
    cpu = time.process_time() - t0
    return {"chunks": chunks, "mean": tokens / max(chunks, 1), "reused": reused / max(tokens, 1), "cpu": cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--max-requests", type=int, default=None)
    ap.add_argument("--capacity", default=None, help="cache capacity (default: the replay default)")
    ap.add_argument("--seeds", default="0", help="comma list of Gear seeds (default 0)")
    a = ap.parse_args()
    if accel.available():
        accel.set_mode("1")         # (the chunk counts below: compiled from the first prompt, as a large replay)
    seeds = [int(x) for x in a.seeds.split(",")]
    print(f"{'trace':28s} {'gear':6s} {'seed':>4s} {'hit rate':>9s} {'replay CPU s':>13s} {'chunks':>9s} "
          f"{'mean':>7s} {'reused':>7s} {'chunk CPU s':>12s}")
    for path in a.traces:
        tr = read_trace_file(path)
        hits: dict[str, list[float]] = {g: [] for g in cdc.GEARS}
        for seed in seeds:
            for gear in cdc.GEARS:
                kw = {"capacity_bytes": parse_size(a.capacity)} if a.capacity else {}
                cfg = ReplayConfig(policies=("irminsul",), max_requests=a.max_requests,
                                   policy_options={"irminsul": {"gear": gear, "gear_seed": seed}}, **kw)
                t0 = time.process_time()
                res = replay(tr, cfg)
                cpu = time.process_time() - t0
                s = res.summary["policies"]["irminsul"]
                hits[gear].append(s["token_hit_rate"])
                cs = chunk_stats(tr, cdc.CDCConfig(seed=seed, gear=gear), a.max_requests)
                print(f"{Path(path).stem:28s} {gear:6s} {seed:4d} {s['token_hit_rate']:9.4f} {cpu:13.2f} "
                      f"{cs['chunks']:9,d} {cs['mean']:7.1f} {cs['reused']:7.4f} {cs['cpu']:12.2f}", flush=True)
        if len(seeds) > 1:
            for gear, h in hits.items():
                print(f"{Path(path).stem:28s} {gear:6s} {'all':>4s} mean {sum(h) / len(h):.4f}, "
                      f"range {min(h):.4f}-{max(h):.4f}")


if __name__ == "__main__":
    main()
