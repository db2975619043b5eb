"""Golden replays: every registered policy on small committed traces, diffed against expected JSON.

Bless a deliberate change with ``python -m tests.golden.regen`` (see tests/golden/README.md).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from pic.engine import policies as registry
from pic.engine.replay import replay, write_run
from pic.traces.io import read_trace
from tests.golden.golden import REGEN, TRACES, GoldenTrace, diff, file_sha256, record, replay_config, run

CASES = [(t, cap) for t in TRACES for cap in t.capacities]
IDS = [f"{t.name}@{cap}" for t, cap in CASES]
TIGHT = [(t, cap) for t, cap in CASES if cap != "inf"]


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str], tuple[dict, bytes]]:
    """Each (trace, capacity) replayed once: (summary.json dict, requests.parquet bytes)."""
    return {(t.name, cap): run(t, cap) for t, cap in CASES}


def _expected(trace: GoldenTrace) -> dict:
    if not trace.expected_path.exists():
        pytest.fail(f"{trace.expected_path} is missing; create it with `{REGEN}`")
    return json.loads(trace.expected_path.read_text())


@pytest.mark.parametrize("trace", TRACES, ids=[t.name for t in TRACES])
def test_trace_file_is_the_one_blessed(trace: GoldenTrace) -> None:
    """The committed golden trace is the one the expected JSON was computed from."""
    assert file_sha256(trace.path) == _expected(trace)["trace_sha256"], (
        f"{trace.path.name} changed since the expected JSON was made; re-bless with `{REGEN}`")


@pytest.mark.parametrize("trace", TRACES, ids=[t.name for t in TRACES])
def test_trace_regenerates_byte_identical(trace: GoldenTrace, tmp_path: Path) -> None:
    """Re-making the trace with the project's synth/ingest now gives the committed bytes."""
    fresh = tmp_path / trace.path.name
    trace.make(fresh)
    assert fresh.read_bytes() == trace.path.read_bytes(), (
        f"{trace.note!r} no longer reproduces {trace.path.name} (generator or writer changed); "
        f"if deliberate, re-bless with `{REGEN}`")


def test_golden_covers_every_registered_policy() -> None:
    """Each expected file lists exactly the registered policies (a new policy needs a re-bless)."""
    for trace in TRACES:
        assert _expected(trace)["policies"] == registry.names(), (
            f"{trace.expected_path.name}: policies {_expected(trace)['policies']} != registered "
            f"{registry.names()}; run `{REGEN}`")


@pytest.mark.parametrize(("trace", "capacity"), CASES, ids=IDS)
def test_golden_replay(trace: GoldenTrace, capacity: str, runs) -> None:
    """summary.json (minus wall_seconds) and requests.parquet digests equal the blessed ones."""
    expected = _expected(trace)["runs"].get(capacity)
    assert expected is not None, f"{trace.expected_path.name} has no run at {capacity}; run `{REGEN}`"
    actual = record(*runs[trace.name, capacity])
    # the whole-file digest is implied by the per-column ones; report columns, not an opaque hash
    lines = diff({k: v for k, v in expected.items() if k != "requests_sha256"},
                 {k: v for k, v in actual.items() if k != "requests_sha256"})
    if not lines and expected["requests_sha256"] != actual["requests_sha256"]:
        lines = ["requests_sha256: requests.parquet bytes changed while every column's values are the same "
                 "(writer settings, schema or metadata)"]
    if lines:
        shown = "\n  ".join(lines[:40]) + (f"\n  ... and {len(lines) - 40} more" if len(lines) > 40 else "")
        pytest.fail(f"golden replay {trace.name} @ capacity {capacity} changed ({len(lines)} field(s)):\n  "
                    f"{shown}\nIf the change is intended, bless it with `{REGEN}` and commit the diff.",
                    pytrace=False)


@pytest.mark.parametrize(("trace", "capacity"), CASES, ids=IDS)
def test_pic_replay_cli_writes_the_golden_run(trace: GoldenTrace, capacity: str, tmp_path: Path) -> None:
    """`pic replay TRACE <the case's flags> -o DIR` writes exactly the blessed summary and requests.parquet."""
    from typer.testing import CliRunner

    from pic.cli.app import app

    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["replay", str(trace.path), *trace.cli_args(capacity), "-o", str(out)])
    assert res.exit_code == 0, res.output
    actual = record(json.loads((out / "summary.json").read_text()), (out / "requests.parquet").read_bytes())
    assert diff(_expected(trace)["runs"][capacity], actual) == []


