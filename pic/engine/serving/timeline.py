"""One replica's simulation in two passes where a policy's answers follow from the arrival order alone.

With one replica and the open loop, requests are prefilled one at a time in arrival order and each is committed
before the next lookup (``engine.serving.replica``: a prefill is never interrupted). A policy that never refuses
and whose answer to a request depends only on the requests committed before it (``order_only``: an unbounded
``prefix`` cache; ``block-hash`` answering from the prefix replay) therefore gives the same answers whatever the
timeline. :func:`run_two_pass` asks it for them in that order first (lookup + admit, commit, release: the same
calls, the same state at the end), then runs the timeline of those plans in one compiled call
(:func:`pic._accel_numba_serve.serve_one`) and writes the columns the event loop would have written; the event
loop (:class:`~engine.serving.model.ServingModel`) stays the reference, and runs wherever this does not apply or
the kernels do not load (tests compare both).

NOTE (speed): the event loop's work per request (events, prefill steps, decode phases, pricing) is ~10-12 us of
Python per simulation (Mooncake conversation: ~0.13 CPU s of each baseline replay); the kernel does it in
well under a microsecond. Its load (numba, ~0.15 s) is paid only for a simulation of ``_MIN_REQUESTS`` or more.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

import numpy as np

from pic import accel

#: requests one simulation needs for the compiled timeline to pay for numba's load where nothing loaded it yet
#: (auto mode). NOTE (speed): the load is ~0.15 CPU s and the kernel saves ~11 us a request of each of the two
#: baseline simulations: 4,096 cost Mooncake synthetic (3,993 requests: its second simulation, counted with the
#: first by ``accel.kernels``, loaded numba) 0.69 -> 0.84 CPU s end to end.
_MIN_REQUESTS = 8192
_CHUNK = 1 << 16      # requests whose values are made at once (bounded memory)


def constants(cost: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(fc, ic, wtab)``: the cost model's constants as :func:`serve_one` reads them (the values its step
    pricing binds: ``cost_fns.prefill_step_fn``), or None where it does not price that way (a calibration profile,
    a hybrid model, an attention function other than the model's ``gqa`` / ``mla``, a constant not a float)."""
    from pic.engine.cost import CostModel

    if type(cost) is not CostModel or cost.profile is not None or getattr(cost.model, "is_hybrid", False):
        return None
    attn = cost._attn
    code = getattr(attn, "__code__", None)
    if code is None or code.co_name not in ("gqa", "mla") or not attn.__qualname__.startswith(
            "ModelSpec.attention_flops_fn"):
        return None
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in attn.__closure__ or ()), strict=True))
    names = ("L", "per_gqa") if code.co_name == "gqa" else ("L", "per_pair", "pair_abs", "r", "H", "q")
    if any(type(cells.get(k)) not in (int, float) for k in names):
        return None
    a = [float(cells[k]) for k in names] + [0.0] * (6 - len(names))
    w0, w1 = cost._w_all
    if math.isinf(w0):
        wk, above = 2, cost._weights(2)
    else:
        wk, above = int(w0), w1
    fl = (cost._peak, cost._bw, cost._kvb, cost._kv_read, cost._dec_attn, cost._lm_flops, cost._state,
          cost._lin_per_token, cost.config.step_overhead_s, above)
    if any(type(x) is not float for x in fl) or wk > 1 << 20:
        return None
    wtab = np.array([cost._weights(k) for k in range(wk)], np.float64)
    dense = cost._kv_read == cost._kvb
    ic = np.array([int(dense), wk, int(code.co_name == "mla")], np.int64)
    return np.array(fl + tuple(a), np.float64), ic, wtab


def applies(sm: Any) -> bool:
    """Whether :func:`run_two_pass` replays ``sm`` (a ServingModel about to run): one replica, the open loop, no
    observer, an ``order_only`` policy with its fused lookup + admit or a policy told its plans (its attribute
    ``told_plans``: ``(reuse, re-encoded tokens)`` per request, ``rdr_told``), the cost model's plain pricing."""
    pol = sm.policies[0] if sm.policies else None
    known = _told(pol) is not None or (sm._starts[0] is not None and getattr(pol, "order_only", False))
    return (sm._one and sm._open and not sm.sim.observers and known and sm._n > 0 and sm._terms is not None
            and not sm._hybrid and sm.replicas[0].steps == 0 and not sm.replicas[0].itl)


