"""Replay runner: one independent simulation per policy over the same trace, and the run directory.

``replay(trace, config)`` -> :class:`RunResult`; ``write_run(result, run_dir)`` writes
``requests.parquet``, ``summary.json`` and ``config.json`` atomically (temp folder, then rename).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pic.engine import policies as registry
from pic.engine.config import ReplayConfig
from pic.engine.cost import CostModel
from pic.engine.coverage import workload_oracle as _oracle
from pic.engine.latency import serving_summary
from pic.engine.memory import COLLECT_LAST_MIN, free_cycles, release_freed
from pic.engine.memory import no_cyclic_gc as _no_cyclic_gc
from pic.engine.metrics import SUMMARY_VERSION, request_rows, summarize
from pic.engine.oracle import duplicate_tokens, join_runs
from pic.engine.policies import prefix_told, prefix_twin, rdr_told
from pic.engine.policies.base import PolicyContext
from pic.engine.policies.block_radix import answer_from_prefix, answers_apply, asked_views
from pic.engine.replay_config import _min_match, _unit_bytes, check_config, cost_config, usable_baselines  # noqa: F401
from pic.engine.request import Labels
from pic.engine.retime import retime
from pic.engine.runconfig import provenance
from pic.engine.sanity import below_prefix_warning, fit_warnings, resident_warnings, saturation_warning
from pic.engine.serving import ServingModel, Workload
from pic.engine.views import make_view
from pic.traces.io import atomic_dir
from pic.traces.schema import Trace

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

    from pic.engine.rows import RequestRows

#: the row columns read from a baseline that is not itself replayed (prefix_* columns; _hit reads its sums)
_BASELINE_COLUMNS = ("reused_tokens", "prefill_joules")
#: requests.parquet columns written with dictionary pages (write_run)
_DICTIONARY_COLUMNS = ["policy", "session_id"]


@dataclass(frozen=True)
class RunResult:
    """Everything a replay produced. ``requests``: one row per request x policy (engine.metrics schema), a polars
    frame made on first use from ``table`` (the same rows as Arrow: what requests.parquet holds)."""

    config: ReplayConfig
    trace: str
    table: pa.Table
    summary: dict[str, Any]
    resolved: dict[str, Any]   # config.json contents

    @cached_property
    def requests(self) -> pl.DataFrame:
        import polars as pl

        return pl.from_arrow(self.table)


def read_trace_file(path: str | os.PathLike) -> Trace:
    """Read a canonical trace (Parquet, recognised by its bytes, whatever the suffix), or any raw log the
    ingest readers accept."""
    from pic.traces.outputs import is_parquet, is_stream
    from pic.traces.schema import TraceError

    if is_stream(path):
        raise TraceError(str(path), None, "path", "is a pipe, not a file: a trace must be read more than once; "
                         "save it to a file first (or `pic ingest --format FORMAT <(...) -o t.parquet`)")
    if Path(path).suffix.lower() == ".parquet" or is_parquet(path):
        from pic.traces.io import read_trace
        trace = read_trace(path)
        release_freed()          # NOTE (memory): what the read freed, for the oracle and simulations to reuse
        return trace
    from pic.traces.ingest import read_sources
    return read_sources([Path(path)])[0]


def workload_from_trace(trace: Trace, max_requests: int | None = None) -> Workload:
    """Requests in (arrival, request_id) order with lazily built RequestViews."""
    arrival = trace.column("arrival_us").astype(np.int64)
    rid_all = trace.column("request_id")
    order = np.lexsort((rid_all, arrival))
    if max_requests is not None:
        order = order[:max_requests]
    seg = trace.segments
    offs, seg_idx = trace._csr   # NOTE: CSR of request -> segment rows, shared with Trace.prompt
    rid = rid_all.astype(np.int64)[order]
    sess = _labels(trace, "session_id", order)
    # NOTE (memory): a view is a few slices and gathers of the trace's own arrays (its segments' lengths,
    # ids and kinds), made when the simulation asks for it; nothing per segment occurrence is copied
    # for the whole trace (chat 10^6: ~10 M occurrences, ~300 MB of copies and Python int lists).
    # Its tokens are made only if a policy reads them (RequestView.tokens; opaque segments derived).
    # NOTE (speed): the views' Seqs and per-request values are made a block of requests at a time, their
    # bounds, ids and kinds when a policy reads them (engine.views: the same values)
    runs = _consecutive_rows(offs, seg_idx)
    num_tok = trace.prompt_lengths[order].astype(np.int64)
    view = make_view(order, offs, seg_idx, runs, seg, rid, sess, num_tok)
    return Workload(rid, sess, num_tok, trace.column("output_tokens").astype(np.int64)[order], arrival[order], view)


def _consecutive_rows(offs: np.ndarray, seg_idx: np.ndarray) -> np.ndarray:
    """bool [R]: request ``r``'s segment rows ``seg_idx[offs[r]:offs[r+1]]`` are one or more consecutive
    rows ``a, a+1, ...`` (False for a request without segments)."""
    counts = np.diff(offs)
    breaks = np.zeros(seg_idx.size, np.int64)     # breaks[k]: steps != +1 among seg_idx[:k+1]
    if seg_idx.size > 1:
        np.cumsum(np.diff(seg_idx) != 1, out=breaks[1:])
    last = np.maximum(offs[1:] - 1, 0)
    first = np.minimum(offs[:-1], max(seg_idx.size - 1, 0))
    return (counts > 0) & (breaks[last] == breaks[first]) if seg_idx.size else np.zeros(counts.size, np.bool_)


def _labels(trace: Trace, name: str, order: np.ndarray) -> Labels | list[str]:
    """The rows ``order`` of a string request column, as :class:`engine.request.Labels` (codes into its sorted
    distinct values); a plain list where it holds nulls."""
    got = trace.string_codes(name)
    if got is None:
        full = trace.strings(name)
        return [full[i] for i in order]
    codes, names = got
    return Labels(codes[order].astype(np.int32 if len(names) < 1 << 31 else np.int64), names)


def replay(trace: Trace, config: ReplayConfig, progress: Callable[[int, int], None] | None = None, *,
           command: str | None = None) -> RunResult:
    """Replay ``trace`` once per policy in ``config.policies`` (same seed, same workload), and once per
    exact-prefix baseline of ``config.baselines`` not among them. Each policy's rows carry the best
    baseline's per-request reuse and joules (``prefix_*`` columns) and the trace-level oracle's reuse.

    ``command``: the command line that asked for it, recorded in config.json with the pic version and the
    trace's path and content digest (``engine.runconfig.provenance``)."""
    model, gpu, cost, resolved = check_config(config)
    if trace.num_requests == 0:
        raise ValueError(f"{trace.source}: requests: the trace has no requests; nothing to replay")
    work = workload_from_trace(trace, config.max_requests)
    arrivals, time_factor = retime(work.arrival_us, config.time_scale, config.rate)
    work = dataclasses.replace(work, arrival_us=arrivals)
    bases = usable_baselines(config, model)
    names = [*config.policies, *(b for b in bases if b not in config.policies)]
    total = work.num_requests * len(names)
    warnings = fit_warnings(model, gpu, config.capacity_bytes)
    ctx = PolicyContext(config.capacity_bytes, model.kv_bytes_per_token, model, config.seed, config.verify)
    # NOTE (memory): the oracle runs first (its working set then sits on the trace alone, not on every
    # policy's final state too); each simulation's policy state is reduced to the summary values it feeds
    # and dropped before the next one is built; a baseline keeps only the row columns read from it.
    min_match = _min_match(config)
    oracle = _oracle(trace, work, min_match)
    # NOTE (speed): oracle answers from the trace-level oracle, and takes prefix's timeline, where they are its own
    told = "oracle" in config.policies and registry.get("oracle").told(trace, work, oracle, min_match, config)
    # (irminsul, fixed-chunk, linearkv take prefix's simulation where their plans are prefix's: told where proven)
    itwin = rdr_told.wanted(config, ctx, lambda: (trace, work, oracle, min_match))    # (and irminsul+rdr's)
    sims: dict[str, _Sim] = {}
    # NOTE (speed): the baselines are simulated first and the replayed policies last (each simulation is
    # independent: same seed, a fresh policy), so the state left for the cyclic GC at the end is the
    # policy's, which a CLI run never collects: irminsul's (~2.6 M objects on Mooncake conversation) cost
    # ~1.3 CPU s to collect and free on Azure conversation; outputs keep the order of ``names``
    order = [n for n in names if n not in config.policies] + [n for n in names if n in config.policies]
    # NOTE (speed): block-hash answers from the prefix replay, replayed first, where that is its tree's answer
    # (answers_apply; Mooncake conversation: ~0.15 CPU s of block-hash's walks, splits and locks; ~0.03 its views)
    answers = {"prefix", "block-hash"} <= set(order) and answers_apply(config, ctx.capacity_tokens, resolved)
    if answers:
        order.remove("prefix")
        order.insert(order.index("block-hash"), "prefix")
    with _no_cyclic_gc():
        for p, name in enumerate(order):
            base = p * work.num_requests
            tick = None if progress is None else (lambda done, _n, base=base: progress(base + done, total))
            later = any(n in prefix_twin.NAMES for n in order[p + 1:])
            sims[name] = sim = _simulate(name, work, ctx, cost, config, tick, answers and sims.get("prefix"), told, itwin,
                                          trace, keep_twin=later)
            if itwin is not None and not later:
                itwin.sim = None     # NOTE (memory): prefix's rows and ITL, kept for a policy that may take them
            # a radix tree's parent links are cycles: freed only by the cyclic GC; after the last simulation
            # only at scale (free_cycles); nor before block-hash answering (it builds no tree: after it, if need be)
            nxt = order[p + 1] if p + 1 < len(order) else None
            collect = (nxt is not None and not (answers and nxt == "block-hash")
                       or work.num_requests >= COLLECT_LAST_MIN)
            if name in config.policies:
                release_freed()      # NOTE (memory): what the simulation freed, before the footprint's work
                sim.held = _held(sim.pols, min_match, collect)      # (empties sim.pols)
            else:
                sim.sums = (sim.reused, int(sim.rows["prompt_tokens"].sum()))
                sim.rows, sim.itl = sim.rows.select(_BASELINE_COLUMNS), np.zeros((0, 4))
                sim.pols = []
                if nxt is not None and nxt in config.policies:
                    _best_only(sims, bases, keep_reuse="block-hash" in config.policies)
                if collect:
                    free_cycles()
    best = _best(sims, bases)
    window = max(s.last_finish_us for s in sims.values()) - int(work.arrival_us.min(initial=0))
    frames, summary = [], {}
    base_sim = sims[best]
    for name in config.policies:
        sim = sims[name]
        rows = sim.rows.with_columns(prefix_reused_tokens=base_sim.rows["reused_tokens"],
                                     prefix_prefill_joules=base_sim.rows["prefill_joules"],
                                     oracle_reused_tokens=np.asarray(oracle[sim.order], np.int64))
        frames.append(rows)
        summary[name] = _summary(sim, rows, best, base_sim, window, cost, config)
        for w in (saturation_warning(name, summary[name], config.replicas),
                  below_prefix_warning(name, summary[name], sim.config, config.capacity_bytes,
                                       getattr(model, "is_hybrid", False))):
            if w is not None:
                warnings.append(w)
    warnings += resident_warnings(model, gpu, config.capacity_bytes, config.replicas,
                                  {n: s["peak_resident_bytes"] for n, s in summary.items()})
    # each policy's rows are in request_id order: in policy order they are sorted by (policy, request_id)
    frames = [f for _, f in sorted(zip(config.policies, frames, strict=True), key=lambda x: x[0])]
    requests = _concat([f.to_arrow() for f in frames])
    cap = None if math.isinf(config.capacity_bytes) else config.capacity_bytes
    head = {"version": SUMMARY_VERSION, "trace": trace.source, "model": model.name, "gpu": gpu.name,
            "capacity_bytes": cap, "replicas": config.replicas}
    baselines = {"best": best, **{b: {"token_hit_rate": _hit(sims[b]), "gpu_joules": sims[b].gpu_joules(
        window, cost, config.replicas)} for b in bases}}
    path = trace.source if Path(trace.source).exists() else None
    resolved = {**head, **provenance(trace, path, command), "replay": config.to_dict(),
                "policies": {n: {"config": sims[n].config, "stats": sims[n].stats} for n in names},
                "cost": cost.to_dict(), "num_requests": work.num_requests, "arrival_time_factor": time_factor}
    return RunResult(config, trace.source, requests,
                     {**head, "baselines": baselines, "policies": summary, "warnings": warnings}, resolved)


