"""Plan log: every request's Plan, in the order the replay admitted them, for the GPU executor.

``record_plans(trace, config, policy)`` replays the trace through one policy (the same ServingModel as
``pic replay``, so the Plans are the ones the replay priced) and keeps, per request, its tokens, its Plan,
the replica it ran on, the replay's TTFT and the cost model's price of the Plan run alone. ``PlanLog.write``
/ ``read_plan_log`` store it as ``plans.parquet`` through pyarrow only, so a GPU machine without polars can
execute it. ``resolve_sources`` says, for a request's reused spans, which earlier request holds those tokens
at the span's source position (the executor reads that request's KV). Pure Python + numpy; no torch.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pic.engine.plan import Action, Plan, Span

FORMAT = "pic-plans/1"
_FLOATS = ("sim_ttft_s", "predicted_s", "predicted_joules", "predicted_full_s", "predicted_full_joules", "roofline_s",
           "predicted_hbm_bytes", "predicted_full_hbm_bytes")
_NAN_IF_ABSENT = ("predicted_hbm_bytes", "predicted_full_hbm_bytes")   # logs written before they existed


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request of the log. Times in seconds; ``predicted_*`` = the cost model's price of the Plan
    executed alone (no queueing), ``sim_ttft_s`` = the replay's TTFT including queueing."""

    order: int                 # admission order in the replay (0, 1, ...)
    request_id: int
    replica: int
    tokens: np.ndarray         # int32 [N]
    plan: Plan
    sim_ttft_s: float = 0.0
    predicted_s: float = 0.0
    predicted_joules: float = 0.0
    predicted_full_s: float = 0.0
    predicted_full_joules: float = 0.0
    roofline_s: float = 0.0    # the uncalibrated (roofline) price of the Plan, = predicted_s without a profile
    predicted_hbm_bytes: float = float("nan")       # the cost model's HBM bytes of the Plan / of the full prefill
    predicted_full_hbm_bytes: float = float("nan")

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.shape[0])


@dataclass(frozen=True, slots=True)
class Source:
    """Tokens ``[start, end)`` of a request are read from request ``provider`` (log index) at
    ``provider_pos`` (its KV was produced there): δ = start − provider_pos."""

    start: int
    end: int
    provider: int
    provider_pos: int

    @property
    def delta(self) -> int:
        return self.start - self.provider_pos


