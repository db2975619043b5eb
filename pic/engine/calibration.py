"""Calibration profiles: measured prefill/decode times that replace the cost model's efficiency factors.

File format (JSON, written by ``pic calibrate --gpu``; documented in docs/cost-model.md)::

    {"format": "pic-calibration/1", "gpu": "h200", "model": "deepseek-v2-lite",
     "watts_busy": 612.0, "watts_idle": 84.0,
     "prefill": [[num_new, num_cached, seconds], ...],
     "decode":  [[num_seqs, context_tokens, seconds], ...],
     "prefill_rotated": [[num_new, num_cached, seconds], ...],          # optional
     "power": [[num_new, num_cached, watts], ...],                       # optional: board power by forward size
     "extend": {"tokens_per_program": 4, "head_groups": 1, "sm_count": 132, "decode_max_new": 32}}  # optional

Prefill time is interpolated piecewise-linearly in ``num_new`` within each measured ``num_cached`` row
group, then linearly across groups (linear extrapolation outside the grid). Decode time is a least-squares
line ``a + b * context_tokens`` per ``num_seqs`` group, with ``a`` and ``b`` interpolated linearly in
``num_seqs`` -- so decode time stays exactly affine in context, as the serving model needs.

A Plan with several RECOMPUTE runs is priced by ``plan_seconds``: with an ``extend`` block (profiles from
``pic calibrate`` since #11's fidelity fix) the forward is the measured c = 0 forward of its new tokens plus
the attention makespan of its sequences on the extend kernel (``pic.engine.attn_waves``, fitted to this
profile's own grid, ``prefill_rotated`` rows giving the cost of rotated keys); without it, one forward over
the equivalent cached length with the same query-key pairs.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pic.engine.attn_waves import ExtendFit, ExtendShape, Seq, fit_extend, makespan

FORMAT = "pic-calibration/1"


@dataclass(frozen=True, slots=True)
class CalibrationProfile:
    """Measured tables for one (gpu, model). Tables are tuples of (x, y, seconds) rows."""

    gpu: str = field(metadata={"help": "GpuSpec name the profile was measured on"})
    model: str = field(metadata={"help": "ModelSpec name the profile was measured with"})
    prefill: tuple[tuple[int, int, float], ...] = field(metadata={"help": "(num_new, num_cached, seconds) rows"})
    decode: tuple[tuple[int, int, float], ...] = field(metadata={"help": "(num_seqs, context_tokens, seconds) rows"})
    watts_busy: float = field(metadata={"help": "measured board power while busy, W"})
    watts_idle: float = field(metadata={"help": "measured board power while idle, W"})
    source: str = field(default="<memory>", metadata={"help": "file it was loaded from (for errors)"})
    prefill_rotated: tuple[tuple[int, int, float], ...] = field(default=(), metadata={
        "help": "(num_new, num_cached, seconds) rows whose cached pages are read rotated (δ != 0)"})
    extend: ExtendShape | None = field(default=None, metadata={"help": "attention layout facts (pic calibrate)"})
    power: tuple[tuple[int, int, float], ...] = field(default=(), metadata={
        "help": "(num_new, num_cached, watts) rows: board power of sustained forwards by size"})
    fit: ExtendFit | None = field(default=None, init=False, compare=False, repr=False)
    _groups: dict = field(default=None, init=False, compare=False, repr=False)   # prefill rows by num_cached

    def __post_init__(self) -> None:
        where = self.source
        if not self.gpu or not self.model:
            raise ValueError(f"{where}: gpu/model: must be non-empty names")
        if not (self.watts_busy > 0 and 0 <= self.watts_idle <= self.watts_busy):
            raise ValueError(f"{where}: watts_busy/watts_idle: need 0 <= idle <= busy and busy > 0")
        for table, min_x in (("prefill", 1), ("decode", 1), ("prefill_rotated", 1), ("power", 1)):
            rows = getattr(self, table)
            if not rows and table in ("prefill", "decode"):
                raise ValueError(f"{where}: {table}: needs at least one row")
            for i, (x, y, s) in enumerate(rows):
                if x < min_x or y < 0 or not (s > 0 and math.isfinite(s)):
                    raise ValueError(f"{where}: {table}[{i}]: need first >= 1, second >= 0, seconds > 0 "
                                     f"(got {[x, y, s]})")
        object.__setattr__(self, "_groups", _prefill_groups(self.prefill))
        for n, line in _decode_lines(self.decode).items():
            if line is None:
                raise ValueError(f"{where}: decode: num_seqs={n} needs rows at >= 2 distinct context_tokens")
        if self.extend is not None:
            e = self.extend
            if min(e.tokens_per_program, e.head_groups, e.sm_count) < 1 or e.decode_max_new < 0:
                raise ValueError(f"{where}: extend: tokens_per_program, head_groups, sm_count must be >= 1 and "
                                 f"decode_max_new >= 0")
            plain = {(n, c): s for n, c, s in self.prefill}
            rot = {(n, c): s for n, c, s in self.prefill_rotated}
            object.__setattr__(self, "fit", fit_extend(e, plain, rot, lambda n: self.prefill_seconds(n, 0)))

    # ---- Public API -------------------------------------------------------------------------------
    def prefill_seconds(self, num_new: int, num_cached: float) -> float:
        """Interpolated time to prefill ``num_new`` tokens after ``num_cached`` cached ones."""
        if num_new <= 0:
            return 0.0
        groups = self._groups
        cs = sorted(groups)
        if len(cs) == 1:
            return max(_interp_curve(groups[cs[0]], num_new), 0.0)
        j = min(max(bisect.bisect_right(cs, num_cached), 1), len(cs) - 1)
        c0, c1 = cs[j - 1], cs[j]
        t0, t1 = _interp_curve(groups[c0], num_new), _interp_curve(groups[c1], num_new)
        t = t0 + (t1 - t0) * (num_cached - c0) / (c1 - c0)
        if (num_cached > c1 and t1 < t0) or (num_cached < c0 and t0 > t1):
            t = t1 if num_cached > c1 else t0   # never extrapolate a decreasing trend
        return max(t, 0.0)

    def plan_seconds(self, seqs: Sequence[Seq]) -> float:
        """Seconds of one forward whose attention runs ``seqs`` = (new tokens, plain cached keys before them,
        rotated cached keys before them), one per RECOMPUTE run of a Plan (see the module docstring)."""
        num_new = sum(n for n, _, _ in seqs)
        if num_new <= 0:
            return 0.0
        ctx_pairs = sum(n * (p + r) for n, p, r in seqs)
        pairs = ctx_pairs + sum(n * (n + 1) / 2 for n, _, _ in seqs)
        c_eq = max((pairs - num_new * (num_new + 1) / 2) / num_new, 0.0)
        fit, shape = self.fit, self.extend
        if fit is None or shape is None:
            return self.prefill_seconds(num_new, c_eq)
        if num_new <= shape.decode_max_new:   # one-token sequences through the split-KV decode kernel
            t = self.prefill_seconds(num_new, c_eq)
            rot_pairs = sum(n * r for n, _, r in seqs)
            if rot_pairs and ctx_pairs:
                t0 = self.prefill_seconds(num_new, 0)
                t = t0 + (t - t0) * (1.0 + rot_pairs / ctx_pairs * (fit.decode_rotated_factor - 1.0))
            return max(t, 0.0)
        attn = makespan(seqs, shape, fit.slots, fit.rotated_factor) - makespan([(num_new, 0, 0)], shape, fit.slots)
        return max(self.prefill_seconds(num_new, 0) + fit.seconds_per_key * attn, 0.0)

    def watts_for(self, num_new: int) -> float:
        """Board power of a forward of ``num_new`` new tokens: the ``power`` rows interpolated linearly in
        log(num_new) (held flat outside them; rows at several cached lengths averaged per num_new), else
        ``watts_busy``."""
        if not self.power or num_new <= 0:
            return self.watts_busy
        pts: dict[int, list[float]] = {}
        for n, _, w in self.power:
            pts.setdefault(n, []).append(w)
        xs = sorted(pts)
        ws = [sum(pts[x]) / len(pts[x]) for x in xs]
        if num_new <= xs[0]:
            return ws[0]
        if num_new >= xs[-1]:
            return ws[-1]
        j = bisect.bisect_right(xs, num_new)
        f = (math.log(num_new) - math.log(xs[j - 1])) / (math.log(xs[j]) - math.log(xs[j - 1]))
        return ws[j - 1] + f * (ws[j] - ws[j - 1])

    def decode_coeffs(self, num_seqs: int) -> tuple[float, float]:
        """``(fixed_s, per_context_token_s)`` of a decode step of ``num_seqs`` sequences (both >= 0)."""
        if num_seqs <= 0:
            return 0.0, 0.0
        lines = {n: ln for n, ln in _decode_lines(self.decode).items() if ln is not None}
        ns = sorted(lines)
        if len(ns) == 1:
            a, b = lines[ns[0]]
        else:
            j = min(max(bisect.bisect_right(ns, num_seqs), 1), len(ns) - 1)
            n0, n1 = ns[j - 1], ns[j]
            w = (num_seqs - n0) / (n1 - n0)
            a = lines[n0][0] + w * (lines[n1][0] - lines[n0][0])
            b = lines[n0][1] + w * (lines[n1][1] - lines[n0][1])
        return max(a, 0.0), max(b, 0.0)

    def to_dict(self) -> dict[str, Any]:
        out = {"format": FORMAT, "gpu": self.gpu, "model": self.model, "watts_busy": self.watts_busy,
               "watts_idle": self.watts_idle, "prefill": [list(r) for r in self.prefill],
               "decode": [list(r) for r in self.decode]}
        if self.prefill_rotated:
            out["prefill_rotated"] = [list(r) for r in self.prefill_rotated]
        if self.extend is not None:
            out["extend"] = self.extend.to_dict()
        if self.power:
            out["power"] = [list(r) for r in self.power]
        return out


# ---- Internal helpers -----------------------------------------------------------------------------
def _prefill_groups(rows) -> dict[int, list[tuple[int, float]]]:
    groups: dict[int, dict[int, list[float]]] = {}
    for n, c, s in rows:
        groups.setdefault(c, {}).setdefault(n, []).append(s)
    return {c: sorted((n, sum(v) / len(v)) for n, v in g.items()) for c, g in groups.items()}


def _interp_curve(pts: list[tuple[int, float]], x: float) -> float:
    """Piecewise-linear through pts (sorted by x); proportional below/at a single point; linear beyond."""
    if len(pts) == 1:
        return pts[0][1] * x / pts[0][0]
    if x <= pts[0][0]:
        (x0, y0), (x1, y1) = pts[0], pts[1]
    else:
        j = min(bisect.bisect_left([p[0] for p in pts], x), len(pts) - 1)
        (x0, y0), (x1, y1) = pts[j - 1], pts[j]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _decode_lines(rows) -> dict[int, tuple[float, float] | None]:
    groups: dict[int, list[tuple[int, float]]] = {}
    for n, c, s in rows:
        groups.setdefault(n, []).append((c, s))
    out: dict[int, tuple[float, float] | None] = {}
    for n, pts in groups.items():
        xs = [p[0] for p in pts]
        if len(set(xs)) < 2:
            out[n] = None
            continue
        mx, my = sum(xs) / len(xs), sum(p[1] for p in pts) / len(pts)
        b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x in xs)
        out[n] = (my - b * mx, b)
    return out


def _rows(path: Path, cfg: dict[str, Any], key: str) -> tuple[tuple[int, int, float], ...]:
    rows = cfg.get(key)
    if not isinstance(rows, list):
        raise ValueError(f"{path}: {key}: missing or not a list of [x, y, seconds] rows")
    out = []
    for i, r in enumerate(rows):
        ok = (isinstance(r, list) and len(r) == 3 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                          for v in r) and r[0] == int(r[0]) and r[1] == int(r[1]))
        if not ok:
            raise ValueError(f"{path}: {key}[{i}]: expected [int, int, seconds], got {r!r}")
        out.append((int(r[0]), int(r[1]), float(r[2])))
    return tuple(out)


#: profiles shipped with pic (measured with ``pic calibrate --gpu``; see docs/bench-execute.md)
BUNDLED_DIR = Path(__file__).resolve().parent / "profiles"


def bundled_profiles() -> dict[str, Path]:
    """Name -> file of the profiles shipped with pic (``h200-deepseek-v2-lite``, ...)."""
    return {p.stem: p for p in sorted(BUNDLED_DIR.glob("*.json"))}


def load_profile(path: str | Path) -> CalibrationProfile:
    """Read and validate a profile (a JSON path, or the name of a bundled profile); errors name the file
    and the field (``file: decode[3]: ...``)."""
    bundled = bundled_profiles()
    if str(path) in bundled and not Path(path).exists():
        path = bundled[str(path)]
    path = Path(path)
    if not path.exists() and path.suffix != ".json":
        raise ValueError(f"profile {str(path)!r}: no such file, and not a bundled profile "
                         f"({', '.join(bundled) or 'none'})")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"{path}: cannot read profile: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    except RecursionError:
        raise ValueError(f"{path}: invalid JSON: nested too deeply to read") from None
    except ValueError as e:   # not UTF-8, an integer of more than 4300 digits
        raise ValueError(f"{path}: cannot read profile: {str(e)[:80]}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: top level must be a JSON object")
    if cfg.get("format", FORMAT) != FORMAT:
        raise ValueError(f"{path}: format: expected {FORMAT!r}, got {cfg.get('format')!r}")
    for k in ("gpu", "model"):
        if not isinstance(cfg.get(k), str):
            raise ValueError(f"{path}: {k}: missing or not a string")
    for k in ("watts_busy", "watts_idle"):
        if not isinstance(cfg.get(k), (int, float)) or isinstance(cfg.get(k), bool):
            raise ValueError(f"{path}: {k}: missing or not a number")
    rotated = _rows(path, cfg, "prefill_rotated") if "prefill_rotated" in cfg else ()
    power = _rows(path, cfg, "power") if "power" in cfg else ()
    return CalibrationProfile(gpu=cfg["gpu"].lower(), model=cfg["model"].lower(), prefill=_rows(path, cfg, "prefill"),
                              decode=_rows(path, cfg, "decode"), watts_busy=float(cfg["watts_busy"]),
                              watts_idle=float(cfg["watts_idle"]), source=str(path), prefill_rotated=rotated,
                              extend=_extend(path, cfg["extend"]) if "extend" in cfg else None, power=power)


def _extend(path: Path, obj: Any) -> ExtendShape:
    keys = ("tokens_per_program", "head_groups", "sm_count", "decode_max_new")
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: extend: expected an object with {', '.join(keys)}")
    for k in keys:
        v = obj.get(k)
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if k == "decode_max_new" else 1):
            raise ValueError(f"{path}: extend.{k}: missing or not an integer >= {0 if k == 'decode_max_new' else 1}")
    return ExtendShape(**{k: obj[k] for k in keys})


def write_profile(profile: CalibrationProfile, path: str | Path) -> None:
    """Write ``profile`` as JSON atomically (temp name, then rename)."""
    from pic.traces.outputs import atomic_path

    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(profile.to_dict(), indent=1) + "\n", encoding="utf-8")