def write_run(result: RunResult, run_dir: str | os.PathLike, *, force: bool = False,
              inputs: tuple[str | os.PathLike, ...] = ()) -> Path:
    """Write the run dir: files are built in a temp folder, then moved in (``traces.outputs.atomic_dir``).

    Refused (``OutputError``) when ``run_dir`` is the trace, the model config or a folder holding them
    (``inputs`` adds more), a file, or a non-empty folder pic did not write (unless ``force``; even then
    only pic's own files are written there).
    """
    run_dir = Path(run_dir)
    inputs = (result.trace, result.config.model, *inputs)
    with atomic_dir(run_dir, kind="run-dir", force=force, inputs=inputs) as tmp:
        import pyarrow.parquet as pq

        # NOTE (speed): dictionary pages for the string columns only: a numeric column of distinct values filled
        # a dictionary page before falling back to plain pages (Mooncake conversation prefix: the write 0.021 ->
        # 0.012 CPU s, the file 1.46 -> 1.17 MB; the same values read back)
        pq.write_table(result.table, tmp / "requests.parquet", compression="zstd",
                       compression_level=3, use_dictionary=_DICTIONARY_COLUMNS, write_statistics=True)
        (tmp / "summary.json").write_text(json.dumps(result.summary, indent=2, default=_json) + "\n")
        (tmp / "config.json").write_text(json.dumps(result.resolved, indent=2, default=_json) + "\n")
    return run_dir


