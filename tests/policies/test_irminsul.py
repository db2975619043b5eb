"""irminsul: shifted content found with the right delta, prefix continuation, first-chunk clip, S1, S2,
accounting and eviction order."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic.engine import policies
from pic.engine.plan import Action, Plan
from pic.engine.policies import PolicyContext, RequestView
from pic.engine.policies.irminsul_records import Chunk
from pic.engine.policies.irminsul_runs import run_edges
from pic.engine.seq import Seq
from pic.traces.markers import BOUNDARY_MARKER

BPT = 2


def _pol(capacity_tokens: float = math.inf, verify: bool = True, **opts):
    cap = math.inf if math.isinf(capacity_tokens) else capacity_tokens * BPT
    return policies.build("irminsul", PolicyContext(cap, BPT, verify=verify), opts)


def _rand(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 100_000, n, dtype=np.int32)


def _serve_view(pol, req: RequestView, now: int) -> Plan:
    plan = pol.lookup(req, now)
    assert pol.admit(req, plan, now)
    pol.commit(req, now + 1)
    pol.release(req, now + 2)
    return plan


def _serve(pol, rid: int, toks: np.ndarray, now: int = 0) -> Plan:
    plan = _serve_view(pol, RequestView.from_tokens(rid, toks), now)
    pol.usage().check()
    return plan


def test_shifted_content_reused_with_delta():
    """A document moved behind a longer header is reused rotated with delta = shift."""
    doc = _rand(1, 3000)
    pol = _pol()
    _serve(pol, 0, np.concatenate([_rand(2, 100), doc]))
    plan = _serve(pol, 1, np.concatenate([_rand(3, 250), doc]))
    rot = [s for s in plan.spans if s.action == Action.REUSE_ROTATED]
    assert rot and all(s.delta == 150 for s in rot)
    assert plan.num_reused >= 3000 - 2 * 700          # all but the chunks straddling the edit
    assert pol.stats.collisions == 0 and pol.stats.verified_hits > 0


@pytest.mark.parametrize("gear", ["table", "mix"])
def test_shifted_content_reused_with_either_gear(gear):
    """``gear=mix`` (table-free Gear values) chunks differently but finds moved content as well."""
    doc = _rand(11, 4000)
    pol = _pol(gear=gear)
    assert pol.config.cdc.gear == gear
    _serve(pol, 0, np.concatenate([_rand(12, 90), doc]))
    plan = _serve(pol, 1, np.concatenate([_rand(13, 333), doc]))
    assert plan.num_reused >= 4000 - 2 * 700 and pol.stats.collisions == 0
    cuts = {g: _pol(gear=g).config.cdc for g in ("table", "mix")}
    from pic.engine import cdc
    assert not np.array_equal(cdc.chunk(doc, cuts["table"]), cdc.chunk(doc, cuts["mix"]))


def test_exact_prefix_is_token_granular_reuse():
    """A continued prompt reuses exactly the earlier prompt, in place, to the token."""
    first = _rand(4, 1234)
    pol = _pol()
    _serve(pol, 0, first)
    plan = _serve(pol, 1, np.concatenate([first, _rand(5, 300)]))
    assert plan.spans[0].action == Action.REUSE and plan.leading_reuse == 1234


def test_first_chunk_clip_recomputes_sink_tokens():
    """KV reused at position 0 from elsewhere has its first sink_tokens recomputed."""
    x = _rand(6, 900)
    pol = _pol(s2=True)
    head = _rand(7, 100)
    _serve(pol, 0, np.concatenate([head, BOUNDARY_MARKER, x, BOUNDARY_MARKER]))
    plan = _serve(pol, 1, np.concatenate([x, _rand(8, 50)]))
    assert plan.spans[0].action == Action.RECOMPUTE and plan.spans[0].end == 32
    s = plan.spans[1]
    assert s.action == Action.REUSE_ROTATED and s.source_pos == 164 + 32
    assert pol.stats.extra["clipped_tokens"] == 32


def test_s2_markers_make_region_chunks_context_free():
    """With S2 a marked region is reused whole after any header; without it the edge chunks miss."""
    region = _rand(9, 2000)
    got = {}
    for s2 in (False, True):
        pol = _pol(s2=s2)
        _serve(pol, 0, np.concatenate([_rand(10, 77), BOUNDARY_MARKER, region, BOUNDARY_MARKER, _rand(11, 40)]))
        plan = _serve(pol, 1, np.concatenate([_rand(12, 301), BOUNDARY_MARKER, region, BOUNDARY_MARKER,
                                              _rand(13, 90)]))
        got[s2] = plan.num_reused
    assert got[True] >= 2000 + 2 * 64 - 1 and got[True] > got[False]


@pytest.mark.parametrize("how", ["s1", "tails"])
def test_straddling_chunk_recovered(how):
    """The chunk straddling the start of a shared document (new header, then the document) shares its end
    with the stored one: S1's end-aligned windows find whole windows of it, the tail trie the whole run
    (token-granular, so at least as much), with no registry entry of its own."""
    doc = _rand(14, 2500)
    got = {}
    for on in (False, True):
        pol = _pol(s1=(how == "s1") and on, tails=(how == "tails") and on)
        _serve(pol, 0, np.concatenate([_rand(15, 200), doc]))
        plan = _serve(pol, 1, np.concatenate([_rand(16, 333), doc]))
        got[on] = plan.num_reused
        entries = len(pol._store.entries) + len(pol._store.windows)
    assert got[True] > got[False]
    assert pol.stats.extra["window_hits" if how == "s1" else "tail_tokens"] > 0
    if how == "tails":
        assert got[True] >= 2500 - 64 and entries == len(pol._store.entries)


def test_capacity_never_exceeded_and_locked_kept():
    """Admission evicts unlocked KV only: while a is locked, b stores only the head that fits (it still
    runs); once a is released, a later request evicts a for its own KV."""
    pol = _pol(capacity_tokens=5000)
    a = RequestView.from_tokens(0, _rand(17, 3000))
    plan = pol.lookup(a, 0)
    assert pol.admit(a, plan, 0)
    pol.commit(a, 1)
    b = RequestView.from_tokens(1, _rand(18, 3000))
    assert pol.admit(b, pol.lookup(b, 2), 2)          # a is locked: b keeps what fits in the 2000 left
    u = pol.usage()
    u.check()
    assert 3000 * BPT < u.protected <= 5000 * BPT and pol.stats.extra["partly_stored"] == 1
    assert pol.holds(a)
    pol.commit(b, 3)
    pol.release(b, 3)
    pol.release(a, 3)
    c = RequestView.from_tokens(2, _rand(19, 3000))
    assert pol.admit(c, pol.lookup(c, 4), 4)          # now a (or b) is evicted for c
    u = pol.usage()
    u.check()
    assert u.protected == 3000 * BPT and pol.stats.evictions > 0


@pytest.mark.parametrize("order", ["lru", "lfu"])
def test_eviction_order_by_key(order):
    """Under lru the least recently used chunk goes first; under lfu the least hit."""
    pol = _pol(capacity_tokens=2000, eviction=order)
    x, y = _rand(19, 1000), _rand(20, 1000)
    _serve(pol, 0, x, now=0)
    _serve(pol, 1, y, now=10)
    for t in (20, 30):                      # x hit twice, y once (at the latest time)
        pol.lookup(RequestView.from_tokens(9, x), t)
    pol.lookup(RequestView.from_tokens(9, y), 40)
    _serve(pol, 2, _rand(21, 1000), now=50)     # frees exactly 1000 tokens: all of x or all of y
    reused = pol.lookup(RequestView.from_tokens(3, x), 60).num_reused
    assert reused == (1000 if order == "lfu" else 0)


def test_config_validation():
    """Bad options fail at construction with ValueError."""
    with pytest.raises(ValueError):
        _pol(eviction="random")
    with pytest.raises(ValueError):
        _pol(avg_chunk=100, min_chunk=64)
    with pytest.raises(ValueError):
        _pol(marker_tokens="1,x")


def test_never_behind_exact_prefix_cache(stream):
    """With room for everything, irminsul reuses at least what the prefix cache does on every request
    (up to the first-chunk clip of a chunk whose stored copy came from another position)."""
    irm, pre = _pol(), policies.build("prefix", PolicyContext(math.inf, BPT))
    ahead = 0
    for i, req in enumerate(stream):
        got = [_serve_view(p, req, 10 * i).num_reused for p in (irm, pre)]
        assert got[0] >= got[1] - irm.config.sink_tokens, f"request {req.request_id}: {got}"
        ahead += got[0] > got[1]
    assert ahead > 0 and irm.stats.collisions == 0


# ---- memory pressure (#10): lock only what is reused, never store reused KV twice, store what fits ----

def _run_doc(seed: int, reps: int) -> np.ndarray:
    """Random text, a 23-token sentence repeated ``reps`` times (no content cut for thousands of tokens),
    random text: the low-entropy shape of real tool outputs."""
    rng = np.random.default_rng(seed)
    sentence = rng.integers(0, 50_000, 23, dtype=np.int32)
    return np.concatenate([rng.integers(0, 50_000, 1500, dtype=np.int32), np.tile(sentence, 230),
                           rng.integers(0, 50_000, 1200, dtype=np.int32)])


def test_near_full_reuse_fits_a_tight_cache():
    """A request that reuses all but a few dozen tokens of a stored prompt is served from the cache in a
    cache barely larger than the prompt: it locks what it reuses and stores only what it recomputes
    (before: its moved chunks needed ~2x the prompt and it ran uncached)."""
    a = _run_doc(1, 230)
    edit = 1500 + 23 * 100                                    # an insertion inside the repeated run
    b = np.concatenate([a[:edit], _rand(2, 61), a[edit:]])
    pol = _pol(capacity_tokens=int(1.3 * a.size), max_chunk=1024)
    _serve(pol, 0, a)
    req = RequestView.from_tokens(1, b)
    plan = pol.lookup(req, 10)
    assert plan.num_reused >= b.size - 61 - 2 * 1024
    assert pol.admit(req, plan, 10), "a near-full hit must not run uncached"
    pol.usage().check()
    pol.commit(req, 11)
    pol.release(req, 12)
    pol.usage().check()


def test_reused_kv_is_not_stored_twice():
    """Serving a shifted and edited copy of a stored prompt adds only the tokens it recomputed."""
    a = np.concatenate([_rand(3, 200), _rand(4, 5000)])
    b = np.concatenate([_rand(5, 333), a[200:2600], _rand(6, 40), a[2600:]])
    pol = _pol()
    _serve(pol, 0, a)
    before = pol.usage().total // BPT
    plan = _serve(pol, 1, b)
    assert plan.num_reused > 4000
    assert pol.usage().total // BPT - before == plan.num_recomputed


def test_locks_only_the_reused_tokens():
    """A plan that reuses half of a stored chunk protects exactly those tokens (+ its own new KV), and
    the other half of the chunk stays evictable."""
    a = _rand(7, 3000)
    pol = _pol(max_chunk=2048)
    _serve(pol, 0, a)
    first = min(pol._store.chunks(), key=lambda e: e.pieces[0][0].base_pos)
    take = first.tokens.size // 2
    req = RequestView.from_tokens(1, np.concatenate([a[:take], _rand(8, 100)]))
    plan = pol.lookup(req, 10)
    assert plan.num_reused == take
    assert pol.admit(req, plan, 10)
    u = pol.usage()
    assert u.protected == (take + plan.num_recomputed) * BPT
    assert u.evictable == (3000 - take) * BPT
    pol.evict(10**9, 11)
    assert pol.holds(req) and pol.usage().protected == u.protected


def test_stores_what_fits_prefix_first():
    """New chunks that do not all fit are stored prefix first instead of running the request uncached."""
    pol = _pol(capacity_tokens=2000)
    a = _rand(10, 1500)
    _serve(pol, 0, a)
    b = _rand(11, 4000)
    req = RequestView.from_tokens(1, b)
    assert pol.admit(req, pol.lookup(req, 10), 10)
    pol.commit(req, 11)
    pol.release(req, 12)
    u = pol.usage()
    u.check()
    assert 1000 <= u.total // BPT <= 2000
    assert pol.lookup(RequestView.from_tokens(2, b), 20).leading_reuse >= 1000     # its head was kept


def test_tight_cache_keeps_conversation_heads_like_a_prefix_cache():
    """Two interleaved conversations, each turn extending the last, in a cache of ~2.5 prompts: among
    equally recent KV irminsul evicts prompt tails first (a chunk loses its tail, keeps serving its head),
    so it reuses at least what the exact-prefix cache does (before: a shared head extent went first and
    took every chunk over it)."""
    rng = np.random.default_rng(30)
    convs = [list(rng.integers(0, 9000, 120)) for _ in range(2)]
    irm = _pol(capacity_tokens=1000, verify=False)
    pre = policies.build("prefix", PolicyContext(1000 * BPT, BPT))
    got = {"irminsul": 0, "prefix": 0}
    for t in range(24):
        conv = convs[t % 2]
        conv += list(rng.integers(0, 9000, int(rng.integers(20, 60))))
        req = RequestView.from_tokens(t, np.array(conv, np.int32))
        for name, pol in (("irminsul", irm), ("prefix", pre)):
            plan = pol.lookup(req, 10 * t)
            if pol.admit(req, plan, 10 * t):
                got[name] += plan.num_reused
                pol.commit(req, 10 * t + 1)
                pol.release(req, 10 * t + 2)
    assert got["irminsul"] >= got["prefix"] > 0, got


def test_evicting_a_tail_cuts_the_chunk_and_keeps_its_head():
    """r1 extends r0 by 10 tokens, so r1's last chunk is a view of r0's tail KV plus 10 tokens of its own.
    Evicting the smallest amount takes those 10 tokens (the tail, produced last) and cuts r1's chunk to its
    head instead of dropping it: every registry entry stays, and r1's prompt minus 10 tokens is served."""
    a = _rand(31, 2010)
    pol = _pol(max_chunk=1024)
    _serve(pol, 0, a[:2000])
    _serve(pol, 1, a, now=10)
    last = max(pol._store.chunks(), key=lambda c: c.pieces[-1][0].base_pos)
    assert [x.base_pos for x, _, _ in last.pieces][-1] == 2000 and len(last.pieces) == 2   # view + own tail
    before, entries = pol.usage().total, len(pol._store.entries)
    assert pol.evict(BPT, 20) == 10 * BPT and pol.usage().total == before - 10 * BPT
    assert len(pol._store.entries) == entries and last.tokens.size == last.pieces[0][2]    # cut, not dropped
    assert pol.lookup(RequestView.from_tokens(2, a), 30).leading_reuse == 2000


