"""Shared helpers for policy tests: a seeded stream of requests with shared, shifted and continued
content, a context builder, a request builder and one-call lifecycle, and a brute-force history of
committed prompts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pic.engine.plan import Action, Plan
from pic.engine.policies import PolicyContext, RequestView
from pic.traces.content import Segments

BYTES_PER_TOKEN = 3


def model_or_none():
    """A DeepSeek-V2-Lite ModelSpec when the specs package is importable (policies that need one)."""
    try:
        from pic.engine.specs import model_from_name
        return model_from_name("deepseek-v2-lite")
    except Exception:  # specs not there yet: policies must cope with model=None
        return None


def make_ctx(capacity_tokens: float, verify: bool = False, seed: int = 0) -> PolicyContext:
    """Context with ``capacity_tokens`` tokens of room (``math.inf`` = unbounded)."""
    cap = math.inf if math.isinf(capacity_tokens) else capacity_tokens * BYTES_PER_TOKEN
    return PolicyContext(cap, BYTES_PER_TOKEN, model=model_or_none(), seed=seed, verify=verify)


def request_stream(seed: int, num_requests: int, vocab: int = 500) -> list[RequestView]:
    """Agentic-looking prompts: variable header + shared documents in shuffled order + a tail; a third
    of them continue an earlier prompt (multi-turn), so both prefix and shifted reuse occur."""
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, vocab, int(rng.integers(40, 700)), dtype=np.int32) for _ in range(8)]
    out: list[RequestView] = []
    for rid in range(num_requests):
        if out and rng.random() < 0.33:
            prev = out[int(rng.integers(len(out)))].tokens
            tail = rng.integers(0, vocab, int(rng.integers(1, 300)), dtype=np.int32)
            toks = np.concatenate([prev, tail])
        else:
            head = rng.integers(0, vocab, int(rng.choice([0, 0, 0, 5, 17, 40])), dtype=np.int32)
            picks = rng.choice(len(docs), size=int(rng.integers(1, 4)), replace=False)
            tail = rng.integers(0, vocab, int(rng.integers(1, 80)), dtype=np.int32)
            toks = np.concatenate([head, *[docs[i] for i in picks], tail])
        out.append(RequestView.from_tokens(rid, toks[:3000], session_id=f"s{rid % 5}"))
    return out


def opaque_store(seed: int, num: int, max_len: int) -> Segments:
    """A store of opaque segments only (row 3 empty), lengths 1 .. max_len - 1, random keys and salts."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, max_len, num).astype(np.int64)
    lens[3] = 0
    offs = np.zeros(num + 1, np.int64)
    np.cumsum(lens, out=offs[1:])
    keys = rng.integers(0, 2**63, num, dtype=np.int64).astype(np.uint64)
    salts = rng.integers(0, 2**63, num, dtype=np.int64).astype(np.uint64)
    return Segments(np.arange(num, dtype=np.uint64), np.zeros(num, np.uint8), offs, np.zeros(0, np.int32),
                    np.zeros(num + 1, np.int64), keys, salts)


def view(rid: int, toks) -> RequestView:
    """A single-segment request of token ids ``toks``."""
    return RequestView.from_tokens(rid, np.asarray(toks, np.int32))


def serve(policy, req: RequestView, now: int):
    """One full lifecycle at time ``now``: lookup, admit (must succeed), commit, release. Returns the plan."""
    plan = policy.lookup(req, now)
    assert policy.admit(req, plan, now)
    policy.commit(req, now)
    policy.release(req, now)
    return plan


def plans_of(policy, reqs) -> list[list[tuple]]:
    """Request ``rid`` of ``reqs`` at ``10 * rid``: lookup, admit, and commit + release where admitted; each
    plan's spans as ``(start, end, action, source_pos)``."""
    out = []
    for rid, req in enumerate(reqs):
        plan = policy.lookup(req, 10 * rid)
        if policy.admit(req, plan, 10 * rid):
            policy.commit(req, 10 * rid + 1)
            policy.release(req, 10 * rid + 2)
        out.append([(s.start, s.end, int(s.action), s.source_pos) for s in plan.spans])
    return out


