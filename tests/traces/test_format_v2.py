"""Trace format v2: compact opaque segments, no nullable integer columns (pandas reads ids exactly),
readable by pyarrow, polars, pandas and duckdb; version 1 files still read."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pic.traces.content import opaque_tokens
from pic.traces.io import read_trace, write_trace
from pic.traces.schema import KINDS, SegmentTable, Trace, TraceError, requests_frame
from tests.conftest import shared_file


def _trace(n_req: int = 40) -> Trace:
    """Stored text-like segments and opaque blocks (a shared prefix, partial last blocks)."""
    rng = np.random.default_rng(1)
    table = SegmentTable()
    system = table.add(rng.integers(0, 1000, 300, dtype=np.int32), "system")
    rows = {"request_id": [], "session_id": [], "agent_id": [], "arrival_us": [], "output_tokens": [],
            "segment_ids": []}
    for i in range(n_req):
        sids = [system] if i % 2 else []
        sids += [table.add_opaque(k, 7, 512, "block") for k in range(i % 5)]
        sids.append(table.add_opaque(1000 + i % 3, 7, 100 + i % 3, "block"))
        sids.append(table.add(rng.integers(0, 1000, 20 + i, dtype=np.int32), "user"))
        for c, v in zip(rows, (i, f"s{i % 4}", "a", 1000 * i, 3, sids), strict=True):
            rows[c].append(v)
    return Trace(table.build(), requests_frame(rows), source="<test>")


def _occurrences(t: Trace) -> int:
    return int(t.requests["segment_ids"].list.len().sum())


def test_roundtrip_keeps_prompts_and_stores_opaque_compactly(tmp_path) -> None:
    t = _trace()
    assert t.segments.num_opaque == 7 and t.segments.tokens.size == 300 + sum(20 + i for i in range(40))
    p = write_trace(t, tmp_path / "t.parquet")
    back = read_trace(p)
    assert back.segments.num_opaque == 7
    for i in range(t.num_requests):
        assert np.array_equal(back.prompt(i), t.prompt(i))
    assert np.array_equal(back.prompt_lengths, t.prompt_lengths)
    # opaque tokens: derived from (key, salt); a partial block is the prefix of its key's full block
    full, _ = opaque_tokens(np.array([1000], np.uint64), np.array([512]), salt=7)
    j = int(np.flatnonzero(back.segments.lengths == 100)[0])
    assert np.array_equal(back.segments.segment(j), full[:100])
    # tokens column is null for opaque rows and holds no derived token
    tab = pq.read_table(p)
    seg = tab.filter(pa.compute.equal(tab["record"].cast(pa.string()), "segment"))
    assert seg["tokens"].null_count == 7


def test_no_integer_column_has_nulls(tmp_path) -> None:
    p = write_trace(_trace(), tmp_path / "t.parquet")
    tab = pq.read_table(p)
    for f in tab.schema:
        if pa.types.is_integer(f.type):
            assert tab[f.name].null_count == 0, f.name


def test_pyarrow_and_polars_join_every_segment_id(tmp_path) -> None:
    t = _trace()
    p = write_trace(t, tmp_path / "t.parquet")
    df = pl.read_parquet(p)
    assert df.schema["segment_id"] == pl.UInt64
    req = df.filter(pl.col("record") == "request").select("request_id", "segment_ids").explode("segment_ids")
    seg = df.filter(pl.col("record") == "segment").select("segment_id", "length")
    joined = req.join(seg, left_on="segment_ids", right_on="segment_id", how="inner")
    assert joined.height == _occurrences(t)
    lens = joined.group_by("request_id").agg(pl.col("length").sum()).sort("request_id")["length"].to_numpy()
    assert np.array_equal(lens, t.prompt_lengths)


def test_pandas_reads_ids_exactly(tmp_path) -> None:
    pd = pytest.importorskip("pandas")
    t = _trace()
    p = write_trace(t, tmp_path / "t.parquet")
    df = pd.read_parquet(p)
    assert str(df["segment_id"].dtype) == "uint64" and str(df["request_id"].dtype) == "int64"
    seg = df[df["record"] == "segment"]
    req = df[df["record"] == "request"][["request_id", "segment_ids"]].explode("segment_ids")
    req["segment_ids"] = req["segment_ids"].astype("uint64")
    joined = req.merge(seg[["segment_id", "length"]], left_on="segment_ids", right_on="segment_id")
    assert len(joined) == _occurrences(t)
    assert set(seg["segment_id"]) == {int(x) for x in t.segments.ids}
    lens = joined.groupby("request_id")["length"].sum().sort_index().to_numpy()
    assert np.array_equal(lens, t.prompt_lengths)


def test_duckdb_joins_every_segment_id(tmp_path) -> None:
    duckdb = pytest.importorskip("duckdb")
    t = _trace()
    p = write_trace(t, tmp_path / "t.parquet")
    got = duckdb.sql(f"""
        select r.request_id, sum(s.length) as n
        from (select request_id, unnest(segment_ids) as sid from '{p}' where record = 'request') r
        join (select segment_id, length from '{p}' where record = 'segment') s on r.sid = s.segment_id
        group by r.request_id order by r.request_id""").fetchall()
    assert [n for _, n in got] == t.prompt_lengths.tolist()


def _write_v1(t: Trace, path) -> None:
    """A schema-version-1 file (the layout before v2): nullable columns, every token stored."""
    seg = t.segments.materialized()
    n, r = len(seg), t.num_requests
    typ = {"record": pa.dictionary(pa.int8(), pa.string()), "segment_id": pa.uint64(),
           "kind": pa.dictionary(pa.int8(), pa.string()), "tokens": pa.large_list(pa.int32()),
           "request_id": pa.int64(), "session_id": pa.string(), "agent_id": pa.string(), "arrival_us": pa.int64(),
           "output_tokens": pa.int32(), "segment_ids": pa.list_(pa.uint64())}
    req = t.requests.to_arrow()
    cols = {
        "record": pa.array(["segment"] * n + ["request"] * r).dictionary_encode(),
        "segment_id": pa.concat_arrays([pa.array(seg.ids, pa.uint64()), pa.nulls(r, pa.uint64())]),
        "kind": pa.array([KINDS[k] for k in seg.kinds] + [None] * r).dictionary_encode(),
        "tokens": pa.concat_arrays([pa.LargeListArray.from_arrays(pa.array(seg.offsets), pa.array(seg.tokens)),
                                    pa.nulls(r, typ["tokens"])]),
    }
    for c in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids"):
        cols[c] = pa.concat_arrays([pa.nulls(n, typ[c]), req[c].combine_chunks().cast(typ[c])])
    tab = pa.table({c: cols[c].cast(typ[c]) for c in typ}).replace_schema_metadata({"pic.schema_version": "1"})
    pq.write_table(tab, path)


def test_version_1_files_still_read(tmp_path) -> None:
    t = _trace()
    _write_v1(t, tmp_path / "v1.parquet")
    back = read_trace(tmp_path / "v1.parquet")
    assert back.segments.num_opaque == 0
    for i in range(t.num_requests):
        assert np.array_equal(back.prompt(i), t.prompt(i))


def test_bad_v2_files_name_the_field(tmp_path) -> None:
    t = _trace()
    p = write_trace(t, tmp_path / "t.parquet")
    tab = pq.read_table(p)
    meta = tab.schema.metadata
    ids = tab["segment_id"].to_pylist()
    ids[0] = None
    bad = tab.set_column(tab.schema.get_field_index("segment_id"), "segment_id", pa.array(ids, pa.uint64()))
    pq.write_table(bad.replace_schema_metadata(meta), tmp_path / "null.parquet")
    with pytest.raises(TraceError, match="segment_id: null value in a segment row"):
        read_trace(tmp_path / "null.parquet")
    lens = tab["length"].to_pylist()
    lens[0] += 1                        # the first row stores its tokens: they no longer match
    bad = tab.set_column(tab.schema.get_field_index("length"), "length", pa.array(lens, pa.int64()))
    pq.write_table(bad.replace_schema_metadata(meta), tmp_path / "len.parquet")
    with pytest.raises(TraceError, match="tokens: segment row 0: 300 tokens but length 301"):
        read_trace(tmp_path / "len.parquet")


def test_mooncake_conversation_is_compact(tmp_path) -> None:
    """Issue #12: the Mooncake conversation trace is <= 20 MB on disk and stores no block token."""
    from pic.traces.ingest import ingest
    src = shared_file("mooncake", "conversation_trace.jsonl")
    out = tmp_path / "mc.parquet"
    ingest([src], out)
    assert out.stat().st_size <= 20 * 2**20
    t = read_trace(out)
    assert t.segments.tokens.size == 0 and t.segments.num_opaque == 182_790
    assert int(t.segments.offsets[-1]) == 90_695_412