def run_two_pass(sm: Any) -> bool:
    """Replay ``sm`` in two passes (the module docstring); False (nothing done) where it does not apply or the
    kernels do not load: the event loop runs it."""
    if not applies(sm):
        return False
    consts = constants(sm.cost)
    if consts is None:
        return False
    if sm._n < _MIN_REQUESTS and accel.mode() == "auto" and not accel.loaded():
        return False
    fast = accel.kernels(accel.AUTO_TOKENS, "serve")
    if fast is None:
        return False
    fc, ic, wtab = consts
    w, n = sm.w, sm._n
    col = sm.requests.column
    ntok = np.ascontiguousarray(w.num_prompt, np.int64)
    told = _told(sm.policies[0])
    if told is None:
        reuse, bulk = col("num_reused"), getattr(sm.policies[0], "answer_all", None)
        # (asked all at once where the policy can: its peak is read at the end, ServingModel.run)
        if bulk is None or sm._note_admit[0] or sm._note_commit[0] or not bulk(w.request_ids, ntok, reuse):
            reuse = _answers(sm, ntok, reuse)
        extra, corr, reenc = np.zeros(n), np.zeros(n, np.bool_), None
    else:
        reuse, reenc = col("num_reused"), told[1]
        reuse[:] = told[0]
        corr = reenc > 0
        extra = _reencode_extra(sm.cost, ntok, reuse, reenc, corr)
        sm._note_resident(0)        # (its resident bytes never fall: the peak, its final total)
    rep = sm.replicas[0]
    # NOTE (memory): the kernel writes the request columns in place (a joules column holds its seconds first)
    joules, nocache = col("prefill_joules"), col("nocache_prefill_joules")
    itl, stats = fast.serve_one(np.ascontiguousarray(w.arrival_us, np.int64), ntok, reuse,
                                np.ascontiguousarray(w.num_output, np.int64), not sm._lean, int(rep.token_budget),
                                fc, ic, wtab, extra, corr, col("start_us"), col("first_token_us"), col("finish_us"),
                                joules, nocache)
    _write(sm, reuse, ntok, joules, nocache, corr, reenc)
    rep.busy_us = int(stats[0])
    rep.steps = int(stats[2])
    rep.itl._a.frombytes(memoryview(itl).cast("B"))      # (from the kernel's buffer: one copy)
    sm.sim.num_events += int(stats[1])
    sm.num_finished = n
    if sm.progress is not None:
        for k in range(sm._tick, n + 1, sm._tick):
            sm.progress(k, n)
        if n % sm._tick:
            sm.progress(n, n)
    return True


def _told(pol: Any) -> tuple | None:
    """``pol.told_plans`` where it has them (a tuple), else None."""
    got = getattr(pol, "told_plans", None)
    return got if type(got) is tuple else None


