"""Golden replays: the traces, the runs and the normalized expected record (shared by the test and regen).

Each :class:`GoldenTrace` is a small Parquet trace in ``tests/golden/data/`` made by the project's own
``traces.synth.synth`` (what ``pic synth`` runs) or ``traces.ingest.ingest`` (what ``pic ingest`` runs).
It is replayed with every registered policy, ``--verify`` on, at each of its capacities. The record
kept in ``tests/golden/expected/<name>.json`` is ``summary.json`` with the one nondeterministic field
(``wall_seconds``) dropped and the trace path reduced to its file name, plus the sha256 of
``requests.parquet`` and one short digest per (policy, column) of it, so a diff can name the policy and
column that changed. ``python -m tests.golden.regen`` is the only way to rewrite these files.
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pic.engine import policies as registry
from pic.engine.config import ReplayConfig, parse_size
from pic.engine.replay import replay, write_run
from pic.traces import synth
from pic.traces.ingest import ingest
from pic.traces.io import read_trace, write_trace

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
EXPECTED = HERE / "expected"
REGEN = "python -m tests.golden.regen"
FLOAT_REL_TOL = 1e-9   # summary floats; requests.parquet is compared by exact digest


@dataclass(frozen=True, slots=True)
class GoldenTrace:
    """One golden trace: how it is made and the capacities it is replayed at (``parse_size`` strings)."""

    name: str
    make: Callable[[Path], None]          # writes the trace to the given path
    capacities: tuple[str, ...]
    note: str
    serving: tuple[tuple[str, Any], ...] = ()   # ReplayConfig overrides (replicas, router, closed_loop)

    def cli_args(self, capacity: str) -> list[str]:
        """``pic replay`` arguments (after the trace) that reproduce the run at ``capacity``."""
        args = ["--policy", ",".join(registry.names()), "--capacity", capacity, "--verify"]
        for key, value in self.serving:
            flag = "--" + key.replace("_", "-")
            args += [flag] if value is True else [flag, str(value)]
        return args

    @property
    def path(self) -> Path:
        return DATA / f"{self.name}.parquet"

    @property
    def expected_path(self) -> Path:
        return EXPECTED / f"{self.name}.json"


def _synth(scenario: str, num_requests: int, *, markers: bool = False, **knobs: Any) -> Callable[[Path], None]:
    def make(out: Path) -> None:
        write_trace(synth.synth(scenario, num_requests, 0, markers=markers, **knobs), out)
    return make


def _ingest_chat(out: Path) -> None:
    ingest([DATA / "chat.jsonl"], out, fmt="openai-chat")


TRACES: tuple[GoldenTrace, ...] = (
    GoldenTrace("early-variation", _synth("early-variation", 40, pool_size=8, doc_max=800, tools_max=1500,
                                          system_max=1200),
                ("inf", "256MiB"),
                "pic synth -s early-variation -n 40 --seed 0 --pool-size 8 --set doc_max=800 "
                "--set tools_max=1500 --set system_max=1200 -o tests/golden/data/early-variation.parquet"),
    GoldenTrace("rag-reorder-markers", _synth("rag-reorder", 40, markers=True, pool_size=24, doc_max=500,
                                              docs_max=5),
                ("inf", "128MiB"),
                "pic synth -s rag-reorder -n 40 --seed 0 --markers --pool-size 24 --set doc_max=500 "
                "--set docs_max=5 -o tests/golden/data/rag-reorder-markers.parquet"),
    GoldenTrace("chat-openai", _ingest_chat, ("inf", "64MiB"),
                "pic ingest tests/golden/data/chat.jsonl --format openai-chat -o tests/golden/data/chat-openai.parquet"),
    GoldenTrace("multi-agent", _synth("multi-agent", 40), ("inf", "384MiB"),
                "pic synth -s multi-agent -n 40 --seed 0 -o tests/golden/data/multi-agent.parquet",
                (("replicas", 2), ("router", "cache-aware"), ("closed_loop", True))),
)


# ---- Runs -----------------------------------------------------------------------------------------
def replay_config(capacity: str, **serving: Any) -> ReplayConfig:
    """Every registered policy, ``--verify`` (token checks + usage invariants after every event)."""
    return ReplayConfig(policies=tuple(registry.names()), capacity_bytes=parse_size(capacity),
                        verify=True, check_invariants=True, **serving)


def run(trace: GoldenTrace, capacity: str) -> tuple[dict[str, Any], bytes]:
    """Replay ``trace`` and write a run dir as ``pic replay`` does; ``(summary.json dict, requests.parquet
    bytes)``."""
    result = replay(read_trace(trace.path), replay_config(capacity, **dict(trace.serving)))
    with tempfile.TemporaryDirectory(prefix="pic-golden-") as tmp:
        run_dir = write_run(result, Path(tmp) / "run")
        summary = json.loads((run_dir / "summary.json").read_text())
        return summary, (run_dir / "requests.parquet").read_bytes()


def column_digests(requests_parquet: bytes) -> dict[str, dict[str, str]]:
    """``{policy: {column: sha256[:16]}}`` of requests.parquet (values in request order, exact bits)."""
    import io

    df = pl.read_parquet(io.BytesIO(requests_parquet))
    out: dict[str, dict[str, str]] = {}
    for policy in sorted(df["policy"].unique().to_list()):
        part = df.filter(pl.col("policy") == policy).sort("request_id")
        out[policy] = {c: _digest(part[c]) for c in part.columns if c != "policy"}
    return out


def record(summary: dict[str, Any], requests_parquet: bytes) -> dict[str, Any]:
    """The normalized, deterministic record of one run (what the expected JSON stores per capacity)."""
    out = json.loads(json.dumps(summary))
    out["trace"] = Path(out["trace"]).name
    for stats in out["policies"].values():
        stats.pop("wall_seconds", None)
    out["requests_sha256"] = hashlib.sha256(requests_parquet).hexdigest()
    out["request_columns"] = column_digests(requests_parquet)
    return out


def expected_document(trace: GoldenTrace) -> dict[str, Any]:
    """The full expected file for ``trace`` (trace digest + one record per capacity), computed now."""
    runs = {cap: record(*run(trace, cap)) for cap in trace.capacities}
    return {"trace": trace.path.name, "made_by": trace.note, "trace_sha256": file_sha256(trace.path),
            "policies": registry.names(), "runs": runs}


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- Diff -----------------------------------------------------------------------------------------
def diff(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Readable differences ``path: expected X, got Y`` (floats within FLOAT_REL_TOL count as equal)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        lines = []
        for key in sorted(set(expected) | set(actual), key=str):
            sub = f"{where}.{key}" if where else str(key)
            if key not in actual:
                lines.append(f"{sub}: missing now (expected {_short(expected[key])})")
            elif key not in expected:
                lines.append(f"{sub}: new (not in the expected file): {_short(actual[key])}")
            else:
                lines.extend(diff(expected[key], actual[key], sub))
        return lines
    if _is_num(expected) and _is_num(actual) and (isinstance(expected, float) or isinstance(actual, float)):
        if math.isclose(expected, actual, rel_tol=FLOAT_REL_TOL, abs_tol=1e-12):
            return []
    elif expected == actual:
        return []
    return [f"{where}: expected {_short(expected)}, got {_short(actual)}"]


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _short(x: Any) -> str:
    text = json.dumps(x, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _digest(col: pl.Series) -> str:
    if col.dtype in (pl.String, pl.Utf8):
        data = "\x00".join(col.to_list()).encode()
    else:
        data = col.to_numpy().tobytes()
    return hashlib.sha256(data).hexdigest()[:16]