@dataclass(frozen=True)
class PlanLog:
    """All Plans of one (trace, policy, model) replay, in admission order."""

    requests: list[PlannedRequest]
    meta: dict[str, Any] = field(default_factory=dict)   # trace, policy, model, gpu, replay config

    def __len__(self) -> int:
        return len(self.requests)

    # ---- Public API -------------------------------------------------------------------------------
    def sample(self, k: int | None, seed: int = 0, max_tokens: int | None = None,
               min_reuse: float = 0.0) -> list[int]:
        """Log indices of a seeded sample of ``k`` requests (all when ``k`` is None), in admission order.
        ``max_tokens`` / ``min_reuse`` restrict the pool first (prompt length, reused fraction)."""
        pool = [i for i, r in enumerate(self.requests)
                if (max_tokens is None or r.num_tokens <= max_tokens)
                and r.plan.num_reused >= min_reuse * r.num_tokens]
        if k is None or k >= len(pool):
            return pool
        rng = np.random.default_rng(seed)
        return sorted(rng.choice(pool, size=k, replace=False).tolist())

    def resolve_sources(self, i: int) -> list[Source]:
        """Where request ``i``'s reused tokens come from: earlier requests of the same replica holding the
        same tokens at the span's source position. A span is split where no single earlier request holds
        all of it (adjacent chunks with equal δ merge into one span but may come from different producers).
        Raises ValueError when no earlier request holds a token the Plan reuses (a false hit)."""
        req = self.requests[i]
        earlier = [j for j in range(i) if self.requests[j].replica == req.replica]
        out: list[Source] = []
        for s in req.plan.spans:
            if s.action == Action.RECOMPUTE:
                continue
            src = s.start if s.action == Action.REUSE else s.source_pos
            pos = s.start
            while pos < s.end:
                want = req.tokens[pos:s.end]
                best, best_len = -1, 0
                for j in reversed(earlier):   # most recent first: its KV is the freshest copy
                    have = self.requests[j].tokens[src + (pos - s.start):]
                    n = min(have.shape[0], want.shape[0])
                    if n <= best_len:
                        continue
                    neq = np.flatnonzero(have[:n] != want[:n])
                    m = int(neq[0]) if neq.size else n
                    if m > best_len:
                        best, best_len = j, m
                        if m == want.shape[0]:
                            break
                if best < 0:
                    raise ValueError(f"request {req.request_id}: no earlier request on replica {req.replica} "
                                     f"holds tokens [{pos}, {s.end}) at position {src + pos - s.start}")
                out.append(Source(pos, pos + best_len, best, src + (pos - s.start)))
                pos += best_len
        return out

    def write(self, path: str | os.PathLike) -> Path:
        """Write ``plans.parquet`` atomically (pyarrow only; output checks are the caller's)."""
        from pic.traces.outputs import atomic_path

        path = Path(path)
        with atomic_path(path) as tmp:
            self.write_to(tmp)
        return path

    def write_to(self, path: str | os.PathLike) -> None:
        """Write the log to ``path`` as is (no temp name)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        rs = self.requests
        spans = [r.plan.spans for r in rs]
        cols = {
            "order": pa.array([r.order for r in rs], pa.int32()),
            "request_id": pa.array([r.request_id for r in rs], pa.int64()),
            "replica": pa.array([r.replica for r in rs], pa.int32()),
            "tokens": pa.array([r.tokens for r in rs], pa.list_(pa.int32())),
            "span_start": pa.array([[s.start for s in sp] for sp in spans], pa.list_(pa.int32())),
            "span_end": pa.array([[s.end for s in sp] for sp in spans], pa.list_(pa.int32())),
            "span_action": pa.array([[int(s.action) for s in sp] for sp in spans], pa.list_(pa.int8())),
            "span_source": pa.array([[s.source_pos for s in sp] for sp in spans], pa.list_(pa.int32())),
            "span_tier": pa.array([[int(s.tier) for s in sp] for sp in spans], pa.list_(pa.int8())),
            "correction_recompute": pa.array([r.plan.correction.recompute_tokens for r in rs], pa.int64()),
        }
        for name in _FLOATS:
            cols[name] = pa.array([getattr(r, name) for r in rs], pa.float64())
        table = pa.table(cols).replace_schema_metadata(
            {"pic_format": FORMAT, "pic_meta": json.dumps(self.meta, default=str)})
        pq.write_table(table, path, compression="zstd")


def read_plan_log(path: str | os.PathLike) -> PlanLog:
    """Read a ``plans.parquet`` written by :meth:`PlanLog.write` (errors name the file and field)."""
    import pyarrow.parquet as pq

    from pic.engine.plan import Correction, Tier

    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read plan log: {e}") from None
    meta = table.schema.metadata or {}
    if meta.get(b"pic_format", b"").decode() != FORMAT:
        raise ValueError(f"{path}: not a pic plan log (pic_format {meta.get(b'pic_format')!r}, expected {FORMAT})")
    d = table.to_pydict()
    out = []
    for k in range(table.num_rows):
        try:
            spans = tuple(Span(a, b, Action(c), s, Tier(t)) for a, b, c, s, t in zip(
                d["span_start"][k], d["span_end"][k], d["span_action"][k], d["span_source"][k], d["span_tier"][k],
                strict=True))
            tokens = np.asarray(d["tokens"][k], dtype=np.int32)
            plan = Plan(len(tokens), spans, Correction(recompute_tokens=int(d["correction_recompute"][k])))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}: row {k}: plan: {e}") from None
        out.append(PlannedRequest(int(d["order"][k]), int(d["request_id"][k]), int(d["replica"][k]), tokens, plan,
                                  *(float(d[c][k]) if c in d else (math.nan if c in _NAN_IF_ABSENT else 0.0)
                                    for c in _FLOATS)))
    return PlanLog(out, json.loads(meta.get(b"pic_meta", b"{}")))


def record_plans(trace: Any, config: Any, policy: str,
                 progress: Callable[[int, int], None] | None = None, cost: Any = None) -> PlanLog:
    """Replay ``trace`` through ``policy`` with ``config`` (a ReplayConfig) and log every admitted Plan.

    ``cost`` (a CostModel) prices each Plan alone; default: the config's model/GPU roofline."""
    import dataclasses

    from pic.engine import policies as registry
    from pic.engine.policies.base import PolicyContext
    from pic.engine.replay import check_config, workload_from_trace
    from pic.engine.serving import ServingModel

    opts = {policy: config.policy_options[policy]} if policy in config.policy_options else {}
    config = dataclasses.replace(config, policies=(policy,), policy_options=opts)
    model, gpu, roofline, _ = check_config(config)
    cost = roofline if cost is None else cost
    work = workload_from_trace(trace, config.max_requests)
    ctx = PolicyContext(config.capacity_bytes, model.kv_bytes_per_token, model, config.seed, config.verify)
    admitted: list[tuple[int, int, np.ndarray, Plan]] = []
    pols = [_Recorder(registry.build(policy, ctx, opts.get(policy)), k, admitted) for k in range(config.replicas)]
    sm = ServingModel(work, pols, cost, token_budget=config.token_budget, router=config.router,
                      closed_loop=config.closed_loop, progress=progress)
    reqs = {r.request_id: r for r in sm.run()}
    seen = {rid for _, rid, _, _ in admitted}
    for r in reqs.values():   # requests the policy could not admit ran uncached (Plan.recompute_all)
        if r.uncached and r.request_id not in seen:
            admitted.append((r.replica, r.request_id, None, Plan.recompute_all(r.num_prompt_tokens)))
    admitted.sort(key=lambda a: reqs[a[1]].start_us)
    out = []
    full_memo: dict[int, Any] = {}
    for order, (replica, rid, tokens, plan) in enumerate(admitted):
        r = reqs[rid]
        if tokens is None:
            tokens = work.view(r.idx).tokens
        pc = cost.prefill(plan)
        full = full_memo.get(plan.num_tokens) or full_memo.setdefault(
            plan.num_tokens, cost.prefill(Plan.recompute_all(plan.num_tokens)))
        roof = pc.time_s if cost.profile is None else roofline.prefill(plan).time_s
        out.append(PlannedRequest(order, rid, replica, np.array(tokens, dtype=np.int32), plan,
                                  (r.first_token_us - r.arrival_us) / 1e6, pc.time_s, pc.joules,
                                  full.time_s, full.joules, roof, pc.hbm_bytes, full.hbm_bytes))
    meta = {"trace": getattr(trace, "source", ""), "policy": policy, "model": model.name, "gpu": gpu.name,
            "replay": config.to_dict(), "policy_config": pols[0].describe(),
            "cost": {"profile": None if cost.profile is None else cost.profile.source}}
    return PlanLog(out, meta)