@pytest.mark.parametrize(("trace", "capacity"), CASES, ids=IDS)
def test_requests_parquet_byte_identical_across_runs(trace: GoldenTrace, capacity: str, runs) -> None:
    """A second in-process replay writes the same requests.parquet bytes and the same summary."""
    summary1, bytes1 = runs[trace.name, capacity]
    summary2, bytes2 = run(trace, capacity)
    assert bytes1 == bytes2, f"{trace.name} @ {capacity}: requests.parquet differs between two runs"
    strip = [{k: {p: {m: v for m, v in st.items() if m != "wall_seconds"} for p, st in s["policies"].items()}
              if k == "policies" else v for k, v in s.items()} for s in (summary1, summary2)]
    assert strip[0] == strip[1]


@pytest.mark.parametrize(("trace", "capacity"), TIGHT, ids=[f"{t.name}@{c}" for t, c in TIGHT])
def test_tight_capacity_forces_evictions(trace: GoldenTrace, capacity: str, runs) -> None:
    """At the tight capacity every caching policy evicts (so the golden pins eviction behaviour); the
    unbounded bound (oracle) never does."""
    from pic.engine import policies as registry
    pols = runs[trace.name, capacity][0]["policies"]
    idle = [name for name, st in pols.items()
            if name != "none" and registry.get(name).bounded and st["evictions"] == 0]
    assert not idle, f"{trace.name} @ {capacity}: no evictions for {idle}; lower the tight capacity"


@pytest.mark.parametrize(("trace", "capacity"), CASES, ids=IDS)
def test_verify_finds_no_collisions(trace: GoldenTrace, capacity: str, runs) -> None:
    """--verify compared every hit's tokens and found no hash collision."""
    pols = runs[trace.name, capacity][0]["policies"]
    assert {name: st["collisions"] for name, st in pols.items()} == dict.fromkeys(pols, 0)


def test_diff_names_policy_and_metric() -> None:
    """The diff message names the policy and metric that moved and ignores float noise."""
    old = {"policies": {"irminsul": {"token_hit_rate": 0.5, "evictions": 3}}}
    new = {"policies": {"irminsul": {"token_hit_rate": 0.5 * (1 + 1e-12), "evictions": 4}}}
    assert diff(old, new) == ["policies.irminsul.evictions: expected 3, got 4"]


def test_regen_check_reports_a_tampered_expected_file(monkeypatch) -> None:
    """regen --check exits 1 and names the field when an expected file was edited by hand."""
    from tests.golden import golden, regen

    trace = TRACES[-1]
    doc = _expected(trace)
    cap = trace.capacities[0]
    doc["runs"][cap]["policies"]["prefix"]["reused_tokens"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / trace.expected_path.name).write_text(json.dumps(doc))
        monkeypatch.setattr(golden, "EXPECTED", Path(tmp))
        monkeypatch.setattr(regen, "TRACES", (trace,))
        problems = regen.regen_golden(check=True)
    assert problems == [f"{trace.name}: runs.{cap}.policies.prefix.reused_tokens: expected "
                        f"{doc['runs'][cap]['policies']['prefix']['reused_tokens']}, "
                        f"got {doc['runs'][cap]['policies']['prefix']['reused_tokens'] - 1}"]


@pytest.mark.parametrize(("trace", "capacity"), CASES, ids=IDS)
def test_verify_only_observes(trace: GoldenTrace, capacity: str, runs) -> None:
    """The same replay without --verify writes the same requests.parquet (verify checks, never steers)."""
    import dataclasses

    plain = dataclasses.replace(replay_config(capacity, **dict(trace.serving)), verify=False,
                                check_invariants=False)
    with tempfile.TemporaryDirectory() as tmp:
        out = write_run(replay(read_trace(trace.path), plain), Path(tmp) / "run")
        assert (out / "requests.parquet").read_bytes() == runs[trace.name, capacity][1]
