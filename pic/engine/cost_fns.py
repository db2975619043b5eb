"""The cost model's per-step pricing as closures over its constants (engine.cost), for the serving model's hot path.

:func:`prefill_step_fn` gives ``CostModel.prefill_step`` and :func:`one_chunk_terms_fn` ``CostModel._one_chunk_terms``:
the same operations in the same order on the same values (so the same floats), with the model's constants, its
memo dicts and the helpers they call bound as closure variables instead of read as attributes of the cost model
on each call, ``_weights``' answer for a batch that touches every expert (every step of a prompt's chunks of
more than a few hundred tokens) taken without calling it, and a chunk's attention FLOPs computed (``_attn``, the
function ``_attn_memo`` remembers) instead of looked up by a tuple key (Mooncake conversation: half the pairs are
new, and a lookup cost about what the computation does; Azure: no slower). NOTE (speed): the serving model prices ~4 prefill steps
and two one-chunk plans per request (Mooncake conversation: ~2 us each as methods, ~45 attribute loads a step).
tests/engine/test_cost_fns.py compares them with the methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def prefill_step_fn(cost: Any) -> Callable[[int, int, int, int], tuple[float, float]]:
    """``cost.prefill_step`` (the bound method itself under a calibration profile)."""
    if cost.profile is not None:
        return cost.prefill_step
    method = cost.prefill_step
    kvb, peak, bw, kv_read, dec_attn = cost._kvb, cost._peak, cost._bw, cost._kv_read, cost._dec_attn
    step_nd, w_memo, attn = cost._step_nd, cost._w_memo, cost._attn
    weights = cost._weights
    lm_flops, state, lin_per_token = cost._lm_flops, cost._state, cost._lin_per_token
    w_all0, w_all1 = cost._w_all
    overhead = cost.config.step_overhead_s
    dense = kv_read == kvb and type(kv_read) is type(kvb)   # decode attention reads the KV as written

    def prefill_step(num_new: int, num_cached: int, num_decode: int,
                     decode_context_tokens: int) -> tuple[float, float]:
        if num_new <= 0:
            return method(num_new, num_cached, num_decode, decode_context_tokens)
        dctx = decode_context_tokens
        n, c = int(num_new), int(num_cached)
        num_tokens = n + num_decode
        nd_terms = step_nd.get(num_decode)
        if nd_terms is None:
            nd_terms = step_nd[num_decode] = (lm_flops * (1 + num_decode),
                                              max(0.0 / peak, 2.0 * (1 + num_decode) * state / bw))
        lm_f, t_rec = nd_terms
        lin_f = lin_per_token * num_tokens + lm_f
        if num_tokens >= w_all0:      # (_weights' value there; n0 >= 2, so never the one-token weights)
            w = w_all1
        else:
            w = w_memo.get(num_tokens)
            if w is None:
                w = weights(num_tokens)
        lin_b = w + num_tokens * kvb
        pre_f = attn(n, c)
        x, y = lin_f / peak, lin_b / bw
        t_lin = y if y > x else x
        dec_f = dctx * dec_attn
        xa, ya = (pre_f + dec_f) / peak, ((n + c) * kvb + dctx * kv_read) / bw
        t_a = ya if ya > xa else xa
        step = t_lin + t_a + t_rec + overhead
        tok = num_new / (num_new + num_decode)
        if not num_decode:
            return step, step * tok
        pre_b = (num_new + num_cached) * kvb
        dec_b = dctx * kvb
        if dense and n == num_new and c == num_cached:
            t_att = t_a         # (the same expressions: kv_read is kvb, pre_b is (n + c) * kvb)
        else:
            x, y = (pre_f + dec_f) / peak, (pre_b + dec_b) / bw
            t_att = y if y > x else x
        x, y = pre_f / peak, pre_b / bw
        a_pre = y if y > x else x
        x, y = dec_f / peak, dec_b / bw
        a_dec = y if y > x else x
        att_share = a_pre / (a_pre + a_dec) if a_pre + a_dec > 0 else tok
        share = ((t_lin + overhead) * tok + t_att * att_share + t_rec / (1 + num_decode))
        return step, share

    return prefill_step


def one_chunk_terms_fn(cost: Any) -> Callable[[int, int, int], tuple]:
    """``cost._one_chunk_terms``."""
    kvb, peak, bw = cost._kvb, cost._peak, cost._bw
    w_memo, attn = cost._w_memo, cost._attn
    weights = cost._weights
    lm_flops, lm_bytes, state, lin_per_token = cost._lm_flops, cost._lm_bytes, cost._state, cost._lin_per_token
    w_all0, w_all1 = cost._w_all
    overhead = cost.config.step_overhead_s
    rec_b = 2.0 * 1 * state
    extra_s = max(0.0 / peak, rec_b / bw)

    def one_chunk_terms(num_tokens: int, num_new: int, start: int) -> tuple:
        cache_read = (num_tokens - num_new) * kvb
        if not num_new:   # full hit: the last prompt token still runs through the model for its logits
            num_new, start = 1, num_tokens - 1
        lin_f = lin_per_token * num_new + lm_flops
        if num_new >= w_all0:
            w = w_all1
        else:
            w = w_memo.get(num_new)
            if w is None:
                w = weights(num_new)
        lin_b = w + num_new * kvb
        att_f = attn(num_new, start)
        att_b = (num_new + start) * kvb
        x, y = lin_f / peak, lin_b / bw
        t_lin = y if y > x else x
        x2, y2 = att_f / peak, att_b / bw
        t_att = y2 if y2 > x2 else x2
        roof = t_lin + t_att + overhead
        time_s = roof + extra_s
        lm = (lm_flops / lin_f) if x >= y else (lm_bytes / lin_b)
        attn_s = (t_lin * (1.0 - lm) + t_att) * (roof / roof)
        return lin_f + att_f, lin_b + att_b + rec_b, time_s, cache_read, attn_s, num_new

    return one_chunk_terms


def prefill_shares_fn(cost: Any) -> Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None:
    """``prefill_step(n, c, nd, dctx)[1]`` (the share) of many steps at once, from int64 arrays of steps with
    ``n >= 1``: the same operations in the same order, elementwise on float64 (IEEE: the same floats), the
    attention FLOPs :func:`attention_flops_np`'s; None under a calibration profile (its share is the method's).
    NOTE (speed): for what no later step reads, a request's counterfactual full prefill (engine.serving.shares):
    priced per batch of steps instead of ~1.2 us a step (Mooncake conversation ``prefix``: ~2 steps a request)."""
    if cost.profile is not None:
        return None
    kvb, peak, bw, kv_read, dec_attn = cost._kvb, cost._peak, cost._bw, cost._kv_read, cost._dec_attn
    w_memo, weights = cost._w_memo, cost._weights
    lm_flops, state, lin_per_token = cost._lm_flops, cost._state, cost._lin_per_token
    w_all0, w_all1 = cost._w_all
    overhead = cost.config.step_overhead_s
    dense = kv_read == kvb and type(kv_read) is type(kvb)
    attn = attention_flops_np(cost.model)

    def shares(n: np.ndarray, c: np.ndarray, nd: np.ndarray, dctx: np.ndarray) -> np.ndarray:
        num_tokens = n + nd
        nd1 = 1 + nd
        lm_f = lm_flops * nd1
        t_rec = np.maximum(0.0 / peak, 2.0 * nd1 * state / bw)
        lin_f = lin_per_token * num_tokens + lm_f
        all_w = num_tokens >= w_all0
        w = np.full(n.shape, w_all1)
        if not all_w.all():      # (fewer tokens than touch every expert, or a dense model: the scalar values)
            few = np.flatnonzero(~all_w)
            w[few] = [w_memo.get(k) or weights(k) for k in num_tokens[few].tolist()]
        lin_b = w + num_tokens * kvb
        pre_f = attn(n, c)
        x, y = lin_f / peak, lin_b / bw
        t_lin = np.where(y > x, y, x)
        dec_f = dctx * dec_attn
        x, y = (pre_f + dec_f) / peak, ((n + c) * kvb + dctx * kv_read) / bw
        t_a = np.where(y > x, y, x)
        step = t_lin + t_a + t_rec + overhead
        tok = n / (n + nd)
        pre_b = (n + c) * kvb
        dec_b = dctx * kvb
        if dense:
            t_att = t_a
        else:
            x, y = (pre_f + dec_f) / peak, (pre_b + dec_b) / bw
            t_att = np.where(y > x, y, x)
        x, y = pre_f / peak, pre_b / bw
        a_pre = np.where(y > x, y, x)
        x, y = dec_f / peak, dec_b / bw
        a_dec = np.where(y > x, y, x)
        tot = a_pre + a_dec
        pos = tot > 0
        att_share = tok.copy()
        np.divide(a_pre, tot, out=att_share, where=pos)
        share = (t_lin + overhead) * tok + t_att * att_share + t_rec / nd1
        return np.where(nd == 0, step * tok, share)

    return shares


def attention_flops_np(model: Any) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``model.attention_flops_fn()`` for int64 arrays ``num_new >= 1``, ``num_cached``: the closure's operations
    in its order, elementwise (tests/engine/test_cost_fns.py compares them)."""
    L, H = model.num_attn_layers, model.num_heads
    if model.attention == "gqa":
        per_gqa = 4.0 * H * model.head_dim

        def gqa(num_new: np.ndarray, num_cached: np.ndarray) -> np.ndarray:
            n, c = num_new.astype(np.float64), num_cached.astype(np.float64)
            return L * per_gqa * (n * c + n * (n + 1) / 2)
        return gqa
    per_pair = 2.0 * H * (model.head_dim + model.v_head_dim)
    pair_abs = model._mla_absorbed_pair_flops()
    r, q = model.kv_lora_rank, model.qk_nope_head_dim + model.v_head_dim

    def mla(num_new: np.ndarray, num_cached: np.ndarray) -> np.ndarray:
        n, c = num_new.astype(np.float64), num_cached.astype(np.float64)
        x, y = n * c * pair_abs, 2.0 * c * r * H * q + n * c * per_pair
        return L * (per_pair * (n * (n + 1) / 2) + np.where(y < x, y, x))
    return mla