def test_overlapping_locks_of_one_extent_leave_live_parts():
    """Two reused ranges of one stored run that overlap in the source (a prompt holding the run twice)
    lock it twice; the second lock splits what the first one locked. The first lock's extent is then dead
    and its live parts are what a new chunk must index (admit maps views through ``parts_of``; before, a
    view kept the dead extent and a later request reusing that chunk was refused as stale: 1 request on
    taubench at 5 % of the prefix peak)."""
    from pic.engine.eviction import lru
    from pic.engine.policies.irminsul_store import ChunkStore

    st = ChunkStore(lru, 128, BPT)
    x = st.new_extent(Seq.of_array(_rand(32, 140)), 100, 40, 0)
    st.register(1, x.src, x.base_pos, 40, [[x, 0, 40]], 0, [x])
    st.unlock(x)
    first = st.lock_range(x, 0, 20)
    second = st.lock_range(x, 10, 30)
    assert [e.size for e in first] == [20] and not first[0].alive
    parts = [e for f in first for e in st.parts_of(f)]
    assert [(e.base_pos, e.size) for e in parts] == [(100, 10), (110, 10)] and all(e.alive for e in parts)
    assert [(e.base_pos, e.size) for e in second] == [(110, 10), (120, 10)]
    assert st.protected == 30 * BPT and st.evictable == 10 * BPT


