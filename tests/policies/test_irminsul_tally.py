"""irminsul told, not asked (``irminsul_tally.tally``, #12): where the trace-level oracle proves that no request
meets content past its exact prefix, the told state (stats, resident bytes, registry entries, duplicate stored
tokens) is the one the asked pass leaves: every output of a replay equals the simulation's, with the compiled pass
and with the numpy reference. Where a window may repeat inside a prompt's stored tokens, a chunk would be met past
the prefix or served rotated, irminsul's ``min_match`` is below the proof's: declined (asked), the same outputs."""

from __future__ import annotations

import numpy as np
import pytest

from pic import accel
from pic.engine import cdc, oracle
from pic.engine.config import ReplayConfig
from pic.engine.policies import irminsul_tally as T
from pic.engine.policies.irminsul import Irminsul
from pic.engine.replay import workload_from_trace
from pic.traces.schema import SegmentTable, Trace, requests_frame
from tests.policies.test_oracle_lines import _key_at
from tests.policies.test_oracle_told import _grown_trace
from tests.policies.test_prefix_twin import _both, _same


@pytest.fixture(params=["0", "1"])
def mode(request):
    if request.param == "1" and not accel.available():
        pytest.skip("numba not installed")
    accel.set_mode(request.param)
    yield request.param
    accel.set_mode(None)


