"""Executor on real math (Triton interpreter, fp32): layout invariants, full prefill vs a float64 forward,
and reuse + rotate + recompute against full prefill (exact on one layer, measured on deeper specs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pic.engine.plan import Action, Plan, Span
from pic.engine.planlog import PlanLog, PlannedRequest
from pic.kernels._testing import rel_rms
from pic.kernels.executor import ExecConfig, Executor
from pic.kernels.executor.layout import PagePool, full_layout, owned_rows_needed, plan_layout
from pic.kernels.model import Model, exec_spec, prefill_reference, random_weights, tiny_model_spec
from pic.kernels.model.layers import Batch
from tests.kernels.conftest import DEVICE

PAGE = 32
#: reuse = full prefill "exactly": fp32 dots run exactly under the CPU interpreter, as TF32 on CUDA tensor cores
EXACT = 1e-5 if DEVICE == "cpu" else 5e-3
TILE = {"BLOCK_T": 16, "BLOCK_HH": 2, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1}   # fast interpreter tiles


def _log(seed: int = 0) -> PlanLog:
    """r0 computes 160 tokens; r1 = r0[0:40] | 7 new | r0[60:140] (δ = −13) | 5 new; r2 = r0[0:33] | 30 new |
    r1[40:100] rotated (δ = 23), ending in a reused token (the last token is always computed)."""
    g = np.random.default_rng(seed)
    t0 = g.integers(0, 10**6, 160).astype(np.int32)
    new1, new2 = g.integers(0, 10**6, 7).astype(np.int32), g.integers(0, 10**6, 5).astype(np.int32)
    t1 = np.concatenate([t0[:40], new1, t0[60:140], new2])
    p1 = Plan(132, (Span(0, 40, Action.REUSE, 0), Span(40, 47, Action.RECOMPUTE),
                    Span(47, 127, Action.REUSE_ROTATED, 60), Span(127, 132, Action.RECOMPUTE)))
    t2 = np.concatenate([t0[:33], g.integers(0, 10**6, 30).astype(np.int32), t1[40:100]])
    p2 = Plan(123, (Span(0, 33, Action.REUSE, 0), Span(33, 63, Action.RECOMPUTE),
                    Span(63, 123, Action.REUSE_ROTATED, 40)))
    reqs = [PlannedRequest(0, 100, 0, t0, Plan.recompute_all(160)), PlannedRequest(1, 101, 0, t1, p1),
            PlannedRequest(2, 102, 0, t2, p2)]
    return PlanLog(reqs, {"policy": "hand"})


def _keys(hb, own: dict[int, np.ndarray], scratch: np.ndarray, tokens_of: dict[int, np.ndarray],
          req_tokens: np.ndarray, b: int) -> np.ndarray:
    """Target positions of the keys sequence b sees, decoded from its block table and δ table."""
    page_owner = {int(p): (j, k) for j, pages in own.items() for k, p in enumerate(pages)}
    out = []
    L = int(hb.seq_lens[b])
    for n in range(L):
        pg = int(hb.block_table[b, n // PAGE])
        d = int(hb.block_delta[b, n // PAGE])
        if pg in set(scratch.tolist()):
            out.append(-1)          # owned row: checked through dst/copy rows below
            continue
        j, k = page_owner[pg]
        pos = k * PAGE + n % PAGE
        assert tokens_of[j][pos] == req_tokens[pos + d], "in-place key carries other tokens"
        out.append(pos + d)
    return np.asarray(out)


def test_plan_layout_covers_each_context_once():
    """Every sequence sees each earlier prompt position exactly once, with the right tokens."""
    log = _log()
    srcs = log.resolve_sources(1)
    assert [(s.start, s.end, s.provider, s.provider_pos) for s in srcs] == [(0, 40, 0, 0), (47, 127, 0, 60)]
    pool = PagePool(64)
    own = {0: pool.alloc(5)}
    scratch = pool.alloc(-(-owned_rows_needed(log.requests[1].plan, srcs, PAGE) // PAGE))
    r = log.requests[1]
    hb = plan_layout(r.tokens, r.plan, srcs, own, scratch, PAGE, 512)
    assert hb.num_seqs == 2 and list(np.diff(hb.cu_q)) == [7, 5]
    assert list(hb.positions) == [*range(40, 47), *range(127, 132)]
    assert hb.num_inplace_rows == 3 * PAGE      # provider page 0 (δ 0) and pages 2, 3 (δ −13)
    for b, end in enumerate((47, 132)):
        keys = _keys(hb, own, scratch, {0: log.requests[0].tokens}, r.tokens, b)
        inplace = sorted(keys[keys >= 0].tolist())
        n_owned = int((keys < 0).sum())
        assert len(inplace) + n_owned == end                       # nothing missing, nothing twice
        assert len(set(inplace)) == len(inplace) and max(inplace) < end


@pytest.fixture(scope="module")
def one_layer():
    spec = exec_spec(tiny_model_spec(num_layers=1, num_experts=0))
    return Model(spec, random_weights(spec, device=DEVICE, dtype=torch.float32, seed=3), tile=TILE)


def test_full_prefill_matches_float64_forward(one_layer):
    """Kernel forward (fp32, interpreter) = float64 torch forward: KV rows, final hidden, logits."""
    spec = exec_spec(tiny_model_spec(num_layers=2))
    model = Model(spec, random_weights(spec, device=DEVICE, dtype=torch.float32, seed=4), tile=TILE)
    toks = np.random.default_rng(1).integers(0, 10**6, 75).astype(np.int32)
    cache = model.alloc_cache(6, PAGE)
    pages = np.array([4, 1, 5], np.int32)
    hb = full_layout(toks, pages, PAGE, spec.vocab_size)
    from pic.kernels.executor.device import to_device
    hs, logits = model.forward(to_device(hb, spec, torch.device(DEVICE)), cache)
    ref = prefill_reference(spec, model.w, torch.from_numpy(hb.token_ids))
    kv = cache.view(spec.num_layers, -1, spec.row)[:, torch.from_numpy(hb.dst_rows)]
    assert rel_rms(ref["kv"], kv) < EXACT
    assert rel_rms(ref["hidden"], hs[0]) < EXACT
    assert rel_rms(ref["logits"], logits[0]) < EXACT


def test_one_layer_reuse_equals_full_prefill(one_layer):
    """One layer: cached latents are context-free, so REUSE + REUSE_ROTATED + RECOMPUTE = full prefill."""
    ex = Executor(one_layer, _log(), ExecConfig(page_size=PAGE, timing=False, energy_seconds=0))
    rows = ex.run([1, 2])
    for row in rows:
        assert row["out_dev"] < EXACT, row
        assert row["kv_dev"] < EXACT and row["top1_match"]
        assert row["reused_tokens"] > 0 and row["executed_tokens"] < row["prompt_tokens"]
        assert row["access_bytes"] >= row["hbm_bytes"] > 0 and row["hbm_bytes_full"] > row["hbm_bytes"]
    assert rows[1]["executed_tokens"] == 31        # 30 recomputed + the reused last token
    assert ex.num_fills == 1                       # r0 was filled once as a provider, r1 was executed


def test_deeper_reuse_deviation_is_measured():
    """Three layers: layer-0 KV still matches, deeper reused KV carries its producer's context (> 0)."""
    spec = exec_spec(tiny_model_spec(num_layers=3))
    model = Model(spec, random_weights(spec, device=DEVICE, dtype=torch.float32, seed=5), tile=TILE)
    ex = Executor(model, _log(), ExecConfig(page_size=PAGE, timing=False, energy_seconds=0))
    row = ex.run([1])[0]
    assert row["kv_dev_first"] < EXACT
    assert row["kv_dev_last"] > 1e-3          # a real deviation, not assumed zero
    assert 0 < row["out_dev"] < 1.0
    assert len(row["kv_dev_layers"]) == 3