def _shared_trace(seed: int, n: int = 60):
    """Prompts of shared documents in varying order (stored and opaque segments), continued conversations
    and fresh text: irminsul reuses chunks off the prefix, splits extents and, when tight, evicts."""
    from pic.traces.schema import SegmentTable, Trace, requests_frame

    rng = np.random.default_rng(seed)
    table = SegmentTable()
    docs = [table.add(rng.integers(0, 5000, int(rng.integers(150, 700)), dtype=np.int32), "document")
            for _ in range(6)]
    docs += [table.add_opaque(k, 7, int(rng.choice([128, 512])), "block") for k in range(3)]
    rows = {c: [] for c in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    prev: list[int] = []
    for i in range(n):
        r = rng.random()
        if r < 0.3 and prev:
            sids = prev + [table.add(rng.integers(0, 5000, int(rng.integers(20, 200)), dtype=np.int32), "user")]
        else:
            k = int(rng.integers(1, 4))
            sids = [docs[j] for j in rng.choice(len(docs), k, replace=False)]
            sids.append(table.add(rng.integers(0, 5000, int(rng.integers(5, 120)), dtype=np.int32), "user"))
        prev = sids
        for c, v in zip(rows, (i, f"s{i}", "a", i, 1, sids), strict=True):
            rows[c].append(v)
    return Trace(table.build(), requests_frame(rows), source="<shared>")


@pytest.mark.parametrize("seed,capacity", [(0, math.inf), (1, 3000), (2, 6000)])
def test_stored_runs_are_references_counting_what_their_tokens_count(seed: int, capacity: float):
    """Extents refer to their prompt's segments, ``(seq, lo, hi, 0)``, through splits and evictions: every
    chunk's pieces read back exactly the chunk's own token copy, duplicate_stored_tokens by reference
    equals the count over the materialized runs, and the plans equal those of the same prompts given as
    bare token arrays (private-array Seqs: prompt index and extents over copies)."""
    from pic.engine.oracle import duplicate_tokens
    from pic.engine.replay import workload_from_trace

    t = _shared_trace(seed)
    work = workload_from_trace(t)
    by_ref, by_tok = _pol(capacity), _pol(capacity)
    dups, splits = [], 0
    for i in range(work.num_requests):
        v = work.view(i)
        a = _serve_view(by_ref, v, 10 * i)
        b = _serve_view(by_tok, RequestView.from_tokens(v.request_id, v.tokens.copy()), 10 * i)
        assert a == b, f"request {i}: plans differ"
        by_ref.usage().check()
        st = by_ref._store
        for c in st.chunks():
            got = np.concatenate([x.src.tokens(x.base_pos + xo, x.base_pos + xo + n) for x, xo, n in c.pieces])
            assert np.array_equal(got, c.tokens), f"request {i}: chunk {c.fp:x} reads other tokens"
            splits += sum(x.base_pos != c.pieces[0][0].base_pos for x, _, _ in c.pieces[1:])
        if i % 15 == 14 or i == work.num_requests - 1:
            runs = by_ref.footprint().runs
            assert all(len(r) == 4 and r[0].store is t.segments and r[3] == 0 for r in runs)
            assert sum(hi - lo for _, lo, hi, _ in runs) * BPT == by_ref.usage().total     # every stored token once
            toks = [(q.tokens(lo, hi), c) for q, lo, hi, c in runs]
            for m in (16, 64):
                want = duplicate_tokens(toks, m)
                assert duplicate_tokens(runs, m) == want
                assert want == duplicate_tokens([(q.tokens(lo, hi), c) for q, lo, hi, c in by_tok.footprint().runs], m)
                dups.append(want)
    assert max(dups) > 0 and splits > 0
    if not math.isinf(capacity):
        assert by_ref.stats.evictions > 0


@pytest.mark.parametrize("bounded", [False, True])
def test_make_ready_fast_path_equals_the_general_path(bounded):
    """Chunks whose keys admit gave (the common case: one C-level pass) are made ready with the same state,
    log and prefilter counts as chunks whose keys are derived from their tokens (the general loop)."""
    from collections import Counter

    from pic.engine import cdc
    from pic.engine.eviction import lru
    from pic.engine.policies.irminsul_store import ChunkStore

    toks = _rand(41, 3000)
    src = Seq.of_array(toks)
    bounds = [0, 300, 700, 701 + 63, 1500, 2200, 3000]     # (one chunk of 64 tokens)
    m = 16
    heads, tails = cdc.edge_keys(toks, np.array(bounds, np.int64), m)
    state = []
    for given in (True, False):
        st = ChunkStore(lru, 128, BPT, tails=True, min_match=m, bounded=bounded)
        chunks = []
        for k in range(len(bounds) - 1):
            a, b = bounds[k], bounds[k + 1]
            x = st.new_extent(src, a, b - a, 0)
            keys = (int(heads[k]), int(tails[k])) if given else None
            chunks.append(st.register(1000 + k, src, a, b - a, [[x, 0, b - a]], 0, [x], keys))
        st.make_ready(chunks, 0, False)
        state.append(([(c.ready, c.indexed, c.head, c.keys) for c in chunks], Counter(st._heads), Counter(st._tails),
                      [(e if not isinstance(e, type(chunks[0])) else e.fp) for e in st._log]))
    assert state[0] == state[1]
    assert all(r and n == c.size for (r, n, _, _), c in zip(state[0][0], chunks, strict=True))
    assert sum(state[0][1].values()) == len(bounds) - 1 and state[0][0][0][3] == ((state[0][0][0][2], int(tails[0]))
                                                                                 if bounded else None)


def test_plan_of_merged_hits_equals_plan_from_spans():
    """The plan lookup builds from its merged hits without the checks is Plan.from_spans' (spans, actions,
    sources, gaps), with its reused and rotated counts; invalid hits still raise as from_spans does."""
    from pic.engine.plan import Span
    from pic.engine.policies.irminsul_layout import _plan_of

    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(1, 400))
        cuts = sorted({int(v) for v in rng.integers(0, n + 1, int(rng.integers(0, 8)))})
        hits = [[a, b, a if rng.random() < 0.5 else int(rng.integers(0, 1000))]
                for a, b in zip(cuts[::2], cuts[1::2], strict=False)]     # (disjoint, none abutting)
        ref = Plan.from_spans(n, [Span(a, b, Action.REUSE if a == s else Action.REUSE_ROTATED, s) for a, b, s in hits])
        plan, reused, rotated = _plan_of(n, hits)
        assert plan == ref and reused == ref.num_reused and rotated == ref.num_rotated
    with pytest.raises(ValueError):
        _plan_of(10, [[2, 5, 2], [4, 8, 4]])                 # overlapping: not a cover
    with pytest.raises(ValueError):
        _plan_of(10, [[2, 5, -3]])                           # a rotated source before the prompt