# ---- Internal helpers -----------------------------------------------------------------------------
@dataclass
class _Sim:
    """One policy's simulation: its request rows (by request_id), counters and what it holds at the end."""

    name: str
    rows: RequestRows
    order: np.ndarray          # workload index of each row
    busy_s: float
    last_finish_us: int
    peak_resident: int
    num_events: int
    wall: float
    pols: list
    itl: np.ndarray            # ITL segments of all replicas, float64 [k, 4] (engine.serving.itl)
    config: dict[str, Any]
    stats: dict[str, int]
    held: dict[str, Any] = dataclasses.field(default_factory=dict)   # _held(pols), once pols are dropped
    reuse: np.ndarray | None = None   # prefix: its reuse per workload request (block_radix.answers_apply)
    sums: tuple[int, int] | None = None   # a baseline not replayed: its reused and prompt tokens

    @property
    def reused(self) -> int:
        return self.sums[0] if self.sums is not None else int(self.rows["reused_tokens"].sum())

    def gpu_joules(self, window_us: int, cost: CostModel, replicas: int) -> float:
        """Whole-GPU joules (busy + idle, all replicas) over a window of ``window_us`` from the first arrival."""
        span = replicas * window_us / 1e6
        return cost.energy(self.busy_s, max(span - self.busy_s, 0.0))


