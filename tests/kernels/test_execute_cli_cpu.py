"""`pic execute --gpu` end to end on the CPU (on the GPU where there is one): the GPU check and the model builder are patched to a tiny
1-layer model under the Triton interpreter; everything else (replay, sampling, layout, kernels, outputs,
`pic report`) is the real path."""

from __future__ import annotations

import torch
from typer.testing import CliRunner

from pic.cli.app import app
from pic.engine.measurements import read_measurements
from pic.kernels.model import Model, exec_spec, random_weights, tiny_model_spec
from tests.kernels.conftest import DEVICE

runner = CliRunner()
TINY_RAG = ["--set", "system_min=40", "--set", "system_max=60", "--set", "doc_min=40", "--set", "doc_max=90",
            "--set", "docs_min=2", "--set", "docs_max=3", "--set", "query_min=5", "--set", "query_max=20",
            "--set", "pool_size=6", "--set", "working_set=3"]
SMALL_CHUNKS = ["--set", "irminsul.avg_chunk=48", "--set", "irminsul.min_chunk=16", "--set", "irminsul.max_chunk=128",
                "--set", "irminsul.s1_window=32"]


def test_execute_end_to_end_on_cpu(tmp_path, monkeypatch):
    """Measurements are written for the sampled request; reuse on one layer reproduces full prefill."""
    import pic.cli.execute as cli
    import pic.kernels.executor.api as api

    trace = tmp_path / "tiny.parquet"
    res = runner.invoke(app, ["synth", "-s", "rag-reorder", "-n", "12", *TINY_RAG, "-o", str(trace)])
    assert res.exit_code == 0, res.output
    spec = exec_spec(tiny_model_spec(num_layers=1, num_experts=0))
    tiny = Model(spec, random_weights(spec, device=DEVICE, dtype=torch.float32, seed=2),
                 tile={"BLOCK_T": 16, "BLOCK_HH": 2, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1})
    built = {}

    def fake_build(model, **kw):
        built.update(kw, name=model.name)
        return tiny

    monkeypatch.setattr(cli, "_open_gpu", lambda energy: (torch.device(DEVICE), None))
    monkeypatch.setattr(api, "build_model", fake_build)
    out = tmp_path / "exec"
    res = runner.invoke(app, ["execute", str(trace), "--gpu", *SMALL_CHUNKS, "-k", "1", "--max-tokens", "300",
                              "--repeats", "1", "--no-energy", "--page-size", "32", "--seed", "1", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert built["name"] == "deepseek-v2-lite" and built["layers"] is None
    rows, summary = read_measurements(out)
    assert len(rows) == 1 and summary["requests"] == 1 and (out / "plans.parquet").is_file()
    r = rows[0]
    assert r["prompt_tokens"] <= 300 and r["ttft_s"] > 0 and r["ttft_full_s"] > 0
    assert r["reused_tokens"] > 0 and r["executed_tokens"] < r["prompt_tokens"]     # the seed picks a hit
    assert r["out_dev"] < 1e-5 and r["kv_dev"] < 1e-5
    rep = runner.invoke(app, ["report", str(out)])
    assert rep.exit_code == 0 and "TTFT / full prefill p50" in rep.output


def test_replay_execute_adds_measurements_to_the_run_dir(tmp_path, monkeypatch):
    """`pic replay --execute`: the run dir keeps its replay files and gains measurements.parquet;
    `pic report` shows the replay tables and the measured table."""
    import pic.cli.execute as cli
    import pic.kernels.executor.api as api

    trace = tmp_path / "tiny.parquet"
    assert runner.invoke(app, ["synth", "-s", "rag-reorder", "-n", "8", *TINY_RAG, "-o", str(trace)]).exit_code == 0
    spec = exec_spec(tiny_model_spec(num_layers=1, num_experts=0))
    tiny = Model(spec, random_weights(spec, device=DEVICE, dtype=torch.float32, seed=2),
                 tile={"BLOCK_T": 16, "BLOCK_HH": 2, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1})
    monkeypatch.setattr(cli, "_open_gpu", lambda energy: (torch.device(DEVICE), None))
    monkeypatch.setattr(api, "build_model", lambda model, **kw: tiny)
    from pic.kernels.executor import ExecConfig
    monkeypatch.setattr("pic.kernels.executor.ExecConfig", lambda: ExecConfig(repeats=1, warmup=0, graphs=False,
                                                                           energy_seconds=0, page_size=32))
    run = tmp_path / "run"
    res = runner.invoke(app, ["replay", str(trace), "--policy", "prefix,irminsul", *SMALL_CHUNKS, "--execute",
                              "--execute-requests", "1", "-o", str(run)])
    assert res.exit_code == 0, res.output
    for f in ("requests.parquet", "summary.json", "config.json", "measurements.parquet", "execute.json"):
        assert (run / f).is_file(), f
    rows, summary = read_measurements(run)
    assert len(rows) == 1 and summary["policy"] == "irminsul"
    rep = runner.invoke(app, ["report", str(run)])
    assert rep.exit_code == 0 and "TTFT / full prefill p50" in rep.output and "irminsul" in rep.output
