"""pic — how much prefill position-independent KV caching saves on your traffic, and what it costs.

One import namespace: ``pic.traces`` (schema, readers, Parquet I/O), ``pic.engine`` (simulator, policies,
cost model, report data), ``pic.kernels`` (torch + Triton; needs the ``gpu`` extra), ``pic.cli``.

The names below are loaded on first use, so ``import pic`` stays light (no polars, no torch)::

    import pic
    trace = pic.read_trace("traces/samples/rag-reorder.parquet")
    result = pic.replay(trace, pic.ReplayConfig(policies=("prefix", "irminsul")))
    result.summary["policies"]["irminsul"]["token_hit_rate"]
"""

from __future__ import annotations

from typing import Any

__version__ = "0.2.0"

#: public name -> (module, attribute), imported lazily (docs/python-api.md documents each)
_LAZY = {
    "read_trace": ("pic.engine.replay", "read_trace_file"),
    "write_trace": ("pic.traces.io", "write_trace"),
    "ingest": ("pic.traces.ingest", "ingest"),
    "synth": ("pic.traces.synth", "synth"),
    "trace_stats": ("pic.traces.stats", "trace_stats"),
    "replay": ("pic.engine.replay", "replay"),
    "write_run": ("pic.engine.replay", "write_run"),
    "ReplayConfig": ("pic.engine.config", "ReplayConfig"),
    "RunResult": ("pic.engine.replay", "RunResult"),
    "load_runs": ("pic.engine.report", "load_runs"),
    "make_report": ("pic.engine.report", "make_report"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'pic' has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