class History:
    """Brute-force record of committed prompts: answers "were these tokens ever cached at that position"."""

    def __init__(self) -> None:
        self.prompts: list[np.ndarray] = []

    def add(self, tokens: np.ndarray) -> None:
        self.prompts.append(tokens)

    def covers(self, tokens: np.ndarray, source_pos: int) -> bool:
        """True when ``tokens`` can be split into pieces each equal to some committed prompt's tokens at
        the same offset from ``source_pos`` (adjacent reused chunks may come from different prompts)."""
        p, n = 0, tokens.shape[0]
        while p < n:
            best = 0
            for h in self.prompts:
                lo = source_pos + p
                if lo >= h.shape[0]:
                    continue
                m = min(n - p, h.shape[0] - lo)
                neq = h[lo:lo + m] != tokens[p:p + m]
                best = max(best, m if not neq.any() else int(neq.argmax()))
            if best == 0:
                return False
            p += best
        return True

    def check_plan(self, req: RequestView, plan: Plan) -> None:
        for s in plan.spans:
            if s.action == Action.RECOMPUTE:
                continue
            src = s.start if s.action == Action.REUSE else s.source_pos
            assert self.covers(req.tokens[s.start:s.end], src), \
                f"request {req.request_id}: span {s} reuses tokens never committed at {src}"


@pytest.fixture
def stream() -> list[RequestView]:
    return request_stream(seed=7, num_requests=40)


def conversations(seed: int, n: int, shared_piece, new_piece):
    """A trace of ``n`` turns that continue one of the last six turns (all or a leading part of its segments, then
    one to three new pieces) or start fresh: each new piece is one of four shared ones (``shared_piece(rng,
    table)``: a segment id) with probability 0.3, else ``new_piece(rng, table, r)`` (``r``: the draw, in [0.3,
    1)). Tests of a policy's conversation shortcuts (fixed-chunk's known keys, linearkv's resumed CDC)."""
    from pic.traces.schema import SegmentTable, Trace, requests_frame

    rng = np.random.default_rng(seed)
    table = SegmentTable()
    shared = [shared_piece(rng, table) for _ in range(4)]
    rows = {c: [] for c in ("request_id", "session_id", "agent_id", "arrival_us", "output_tokens", "segment_ids")}
    prompts: list[list] = []
    for i in range(n):
        if prompts and rng.random() < 0.75:
            prev = prompts[int(rng.integers(max(0, len(prompts) - 6), len(prompts)))]
            sids = list(prev if rng.random() < 0.7 else prev[:int(rng.integers(0, len(prev) + 1))])
        else:
            sids = []
        for _ in range(int(rng.integers(1, 4))):
            r = rng.random()
            sids.append(shared[int(rng.integers(len(shared)))] if r < 0.3 else new_piece(rng, table, r))
        prompts.append(sids)
        for c, v in zip(rows, (i, f"s{i}", "a", i, 1, sids), strict=True):
            rows[c].append(v)
    return Trace(table.build(), requests_frame(rows), source="<conversations>")


def in_groups(policy, work, group: int, admitted, before=None) -> list[tuple]:
    """Every request of ``work`` looked up and admitted at ``10 * rid`` (``admitted(rid, plan)`` right after),
    then, every ``group`` requests and after the last, the group committed and released; ``before(rid)`` ahead of
    a lookup. Returns the usage ``(evictable, protected, total)`` after each group."""
    states, live = [], []
    for rid in range(work.num_requests):
        if before is not None:
            before(rid)
        req = work.view(rid)
        plan = policy.lookup(req, 10 * rid)
        assert policy.admit(req, plan, 10 * rid)
        admitted(rid, plan)
        live.append(req)
        if len(live) == group or rid == work.num_requests - 1:
            for q in live:
                policy.commit(q, 10 * rid + 1)
            for q in live:
                policy.release(q, 10 * rid + 2)
            live = []
            u = policy.usage()
            states.append((u.evictable, u.protected, u.total))
    return states