def _simulate(name: str, work: Workload, ctx: PolicyContext, cost: CostModel, config: ReplayConfig,
              tick: Callable[[int, int], None] | None, answers: _Sim | None = None, told: Any = None,
              itwin: Any = None, trace: Trace | None = None, keep_twin: bool = True) -> _Sim:
    """``answers``/``told``/``itwin``: what block-hash (the prefix replay: block_radix.answers_apply)/oracle
    (OracleCache.told)/irminsul, fixed-chunk, linearkv (prefix_twin.take) answer from; ``keep_twin``: False where
    no policy simulated after this one may take prefix's simulation (``itwin.sim`` dropped once it is not taken)."""
    pols = [registry.build(name, ctx, config.policy_options.get(name)) for _ in range(config.replicas)]
    taken = prefix_twin.take(name, pols, work, itwin, tick)   # (False: asked, pols[0] a fresh one)
    if not taken and not keep_twin and itwin is not None:
        # NOTE (memory): prefix's rows (~30 columns) and ITL, not taken: not held through this simulation
        # (chat 10^6: ~0.3 GB under irminsul's state)
        itwin.sim = None
    rdr_told.tell(pols, work, itwin)      # (irminsul+rdr: told where proven; its timeline from its plans)
    t = told.twin if name == "oracle" and told else itwin.sim if taken else None
    if t is not None:        # prefix's simulation: its plans (Told.see, prefix_twin.take)
        if name == "oracle":
            pols[0].tell(told, done=True)
        if tick is not None:
            tick(work.num_requests, work.num_requests)      # (every request done)
        return _Sim(name, type(t.rows)(name, t.rows.session, dict(t.rows.cols), t.rows.valid), t.order, t.busy_s,
                    t.last_finish_us, pols[0].usage().total, t.num_events, 0.0, pols, t.itl, pols[0].describe(), _stats(pols))
    if name == "block-hash" and answers or name == "oracle" and told:
        if name == "block-hash":
            answer_from_prefix(pols[0], work.request_ids, answers.reuse)
        else:
            pols[0].tell(told)
        work = dataclasses.replace(work, view=asked_views(work.request_ids, work.num_prompt))
    kv_bpt = getattr(pols[0], "kv_bytes_per_token", ctx.bytes_per_token)   # compressed KV (rdr)
    pcost = cost if kv_bpt == ctx.bytes_per_token else cost.with_kv_read_bytes(kv_bpt)
    # (lean: read as a baseline only; not prefix's where the oracle may take its simulation: Told.see)
    lean = name not in config.policies and not (name == "prefix" and (told or itwin is not None))
    sm = ServingModel(work, pols, pcost, token_budget=config.token_budget, router=config.router, progress=tick,
                      closed_loop=config.closed_loop, lean=lean)
    if config.check_invariants or config.verify:
        sm.sim.observers.append(_invariant_observer(name, pols))
    if name == "prefix":
        prefix_told.tell(pols, sm, trace, work)     # (its final state and plans from the trace, where it can)
    t0 = time.perf_counter()
    reqs = sm.run()
    wall = time.perf_counter() - t0
    rows = request_rows(name, reqs)
    order = np.argsort(reqs.column("request_id"), kind="stable")
    out = _Sim(name, rows, order, sum(rep.busy_us for rep in sm.replicas) / 1e6,
               int(reqs.column("finish_us").max(initial=0)), sm.peak_resident, sm.sim.num_events, wall, pols,
               np.concatenate([rep.itl.array() for rep in sm.replicas]), pols[0].describe(), _stats(pols))
    # NOTE (memory): the model and its Simulator hold each other (bound-method handlers), a cycle the
    # disabled GC would keep until the next collect, and with it the request table (27 x 8 B per request)
    # and the replicas' ITL logs while the policy's footprint is counted (chat 10^6: ~300 MB). Broken here:
    # they are freed on return (the policies, in ``pols``, are not)
    sm.sim.handlers.clear()
    if name == "prefix":
        out.reuse = reqs.column("num_reused")
        for t in (told or None, itwin):
            if t is not None:
                t.see(dataclasses.replace(out, pols=[]))     # (its rows, ITL kept: replay() drops them)
    return out


