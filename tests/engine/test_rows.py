"""engine.rows: a replay's request rows in numpy give what the polars frame and expressions gave (columns,
Arrow table, summaries to the last bit), and a replay imports no polars until ``RunResult.requests`` is read."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from pic.engine.latency import request_latencies, serving_summary
from pic.engine.metrics import REQUEST_SCHEMA, request_frame, request_rows, summarize
from pic.engine.request import Labels, RequestTable
from pic.engine.rows import REQUEST_TYPES, RequestRows, polars_sum


@pytest.mark.parametrize("n", [0, 1, 5, 127, 128, 129, 256, 1000, 4097, 12031, 40000])
def test_polars_sum_is_polars_sum(n):
    """polars_sum equals polars' Series.sum bit for bit (numpy's own sum does not, on most of these)."""
    rng = np.random.default_rng(n)
    for k in range(8):
        a = rng.random(n) * 10.0 ** int(rng.integers(-6, 12))
        if k % 2:
            a = a * rng.integers(0, 2, n) - (a.sum() / max(n, 1)) / 3
        assert polars_sum(a) == float(pl.Series(a, dtype=pl.Float64).sum())


def _table(n: int, seed: int, session_nulls: bool = False) -> RequestTable:
    rng = np.random.default_rng(seed)
    ids = rng.permutation(n).astype(np.int64) * 3 + 7              # (not in order: rows sorted by id)
    names = ["s-b", "s-a", "ü-é", ""]
    codes = rng.integers(0, len(names), n)
    sessions = ([None if c == 0 else names[c] for c in codes] if session_nulls
                else Labels(codes.astype(np.int32), names))
    arrival = np.sort(rng.integers(0, 10**9, n))
    t = RequestTable(ids, sessions, rng.integers(1, 5000, n), rng.integers(0, 4, n), arrival)
    start = arrival + rng.integers(0, 10**6, n)
    first = start + rng.integers(1, 10**6, n)
    for f, v in (("replica", rng.integers(0, 3, n)), ("start_us", start), ("first_token_us", first),
                 ("finish_us", first + rng.integers(0, 10**7, n)), ("num_reused", rng.integers(0, 3, n) * 100),
                 ("num_oracle_reused", rng.integers(0, 500, n)), ("uncached", rng.integers(0, 2, n))):
        t.column(f)[:] = v
    for f in ("prefill_flops", "prefill_joules", "nocache_prefill_joules", "prefix_prefill_joules",
              "attn_layer_s", "cache_read_bytes"):
        t.column(f)[:] = rng.random(n) * 10.0 ** int(rng.integers(-3, 9))
    return t


def _reference_frame(policy: str, table: RequestTable) -> pl.DataFrame:
    """The polars frame request_frame made before the rows were numpy (polars expressions, polars dtypes)."""
    from pic.engine.metrics import _ATTRS

    n = len(table)
    rid = table.column("request_id")
    order = np.argsort(rid, kind="stable")
    cols = {"policy": pl.Series("policy", [policy] * n, pl.String())}
    for col, attr in _ATTRS.items():
        dtype = REQUEST_SCHEMA[col]
        if dtype == pl.String():
            s = table.session_ids
            s = pl.Series(col, s.names, dtype).gather(s.codes) if isinstance(s, Labels) else pl.Series(col, s, dtype)
            cols[col] = s.gather(order)
        else:
            cols[col] = pl.Series(col, table.column(attr)[order]).cast(dtype)
    df = request_latencies(pl.DataFrame(cols).with_columns(
        ttft_s=(pl.col("first_token_us") - pl.col("arrival_us")).cast(pl.Float64) / 1e6,
        queue_s=(pl.col("start_us") - pl.col("arrival_us")).cast(pl.Float64) / 1e6))
    return df.select(list(REQUEST_SCHEMA))


@pytest.mark.parametrize("n,nulls", [(1, False), (300, False), (1000, True), (5000, False)])
def test_rows_equal_the_polars_frame(n, nulls):
    """Every column (derived latencies included), dtype and null of request_rows equals the polars reference."""
    table = _table(n, n, nulls)
    want = _reference_frame("pol", table)
    rows = request_rows("pol", table)
    assert list(rows.to_arrow().schema.names) == list(REQUEST_TYPES)
    got = request_frame("pol", table)
    assert got.schema == want.schema and got.equals(want)
    assert rows.to_polars().equals(want)
    assert pl.from_arrow(rows.to_arrow()).equals(want)        # (what requests.parquet and RunResult.requests hold)
    for c in ("ttft_s", "queue_s", "e2el_s", "tpot_s"):
        assert np.array_equal(rows.non_null(c), want[c].drop_nulls().to_numpy())


@pytest.mark.parametrize("n", [1, 700, 5000])
def test_summaries_equal_from_rows_and_frame(n):
    """summarize and serving_summary give the same dict (floats to the last bit) from RequestRows and from the
    polars frame, and the frame's float sums are polars' own."""
    table = _table(n, n + 1)
    rows, frame = request_rows("p", table), _reference_frame("p", table)
    kw = {"peak_resident_bytes": 5, "evictions": 1, "collisions": 0, "num_events": 9, "wall_seconds": 0.5}
    a, b = summarize(rows, **kw), summarize(frame, **kw)
    assert a == b
    assert a["prefill_joules"] == float(frame["prefill_joules"].sum())
    hit = frame.filter(pl.col("reused_tokens") > 0)
    assert a["hit_requests"] == hit.height
    for slo in ({}, {"ttft": 0.4, "tpot": 0.01}, {"e2el": 3.0}):
        s1 = serving_summary(rows, [(0.01, 0.001, 5, 2)], percentiles=(50, 99), slo=slo)
        s2 = serving_summary(frame, [(0.01, 0.001, 5, 2)], percentiles=(50, 99), slo=slo)
        assert s1 == s2
    if slo:
        good = frame.select(((pl.col("e2el_s").fill_null(0.0) <= 3.0)).sum()).item()
        assert s1["good_requests"] == good


def test_rows_select_and_with_columns():
    rows = request_rows("p", _table(50, 3))
    base = rows.select(("reused_tokens", "prefill_joules"))
    assert set(base.cols) == {"reused_tokens", "prefill_joules"} and len(base) == 50
    more = rows.with_columns(oracle_reused_tokens=np.arange(50))
    assert np.array_equal(more["oracle_reused_tokens"], np.arange(50))
    assert isinstance(more, RequestRows) and more.to_arrow().num_rows == 50


def test_replay_imports_no_polars(tmp_path):
    """`pic replay --json` of a trace file imports neither polars nor pandas (nor, without oracle options, the
    ``oracle`` policy's module); RunResult.requests is polars."""
    from pic.engine.config import ReplayConfig
    from pic.engine.replay import replay, write_run
    from pic.traces.io import read_trace, write_trace
    from tests.engine.test_replay import _trace

    path = tmp_path / "t.parquet"
    write_trace(_trace(40), path)
    code = (f"import sys; from pic.cli.app import main; sys.argv = ['pic', 'replay', {str(path)!r}, '-o', "
            f"{str(tmp_path / 'run')!r}, '--json', '--policy', 'prefix,none']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('polars', 'pandas', 'pic.engine.policies.oracle') if m in sys.modules), "
            "file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stderr.strip().splitlines()[-1] == "[]", r.stderr
    res = replay(read_trace(path), ReplayConfig(policies=("prefix", "none")))
    assert isinstance(res.requests, pl.DataFrame) and res.requests.height == 80
    out = write_run(res, tmp_path / "run2")
    assert pl.read_parquet(out / "requests.parquet").equals(res.requests)


def test_min_match_is_the_oracle_option():
    from pic.engine import policies as registry
    from pic.engine.config import ReplayConfig
    from pic.engine.replay import _min_match

    assert _min_match(ReplayConfig(policies=("prefix",))) == registry.make_config("oracle").min_match
    assert _min_match(ReplayConfig(policies=("prefix",), policy_options={"oracle": {"min_match": "16"}})) == 16
    with pytest.raises(ValueError, match="min_match"):
        _min_match(ReplayConfig(policies=("prefix",), policy_options={"oracle": {"min_match": 0}}))


def test_requests_parquet_dictionary_only_for_strings(tmp_path):
    """requests.parquet holds RunResult.table's rows; dictionary pages only for the string columns."""
    import pyarrow.parquet as pq

    from pic.engine.config import ReplayConfig
    from pic.engine.replay import replay, write_run
    from tests.engine.test_replay import _trace

    res = replay(_trace(60), ReplayConfig(policies=("prefix", "none")))
    out = write_run(res, tmp_path / "run")
    f = pq.ParquetFile(out / "requests.parquet")
    assert f.read().equals(res.table) and f.schema_arrow.equals(res.table.schema)
    meta = f.metadata.row_group(0)
    for i in range(meta.num_columns):
        col = meta.column(i)
        assert (col.dictionary_page_offset is not None) == (col.path_in_schema in ("policy", "session_id"))


def test_replay_table_imports_no_polars(tmp_path):
    """`pic replay` as typed (the summary table and headline) imports no polars either."""
    from pic.traces.io import write_trace
    from tests.engine.test_replay import _trace

    path = tmp_path / "t.parquet"
    write_trace(_trace(40), path)
    code = (f"import sys; from pic.cli.app import main; sys.argv = ['pic', 'replay', {str(path)!r}, '-o', "
            f"{str(tmp_path / 'run')!r}, '--policy', 'prefix,fixed-chunk']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('polars', 'pandas') if m in sys.modules), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stderr.strip().splitlines()[-1] == "[]", r.stderr
    assert "fixed-chunk reuses" in r.stdout
