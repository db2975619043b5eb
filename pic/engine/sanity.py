"""Warnings about a replay whose numbers would mislead: the model or the cache does not fit the GPU, the
run is saturated (TTFT then measures the queue, not the cache), or a policy loses to the exact-prefix cache
for a reason one of its options addresses. Each warning is a dict
``{"code", "message"}`` (plus ``"policy"`` for per-policy ones) in ``summary.json["warnings"]``; the CLI
prints them, the report shows them. Nothing here stops a run: the simulation stays well defined, only its
reading changes. Thresholds and reasoning: docs/metrics.md ("Warnings").
"""

from __future__ import annotations

import math
from typing import Any

#: a run is saturated when the replicas were busy at least this share of the replay ...
SATURATED_BUSY = 0.9
#: ... and the median request waited in the queue longer than this many times its own prefill
SATURATED_QUEUE_RATIO = 1.0
_GIB = 2.0**30


def _gib(n: float) -> str:
    return f"{n / _GIB:,.1f} GiB"


def fit_warnings(model: Any, gpu: Any, capacity_bytes: float) -> list[dict[str, str]]:
    """Before any work: the weights alone, or weights + the cache capacity of one replica, exceed one GPU's HBM."""
    weights = float(model.total_params * model.dtype_bytes)
    hbm = float(gpu.hbm_capacity_bytes)
    out = []
    if weights > hbm:
        need = math.ceil(weights / hbm)
        out.append({"code": "model-does-not-fit", "message": (
            f"{model.name}'s weights ({_gib(weights)}) exceed one {gpu.name}'s HBM ({_gib(hbm)}): a replica "
            f"needs at least {need} GPUs; the cost model still times one GPU's roofline, so TTFT and energy "
            f"are those of an idealized single device")})
    elif math.isfinite(capacity_bytes) and weights + capacity_bytes > hbm:
        out.append({"code": "kv-exceeds-hbm", "message": (
            f"cache capacity {_gib(capacity_bytes)} per replica + {model.name}'s weights ({_gib(weights)}) "
            f"exceed one {gpu.name}'s HBM ({_gib(hbm)}): the cache would spill to host memory, but the cost "
            f"model reads every hit at HBM speed")})
    return out


def resident_warnings(model: Any, gpu: Any, capacity_bytes: float, replicas: int,
                      peak_by_policy: dict[str, float]) -> list[dict[str, str]]:
    """After the run, for an unbounded cache: the peak resident KV of a replica did not fit beside the weights."""
    if math.isfinite(capacity_bytes):
        return []
    weights = float(model.total_params * model.dtype_bytes)
    hbm = float(gpu.hbm_capacity_bytes)
    if weights > hbm:
        return []   # already said by fit_warnings
    out = []
    for policy, peak in peak_by_policy.items():
        per_replica = peak / replicas
        if weights + per_replica > hbm:
            out.append({"code": "kv-exceeds-hbm", "policy": policy, "message": (
                f"{policy}: unbounded cache held up to {_gib(peak)} of KV"
                + (f" over {replicas} replicas (~{_gib(per_replica)} each)" if replicas > 1 else "")
                + f"; with the weights ({_gib(weights)}) that exceeds one {gpu.name}'s HBM ({_gib(hbm)}): "
                "set --capacity to what fits to see hit rates a real deployment would get")})
    return out


def saturation_warning(policy: str, s: dict[str, Any], replicas: int) -> dict[str, str] | None:
    """The replicas were busy almost all the time and the median request queued longer than its prefill.

    ``s`` is the policy's summary entry (``busy_seconds``, ``sim_seconds``, ``queue_p50_s``,
    ``prefill_p50_s``, ``ttft_p50_s``)."""
    span = s.get("sim_seconds") or 0.0
    if span <= 0:
        return None
    busy = s["busy_seconds"] / (span * replicas)
    queue, prefill = s["queue_p50_s"], s.get("prefill_p50_s") or 0.0
    if busy < SATURATED_BUSY or queue <= max(SATURATED_QUEUE_RATIO * prefill, 1e-3):
        return None
    return {"code": "saturated", "policy": policy, "message": (
        f"{policy}: saturated — the {replicas} replica(s) were busy {busy:.0%} of the run and the median request "
        f"queued {queue * 1e3:,.0f} ms before a {prefill * 1e3:,.1f} ms prefill (TTFT p50 {s['ttft_p50_s'] * 1e3:,.0f} ms): "
        "the offered load exceeds what they serve, so TTFT measures the queue; slow the trace down "
        "(--time-scale 2, --rate R) or add --replicas")}


#: a policy "loses" to the best exact-prefix baseline when it spends at least this much more prefill energy
BELOW_PREFIX = 0.01


def below_prefix_warning(policy: str, s: dict[str, Any], config: dict[str, Any], capacity_bytes: float,
                         hybrid: bool) -> dict[str, str] | None:
    """``linearkv`` under a capacity spends more prefill energy than the best exact-prefix baseline while
    its stored chunks may displace prefix-stage content (``admission`` other than ``prefix-first``): name
    the option that protects the prefix stage. ``s`` is the policy's summary entry, ``config`` its
    resolved options, ``hybrid`` whether each chunk also holds a recurrent state."""
    saved = s.get("energy_saved_vs_prefix")
    if (policy != "linearkv" or math.isinf(capacity_bytes) or saved is None or saved > -BELOW_PREFIX
            or config.get("admission") == "prefix-first" or not config.get("prefix_stage", True)):
        return None
    what = "stored chunks and their recurrent states take" if hybrid else "stored chunks take"
    return {"code": "below-prefix", "policy": policy, "message": (
        f"{policy}: {-saved:.1%} more prefill energy than {s.get('baseline', 'the exact-prefix baseline')} at "
        f"{_gib(capacity_bytes)}: its {what} room the prefix stage's content needed; "
        "--set linearkv.admission=prefix-first evicts every chunk before prefix-stage content "
        "(docs/linearkv.md, 'Admission under a capacity')")}
