"""Sweeps: cell plan, determinism across --jobs, resume/force, validation before work, failures, Ray, report."""

from __future__ import annotations

import json
import math
import os
import pickle
import sys
import types
from pathlib import Path

import pytest

import pic.engine.sweep as sweep
from pic.engine.config import ReplayConfig
from pic.engine.report import load_runs
from pic.engine.sweep import SweepConfig, capacity_label, check_sweep, plan_cells, run_sweep
from pic.traces.io import write_trace
from pic.traces.outputs import MARKER
from pic.traces.synth import synth

GIB = 2**30
POLICIES = ("prefix", "fixed-chunk")


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    return str(write_trace(synth("early-variation", 30, seed=1), tmp_path_factory.mktemp("t") / "ev.parquet"))


def _cfg(trace_file, caps=(GIB // 4, GIB, math.inf), **kw) -> SweepConfig:
    return SweepConfig(traces=(trace_file,), capacities=caps, replay=ReplayConfig(policies=POLICIES), **kw)


def _bytes(out, cfg) -> dict[str, bytes]:
    return {c.run_dir: (out / c.run_dir / "requests.parquet").read_bytes() for c in plan_cells(cfg)}


def test_capacity_label_round_trips_binary_units():
    """Labels use the largest binary unit that divides the size; inf and odd sizes stay readable."""
    assert [capacity_label(x) for x in (math.inf, 4 * GIB, 512 * 2**20, 1536 * 2**20, 1500.0, 2**40)] == [
        "inf", "4GiB", "512MiB", "1536MiB", "1500B", "1TiB"]


def test_plan_is_cartesian_product_in_order(trace_file):
    """Cells are trace x model x capacity, in that nesting order, in <stem>/<model>/cap-<size> folders."""
    cfg = SweepConfig(traces=(trace_file,), models=("deepseek-v2-lite", "llama-3.1-8b"), capacities=(GIB, math.inf))
    cells = plan_cells(cfg)
    assert [c.run_dir for c in cells] == ["ev/deepseek-v2-lite/cap-1GiB", "ev/deepseek-v2-lite/cap-inf",
                                          "ev/llama-3.1-8b/cap-1GiB", "ev/llama-3.1-8b/cap-inf"]
    assert cells[2].config(cfg.replay).model == "llama-3.1-8b" and cells[1].config(cfg.replay).capacity_bytes == math.inf


def test_same_folder_twice_is_refused(tmp_path, trace_file):
    """Two traces with one stem, or two spellings of one capacity, are refused (they would share a folder)."""
    other = tmp_path / "x" / "ev.parquet"
    other.parent.mkdir()
    other.write_bytes(open(trace_file, "rb").read())
    with pytest.raises(ValueError, match="share the folder 'ev'"):
        plan_cells(SweepConfig(traces=(trace_file, str(other))))
    with pytest.raises(ValueError, match="duplicate"):
        SweepConfig(traces=(trace_file,), capacities=(GIB, float(GIB)))


def test_jobs_1_and_2_give_identical_bytes(tmp_path, trace_file):
    """Every cell's requests.parquet is byte-identical whether cells run in-process or in 2 workers."""
    cfg1, cfg2 = _cfg(trace_file, num_jobs=1), _cfg(trace_file, num_jobs=2)
    r1, r2 = run_sweep(cfg1, tmp_path / "a"), run_sweep(cfg2, tmp_path / "b")
    assert r1.count("done") == r2.count("done") == 3
    a, b = _bytes(tmp_path / "a", cfg1), _bytes(tmp_path / "b", cfg2)
    assert a == b and len(set(a.values())) == 3        # same per cell, different across capacities
    doc = json.loads((tmp_path / "b" / "sweep.json").read_text())
    assert [c["status"] for c in doc["cells"]] == ["done"] * 3 and doc["counts"]["done"] == 3
    assert doc["capacities"][-1] is None and doc["policies"] == list(POLICIES)
    assert not [p for p in (tmp_path / "b").rglob(".*") if p.name != MARKER]   # no temp leftovers


def test_resume_skips_complete_cells_and_force_redoes(tmp_path, trace_file):
    """A re-run skips cells with summary.json (files untouched), runs missing ones; force redoes all."""
    cfg = _cfg(trace_file, caps=(GIB, math.inf), num_jobs=1)
    run_sweep(cfg, tmp_path)
    kept = tmp_path / "ev" / "deepseek-v2-lite" / "cap-1GiB" / "summary.json"
    stamp = kept.stat().st_mtime_ns
    (tmp_path / "ev" / "deepseek-v2-lite" / "cap-inf" / "summary.json").unlink()
    seen = []
    res = run_sweep(cfg, tmp_path, progress=lambda r, done, total: seen.append((r.status, done, total)))
    assert [r.status for r in res.cells] == ["skipped", "done"] and seen == [("skipped", 1, 2), ("done", 2, 2)]
    assert kept.stat().st_mtime_ns == stamp
    forced = run_sweep(_cfg(trace_file, caps=(GIB, math.inf), num_jobs=1, force=True), tmp_path)
    assert [r.status for r in forced.cells] == ["done", "done"] and kept.stat().st_mtime_ns != stamp


def test_existing_cell_with_other_settings_is_refused(tmp_path, trace_file):
    """Resuming with other settings (here the seed) fails before any work instead of mixing runs."""
    run_sweep(_cfg(trace_file, caps=(GIB,), num_jobs=1), tmp_path)
    other = SweepConfig(traces=(trace_file,), capacities=(GIB,), replay=ReplayConfig(policies=POLICIES, seed=3))
    with pytest.raises(ValueError, match=r"cap-1GiB: holds a run with other settings \(seed\)"):
        check_sweep(other, tmp_path)


def test_impossible_cell_fails_before_any_work(tmp_path, trace_file):
    """A capacity below one llama token of KV (fine for deepseek) fails the whole sweep up front."""
    cfg = SweepConfig(traces=(trace_file,), models=("deepseek-v2-lite", "llama-3.1-8b"),
                      capacities=(math.inf, 100_000.0), replay=ReplayConfig(policies=("prefix",)))
    with pytest.raises(ValueError, match="model llama-3.1-8b, capacity 100000B: capacity"):
        run_sweep(cfg, tmp_path / "s")
    assert not (tmp_path / "s").exists()
    with pytest.raises(ValueError, match="unknown model"):
        run_sweep(SweepConfig(traces=(trace_file,), models=("nope",)), tmp_path / "s")
    with pytest.raises(ValueError, match="no such trace"):
        run_sweep(SweepConfig(traces=(str(tmp_path / "missing.parquet"),)), tmp_path / "s")


def test_failed_cell_is_recorded_and_others_finish(tmp_path, trace_file, monkeypatch):
    """A cell whose replay raises is 'failed' with its message in sweep.json; the other cells are written."""
    real = sweep.replay

    def flaky(trace, config, progress=None):
        if config.capacity_bytes == GIB:
            raise RuntimeError("boom")
        return real(trace, config, progress)

    monkeypatch.setattr(sweep, "replay", flaky)
    res = run_sweep(_cfg(trace_file, num_jobs=1), tmp_path)
    assert [r.status for r in res.cells] == ["done", "failed", "done"] and res.count("failed") == 1
    doc = json.loads((tmp_path / "sweep.json").read_text())
    assert doc["cells"][1]["error"] == "RuntimeError: boom" and doc["counts"]["failed"] == 1
    assert not (tmp_path / doc["cells"][1]["run_dir"]).exists()


def test_ray_missing_gives_install_hint(trace_file, tmp_path, monkeypatch):
    """Without Ray installed the ray backend fails before work with the pip install hint."""
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ValueError, match=r"pip install 'pic\[dist\]'"):
        run_sweep(_cfg(trace_file, backend="ray"), tmp_path / "s")
    assert not (tmp_path / "s").exists()


def _fake_ray(monkeypatch, initialized: bool) -> dict:
    """A stand-in Ray whose tasks run in-process, pickling arguments and results as Ray does."""
    fake = types.ModuleType("ray")
    calls: dict = {"cancelled": 0}

    class Ref:
        def __init__(self, value):
            self.value = pickle.loads(pickle.dumps(value))

    def remote(**opts):
        calls["opts"] = opts
        return lambda fn: types.SimpleNamespace(remote=lambda *a: Ref(fn(*[x.value if isinstance(x, Ref) else
                                                                            pickle.loads(pickle.dumps(x))
                                                                            for x in a])))

    fake.is_initialized = lambda: initialized
    fake.init = lambda **kw: calls.setdefault("init", kw)
    fake.remote, fake.put, fake.get = remote, Ref, lambda ref: ref.value
    fake.wait = lambda refs, num_returns: (refs[:num_returns], refs[num_returns:])
    fake.shutdown = lambda: calls.setdefault("shutdown", True)
    fake.cancel = lambda ref, force=False: calls.__setitem__("cancelled", calls["cancelled"] + 1)
    monkeypatch.setitem(sys.modules, "ray", fake)
    return calls


def test_ray_backend_writes_same_bytes(tmp_path, trace_file, monkeypatch):
    """Through a stand-in Ray (pickled args and results) the cells equal the local ones byte for byte; a
    Ray it started itself is shut down, with Ray's own retries off (the sweep retries once itself)."""
    calls = _fake_ray(monkeypatch, initialized=False)
    cfg_ray = _cfg(trace_file, backend="ray", address="ray://head:10001")
    res = run_sweep(cfg_ray, tmp_path / "ray")
    run_sweep(_cfg(trace_file, num_jobs=1), tmp_path / "local")
    assert res.count("done") == 3 and calls["init"] == {"address": "ray://head:10001"} and calls["shutdown"]
    assert calls["opts"] == {"num_cpus": 1, "max_retries": 0}
    assert _bytes(tmp_path / "ray", cfg_ray) == _bytes(tmp_path / "local", cfg_ray)


def test_ray_already_running_is_reused_and_left_running(tmp_path, trace_file, monkeypatch):
    """A Ray the caller started is used as is (no init, no shutdown); Ctrl-C cancels the sweep's own
    outstanding tasks there instead of leaving them running."""
    calls = _fake_ray(monkeypatch, initialized=True)
    assert run_sweep(_cfg(trace_file, backend="ray"), tmp_path / "a").count("done") == 3
    assert "init" not in calls and "shutdown" not in calls and calls["cancelled"] == 0

    def stop(res, done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(_cfg(trace_file, backend="ray"), tmp_path / "b", progress=stop)
    assert calls["cancelled"] == 2 and "shutdown" not in calls


def test_local_ray_init_args(trace_file):
    """A local Ray gets --jobs CPUs, no dashboard and this checkout first on its workers' PYTHONPATH."""
    args = sweep.ray_init_args(_cfg(trace_file, backend="ray", num_jobs=3))
    assert args["num_cpus"] == 3 and args["include_dashboard"] is False
    root = str(Path(sweep.__file__).resolve().parents[2])
    assert args["runtime_env"]["env_vars"]["PYTHONPATH"].split(os.pathsep)[0] == root


def test_report_reads_sweep_dir(tmp_path, trace_file):
    """load_runs(SWEEP_DIR) finds every cell; the capacity series has each policy at every capacity."""
    cfg = _cfg(trace_file, num_jobs=1)
    run_sweep(cfg, tmp_path)
    (tmp_path / ".junk.tmp").mkdir()
    (tmp_path / ".junk.tmp" / "summary.json").write_text("{")     # a temp folder is ignored
    data = load_runs([tmp_path])
    assert sorted(r.label for r in data.runs) == sorted(c.run_dir for c in plan_cells(cfg))
    series = data.capacity_series
    assert series.height == len(POLICIES) * 3 and set(series["capacity_bytes"]) == {GIB / 4, GIB, math.inf}
    got = {(r["policy"], r["capacity_bytes"]): r["token_hit_rate"] for r in series.iter_rows(named=True)}
    for c in plan_cells(cfg):
        summary = json.loads((tmp_path / c.run_dir / "summary.json").read_text())
        for p in POLICIES:
            assert got[(p, c.capacity_bytes)] == pytest.approx(summary["policies"][p]["token_hit_rate"])

