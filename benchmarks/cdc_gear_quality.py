"""irminsul's token hit rate with the default Gear table and with the table-free option, side by side (#12).

    pic ingest ../shared/data/lmcache-agent-trace/miniswe -o miniswe.parquet
    python benchmarks/cdc_gear_quality.py /tmp/bs/mooncake-conv.parquet /tmp/bs/azure-conv.parquet miniswe.parquet

For each trace and each Gear value kind (``table``: the default; ``mix``: ``CDCConfig(gear="mix")``): a
``replay()`` of ``irminsul`` (token hit rate, process CPU seconds of the replay), and every prompt chunked on
its own (:func:`pic.engine.cdc.layout_fps`): chunks, mean chunk size, and the share of prompt tokens in
chunks whose fingerprint an earlier prompt already had (content reuse the chunking exposes, without any
policy or capacity).

The policy's config has no field for the option (``IrminsulConfig.cdc`` builds the CDCConfig from avg / min /
max / seed); for the ``mix`` runs this script swaps that property for one that adds ``gear="mix"`` (the
policy's code is unchanged).
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
from pic.engine.policies import irminsul as irm  # noqa: E402
from pic.engine.replay import read_trace_file, replay, workload_from_trace  # noqa: E402


def _with_gear(gear: str):
    def prop(self: irm.IrminsulConfig) -> cdc.CDCConfig:
        return cdc.CDCConfig(self.avg_chunk, self.min_chunk, self.max_chunk, self.gear_seed, gear=gear)
    return property(prop)


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
    a = ap.parse_args()
    if accel.available():
        accel.set_mode("1")         # (the chunk counts below: compiled from the first prompt, as a large replay)
    orig = irm.IrminsulConfig.cdc
    print(f"{'trace':28s} {'gear':6s} {'hit rate':>9s} {'replay CPU s':>13s} {'chunks':>9s} {'mean':>7s} "
          f"{'reused':>7s} {'chunk CPU s':>12s}")
    for path in a.traces:
        tr = read_trace_file(path)
        for gear in cdc.GEARS:
            irm.IrminsulConfig.cdc = orig if gear == "table" else _with_gear(gear)
            try:
                kw = {"capacity_bytes": parse_size(a.capacity)} if a.capacity else {}
                cfg = ReplayConfig(policies=("irminsul",), max_requests=a.max_requests, **kw)
                t0 = time.process_time()
                res = replay(tr, cfg)
                cpu = time.process_time() - t0
            finally:
                irm.IrminsulConfig.cdc = orig
            s = res.summary["policies"]["irminsul"]
            cs = chunk_stats(tr, cdc.CDCConfig(gear=gear), a.max_requests)
            print(f"{Path(path).stem:28s} {gear:6s} {s['token_hit_rate']:9.4f} {cpu:13.2f} {cs['chunks']:9,d} "
                  f"{cs['mean']:7.1f} {cs['reused']:7.4f} {cs['cpu']:12.2f}", flush=True)


if __name__ == "__main__":
    main()
