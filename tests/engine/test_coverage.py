"""engine.coverage: the segment-structure oracle equals the token-level one (engine.oracle.trace_oracle)."""

from __future__ import annotations

import numpy as np
import pytest

from pic.engine.coverage import covered_counts, prompt_oracle
from pic.engine.oracle import trace_oracle
from pic.traces.schema import SegmentTable, Trace, requests_frame


def _tricky_trace(seed: int, n: int = 60) -> Trace:
    """Stored segments sharing substrings (a sentence pasted into others), short segments (windows over
    three or more of them), repeats inside one prompt, opaque streams met full and partial."""
    rng = np.random.default_rng(seed)
    table = SegmentTable()
    base = rng.integers(0, 40, 400, dtype=np.int32)          # low vocabulary: chance matches happen
    pool = [table.add(base[a:a + ln], "document") for a, ln in ((0, 200), (50, 150), (120, 90), (300, 100))]
    short = [table.add(rng.integers(0, 40, int(rng.integers(3, 30)), dtype=np.int32), "user") for _ in range(8)]
    rows = {c: [] for c in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    for i in range(n):
        sids = []
        for _ in range(int(rng.integers(1, 7))):
            r = rng.random()
            if r < 0.3:
                sids.append(pool[int(rng.integers(len(pool)))])
            elif r < 0.55:
                sids.append(short[int(rng.integers(len(short)))])
            elif r < 0.8:
                k = int(rng.integers(0, 4))
                sids.append(table.add_opaque(k, 3, int(rng.choice([40, 64, 100, 512])), "block"))
            else:
                sids.append(table.add(rng.integers(0, 40, int(rng.integers(1, 120)), dtype=np.int32), "user"))
        if rng.random() < 0.2:
            sids = sids + sids[:2]                              # a repeat inside the prompt
        for c, v in zip(rows, (i, f"s{i}", "a", i, 1, sids), strict=True):
            rows[c].append(v)
    return Trace(table.build(), requests_frame(rows), source="<tricky>")


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("m", [8, 64])
def test_prompt_oracle_equals_token_oracle(seed: int, m: int) -> None:
    t = _tricky_trace(seed)
    order = np.arange(t.num_requests)
    want = trace_oracle((t.prompt(i) for i in order), m)
    assert prompt_oracle(t, order, m).tolist() == want.tolist()
    assert want.sum() > 0


def test_counted_from_and_prefix() -> None:
    """Positions before ``counted_from`` are not counted; ``prefix`` covers [0, prefix)."""
    t = _tricky_trace(5, n=20)
    offs, idx = t._csr
    a = covered_counts(t.segments, idx, offs, 16)
    b = covered_counts(t.segments, idx, offs, 16, prefix=t.prompt_lengths)
    c = covered_counts(t.segments, idx, offs, 16, counted_from=t.prompt_lengths)
    assert (b == t.prompt_lengths).all() and (c == 0).all() and (a <= t.prompt_lengths).all()


@pytest.mark.parametrize("seed", [0, 3])
def test_block_hasher_matches_token_hashes(seed: int) -> None:
    """BlockHasher (segment partial sums): equal to prefix_hashes bit for bit on stored content; with opaque
    segments, two prompts get equal block hashes exactly where their token prefixes are equal."""
    from pic.engine.policies.base import RequestView
    from pic.engine.replay import workload_from_trace
    from pic.engine.rolling import BlockHasher, prefix_hashes

    t = _tricky_trace(seed, n=40)
    work = workload_from_trace(t)
    for bs in (1, 16, 64):
        hasher = BlockHasher(bs)
        views = [work.view(i) for i in range(work.num_requests)]
        got = [hasher.hashes(v) for v in views]
        opq = t.segments.opaque_mask
        for v, h in zip(views, got, strict=True):
            plain = RequestView.from_tokens(v.request_id, v.tokens)
            assert h.shape[0] == v.num_tokens // bs
            if not opq[v.segment_rows].any():
                assert (h == prefix_hashes(v.tokens)[bs::bs]).all()
            assert (hasher.hashes(plain) == prefix_hashes(v.tokens)[bs::bs]).all()
        for i in range(0, len(views) - 1, 3):           # equal hash <=> equal tokens up to that block end
            a, b = views[i], views[i + 1]
            k = min(got[i].shape[0], got[i + 1].shape[0])
            same_tok = [bool((a.tokens[:(j + 1) * bs] == b.tokens[:(j + 1) * bs]).all()) for j in range(k)]
            assert (got[i][:k] == got[i + 1][:k]).tolist() == same_tok


def _duplicate_tokens_reference(runs, m: int) -> int:
    """The per-run token-level definition (one WindowIndex lookup and add per run)."""
    from pic.engine.oracle import WindowIndex, covered
    from pic.engine.rolling import window_hashes

    index, num = WindowIndex(), 0
    for toks, ctx in runs:
        w = window_hashes(toks, m)
        if not w.shape[0]:
            continue
        hit, _ = index.lookup(w)
        num += int(covered(hit, toks.shape[0], m)[ctx:].sum())
        new = np.flatnonzero(~hit)
        new = new[new + m > ctx]
        index.add(w[new], new)
    return num


@pytest.mark.parametrize("batch", [1 << 22, 300])
def test_duplicate_tokens_batched_equals_per_run(monkeypatch, batch: int) -> None:
    """duplicate_tokens (batched) counts what the per-run definition counts: contexts, repeats inside a
    run, runs shorter than a window, content first met inside another run's context."""
    from pic.engine import oracle

    monkeypatch.setattr(oracle, "_DUP_BATCH_TOKENS", batch)
    rng = np.random.default_rng(7)
    base = rng.integers(0, 30, 3000, dtype=np.int32)
    runs = []
    for _ in range(120):
        a = int(rng.integers(0, 2800))
        n = int(rng.integers(1, 200))
        toks = base[a:a + n] if rng.random() < 0.6 else rng.integers(0, 30, n, dtype=np.int32)
        if rng.random() < 0.2:
            toks = np.concatenate([toks, toks])
        runs.append((toks, int(rng.integers(0, min(64, toks.shape[0]) + 1))))
    for m in (4, 16, 64):
        want = _duplicate_tokens_reference(runs, m)
        assert oracle.duplicate_tokens(runs, m) == want
        assert want > 0 or m == 64


@pytest.mark.parametrize(("seed", "anchors", "block"), [(0, True, 1 << 13), (1, True, 7), (2, True, 1), (4, True, 1 << 13),
                                                       (0, False, 7), (2, False, 1 << 13)])
def test_duplicate_tokens_by_reference_equals_tokens(monkeypatch, seed: int, anchors: bool, block: int) -> None:
    """Runs given as references into a trace's segments (radix edges, random sub-ranges of prompts with a
    context, opaque streams cut anywhere) count what their tokens count, with the anchor filter (its second
    pass from the kept run columns) and without it (above ``_ANCHOR_TOKENS``), in blocks down to one run."""
    from pic.engine import oracle

    monkeypatch.setattr(oracle, "_REF_BLOCK", block)
    if not anchors:
        monkeypatch.setattr(oracle, "_ANCHOR_TOKENS", 0)

    seqs, tree, cuts = _tree_and_cuts(_tricky_trace(seed, n=80), seed, 150, 80)
    for refs in (tree.run_refs(), cuts, tree.run_refs(context=100) + cuts):
        toks = [(q.tokens(lo, hi), c) for q, lo, hi, c in refs]
        for m in (8, 16, 64):
            want = oracle.duplicate_tokens(toks, m)
            assert oracle.duplicate_tokens(refs, m) == want
    assert want > 0
    # prompts whose Seq arrays are int64 (values past int32), alone or among int32 ones: the same count
    from array import array

    from pic.engine.seq import Seq

    def wide(q):
        return Seq(array("q", q.rows), array("q", q.bounds), q.store, None, q.end)

    for pick in (lambda k: True, lambda k: k % 3 == 0):
        mixed = [(wide(q) if pick(k) else q, lo, hi, c) for k, (q, lo, hi, c) in enumerate(cuts)]
        assert oracle.duplicate_tokens(mixed, 16) == oracle.duplicate_tokens(cuts, 16)


@pytest.mark.parametrize(("seed", "block", "anchor_tokens"), [(0, 1 << 15, 1 << 27), (1, 7, 1 << 27), (2, 1, 1 << 27),
                                                              (0, 1 << 15, 0), (1, 7, 0)])
def test_duplicate_tokens_of_columns_equals_tokens(monkeypatch, seed: int, block: int, anchor_tokens: int) -> None:
    """Runs given as :class:`RefRuns` columns (a lean irminsul store's stored runs; several replicas' joined
    by ``join_runs``, in blocks down to one run) count what their tokens count, and iterate as the tuples;
    with the anchor filter and without it."""
    from pic.engine import oracle
    from pic.engine.replay import workload_from_trace

    monkeypatch.setattr(oracle, "_COL_BLOCK", block)
    monkeypatch.setattr(oracle, "_ANCHOR_TOKENS", anchor_tokens)
    t = _tricky_trace(seed, n=80)
    work = workload_from_trace(t)
    seqs = [work.view(i).seq for i in range(work.num_requests)]
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(3):                        # replicas: each its own prompts, some shared
        mine = [seqs[i] for i in rng.choice(len(seqs), 12, replace=False)]
        src, lo, hi = [], [], []
        for _ in range(60):
            k = int(rng.integers(len(mine)))
            a = int(rng.integers(0, mine[k].end))
            src.append(k)
            lo.append(a)
            hi.append(int(rng.integers(a, mine[k].end + 1)))
        parts.append(oracle.RefRuns(mine, np.array(src, np.int64), np.array(lo, np.int64), np.array(hi, np.int64)))
    joined = oracle.join_runs(parts)
    tuples = [r for p in parts for r in p]
    assert [(id(q), a, b, c) for q, a, b, c in joined] == [(id(q), a, b, c) for q, a, b, c in tuples]
    assert len(joined) == len(tuples) == 180 and all(c == 0 for *_, c in tuples)
    assert oracle.join_runs([parts[0], tuples[:5]]) == list(parts[0]) + tuples[:5]
    toks = [(q.tokens(a, b), 0) for q, a, b, _ in tuples]
    for m in (8, 16, 64):
        want = oracle.duplicate_tokens(toks, m)
        assert oracle.duplicate_tokens(joined, m) == oracle.duplicate_tokens(tuples, m) == want
    assert want > 0


@pytest.mark.parametrize(("part", "spill", "batch", "chunk"),
                         [(1 << 22, 1 << 24, 1 << 21, 1 << 18), (8, 0, 50, 1), (64, 1 << 24, 7, 5), (16, 300, 100, 40)])
def test_partitioned_windows_equal_token_oracle(monkeypatch, part: int, spill: int, batch: int, chunk: int) -> None:
    """Items in chunks (down to one item each) and hashed windows decided by partition (many partitions,
    tiny batches, spilled to a temporary file, at once or midway, removed afterwards) give the
    token-level oracle's counts and duplicate counts."""
    import os
    import tempfile

    from pic.engine import anchors, coverage, oracle, window_parts
    from pic.engine.radix import RadixTree
    from pic.engine.replay import workload_from_trace

    monkeypatch.setattr(window_parts, "_PART_WINDOWS", part)
    monkeypatch.setattr(window_parts, "_SPILL_WINDOWS", spill)
    monkeypatch.setattr(window_parts, "_BATCH_TOKENS", batch)
    monkeypatch.setattr(anchors, "_BATCH_TOKENS", batch)
    monkeypatch.setattr(coverage, "_CHUNK_PIECES", chunk)
    monkeypatch.setattr(oracle, "_REF_BLOCK", max(1, chunk // 4))
    tmp = tempfile.mkdtemp()
    monkeypatch.setattr(tempfile, "tempdir", tmp)
    for seed in (0, 1):
        t = _tricky_trace(seed)
        order = np.arange(t.num_requests)
        for m in (8, 64):
            want = trace_oracle((t.prompt(i) for i in order), m)
            assert prompt_oracle(t, order, m).tolist() == want.tolist()
        work = workload_from_trace(t)
        tree = RadixTree()
        for i in range(work.num_requests):
            tree.insert(work.view(i).seq, i)
        refs = tree.run_refs(context=100)
        toks = [(q.tokens(lo, hi), c) for q, lo, hi, c in refs]
        assert oracle.duplicate_tokens(refs, 16) == oracle.duplicate_tokens(toks, 16) > 0
    assert os.listdir(tmp) == []


@pytest.mark.parametrize(("seed", "block"), [(0, 1 << 15), (1, 9), (2, 3), (3, 1), (4, 40)])
def test_duplicate_tokens_of_chunked_runs_filtered(monkeypatch, seed: int, block: int) -> None:
    """Stored runs cut like a content-defined store's (each stored prompt's new content as consecutive chunks,
    most content stored once, some stored again later, cut elsewhere, or repeated inside a run), in blocks
    down to one run: the filter of records held by no earlier run (``intervals._Earlier._filtered``: records set
    aside, then merged when a later block meets their content again) counts what the tokens count, and what the
    count without the filter counts."""
    from pic.engine import coverage, oracle
    from pic.engine.replay import workload_from_trace

    monkeypatch.setattr(oracle, "_COL_BLOCK", block)
    t = _tricky_trace(seed, n=80)
    work = workload_from_trace(t)
    seqs = [work.view(i).seq for i in range(work.num_requests)]
    rng = np.random.default_rng(seed)
    src, lo, hi = [], [], []
    for k, q in enumerate(seqs):
        a = int(rng.integers(0, max(q.end // 3, 1)))       # (a shared head not stored again)
        if rng.random() < 0.25 and k > 0:                  # an earlier prompt's content stored again, cut elsewhere
            j = int(rng.integers(k))
            b = int(rng.integers(0, seqs[j].end))
            src.append(j)
            lo.append(b)
            hi.append(min(seqs[j].end, b + int(rng.integers(20, 300))))
        while a < q.end:
            b = min(q.end, a + int(rng.integers(5, 150)))
            src.append(k)
            lo.append(a)
            hi.append(b)
            a = b
    runs = oracle.RefRuns(seqs, np.array(src, np.int64), np.array(lo, np.int64), np.array(hi, np.int64))
    toks = [(q.tokens(a, b), 0) for q, a, b, _ in runs]
    got, on = {}, coverage._FILTER_IDS
    for ids in (on, 0):
        monkeypatch.setattr(coverage, "_FILTER_IDS", ids)
        for m in (8, 16, 64):
            got[ids, m] = oracle.duplicate_tokens(runs, m)
            assert got[ids, m] == oracle.duplicate_tokens(toks, m)
    assert got[on, 8] > 0 and len(runs) > 300


def _opaque_trace(seed: int, n: int = 80, repeats: bool = False) -> Trace:
    """Prompts of opaque blocks only (a radix tree's stored runs hold each content once): conversations that
    grow (a prompt continues an earlier one, or a cut of it), a prompt's last block met longer in a later
    one (one stream at two lengths), optionally a block met again after another prefix (content stored twice)."""
    rng = np.random.default_rng(seed)
    table = SegmentTable()
    rows = {c: [] for c in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    prompts: list[list[tuple[int, int]]] = []
    key = 0
    for i in range(n):
        blocks = list(prompts[int(rng.integers(len(prompts)))]) if prompts and rng.random() < 0.7 else []
        if blocks and rng.random() < 0.3:
            blocks = blocks[:int(rng.integers(1, len(blocks) + 1))]
        if blocks and rng.random() < 0.4:
            blocks[-1] = (blocks[-1][0], blocks[-1][1] + int(rng.integers(1, 50)))     # its last block, longer
        for _ in range(int(rng.integers(1, 4))):
            key += 1
            k = int(rng.integers(1, key)) if repeats and rng.random() < 0.15 else key
            blocks.append((k, int(rng.choice([10, 40, 64, 100]))))
        prompts.append(blocks)
        sids = [table.add_opaque(k, 5, ln, "block") for k, ln in blocks]
        for c, v in zip(rows, (i, f"s{i}", "a", i, 1, sids), strict=True):
            rows[c].append(v)
    return Trace(table.build(), requests_frame(rows), source="<opaque>")


@pytest.mark.parametrize(("seed", "repeats", "keep"), [(0, False, 1 << 21), (1, False, 0), (2, True, 1 << 21),
                                                        (3, True, 0), (4, True, 5)])
def test_covered_none_decides_zero_counts(monkeypatch, seed: int, repeats: bool, keep: int) -> None:
    """coverage.covered_none: where it tells that no window is seen earlier, the count is 0 by the tokens;
    elsewhere (content stored twice, stored-token segments, contexts of a window or more) the count is
    the token-level one, with the chunks it read kept (or, past ``keep`` pieces, read again)."""
    from pic.engine import coverage, oracle
    from pic.engine.radix import RadixTree
    from pic.engine.replay import workload_from_trace

    told = []
    real = coverage.covered_none

    def spy(store, chunks, width, keep_=None):
        got = real(store, chunks, width, keep)
        told.append(got[0])
        return got

    monkeypatch.setattr(coverage, "covered_none", spy)
    for t in (_opaque_trace(seed, repeats=repeats), _tricky_trace(seed)):
        _, tree, cuts = _tree_and_cuts(t, seed, 60, None)
        for refs in (tree.run_refs(), tree.run_refs(context=7), tree.run_refs(context=100), cuts):
            toks = [(q.tokens(lo, hi), c) for q, lo, hi, c in refs]
            for m in (8, 16, 64):
                assert oracle.duplicate_tokens(refs, m) == oracle.duplicate_tokens(toks, m)
    assert False in told and (True in told or repeats)
    if not repeats:             # a radix tree of opaque content: its runs' count is told 0 by the names
        work, runs = workload_from_trace(_opaque_trace(seed)), RadixTree()
        for i in range(work.num_requests):
            runs.insert(work.view(i).seq, i)
        told.clear()
        assert oracle.duplicate_tokens(runs.run_refs(), 16) == 0 and told == [True]


def _tree_and_cuts(trace: Trace, seed: int, num_cuts: int, max_context: int | None):
    """The trace's prompts (Seqs), a radix tree of them (request order) and ``num_cuts`` random sub-ranges
    ``(seq, lo, hi, context)`` of them, each with a random context of up to ``max_context`` tokens (None: 0)."""
    from pic.engine.radix import RadixTree
    from pic.engine.replay import workload_from_trace

    work = workload_from_trace(trace)
    seqs = [work.view(i).seq for i in range(work.num_requests)]
    tree = RadixTree()
    for i, q in enumerate(seqs):
        tree.insert(q, i)
    rng = np.random.default_rng(seed)
    cuts = []
    for _ in range(num_cuts):
        q = seqs[int(rng.integers(len(seqs)))]
        lo = int(rng.integers(0, q.end))
        hi = int(rng.integers(lo, q.end + 1))
        ctx = 0 if max_context is None else int(rng.integers(0, min(max_context, hi - lo) + 1))
        cuts.append((q, lo, hi, ctx))
    return seqs, tree, cuts


def _stream_cases() -> list[Trace]:
    """Opaque prompts where a stream's rows meet past a prefix: an earlier row shorter than the later one's part
    past the prefix (unmet), the same, or longer (met: windows seen), and a row met again within one prompt only."""
    out = []
    for blocks in ([[(1, 30), (2, 100)], [(1, 30), (2, 300)]],            # the longer row continues the shorter: unmet
                   [[(2, 100)], [(3, 20), (2, 300)]],                      # the shorter row's tokens, after another prefix
                   [[(2, 300)], [(3, 20), (2, 100)]],                      # a longer row met before
                   [[(4, 90), (4, 90)], [(4, 90), (5, 70)]],               # repeated inside the first prompt only
                   [[(2, 101)], [(5, 40), (2, 100)], [(5, 40), (2, 300)]]):  # one token more met elsewhere
        table = SegmentTable()
        rows = {c: [] for c in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
        for i, b in enumerate(blocks):
            sids = [table.add_opaque(k, 5, ln, "block") for k, ln in b]
            for c, v in zip(rows, (i, "s", "a", i, 1, sids), strict=True):
                rows[c].append(v)
        out.append(Trace(table.build(), requests_frame(rows), source="<streams>"))
    return out


@pytest.mark.parametrize("m", [4, 8, 64])
def test_prompt_oracle_unmet_past_prefix(monkeypatch, m: int) -> None:
    """coverage._unmet_past_prefix: where every token past each prefix is met for the first time, the reuse is the
    prefix, with no window looked at; where it cannot tell (a stream met before, stored tokens, windows under
    ``_UNMET_MIN`` tokens), the windows decide. Equal to the token-level oracle either way."""
    from pic.engine import coverage

    calls = []
    real = coverage.covered_counts
    monkeypatch.setattr(coverage, "covered_counts", lambda *a, **k: calls.append(1) or real(*a, **k))
    told: dict[str, list[bool]] = {}
    cases = [("grown", _opaque_trace(seed)) for seed in range(6)] + [("again", _opaque_trace(s, repeats=True))
                                                                     for s in range(6)]
    cases += [("tricky", _tricky_trace(s)) for s in range(3)] + [("streams", t) for t in _stream_cases()]
    for kind, t in cases:
        order = np.arange(t.num_requests)
        want = trace_oracle((t.prompt(i) for i in order), m)
        calls.clear()
        assert prompt_oracle(t, order, m).tolist() == want.tolist()
        told.setdefault(kind, []).append(not calls)
    assert not any(told["tricky"])                             # (stored tokens)
    if m < 8:
        assert not any(v for k in told for v in told[k])       # (too short to tell)
    else:           # grown conversations and a continued row told; a stream met before not
        assert all(told["grown"]) and not all(told["again"]) and told["streams"] == [True, False, False, True, False]
