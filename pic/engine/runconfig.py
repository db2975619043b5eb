"""Reproducible runs: replay settings from a config file (TOML, YAML, or a run's own ``config.json``) with
command-line overrides on top, and the provenance every run records (pic version, trace content digest,
the exact command). ``pic replay --config RUN/config.json -o RUN2`` replays RUN again, byte for byte.

A user config file uses the command-line names (``policy``, ``capacity``, ``limit``, ``set``, dashes or
underscores) or the ``ReplayConfig`` field names; ``config.json`` is recognised by its ``replay`` section.
Precedence: defaults < file < options given on the command line (policy options and cost factors merge
key by key). Unknown keys fail before any work, naming the file and suggesting the closest key.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from pic.engine.config import (
    ReplayConfig,
    coerce_overrides,
    parse_percentiles,
    parse_rate,
    parse_size,
    parse_slo,
)

CONFIG_SUFFIXES = {".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".json": "json"}
#: command-line spellings accepted in files -> ReplayConfig field
ALIASES = {"policy": "policies", "capacity": "capacity_bytes", "limit": "max_requests", "set": "set",
           "sets": "set", "baseline": "baselines"}
#: keys a file may hold besides ReplayConfig fields (where the trace is; provenance of a config.json)
FILE_KEYS = ("trace",)
#: keys of a ``pic sweep`` config besides the replay settings
SWEEP_KEYS = ("traces", "models", "capacities", "jobs", "backend", "address", "force")


# ---- Public API -----------------------------------------------------------------------------------

def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The mapping in a ``.toml``, ``.yaml``/``.yml`` or ``.json`` file; ``ValueError`` naming file and line."""
    p = Path(path)
    kind = CONFIG_SUFFIXES.get(p.suffix.lower())
    if kind is None:
        raise ValueError(f"{p}: config file must end in {', '.join(CONFIG_SUFFIXES)}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: not valid UTF-8 (byte {e.start})") from None
    try:
        obj = _parse(p, kind, text)
    except RecursionError:
        raise ValueError(f"{p}: nested too deeply to read") from None
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise ValueError(f"{p}: expected a mapping of settings, got {type(obj).__name__}")
    return obj


