"""Trustworthy savings (issue #10): every trace at unbounded capacity and at 5 / 10 / 25 % of the unbounded
``prefix`` peak, for prefix, block-hash, fixed-chunk (with its prefix stage), irminsul and the oracle.

    python benchmarks/bench_trust.py --sections matrix [--requests 400] [--runs DIR]
    python benchmarks/bench_trust.py --sections pareto --runs DIR     # then: pic report DIR/pareto-* --plots P
    python benchmarks/bench_trust.py --sections chunks                  # irminsul chunk-size sweep

Traces: the LMCache agent traces miniswe and taubench (``pic ingest`` of ../shared/data/lmcache-agent-trace/
<name>, or ``--data DIR``; skipped when absent) and every ``pic synth`` scenario (``--requests`` requests, seed 0). Each cell
is one ``engine.replay.replay`` (DeepSeek-V2-Lite on H200, 1 replica, defaults otherwise), i.e. exactly
``pic replay TRACE --policy prefix,block-hash,fixed-chunk,irminsul,oracle --capacity C``. Markdown tables
go to stdout with the CPU seconds (``time.process_time``) each replay took; ``--runs DIR`` also writes
every run dir (for ``pic report``). Target checks are printed under each table.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from pic.engine.config import ReplayConfig
from pic.engine.replay import replay, write_run
from pic.traces.schema import Trace
from pic.traces.synth import SCENARIOS, synth

REPO = Path(__file__).resolve().parents[1]
DATA = (REPO / ".." / "shared" / "data" / "lmcache-agent-trace").resolve()
POLICIES = ("prefix", "block-hash", "fixed-chunk", "irminsul", "oracle")
PCTS = (5, 10, 25)
GIB = 2**30


def traces(args) -> list[tuple[str, Trace]]:
    from pic.traces.ingest import read_sources
    out = []
    for sub in ("miniswe", "taubench"):
        if sub in args.traces and (args.data / sub).is_dir():
            out.append((sub, read_sources([args.data / sub], skip_bad=True)[0]))
        elif sub in args.traces:
            print(f"\n(skipped {sub}: {args.data / sub} not present)")
    for sc in SCENARIOS:
        if sc in args.traces:
            out.append((sc, synth(sc, args.requests, 0)))
    return out


def run(trace: Trace, policies, cap: float, opts=None, runs: Path | None = None, name: str = "") -> tuple[dict, float]:
    t0 = time.process_time()
    res = replay(trace, ReplayConfig(policies=tuple(policies), capacity_bytes=cap, policy_options=opts or {}))
    cpu = time.process_time() - t0
    if runs is not None:
        write_run(res, runs / name, force=True)
    return res.summary, cpu


def row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def pct(x) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def num(x) -> str:
    return "–" if x is None else f"{x:,}"


def section_matrix(args) -> None:
    cols = ("capacity", "policy", "hit rate", "recovery vs baseline", "oracle share", "uncached",
            "prefill J/req", "per-hit prefill energy saved", "whole-GPU energy saved", "registry entries",
            "stored tokens", "duplicate stored")
    for name, tr in traces(args):
        inf, cpu = run(tr, POLICIES, math.inf, runs=args.runs, name=f"{name}/cap-inf")
        peak = inf["policies"]["prefix"]["peak_resident_bytes"]
        results = [("unbounded", inf, cpu)]
        for p in PCTS:
            s, c = run(tr, POLICIES, max(1.0, peak * p / 100), runs=args.runs, name=f"{name}/cap-{p}pct")
            results.append((f"{p}% ({peak * p / 100 / GIB:.3f} GiB)", s, c))
        print(f"\n### {name} ({tr.num_requests} requests, {int(tr.prompt_lengths.sum()):,} prompt tokens; "
              f"unbounded prefix peak {peak / GIB:.2f} GiB)\n")
        print(row(cols))
        print(row(["---"] * len(cols)))
        for label, s, _ in results:
            base = s["baselines"]["best"]
            for p in POLICIES:
                v = s["policies"][p]
                print(row([label, p + (" (baseline)" if p == base else ""), pct(v["token_hit_rate"]),
                           pct(v["recovery_beyond_prefix"]), pct(v["oracle_share"]), v["uncached"],
                           f"{v['prefill_joules_per_request']:.2f}", pct(v["hit_energy_saved"]),
                           pct(v["gpu_energy_saved_vs_baseline"]), num(v["registry_entries"]),
                           num(v["stored_tokens"]), num(v["duplicate_stored_tokens"])]))
        print("\nCPU seconds per replay (5 policies + baselines + oracle): "
              + ", ".join(f"{label.split(' ')[0]} {c:.1f}" for label, _, c in results))
        checks(name, results)


def checks(name: str, results) -> None:
    s0 = results[0][1]["policies"]
    lines = [f"fixed-chunk >= prefix hit rate (unbounded): "
             f"{'met' if s0['fixed-chunk']['token_hit_rate'] >= s0['prefix']['token_hit_rate'] else 'NOT met'} "
             f"({pct(s0['fixed-chunk']['token_hit_rate'])} vs {pct(s0['prefix']['token_hit_rate'])})"]
    unc = [(lab.split(" ")[0], s["policies"]["irminsul"]["uncached"], s["policies"]["prefix"]["uncached"])
           for lab, s, _ in results]
    ok = all(a <= b for _, a, b in unc)
    lines.append(f"irminsul uncached <= prefix uncached at every capacity: {'met' if ok else 'NOT met'} ("
                 + ", ".join(f"{c}: {a} vs {b}" for c, a, b in unc) + ")")
    beat = [(lab.split(" ")[0], s["policies"]["irminsul"]["token_hit_rate"], s["policies"]["fixed-chunk"]["token_hit_rate"])
            for lab, s, _ in results]
    ok = all(a >= b for _, a, b in beat)
    lines.append(f"irminsul >= fixed-chunk hit rate at every capacity: {'met' if ok else 'NOT met'} ("
                 + ", ".join(f"{c}: {pct(a)} vs {pct(b)}" for c, a, b in beat) + ")")
    print("\n" + "\n".join(f"- {name}: {x}" for x in lines))


PLAIN = {"s1": False, "s2": False, "tails": False}        # content-defined chunks and fingerprints only
PARETO = (
    ("irminsul", "irminsul (default)", {}),
    ("irminsul", "CDC @256 (plain)", PLAIN),
    ("irminsul", "irminsul + S1 windows", {"s1": True}),
    ("irminsul", "irminsul avg 128", {"avg_chunk": 128, "min_chunk": 32, "max_chunk": 1024}),
    ("irminsul", "irminsul avg 512", {"avg_chunk": 512, "min_chunk": 128, "max_chunk": 4096}),
    ("irminsul", "CDC @128 (plain)", {**PLAIN, "avg_chunk": 128, "min_chunk": 32, "max_chunk": 1024}),
    ("fixed-chunk", "fixed-chunk 256", {}),
    ("fixed-chunk", "fixed-chunk 128", {"chunk_size": 128}),
)


def section_pareto(args) -> None:
    print("\n### recovery vs registry entries (unbounded capacity)\n")
    cols = ("trace", "variant", "oracle share", "recovery vs baseline", "registry entries", "stored tokens",
            "duplicate stored", "CPU s")
    print(row(cols))
    print(row(["---"] * len(cols)))
    for name, tr in traces(args):
        got = {}
        for pol, label, opts in PARETO:
            slug = label.replace(" (plain)", "").replace(" (default)", "").replace(" + ", "-").replace(" ", "-") \
                .replace("@", "")
            s, cpu = run(tr, (pol,), math.inf, {pol: opts} if opts else None, args.runs,
                         f"pareto-{name}/{slug}")
            v = s["policies"][pol]
            got[label] = v
            print(row([name, label, pct(v["oracle_share"]), pct(v["recovery_beyond_prefix"]),
                       num(v["registry_entries"]), num(v["stored_tokens"]), num(v["duplicate_stored_tokens"]),
                       f"{cpu:.1f}"]))
        d, c = got["irminsul (default)"], got["CDC @256 (plain)"]
        share = d["oracle_share"] or 0.0
        print(row([name, "**moonshot**: irminsul share >= 0.9 with entries <= CDC@256's",
                   "met" if share >= 0.9 and d["registry_entries"] <= c["registry_entries"] else "NOT met",
                   f"{pct(share)}, {num(d['registry_entries'])} vs {num(c['registry_entries'])} entries",
                   "", "", "", ""]))


CHUNKS = ((128, 32, 1024), (192, 48, 1536), (256, 64, 512), (256, 64, 1024), (256, 64, 2048), (256, 64, 4096),
          (384, 96, 3072), (512, 128, 4096))


def low_entropy(num_sessions: int = 30, turns: int = 8, seed: int = 0) -> Trace:
    """Two agents with different headers read the same growing log: one 23-token line repeated ~40 more
    times every turn (no content-defined cut inside it for thousands of tokens), then their own question.
    Agent B's prompt holds agent A's log at another position: only position-independent reuse helps, and
    only if the forced cuts inside the run land where they did in A's prompt."""
    from pic.traces.schema import SegmentTable, requests_frame
    rng = np.random.default_rng(seed)
    table = SegmentTable()
    rows = {k: [] for k in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    rid, t = 0, 0
    for s in range(num_sessions):
        line = rng.integers(0, 50_000, 23, dtype=np.int32)
        heads = [table.add(rng.integers(0, 50_000, n, dtype=np.int32), "system") for n in (37, 120)]
        for turn in range(1, turns + 1):
            log = table.add(np.tile(line, 40 * turn), "tool_output")
            for agent in (0, 1):
                q = table.add(rng.integers(0, 50_000, int(rng.integers(20, 80)), dtype=np.int32), "user")
                for k, v in (("request_id", rid), ("session_id", f"s{s}-{agent}"), ("agent_id", "ab"[agent]),
                             ("arrival_us", t), ("output_tokens", 50), ("segment_ids", [heads[agent], log, q])):
                    rows[k].append(v)
                rid += 1
                t += 400_000
    return Trace(table.build(), requests_frame(rows), source="low-entropy")


def section_chunks(args) -> None:
    print("\n### irminsul chunk sizes (unbounded and at 10 % of the prefix peak)\n")
    cols = ("trace", "avg / min / max", "recovery (inf)", "oracle share (inf)", "entries (inf)",
            "duplicate stored (inf)", "hit rate @10%", "uncached @10%")
    print(row(cols))
    print(row(["---"] * len(cols)))
    for name, tr in [*traces(args), ("low-entropy", low_entropy())]:
        inf, _ = run(tr, ("prefix",), math.inf)
        cap = inf["policies"]["prefix"]["peak_resident_bytes"] * 0.10
        for avg, mn, mx in CHUNKS:
            opts = {"irminsul": {"avg_chunk": avg, "min_chunk": mn, "max_chunk": mx}}
            a, _ = run(tr, ("irminsul",), math.inf, opts)
            b, _ = run(tr, ("irminsul",), cap, opts)
            va, vb = a["policies"]["irminsul"], b["policies"]["irminsul"]
            print(row([name, f"{avg} / {mn} / {mx}", pct(va["recovery_beyond_prefix"]), pct(va["oracle_share"]),
                       num(va["registry_entries"]), num(va["duplicate_stored_tokens"]),
                       pct(vb["token_hit_rate"]), vb["uncached"]]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", default="matrix,pareto,chunks")
    ap.add_argument("--traces", default=",".join(["miniswe", "taubench", *SCENARIOS]))
    ap.add_argument("--requests", type=int, default=400, help="requests per synthetic trace")
    ap.add_argument("--runs", type=Path, default=None, help="also write every run dir under this folder")
    ap.add_argument("--data", type=Path, default=DATA, help="the LMCache agent traces (miniswe/, taubench/)")
    args = ap.parse_args()
    args.traces = args.traces.split(",")
    for sec in args.sections.split(","):
        t0 = time.process_time()
        {"matrix": section_matrix, "pareto": section_pareto, "chunks": section_chunks}[sec](args)
        print(f"\n(section {sec}: {time.process_time() - t0:.0f} CPU s)")


if __name__ == "__main__":
    main()