def _fresh_trace(seed: int, n: int = 90, lens=(1, 3, 20, 63, 64, 65, 100, 300, 700, 2500)) -> Trace:
    """Opaque prompts whose only content met earlier is a prefix and that repeat nothing inside: each request is
    fresh content (new streams), an earlier prompt whole, or one cut at a segment boundary or inside a segment (a
    shorter row of its stream) and followed by fresh content; prompts of 1 to a few thousand tokens."""
    rng = np.random.default_rng(seed)
    table = SegmentTable()
    rows = {c: [] for c in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    prompts: list[list[tuple[int, int, int, int]]] = []       # (segment id, key, salt, length)

    def fresh() -> list[tuple[int, int, int, int]]:
        out = []
        for _ in range(int(rng.integers(1, 4))):
            key, salt, ln = int(rng.integers(1, 1 << 40)), int(rng.integers(0, 4)), int(rng.choice(lens))
            out.append((table.add_opaque(key, salt, ln, "block"), key, salt, ln))
        return out

    t = 0
    for i in range(n):
        t += int(rng.choice([0, 1, 400, 30_000]))
        r = rng.random()
        if prompts and r < 0.2:
            segs = list(prompts[int(rng.integers(len(prompts)))])
        elif prompts and r < 0.75:
            p = prompts[int(rng.integers(len(prompts)))]
            k = int(rng.integers(len(p)))
            segs = p[:k]
            _, key, salt, ln = p[k]
            if ln > 1 and rng.random() < 0.5:             # cut inside segment k: its stream, shorter
                cut = int(rng.integers(1, ln))
                segs = segs + [(table.add_opaque(key, salt, cut, "block"), key, salt, cut)]
            segs = segs + fresh()
        else:
            segs = fresh()
        prompts.append(segs)
        for c, v in zip(rows, (5000 - i, f"s{i % 5}", "a", t, int(rng.choice([1, 30, 300])), [s[0] for s in segs]),
                        strict=True):
            rows[c].append(v)
    return Trace(table.build(), requests_frame(rows), source="<fresh>")


def _told(monkeypatch, spoil=None) -> list:
    """The answers of irminsul's tally in the replays that follow, each with whether the proof covers irminsul's
    ``min_match`` (``spoil(pol)`` after a True one)."""
    got, real = [], Irminsul.tally
    # (a fresh oracle memo: one remembered from an equal trace leaves the proof at the oracle's min_match, 64)
    monkeypatch.setattr(oracle, "_MEMO", {})

    def spy(self, work, pfx, m, window):
        ok = real(self, work, pfx, m, window)
        got.append((ok, m <= self.config.min_match))
        if ok and spoil is not None:
            spoil(self)
        return ok

    monkeypatch.setattr(Irminsul, "tally", spy)
    return got


CONFIGS = [{}, {"token_budget": 64}, {"max_requests": 40}, {"trace": (100, 900, 3000, 7000)},
           {"policy_options": {"irminsul": {"avg_chunk": 64, "min_chunk": 16, "max_chunk": 128}}},
           {"policy_options": {"irminsul": {"gear": "table", "min_match": 8}}},
           {"policies": ("prefix", "irminsul")}]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("change", CONFIGS)
def test_told_equals_asked(seed, change, mode, monkeypatch):
    """Prompts that repeat nothing inside: irminsul is told (its tally answers True), and the replay's outputs
    (rows, summary: registry entries, stored and duplicate tokens, peak; config.json's stats) are the asked one's."""
    told = _told(monkeypatch)
    change = dict(change)
    trace = _fresh_trace(seed, 60, change.pop("trace")) if "trace" in change else _fresh_trace(seed)   # (long prefixes)
    on, off, took = _both(trace, ReplayConfig(**{"policies": ("irminsul",), **change}), monkeypatch)
    assert took and _same(on, off)
    assert told == [(True, True)]
    s = on.resolved["policies"]["irminsul"]["stats"]
    assert s["chunk_lookups"] > 0 and s["prefix_tokens"] > 0


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_declined_where_a_window_repeats_inside_a_prompt(seed, mode, monkeypatch):
    """A row again, a stream at two lengths, overlapping or continued lines inside a prompt's new content: its
    stored runs are cut where later prefixes end (counted duplicates depend on it) or a plan rotates: declined,
    asked, the same outputs."""
    told = _told(monkeypatch)
    on, off, took = _both(_grown_trace(seed), ReplayConfig(policies=("irminsul",)), monkeypatch)
    assert all(not ok for ok, _ in told) and _same(on, off)


def test_declined_below_the_proofs_min_match(monkeypatch):
    """irminsul matching runs shorter than the proof covers (``min_match`` 4 < 8): declined."""
    told = _told(monkeypatch)
    cfg = ReplayConfig(policies=("irminsul",), policy_options={"irminsul": {"min_match": 4}})
    on, off, took = _both(_fresh_trace(1), cfg, monkeypatch)
    assert told == [(False, False)] and took and _same(on, off)


def test_a_wrong_tally_fails(monkeypatch):
    """The comparison sees a told count one off (chunk lookups, registry entries, stored bytes)."""
    def lookups(pol):
        pol.stats.extra["chunk_lookups"] += 1

    def entries(pol):
        fp = pol.footprint()
        pol.footprint = lambda: type(fp)(fp.entries + 1, fp.runs, fp.duplicates)

    def stored(pol):
        pol._store.evictable += pol.ctx.bytes_per_token

    for spoil in (lookups, entries, stored):
        told = _told(monkeypatch, spoil)
        on, off, took = _both(_fresh_trace(2), ReplayConfig(policies=("irminsul",)), monkeypatch)
        assert told == [(True, True)] and not _same(on, off)


def _pass(trace: Trace, pfx: np.ndarray | None = None, **opts) -> tuple:
    """(compiled, reference) registry passes of ``trace`` (``pfx``: the exact prefixes, default 0 each)."""
    work = workload_from_trace(trace)
    pfx = np.zeros(work.num_requests, np.int64) if pfx is None else np.asarray(pfx, np.int64)
    cfg = Irminsul.Config(**opts)
    got = T._prompts(work, cfg)
    ntok = np.asarray(work.num_prompt, np.int64)
    return T._registry(cfg.cdc, *got, ntok, pfx, work), T._reference(cfg.cdc, work, pfx)


def _trace_of(prompts: list[list[tuple[int, int, int]]]) -> Trace:
    """A trace of the prompts (each a list of opaque rows ``(key, salt, length)``), one request each."""
    table = SegmentTable()
    rows = {c: [] for c in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    for i, p in enumerate(prompts):
        segs = [table.add_opaque(k, s, ln, "block") for k, s, ln in p]
        for c, v in zip(rows, (i, "s", "a", 10 * i, 1, segs), strict=True):
            rows[c].append(v)
    return Trace(table.build(), requests_frame(rows), source="<prompts>")


@pytest.mark.skipif(not accel.available(), reason="numba not installed")
def test_the_compiled_pass_is_the_reference():
    """The compiled registry pass answers what the reference does: exact (registry entries, chunk lookups from the
    prefixes), and None where a chunk past a prefix was registered before or a registered one would be served at
    another position; prompts laid out by the numpy rules (short ones over ``max_chunk``, a periodic run) too."""
    accel.set_mode("1")
    try:
        for seed in range(3):
            for trace in (_fresh_trace(seed, 60), _fresh_trace(seed, 40, (100, 900, 3000, 7000))):
                work = workload_from_trace(trace)
                pfx = _prefixes(work)
                got = _pass(trace, pfx)
                assert got[0] == got[1] and got[0] is not None and got[0][0] > 0
            assert (pfx >= 2048).sum() > 3          # (laid out from an anchor before the prefix: _accel_numba_tally)
        x, y = (7, 1, 900), (9, 2, 300)
        again = _trace_of([[x], [x]])
        assert _pass(again) == (None, None)                         # (met past a prefix of 0)
        assert _pass(again, [0, 900])[0] == _pass(again, [0, 900])[1] is not None
        moved = _trace_of([[x], [y, x]])
        assert _pass(moved, [0, 1200]) == (None, None)              # (registered at another position)
        short = _trace_of([[(5, 0, 50)], [(6, 0, 30)], [(5, 0, 50), (8, 0, 700)]])
        opts = {"avg_chunk": 20, "min_chunk": 4, "max_chunk": 40}
        periodic = _trace_of([[(11, 0, 7)] * 300, [(12, 0, 500)]])
        real = cdc.layout_fps
        for trace, pfx, o in ((short, [0, 0, 50], opts), (periodic, None, {})):
            calls: list = []
            T.cdc.layout_fps = lambda *a, calls=calls, **k: calls.append(1) or real(*a, **k)
            try:
                a = _pass(trace, pfx, **o)[0]
            finally:
                T.cdc.layout_fps = real
            assert a == _pass(trace, pfx, **o)[1] and a is not None and calls      # (laid out by the numpy rules)
    finally:
        accel.set_mode(None)


def _prefixes(work) -> np.ndarray:
    """Each request's longest prefix shared with an earlier one (tokens compared)."""
    toks = [work.view(i).tokens for i in range(work.num_requests)]
    out = np.zeros(len(toks), np.int64)
    for i, t in enumerate(toks):
        for u in toks[:i]:
            n = min(len(t), len(u))
            d = np.flatnonzero(t[:n] != u[:n])
            out[i] = max(out[i], d[0] if d.shape[0] else n)
    return out


def test_repeats_inside_a_prompt_are_found():
    """Two pieces past the prefix on one opaque line (a row again, the stream shorter, an overlapping line) are
    found; lines that only continue one another, or repeats inside the prefix, are not."""
    k, s = 123456, 1
    cases = [([(k, s, 100), (k, s, 100)], 0, True), ([(k, s, 100), (k, s, 40)], 0, True),
             ([(k, s, 100), (_key_at(k, s, 60), 0, 100)], 0, True),
             ([(k, s, 100), (_key_at(k, s, 100), 0, 100)], 0, False),
             ([(k, s, 100), (k, s, 100), (99, 0, 50)], 200, False),
             ([(k, s, 100), (k, s, 100), (99, 0, 50)], 150, False),     # (the new piece repeats the prefix)
             ([(k, s, 100), (k, s, 100), (99, 0, 50)], 50, True)]
    for prompt, p, found in cases:
        work = workload_from_trace(_trace_of([prompt]))
        got = T._prompts(work, Irminsul.Config())
        assert (T._repeats(*got, np.array([p], np.int64)).shape[0] > 0) == found, (prompt, p)