def _summary(sim: _Sim, rows: RequestRows, best: str, base: _Sim, window_us: int, cost: CostModel,
             config: ReplayConfig) -> dict[str, Any]:
    """One policy's summary.json entry: engine.metrics.summarize + whole-GPU energy, serving, footprint."""
    held = sim.held
    out = summarize(rows, peak_resident_bytes=sim.peak_resident, evictions=held["evictions"],
                    collisions=held["collisions"], num_events=sim.num_events, wall_seconds=sim.wall)
    span = out["sim_seconds"] * config.replicas
    mine, theirs = sim.gpu_joules(window_us, cost, config.replicas), base.gpu_joules(window_us, cost, config.replicas)
    out.update(baseline=best, busy_seconds=sim.busy_s,
               gpu_joules=cost.energy(sim.busy_s, max(span - sim.busy_s, 0.0)),
               gpu_energy_saved_vs_baseline=1.0 - mine / theirs if theirs else None)
    out.update(serving_summary(rows, sim.itl, percentiles=config.percentiles, slo=config.slo))
    kv_bpt = held["kv_bytes_per_token"]
    out["kv_bytes_per_token"] = kv_bpt
    out["capacity_tokens"] = None if math.isinf(config.capacity_bytes) else int(config.capacity_bytes // kv_bpt)
    out.update(held["merged"])
    out.update(held["footprint"])
    return out


def _held(pols: list, min_match: int, collect: bool = False) -> dict[str, Any]:
    """What a policy's summary reads from its final state. The state is dropped here (``pols`` emptied);
    ``collect``: and freed (:func:`free_cycles`) before the duplicate count (:func:`_footprint`)."""
    held = {"evictions": sum(q.stats.evictions for q in pols), "collisions": sum(q.stats.collisions for q in pols),
            "kv_bytes_per_token": getattr(pols[0], "kv_bytes_per_token", pols[0].ctx.bytes_per_token),
            "merged": pols[0].merged_summary(pols) if hasattr(pols[0], "merged_summary") else {}}
    held["footprint"] = _footprint(pols, min_match, collect)
    return held


def _footprint(pols: list, min_match: int, collect: bool = False) -> dict[str, Any]:
    """registry_entries, stored_tokens (resident at the end, all replicas) and duplicate_stored_tokens
    (stored tokens whose content another stored run also holds; None when the policy keeps no tokens).
    Empties ``pols`` once their runs are read; ``collect``: a cyclic-GC pass then, before the count.

    NOTE (memory): a policy's stored runs refer to prompts (:class:`~engine.seq.Seq`), not to its state, so
    the state is freed before the count's working set stacks on it, and the count's freed arrays handed back
    after it (chat 10^6 ``prefix``: the count's +0.36-0.42 GiB on top of the radix tree was the replay's
    peak); the pass is the one the replay makes after the simulation anyway (:func:`free_cycles`)."""
    fps = [q.footprint() for q in pols]
    stored = sum(q.usage().total for q in pols) // pols[0].ctx.bytes_per_token
    entries = sum(fp.entries for fp in fps)
    pols.clear()
    if collect:
        free_cycles()
    if len(fps) == 1 and fps[0].duplicates is not None:
        dup = fps[0].duplicates                 # (known without the runs: a policy told, prefix_twin)
    elif any(fp.runs is None for fp in fps):
        dup = None
    else:
        dup = duplicate_tokens(join_runs([fp.runs for fp in fps]), min_match)
    if collect:
        del fps
        release_freed()    # (the count's freed arrays, before the summary's columns stack on them)
    return {"registry_entries": entries, "stored_tokens": int(stored), "duplicate_stored_tokens": dup}


def _concat(tables: list) -> pa.Table:
    """The policies' tables as one (their chunks kept)."""
    if len(tables) == 1:
        return tables[0]
    import pyarrow as pa

    return pa.concat_tables(tables)


def _hit(sim: _Sim) -> float:
    n = sim.sums[1] if sim.sums is not None else int(sim.rows["prompt_tokens"].sum())
    return sim.reused / n if n else 0.0


def _best(sims: dict[str, _Sim], bases: list[str]) -> str:
    """The baseline whose rows a replayed policy's ``prefix_*`` columns take: the most tokens reused, the first
    of ``bases`` of those."""
    return max(bases, key=lambda b: (sims[b].reused, -bases.index(b)))


def _best_only(sims: dict[str, _Sim], bases: list[str], keep_reuse: bool) -> None:
    """Once every baseline that is not replayed is simulated (the replayed policies next) and the best is among
    them: the other baselines' rows dropped (their sums are what the summary reads), and prefix's reuse per
    request (``keep_reuse``: block-hash, replayed, answers from it next). NOTE (memory): ~16 B per request each, not held under the
    replayed policies' state."""
    if not all(b in sims and sims[b].sums is not None for b in bases):
        return
    best = _best(sims, bases)
    for b in bases:
        if b != best:
            sims[b].rows = sims[b].rows.select(())
    if "prefix" in sims and not keep_reuse:
        sims["prefix"].reuse = None


def _invariant_observer(name: str, pols: list) -> Callable[[Any, int], None]:
    def check(event: Any, now: int) -> None:
        for k, q in enumerate(pols):
            q.usage().check(f"{name}[replica {k}] at {now} us after {event!r}")
    return check


def _stats(pols: list) -> dict[str, int]:
    out: dict[str, int] = {}
    for q in pols:
        for k, v in q.stats.as_dict().items():
            out[k] = out.get(k, 0) + int(v)
    return out


def _json(obj: Any) -> Any:
    if isinstance(obj, float) and math.isinf(obj):
        return None
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)