class _Recorder:
    """A policy seen through a window: every ``admit`` that succeeds is logged with its Plan."""

    def __init__(self, inner: Any, replica: int, log: list) -> None:
        self._inner, self._replica, self._log = inner, replica, log

    def admit(self, req: Any, plan: Plan, now_us: int) -> bool:
        ok = self._inner.admit(req, plan, now_us)
        if ok:
            self._log.append((self._replica, req.request_id, req.tokens, plan))
        return ok

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def is_plan_log(path: str | os.PathLike) -> bool:
    """True if ``path`` is a ``plans.parquet`` written by :meth:`PlanLog.write`."""
    try:
        import pyarrow.parquet as pq

        meta = pq.read_schema(path).metadata or {}
    except Exception:   # noqa: BLE001 - pyarrow raises several types on non-Parquet files
        return False
    return meta.get(b"pic_format", b"").decode(errors="replace") == FORMAT


def run_dir_config(run_dir: str | os.PathLike) -> tuple[Path, Any]:
    """(trace path, ReplayConfig) a ``pic replay`` run dir was produced with (from its config.json)."""
    import dataclasses
    import math

    from pic.engine.config import ReplayConfig

    run_dir = Path(run_dir)
    path = run_dir / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
        rc = cfg["replay"]
        trace = Path(cfg["trace"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a pic replay run dir config ({type(e).__name__}: {e})") from None
    fields = {f.name for f in dataclasses.fields(ReplayConfig)}
    kw = {k: v for k, v in rc.items() if k in fields}
    kw["policies"] = tuple(kw.get("policies", ()))
    if kw.get("capacity_bytes") is None:
        kw["capacity_bytes"] = math.inf
    try:
        config = ReplayConfig(**kw)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: replay: {e}") from None
    if not trace.exists():
        raise ValueError(f"{path}: trace {str(trace)!r} of this run is not found here; pass the trace file instead")
    return trace, config