def test_decode_path_equals_extend(one_layer):
    """A few new tokens as one-token sequences through the decode kernel = the extend kernel's result."""
    log = _log()
    ex = Executor(one_layer, log, ExecConfig(page_size=PAGE, timing=False, energy_seconds=0))
    srcs, need = ex.plan_pages([1])
    ex._alloc_cache(need)
    ex._ensure_kv(0)
    r = log.requests[1]
    scratch = ex.pool.alloc(-(-owned_rows_needed(r.plan, srcs[1], PAGE) // PAGE))
    hb = plan_layout(r.tokens, r.plan, srcs[1], ex.own, scratch, PAGE, 512)
    from pic.kernels.executor.device import to_device
    from pic.kernels.executor.layout import as_decode
    d = as_decode(hb)
    assert d.decode and d.num_seqs == hb.num_new and list(d.seq_lens[:3]) == [hb.seq_lens[0] - 6, hb.seq_lens[0] - 5,
                                                                                hb.seq_lens[0] - 4]
    spec = one_layer.spec
    ext = one_layer.forward(to_device(hb, spec, torch.device(DEVICE), decode_max_new=0), ex.cache)
    dec = one_layer.forward(to_device(hb, spec, torch.device(DEVICE), decode_max_new=64), ex.cache)
    assert rel_rms(ext[0], dec[0]) < EXACT and rel_rms(ext[1], dec[1]) < EXACT


def test_batch_fields_cover_the_kernel_inputs():
    """Batch is the only thing a forward reads (regression guard for the dataclass fields)."""
    names = set(Batch.__dataclass_fields__)
    assert {"token_ids", "positions", "dst_rows", "block_table", "block_delta", "run_end", "seq_lens", "cu_q",
            "max_new", "logit_rows", "copies", "decode", "max_seq_len"} == names


def test_cost_model_sequences_match_the_layout():
    """The calibrated cost model prices the attention sequences the executor runs (pic.engine.cost.exec_sequences)."""
    from pic.engine.cost import exec_sequences

    log = _log()
    own = {0: np.arange(5, dtype=np.int32), 1: np.arange(5, 10, dtype=np.int32)}
    for i in (1, 2):
        r, srcs = log.requests[i], log.resolve_sources(i)
        scratch = np.arange(20, 20 + -(-owned_rows_needed(r.plan, srcs, PAGE) // PAGE), dtype=np.int32)
        hb = plan_layout(r.tokens, r.plan, srcs, own, scratch, PAGE, 10**6)
        seqs = exec_sequences(r.plan)
        news = np.diff(hb.cu_q)
        assert [n for n, _, _ in seqs] == news.tolist()
        assert [p + q for _, p, q in seqs] == (hb.seq_lens - news).tolist()
        assert sum(q for _, _, q in seqs) > 0   # both plans read rotated keys


def test_calibrate_records_rotated_points_and_the_attention_layout(one_layer):
    """`calibrate` on the interpreter: the profile has the rotated rows (cached pages read with δ != 0) and
    the extend layout facts the cost model fits with; the rotated batch differs from the plain one by δ only."""
    from pic.kernels.executor.calibrate import ROTATION_DELTA, CalibrationGrid, _prefill_batch, calibrate

    plain = _prefill_batch(40, 40, PAGE, 512, np.random.default_rng(0))
    rot = _prefill_batch(40, 40, PAGE, 512, np.random.default_rng(0), ROTATION_DELTA)
    assert rot.block_delta.tolist() == [[ROTATION_DELTA, ROTATION_DELTA, 0, 0]]   # 64 cached rows, then new
    assert plain.block_delta.tolist() == [[0, 0, 0, 0]] and (rot.token_ids == plain.token_ids).all()
    grid = CalibrationGrid(new_tokens=(40,), cached_tokens=(0, 32), extra_prefill=(), rotated=((40, 32),),
                           decode_seqs=(1,), decode_context=(16, 32), repeats=1)
    prof, details = calibrate(one_layer, "h200", "tiny-mla", grid, page=PAGE)
    assert [r[:2] for r in prof.prefill] == [(40, 0), (40, 32)] and [r[:2] for r in prof.prefill_rotated] == [(40, 32)]
    assert prof.extend.tokens_per_program == TILE["BLOCK_T"] and prof.extend.decode_max_new == 32
    assert prof.extend.head_groups == -(-one_layer.spec.num_heads // TILE["BLOCK_HH"])
    assert all(s > 0 for *_, s in prof.prefill + prof.prefill_rotated + prof.decode)
    assert {d["kind"] for d in details["points"]} == {"prefill", "rotated", "decode"}