def file_settings(raw: dict[str, Any], source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(ReplayConfig values, extras)`` from a parsed config file. Extras: ``trace`` (path or None) and,
    for a run's config.json, ``trace_sha256`` (the content digest the run recorded)."""
    if isinstance(raw.get("replay"), dict):                 # a run's config.json
        values = dict(raw["replay"])
        given, absolute = raw.get("trace"), raw.get("trace_path")
        # the path as the run was given it (so summary.json names it alike), else the absolute one
        trace = given if given and Path(given).exists() else (absolute or given)
        return normalize(values, source), {"trace": trace, "trace_sha256": raw.get("trace_sha256")}
    values = {}
    extras: dict[str, Any] = {"trace": None, "trace_sha256": None}
    for key, v in raw.items():
        k = str(key).replace("-", "_")
        if k in FILE_KEYS:
            extras[k] = None if v is None else str(v)
        else:
            values[k] = v
    return normalize(values, source), extras


def normalize(values: dict[str, Any], source: str) -> dict[str, Any]:
    """File or command-line values (any spelling, text or typed) -> ReplayConfig keyword arguments.

    Raises ``ValueError`` prefixed with ``source`` for an unknown key or a value of the wrong type."""
    fields = {f.name for f in dataclasses.fields(ReplayConfig)}
    out: dict[str, Any] = {}
    for key, v in values.items():
        k = ALIASES.get(str(key).replace("-", "_"), str(key).replace("-", "_"))
        if k == "set":
            for scope, opts in _sets(v, source).items():
                target = out.setdefault("cost", {}) if scope == "cost" else out.setdefault(
                    "policy_options", {}).setdefault(scope, {})
                target.update(opts)
            continue
        if k not in fields:
            known = sorted(fields | set(ALIASES) | set(FILE_KEYS))
            close = difflib.get_close_matches(k, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{source}: unknown setting {key!r}{hint}")
        try:
            out[k] = _value(k, v)
        except ValueError as e:
            raise ValueError(f"{source}: {e}" if source else str(e)) from None
        if k in ("policy_options", "cost") and not isinstance(out[k], dict):
            raise ValueError(f"{source + ': ' if source else ''}{k}: expected a table of options")
    return out


def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``; ``policy_options`` (per policy) and ``cost`` merge key by key."""
    out = {**base, **top}
    if "cost" in base and "cost" in top:
        out["cost"] = {**base["cost"], **top["cost"]}
    if "policy_options" in base and "policy_options" in top:
        po = {p: dict(o) for p, o in base["policy_options"].items()}
        for p, o in top["policy_options"].items():
            po.setdefault(p, {}).update(o)
        out["policy_options"] = po
    return out


def replay_config(file_values: dict[str, Any], overrides: dict[str, Any]) -> ReplayConfig:
    """The ReplayConfig of defaults < ``file_values`` < ``overrides`` (both already :func:`normalize`\\ d)."""
    values = merge(file_values, overrides)
    return ReplayConfig(**values)


_FEED = 1 << 20          # values widened at a time (trace_sha256)


def trace_sha256(trace: Any) -> str:
    """sha256 of everything in a trace that a replay reads: segment tokens, kinds and ids, and per request
    its id, session, agent, arrival, output tokens and segment ids (not the Parquet encoding)."""
    h = hashlib.sha256(b"pic-trace-content/1")

    def feed(arr: Any, dt: str) -> None:
        # NOTE (memory): the array's own buffer, not a .tobytes() copy (at chat 10^6 the tokens' copy, 1.7 GB
        # while the last simulation's state was still alive, was the whole run's peak RSS); same bytes
        if np.dtype(arr.dtype) != np.dtype(dt):
            # NOTE (memory): a narrower array (uint16 tokens: traces.content.narrow_tokens) widened a slice at a
            # time: the same bytes as the whole array's, without its int32 copy (chat 10^6: 1.7 GB)
            for lo in range(0, arr.shape[0], _FEED):
                h.update(memoryview(np.ascontiguousarray(arr[lo:lo + _FEED], dt)).cast("B"))
            return
        a = np.ascontiguousarray(arr, dt)
        h.update(memoryview(a).cast("B"))

    seg = trace.segments
    for arr, dt in ((seg.ids, "<u8"), (seg.kinds, "u1"), (seg.offsets, "<i8"), (seg.tokens, "<i4")):
        feed(arr, dt)
    order = np.argsort(trace.column("request_id"), kind="stable")     # (request ids are unique)
    for col, dt in (("request_id", "<i8"), ("arrival_us", "<i8"), ("output_tokens", "<i8")):
        feed(trace.column(col)[order], dt)
    counts, ids = trace.segment_lists()
    starts = np.zeros(counts.shape[0] + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    c = counts[order]
    feed(c, "<i8")
    feed(ids[np.repeat(starts[:-1][order] - (np.cumsum(c) - c), c) + np.arange(int(c.sum()))], "<u8")
    for col in ("session_id", "agent_id"):
        full = trace.strings(col)
        vals = [full[i] for i in order.tolist()]
        if None in vals:        # a null id (allowed: no session / no agent) hashed apart from any string
            h.update(b"nulls:" + np.array([v is None for v in vals], bool).tobytes())
            vals = ["" if v is None else v for v in vals]
        h.update("\x00".join(vals).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def provenance(trace: Any, trace_path: str | os.PathLike | None = None, command: str | None = None) -> dict[str, Any]:
    """What config.json records so a run can be reproduced and checked: pic version, the trace's path
    (absolute) and content digest, and the exact command line (None from the Python API)."""
    from pic import __version__

    return {"pic_version": __version__,
            "trace_path": str(Path(trace_path).resolve()) if trace_path is not None else None,
            "trace_sha256": trace_sha256(trace), "command": command}


# ---- Internal helpers -----------------------------------------------------------------------------

_HINTS = {f.name: f.type for f in dataclasses.fields(ReplayConfig)}
_TYPES: dict[Any, tuple[type, ...]] = {"int": (int,), "bool": (bool,), "float": (int, float), "str": (str,),
                                       "int | None": (int,), "str | None": (str,)}


def _value(k: str, v: Any) -> Any:
    if k in ("policies", "baselines"):
        items = v.split(",") if isinstance(v, str) else v
        if not isinstance(items, list | tuple) or not all(isinstance(x, str) for x in items):
            raise ValueError(f"{'policy' if k == 'policies' else 'baseline'}: expected a comma-separated string "
                             "or a list of names")
        return tuple(x.strip() for x in items if x.strip())
    if k == "capacity_bytes":
        if v is None:
            return math.inf
        if isinstance(v, bool):
            raise ValueError(f"capacity: expected a size such as 8GiB, got {v!r}")
        return parse_size(str(v)) if isinstance(v, str) else parse_size(repr(float(v)))
    if k == "rate":
        return parse_rate(v)
    if k == "percentiles":
        return parse_percentiles(v if isinstance(v, str) else list(v))
    if k == "slo":
        return parse_slo(v)
    if k in ("policy_options", "cost"):
        if not isinstance(v, dict):
            raise ValueError(f"{k}: expected a table of options, got {type(v).__name__}")
        if k == "policy_options":
            bad = [p for p, o in v.items() if not isinstance(o, dict)]
            if bad:
                raise ValueError(f"policy_options.{bad[0]}: expected a table of options")
            return {str(p): {str(kk).replace("-", "_"): vv for kk, vv in o.items()} for p, o in v.items()}
        return {str(kk).replace("-", "_"): vv for kk, vv in v.items()}
    hint = _HINTS.get(k)
    if not isinstance(v, str) and isinstance(v, _TYPES.get(hint, ())) and not (hint is not bool and isinstance(v, bool)):
        return v   # already typed (a command-line option, a YAML/TOML number): ReplayConfig checks its range
    return coerce_overrides(ReplayConfig, {k: v}, "")[k]


def _sets(v: Any, source: str) -> dict[str, dict[str, Any]]:
    """``set`` in a file: a list of ``POLICY.KEY=VALUE`` strings, or a table ``{policy: {key: value}}`` /
    ``{"policy.key": value}``."""
    out: dict[str, dict[str, Any]] = {}
    if isinstance(v, str):
        v = [v]
    if isinstance(v, list | tuple):
        for item in v:
            if not isinstance(item, str) or "=" not in item or "." not in item.split("=", 1)[0]:
                raise ValueError(f"{source}: set: expected POLICY.KEY=VALUE, got {item!r}")
            key, value = item.split("=", 1)
            scope, name = key.split(".", 1)
            out.setdefault(scope.strip(), {})[name.strip().replace("-", "_")] = value.strip()
        return out
    if not isinstance(v, dict):
        raise ValueError(f"{source}: set: expected a table or a list of POLICY.KEY=VALUE")
    for key, value in v.items():
        if isinstance(value, dict):
            out.setdefault(str(key), {}).update({str(k).replace("-", "_"): x for k, x in value.items()})
        elif "." in str(key):
            scope, name = str(key).split(".", 1)
            out.setdefault(scope, {})[name.replace("-", "_")] = value
        else:
            raise ValueError(f"{source}: set.{key}: expected POLICY.KEY = VALUE or a table per policy")
    return out


def _parse(p: Path, kind: str, text: str) -> Any:
    """The object in ``text`` (``kind``: toml, yaml or json); ``ValueError`` naming file and line."""
    if kind == "toml":
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{p}: invalid TOML: {e}") from None
    elif kind == "yaml":
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f":{mark.line + 1}" if mark is not None else ""
            raise ValueError(f"{p}{where}: invalid YAML: {getattr(e, 'problem', None) or e}") from None
    else:
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{e.lineno}: invalid JSON: {e.msg}") from None
        except ValueError as e:   # e.g. an integer of more than 4300 digits
            raise ValueError(f"{p}: invalid JSON: {str(e)[:80]}") from None