def one_chunk_terms_np(cost: Any) -> Callable[[np.ndarray, np.ndarray, np.ndarray], tuple] | None:
    """``one_chunk_terms`` of many plans at once from int64 arrays (num_tokens, num_new, start): its values but
    the last as float64 arrays, the same operations in the same order elementwise (the same floats); None where
    ``cost.one_chunk_terms`` is None (hybrid models, calibration profiles). NOTE (speed): for values no later
    step reads (a request's priced columns: engine.serving.shares)."""
    if cost.one_chunk_terms is None:
        return None
    kvb, peak, bw = cost._kvb, cost._peak, cost._bw
    w_memo, weights = cost._w_memo, cost._weights
    lm_flops, lm_bytes, state, lin_per_token = cost._lm_flops, cost._lm_bytes, cost._state, cost._lin_per_token
    w_all0, w_all1 = cost._w_all
    overhead = cost.config.step_overhead_s
    rec_b = 2.0 * 1 * state
    extra_s = max(0.0 / peak, rec_b / bw)
    attn = attention_flops_np(cost.model)

    def terms(num_tokens: np.ndarray, num_new: np.ndarray, start: np.ndarray) -> tuple:
        cache_read = (num_tokens - num_new) * kvb
        hit = num_new == 0      # full hit: the last prompt token still runs through the model for its logits
        if hit.any():
            num_new, start = np.where(hit, 1, num_new), np.where(hit, num_tokens - 1, start)
        lin_f = lin_per_token * num_new + lm_flops
        w = np.full(num_new.shape, w_all1)
        few = np.flatnonzero(~(num_new >= w_all0))
        if few.size:
            w[few] = [w_memo.get(k) or weights(k) for k in num_new[few].tolist()]
        lin_b = w + num_new * kvb
        att_f = attn(num_new, start)
        att_b = (num_new + start) * kvb
        x, y = lin_f / peak, lin_b / bw
        t_lin = np.where(y > x, y, x)
        x2, y2 = att_f / peak, att_b / bw
        t_att = np.where(y2 > x2, y2, x2)
        roof = t_lin + t_att + overhead
        lm = np.where(x >= y, lm_flops / lin_f, lm_bytes / lin_b)
        attn_s = (t_lin * (1.0 - lm) + t_att) * (roof / roof)
        return lin_f + att_f, lin_b + att_b + rec_b, roof + extra_s, cache_read, attn_s

    return terms
