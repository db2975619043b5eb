"""The end-of-run footprint of a replay (``engine.replay._footprint``), phase by phase: a policy's ``footprint()``
(irminsul: its stored runs, ``ChunkStore.stored_runs``) and the duplicate count over them
(``engine.oracle.duplicate_tokens``), CPU s, each repeated on the same final state; the counts printed (they must
not move).

    PYTHONPATH=. python benchmarks/bench_footprint.py /tmp/bs/mooncake-conv.parquet --policies prefix,irminsul
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--policies", default="prefix,irminsul")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()

    import pic.engine.replay as R
    from pic.engine import oracle
    from pic.engine.config import ReplayConfig

    orig, reps = R._footprint, a.repeats

    def footprint(pols, min_match, collect=False):
        runs, t_fp, t_dup, dup = None, [], [], None
        for _ in range(reps):
            t = time.process_time()
            fps = [q.footprint() for q in pols]
            t_fp.append(time.process_time() - t)
            runs = None if any(fp.runs is None for fp in fps) else oracle.join_runs([fp.runs for fp in fps])
        for _ in range(reps if runs is not None else 0):
            t = time.process_time()
            dup = oracle.duplicate_tokens(runs, min_match)
            t_dup.append(time.process_time() - t)
        print(f"{type(pols[0]).__name__}: runs {len(runs) if runs is not None else None}, duplicate {dup}; "
              f"footprint() {' '.join(f'{x:.3f}' for x in t_fp)} s, duplicate_tokens "
              f"{' '.join(f'{x:.3f}' for x in t_dup)} s", flush=True)
        return orig(pols, min_match, collect)

    R._footprint = footprint
    trace = R.read_trace_file(a.trace)
    for p in a.policies.split(","):
        R.replay(trace, ReplayConfig(policies=(p,)))


if __name__ == "__main__":
    main()