def _stored_runs_reference(st):
    """A lean store's stored runs as the record-by-record loop gave them (prompt index by first use)."""
    from array import array
    from bisect import bisect_left

    seqs, where, src, lo, hi, num = [], {}, [], array("q"), array("q"), []
    for rec in st.made:
        if type(rec) is not Chunk:
            x, bounds, k = rec if type(rec) is tuple else (rec.x, *run_edges(rec))
            edges = bounds[k:bisect_left(bounds, x.base_pos + x.size, k) + 1]
            if x.parts is not None:
                edges = sorted({*edges, *(y.base_pos for y in st.parts_of(x))})
            q, n = x.src, len(edges) - 1
            lo.extend(edges[:-1])
            hi.extend(edges[1:])
        else:
            o, q, n = rec.owner, None, 0
            for x, xo, m in rec.pieces:
                if x.owner != o or not x.alive and x.parts is None:
                    continue
                for y, a, b in ([(x, xo, xo + m)] if x.parts is None else st.live(x, xo, xo + m) or ()):
                    q = y.src
                    lo.append(y.base_pos + a)
                    hi.append(y.base_pos + b)
                    n += 1
            if q is None:
                continue
        src.append(where.setdefault(id(q), len(where)))
        if src[-1] == len(seqs):
            seqs.append(q)
        num.append(n)
    return seqs, np.repeat(np.array(src, np.int64), num), np.array(lo, np.int64), np.array(hi, np.int64)


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_lean_stored_runs_equal_the_record_by_record_loop(seed: int):
    """A lean store's stored runs (groups of edges per record, runs and prompt indices in numpy) are the record-by-
    record loop's: same prompts in the same order, same runs; through split extents (``parts``)."""
    from pic.engine.oracle import RefRuns
    from pic.engine.replay import workload_from_trace

    work = workload_from_trace(_shared_trace(seed))
    pol, checked, parts = _pol(), 0, 0
    for i in range(work.num_requests):
        _serve_view(pol, work.view(i), 10 * i)
        if i % 10 == 9 or i == work.num_requests - 1:
            st = pol._store
            assert st.lean
            got = st.stored_runs()
            seqs, src, lo, hi = _stored_runs_reference(st)
            assert isinstance(got, RefRuns) and len(got.seqs) == len(seqs)
            assert all(a is b for a, b in zip(got.seqs, seqs, strict=True))
            for a, b in ((got.src, src), (got.lo, lo), (got.hi, hi)):
                assert a.dtype == b.dtype and np.array_equal(a, b)
            checked += len(got)
            parts += sum((r[0] if type(r) is tuple else r.x).parts is not None for r in st.made if type(r) is not Chunk)
    assert checked > 100 and parts > 0