def _answers(sm: Any, ntok: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The policy's reuse of every request (into ``out``), asked in arrival order (lookup + admit, commit, release at
    the request's arrival time); the peaks sampled where the event loop samples them."""
    view, start = sm._view, sm._starts[0]
    pol = sm.policies[0]
    commit, release = pol.commit, pol.release
    note_a, note_c = sm._note_admit[0], sm._note_commit[0]
    ev0 = pol.stats.evictions
    got = array("q")
    for i, (t, m) in enumerate(zip(sm.w.arrival_us.tolist(), ntok.tolist(), strict=True)):
        v = view(i)
        r = start(v, t)
        if r < 0 or v.num_tokens != m:
            raise RuntimeError(f"{pol.name}: request {v.request_id} refused or not its workload's prompt in a "
                               "replay of answers known in advance")
        if note_a:
            sm._note_resident(0)
        commit(v, t)
        if note_c:
            sm._note_resident(0)
        release(v, t)
        got.append(r)
        if len(got) >= _CHUNK:          # NOTE (memory): into the column a block at a time
            out[i + 1 - len(got):i + 1] = np.frombuffer(got, np.int64)
            del got[:]
    if got:
        out[out.shape[0] - len(got):] = np.frombuffer(got, np.int64)
    if pol.stats.evictions != ev0:
        raise RuntimeError(f"{pol.name}: evicted in a replay of answers known in advance")
    return out


def _write(sm: Any, reuse: np.ndarray, ntok: np.ndarray, joules: np.ndarray, nocache: np.ndarray, corr: np.ndarray,
           reenc: np.ndarray | None) -> None:
    """The request columns the event loop writes (``ServingModel._start_prefill`` and the handlers) but the timeline's,
    from the answers: every plan an exact prefix (a full recompute where nothing is reused, a full hit's last token
    recomputed), priced as one chunk (``cost_fns.one_chunk_terms_np``, as the TermsBook prices them; where the plan
    re-encodes ``reenc`` tokens (``corr``), ``CostModel.prefill``'s values: the same but the HBM bytes, ``2 reenc
    kvb`` more); the joules from the seconds the kernel wrote (``watts * share``, as the event loop multiplies)."""
    col = sm.requests.column
    col("replica")[:] = 0
    col("admitted")[:] = True
    np.subtract(ntok, reuse, out=col("num_recomputed"))
    watts = sm._watts
    np.multiply(joules, watts, out=joules)
    if sm._lean:             # (lean: no counterfactual prefill, the plans' priced columns not read)
        nocache[:] = joules
    else:
        np.multiply(nocache, watts, out=nocache)
        np.copyto(nocache, joules, where=(reuse == 0) & ~corr)      # (a plain plan: no counterfactual)
    col("prefix_prefill_joules")[:] = nocache
    if sm._lean:
        return
    from pic.engine.cost_fns import one_chunk_terms_np

    terms = one_chunk_terms_np(sm.cost)
    cols = [col(f) for f in ("prefill_flops", "prefill_hbm_bytes", "cache_read_bytes", "attn_layer_s",
                             "nocache_attn_layer_s")]
    for lo in range(0, ntok.shape[0], _CHUNK):        # NOTE (memory): a block of requests at a time
        n, r = ntok[lo:lo + _CHUNK], reuse[lo:lo + _CHUNK]
        flops, hbm, _, read, attn_s = terms(n, n - r, r)
        if reenc is not None:       # CostModel.prefill's HBM bytes: + 2.0 * reencode_tokens * kvb, in that order
            k = reenc[lo:lo + _CHUNK]
            np.add(hbm, 2.0 * k * sm.cost._kvb, out=hbm, where=k > 0)
        for c, v in zip(cols, (flops, hbm, read, attn_s, terms(n, n, np.zeros_like(n))[4]), strict=True):
            c[lo:lo + _CHUNK] = v


def _reencode_extra(cost: Any, ntok: np.ndarray, reuse: np.ndarray, reenc: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """The extra seconds the event loop gives the prefill of ``Plan.from_prefix(n, r).with_reencode(k)`` (k > 0:
    ``corr``; else 0.0): ``max(0.0, prefill(plan).time_s - step_time(((n - r, r),), 0, 0))`` (``ServingModel
    ._start_prefill``), the same operations in the same order elementwise (``CostModel.prefill``: its zero terms
    (rotation, compositions, transfers) add nothing; ``step_time`` of one chunk, no decode)."""
    out = np.zeros(ntok.shape[0])
    idx = np.flatnonzero(corr)
    if not idx.size:
        return out
    n, r, k = ntok[idx], reuse[idx], reenc[idx]
    kvb, peak, bw = cost._kvb, cost._peak, cost._bw
    new = n - r
    lin_f = cost._lin_per_token * new + cost._lm_flops
    w0, w1 = cost._w_all
    w = np.full(new.shape, w1)
    few = np.flatnonzero(~(new >= w0))
    if few.size:
        w[few] = [cost._weights(x) for x in new[few].tolist()]
    from pic.engine.cost_fns import attention_flops_np

    lin_b = w + new * kvb
    att_f = attention_flops_np(cost.model)(new, r)
    att_b = (new + r) * kvb
    t_lin = np.maximum(lin_f / peak, lin_b / bw)
    t_att = np.maximum(att_f / peak, att_b / bw)
    rec = max(0.0 / peak, 2.0 * 1 * cost._state / bw)      # _phase(0.0, rec_b)
    over = cost.config.step_overhead_s
    ph = 2.0 * k * kvb / bw
    ph = np.where(ph > 0.0 / peak, ph, 0.0 / peak)             # _phase(0.0, reenc_b)
    time_s = (t_lin + t_att + over) + (rec + ph)
    step = ((t_lin + t_att) + rec) + over
    d = time_s - step
    out[idx] = np.where(d > 0.0, d, 0.0)
    return out
