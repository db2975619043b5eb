"""`pic sweep --backend ray` through a real local Ray runtime (the `dist` extra): a 2 x 3 grid on a bundled
sample, retries, a killed worker, an interrupted sweep resumed. One ray.init for the whole module (about
8-10 s of start-up on a 2-core machine); skipped where Ray is not installed."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

import pic.engine.sweep as sweep  # noqa: E402 - after the skip
from pic.engine.config import ReplayConfig  # noqa: E402
from pic.engine.report import make_report  # noqa: E402
from pic.engine.sweep import SweepConfig, plan_cells, run_sweep  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "traces" / "samples" / "early-variation.parquet"
GIB = 2**30
MODELS = ("deepseek-v2-lite", "llama-3.1-8b")
CAPS = (GIB, 4 * GIB, math.inf)
POLICIES = ("prefix", "irminsul")


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module, started with the sweep's own init settings (2 CPUs, no dashboard,
    PYTHONPATH to this checkout) and a small object store; run_sweep uses it and leaves it running."""
    if ray.is_initialized():
        ray.shutdown()
    args = sweep.ray_init_args(SweepConfig(traces=(str(SAMPLE),), backend="ray", num_jobs=2))
    handlers = sweep._signal_handlers()
    ray.init(object_store_memory=128 * 2**20, **args)
    yield ray
    ray.shutdown()
    sweep._restore_signal_handlers(handlers)      # ray.init's SIGTERM handler would outlive the module


def _cfg(trace: Path, models=MODELS, caps=CAPS, **kw) -> SweepConfig:
    return SweepConfig(traces=(str(trace),), models=models, capacities=caps,
                       replay=ReplayConfig(policies=POLICIES), backend="ray", num_jobs=2, **kw)


def _injected_cell(trace, cell, base):
    """A cell task that obeys files beside its trace: ``die-<cap>`` holds how many more times the worker
    process dies (os._exit), ``fail-<cap>`` how many more times the task raises; every attempt is logged."""
    here, cap = Path(cell.trace).parent, Path(cell.run_dir).name
    with open(here / f"tries-{cap}", "a") as f:
        f.write("x")
    for kind in ("die", "fail"):
        marker = here / f"{kind}-{cap}"
        left = int(marker.read_text()) if marker.exists() else 0
        if left > 0:
            marker.write_text(str(left - 1))
            if kind == "die":
                os._exit(3)
            raise RuntimeError(f"injected failure in {cap}")
    return sweep._ray_cell(trace, cell, base)


def test_grid_2x3_on_the_sample_through_real_ray(local_ray, tmp_path):
    """2 models x 3 capacities on the bundled sample: six cells done in a real Ray, each run dir byte-equal
    to the serial local run, and the merged report lists all six points."""
    cfg = _cfg(SAMPLE)
    res = run_sweep(cfg, tmp_path / "ray")
    assert [r.status for r in res.cells] == ["done"] * 6
    assert ray.is_initialized()                           # the caller's Ray is left running
    local = run_sweep(SweepConfig(traces=(str(SAMPLE),), models=MODELS, capacities=CAPS,
                                  replay=ReplayConfig(policies=POLICIES), num_jobs=1), tmp_path / "local")
    assert local.count("done") == 6
    for c in plan_cells(cfg):
        assert (tmp_path / "ray" / c.run_dir / "requests.parquet").read_bytes() == \
            (tmp_path / "local" / c.run_dir / "requests.parquet").read_bytes(), c.run_dir
    rep = make_report([tmp_path / "ray"], md_path=tmp_path / "report.md")
    assert sorted(r.label for r in rep.data.runs) == sorted(c.run_dir for c in plan_cells(cfg))
    md = (tmp_path / "report.md").read_text()
    assert all(c.run_dir in md for c in plan_cells(cfg)), md[:2000]
    series = rep.data.capacity_series
    assert series.height == len(MODELS) * len(CAPS) * len(POLICIES)


def test_failed_cells_retried_once_others_finish(local_ray, tmp_path, monkeypatch):
    """A cell whose worker dies once and one that raises once are retried and finish; one that raises
    twice is recorded failed after exactly two tries while the others finish."""
    trace = tmp_path / "in" / "ev.parquet"
    trace.parent.mkdir()
    shutil.copyfile(SAMPLE, trace)
    (trace.parent / "die-cap-1GiB").write_text("1")
    (trace.parent / "fail-cap-4GiB").write_text("1")
    (trace.parent / "fail-cap-inf").write_text("2")
    monkeypatch.setattr(sweep, "_ray_cell", _injected_cell)
    res = run_sweep(_cfg(trace, models=MODELS[:1]), tmp_path / "s")
    assert [r.status for r in res.cells] == ["done", "done", "failed"]
    tries = {cap: len((trace.parent / f"tries-{cap}").read_text()) for cap in ("cap-1GiB", "cap-4GiB", "cap-inf")}
    assert tries == {"cap-1GiB": 2, "cap-4GiB": 2, "cap-inf": 2}
    doc = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert doc["counts"]["done"] == 2 and doc["counts"]["failed"] == 1
    assert doc["cells"][2]["error"] == "RuntimeError: injected failure in cap-inf (after 2 tries)"
    assert (tmp_path / "s" / res.cells[0].cell.run_dir / "summary.json").is_file()
    assert not (tmp_path / "s" / res.cells[2].cell.run_dir).exists()


def test_interrupted_sweep_resumed_keeps_finished_cells(local_ray, tmp_path):
    """Ctrl-C after two cells came back: both run dirs and their `done` entries stay in sweep.json; the
    re-run skips them (files untouched) and replays only the others."""
    cfg = _cfg(SAMPLE, models=MODELS[:1])

    def stop(res, done, total):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(cfg, tmp_path, progress=stop)
    doc = json.loads((tmp_path / "sweep.json").read_text())
    finished = [c["run_dir"] for c in doc["cells"] if c["status"] == "done"]
    assert len(finished) == 2 and doc["counts"]["pending"] == 1
    stamps = {d: (tmp_path / d / "summary.json").stat().st_mtime_ns for d in finished}
    res = run_sweep(cfg, tmp_path)
    assert sorted(r.status for r in res.cells) == ["done", "skipped", "skipped"]
    assert {r.cell.run_dir for r in res.cells if r.status == "skipped"} == set(finished)
    assert {d: (tmp_path / d / "summary.json").stat().st_mtime_ns for d in finished} == stamps
