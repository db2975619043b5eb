"""ADA kernels vs the float references: encode codes (packed layout read back on the host), decode
attention and its logits over coded pages of every tier (also mixed in one sequence), GQA groups,
split counts, the dense decode of the same structure, and the error model against measurement
(fp16/fp32 under the CPU interpreter; bf16 runs on the GPU in benchmarks/gpu_ada.py)."""

from __future__ import annotations

import math

import pytest

GPU_EXTRA = "kernel tests need the gpu extra: pip install -e '.[gpu]'"
torch = pytest.importorskip("torch", reason=GPU_EXTRA)
pytest.importorskip("triton", reason=GPU_EXTRA)

from pic.engine.angle_codes import TIERS, logit_error  # noqa: E402
from pic.kernels._testing import assert_close, rel_rms  # noqa: E402
from pic.kernels.ada import (  # noqa: E402
    ada_decode,
    allocate,
    decode_attention_reference,
    dense_attention_reference,
    dense_decode,
    encode_reference,
    store,
)
from pic.kernels.ada.reference import unpack_page  # noqa: E402

LOG2E = 1.4426950408889634


def _inputs(lens, H, G, D, dtype, seed, outliers=False):
    g = torch.Generator().manual_seed(seed)
    T = max(lens)
    k = torch.randn(len(lens), T, H, D, generator=g)
    if outliers:   # a few heavy channels and a shared offset, as real keys have
        k[..., :4] *= 12.0
        k += 2.0 * torch.randn(D, generator=g)
    v = torch.randn(len(lens), T, H, D, generator=g)
    q = torch.randn(len(lens), H * G, D, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _check_decode(q, cache, device, tol, splits):
    """Kernel output and logits vs the reference over the cache as stored."""
    T = int(cache.seq_lens.max())
    logits = torch.empty(q.shape[0], q.shape[1], T, dtype=torch.float32, device=device)
    dense = bool((cache.page_bits == 0).all())
    out = (dense_decode if dense else ada_decode)(q, cache, num_splits=splits, logits=logits)
    ref, ref_lg = decode_attention_reference(q, cache, return_logits=True)
    assert_close("ada decode", ref, out, tol)
    m = torch.isfinite(ref_lg)
    assert_close("ada logits", ref_lg[m], logits.cpu()[m] / LOG2E, tol)
    return out


@pytest.mark.parametrize("bits", TIERS, ids=[f"b{b}" for b in TIERS])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
def test_encode_codes_match_reference(bits, dtype, device):
    """Packed codes read back from the pages equal the reference codes (bar angle/threshold ties), the
    radius matches, and the values are copied bit for bit."""
    q, k, v = _inputs([70, 33], 2, 1, 64, dtype, seed=bits)
    cache = store(allocate([70, 33], 2, 32, 64, dtype, bits, device), k.to(device), v.to(device))
    for b, n in ((0, 70), (1, 33)):
        for h in range(2):
            for j in range(-(-n // 32)):
                rows = min(32, n - 32 * j)
                got_bits, (r, tc, rc), vals = unpack_page(cache, int(cache.block_table[b, h, j]), rows)
                assert got_bits == bits
                kk = k[b, 32 * j:32 * j + rows, h]
                r_ref, tc_ref, rc_ref = encode_reference(kk.float(), bits)
                assert (tc != tc_ref).float().mean() <= 0.01 and (tc - tc_ref).abs().max() <= 1
                assert (rc != rc_ref).float().mean() <= 0.01 and (rc - rc_ref).abs().max() <= 1
                if torch.equal(tc, tc_ref) and torch.equal(rc, rc_ref):
                    assert_close("radius", r_ref, r, 1e-5)
                assert torch.equal(vals, v[b, 32 * j:32 * j + rows, h].cpu())


CASES = [
    pytest.param([63, 1], 2, 4, 64, id="B2-T63-H2-G4-D64"),
    pytest.param([97, 40, 5], 1, 5, 64, id="B3-T97-H1-G5-D64"),
    pytest.param([130], 2, 1, 128, id="B1-T130-H2-G1-D128"),
]


DECODE = [pytest.param(*c.values, b, torch.float32, id=f"fp32-b{b}-{c.id}") for c in CASES for b in TIERS] + \
    [pytest.param(*CASES[0].values, b, torch.float16, id=f"fp16-b{b}-{CASES[0].id}") for b in TIERS]


@pytest.mark.parametrize("lens,H,G,D,bits,dtype", DECODE)
def test_decode_matches_reference(lens, H, G, D, bits, dtype, device):
    """Output and logits equal the float64 reference computed from the stored codes."""
    q, k, v = _inputs(lens, H, G, D, dtype, seed=sum(lens) + bits)
    cache = store(allocate(lens, H, 32, D, dtype, bits, device), k.to(device), v.to(device))
    tol = 1e-5 if dtype == torch.float32 and device == "cpu" else 3e-3
    _check_decode(q.to(device), cache, device, tol, splits=2)


@pytest.mark.parametrize("splits", [1, 3, 16], ids=["S1", "S3", "S16"])
def test_mixed_tier_pages(splits, device):
    """Pages of all four tiers mixed within each sequence (ragged lengths, partial last pages): one
    tier-specialized launch per tier merged by the combine, and the one-launch runtime-tier path
    (header-driven, with logits), both equal the reference; any split count agrees."""
    lens, H, G, D = [150, 77, 5], 2, 4, 64
    q, k, v = _inputs(lens, H, G, D, torch.float32, seed=splits)
    g = torch.Generator().manual_seed(99)
    bits = torch.tensor(TIERS)[torch.randint(4, (3, H, 5), generator=g)]
    cache = store(allocate(lens, H, 32, D, torch.float32, bits, device, shuffle=splits), k.to(device), v.to(device))
    assert len(torch.unique(bits[cache.used_pages()])) == 4 and cache.single_tier() is None
    tol = 1e-5 if device == "cpu" else 3e-3
    ref = decode_attention_reference(q, cache)
    assert_close("mixed, per-tier launches", ref, ada_decode(q.to(device), cache, num_splits=splits), tol)
    _check_decode(q.to(device), cache, device, tol, splits)   # logits asked: runtime-tier path


def test_tier_groups_cover_every_token():
    """The per-tier page lists hold every used page once, the partial last page last, and token counts
    that add up to the sequence lengths."""
    lens, H = [150, 64, 5], 2
    bits = torch.tensor(TIERS)[torch.randint(4, (3, H, 5), generator=torch.Generator().manual_seed(1))]
    cache = allocate(lens, H, 32, 64, torch.float32, bits)
    total = torch.zeros(3, H, dtype=torch.long)
    for b_, bt, toks, _, _ in cache.tier_groups():
        total += toks.long()
        for b in range(3):
            for h in range(H):
                n = int(toks[b, h])
                units = bt[b, h, :-(-n // 32)].tolist() if n else []
                want = [int(cache.block_table[b, h, j]) for j in range(-(-lens[b] // 32)) if int(bits[b, h, j]) == b_]
                assert sorted(units) == sorted(want)
                if lens[b] % 32 and int(bits[b, h, (lens[b] - 1) // 32]) == b_:
                    assert units[-1] == int(cache.block_table[b, h, (lens[b] - 1) // 32])
    assert total.tolist() == [[n] * H for n in lens]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
def test_dense_decode_is_exact_attention(dtype, device):
    """The dense kernel of the same structure equals exact attention over the original keys."""
    lens = [90, 17]
    q, k, v = _inputs(lens, 2, 4, 64, dtype, seed=5)
    cache = store(allocate(lens, 2, 32, 64, dtype, 0, device), k.to(device), v.to(device))
    out = _check_decode(q.to(device), cache, device, 1e-5 if dtype == torch.float32 and device == "cpu" else 3e-3, 2)
    assert_close("dense vs exact", dense_attention_reference(q, k, v, lens), out,
                 1e-5 if dtype == torch.float32 and device == "cpu" else 3e-3)


def test_decode_refuses_wrong_page_kind(device):
    """ada_decode refuses dense pages and dense_decode coded ones."""
    q, k, v = _inputs([40], 1, 2, 64, torch.float32, seed=1)
    coded = store(allocate([40], 1, 32, 64, torch.float32, 4, device), k.to(device), v.to(device))
    with pytest.raises(ValueError, match="dense"):
        dense_decode(q.to(device), coded)


@pytest.mark.parametrize("bits", TIERS, ids=[f"b{b}" for b in TIERS])
def test_error_model_predicts_logit_error(bits):
    """ε(b) of pic.engine.angle_codes predicts the measured relative logit error on random keys (±15 %),
    and heavy-tailed keys (outlier channels) see the same relative error (the rotation spreads them)."""
    g = torch.Generator().manual_seed(bits)
    for outliers in (False, True):
        k = torch.randn(3000, 128, generator=g, dtype=torch.float64)
        if outliers:
            k[:, :4] *= 20.0
        q = torch.randn(64, 128, generator=g, dtype=torch.float64)
        from pic.kernels.ada import decode_reference
        kt = decode_reference(*encode_reference(k, bits), bits)
        rel = ((q @ kt.T - q @ k.T).norm() / (q.norm(dim=1, keepdim=True) * k.norm(dim=1) / math.sqrt(128)).norm())
        assert abs(float(rel) / logit_error(128, bits) - 1) < 0.15, (bits, outliers, float(rel))


def test_decode_output_error_shrinks_with_tier(device):
    """Attention output vs exact attention: error falls monotonically from tier 2 to tier 8."""
    lens = [120]
    q, k, v = _inputs(lens, 1, 4, 64, torch.float32, seed=3)
    exact = dense_attention_reference(q, k, v, lens)
    errs = []
    for bits in (2, 3, 4, 8):
        cache = store(allocate(lens, 1, 32, 64, torch.float32, bits, device), k.to(device), v.to(device))
        errs.append(rel_rms(exact, ada_decode(q.to(device), cache)))
    assert errs == sorted(errs, reverse=True) and errs[-1] < 0.03, errs


@pytest.mark.parametrize("bits", TIERS, ids=[f"b{b}" for b in TIERS])
def test_specialized_and_runtime_tier_paths_agree(bits, device):
    """A one-tier cache takes the compile-time-tier kernel; the runtime-tier path (mixed caches) gives
    the same output on it, and both match the reference."""
    lens = [100, 37]
    q, k, v = _inputs(lens, 2, 4, 64, torch.float32, seed=11 + bits)
    cache = store(allocate(lens, 2, 32, 64, torch.float32, bits, device), k.to(device), v.to(device))
    assert cache.single_tier() == bits
    ref = decode_attention_reference(q, cache)
    tol = 1e-5 if device == "cpu" else 3e-3
    fast = ada_decode(q.to(device), cache, num_splits=2)
    slow = ada_decode(q.to(device), cache, num_splits=2, specialize=False)
    assert_close("specialized", ref, fast, tol)
    assert_close("runtime tier", ref, slow, tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
def test_rotate_queries_and_prerotated_path(dtype, device):
    """rotate_queries gives Πq (float64 check), and a caller's own Πq (prerotated=True, fp32 or in the
    cache dtype) gives the reference attention over the stored codes — the path a model takes when Π
    is folded into W_q."""
    from pic.kernels.ada import rotate_queries, rotation
    lens, H, G, D = [75, 20], 2, 4, 64
    q, k, v = _inputs(lens, H, G, D, dtype, seed=21)
    cache = store(allocate(lens, H, 32, D, dtype, 4, device), k.to(device), v.to(device))
    want = q.double() @ rotation(D).T
    assert_close("Πq", want, rotate_queries(q.to(device), cache), 1e-6 if device == "cpu" else 1e-5)
    ref = decode_attention_reference(q, cache)
    tol = 1e-5 if dtype == torch.float32 and device == "cpu" else 3e-3
    for qr in (want.float(), want.to(dtype)):
        out = torch.full_like(q, float("nan")).to(device)
        ada_decode(qr.to(device), cache, num_splits=2, prerotated=True, out=out)
        assert_close(f"prerotated {qr.dtype}", ref, out, tol)
    with pytest.raises(AssertionError, match="dtypes"):
        ada_decode(want.float().to(device) if dtype != torch.float32 else want.half().to(device), cache)


@pytest.mark.parametrize("bits", [4, 2], ids=["b4", "b2"])
def test_split_lut_diagnostic_matches_reference(bits, device):
    """The split θ / ρ lookup variant (config split_lut) decodes the same codes: equal to the reference
    up to the fp16 rounding of the joint table (ρ̂·fp16(cos θ̂) against fp16(ρ̂ cos θ̂))."""
    lens = [90, 41]
    q, k, v = _inputs(lens, 2, 4, 64, torch.float32, seed=31 + bits)
    cache = store(allocate(lens, 2, 32, 64, torch.float32, bits, device), k.to(device), v.to(device))
    out = ada_decode(q.to(device), cache, num_splits=2, config={"split_lut": True})
    err = assert_close("split lut", decode_attention_reference(q, cache), out, 3e-3)
    assert err > 0   # a different rounding, so not bit-identical (the flag took effect)


@pytest.mark.parametrize("bits", TIERS, ids=[f"b{b}" for b in TIERS])
def test_code_prefetch_off_matches_reference(bits, device):
    """The one-tier kernel with its code prefetch off (each tile loads its own codes) equals the
    reference too, on ragged lengths with several tiles per split (the default path is covered above)."""
    lens = [130, 47]
    q, k, v = _inputs(lens, 2, 4, 64, torch.float32, seed=41 + bits)
    cache = store(allocate(lens, 2, 32, 64, torch.float32, bits, device), k.to(device), v.to(device))
    tol = 1e-5 if device == "cpu" else 3e-3
    out = ada_decode(q.to(device), cache, num_splits=2, config={"code_prefetch": False})
    assert_close("no prefetch", decode_attention_reference(q, cache), out, tol)


def test_resident_ctas_follows_hopper_limits():
    """The residency the split count is sized for: registers rounded up to 8 per thread and allocated per
    warp out of 64 K, 228 KB of shared memory with 1 KB reserved per program, at most 64 warps."""
    from pic.kernels.ada.kernel import resident_ctas
    assert resident_ctas(178, 39168, 4) == 2     # the third kernel's tier 4: registers bind
    assert resident_ctas(168, 72192, 4) == 3     # 168 x 128 x 3 = 64,512 registers; 3 x 71 KB shared
    assert resident_ctas(122, 39168, 4) == 4     # 128 x 128 x 4 = 65,536
    assert resident_ctas(128, 105216, 4) == 2    # shared memory binds
    assert resident_ctas(32, 1024, 4) == 16      # the 64-warp limit


@pytest.mark.parametrize("bits", [8, 3], ids=["b8", "b3"])
def test_tuned_launch_options_keep_results(bits, device):
    """Launch options of the GPU tile configs (register cap, stages, BLOCK_N 32, twice the splits) do not
    change the result (the interpreter ignores the register cap; the GPU sweep checks it in bf16)."""
    lens = [150, 33]
    q, k, v = _inputs(lens, 2, 4, 64, torch.float32, seed=51 + bits)
    cache = store(allocate(lens, 2, 64, 64, torch.float32, bits, device), k.to(device), v.to(device))
    tol = 1e-5 if device == "cpu" else 3e-3
    cfg = {"BLOCK_N": 32, "num_warps": 4, "num_stages": 3, "ctas_per_sm": 8, "maxnreg": 128, "lut_smem": True}
    out = torch.full_like(q, float("nan")).to(device)
    ada_decode(q.to(device), cache, config=cfg, out=out)
    assert_close("tuned options", decode_attention_reference(q, cache), out, tol)


@pytest.mark.parametrize("bits", [4, 3, 2], ids=["b4", "b3", "b2"])
def test_shared_memory_table_gather_matches_reference(bits, device):
    """lut_smem: the joint table gathered from a register copy (tl.gather) holds the same fp16 products,
    so it equals the reference as tightly as the default global-table lookup."""
    lens = [140, 29]
    q, k, v = _inputs(lens, 2, 4, 64, torch.float32, seed=61 + bits)
    cache = store(allocate(lens, 2, 32, 64, torch.float32, bits, device), k.to(device), v.to(device))
    tol = 1e-5 if device == "cpu" else 3e-3
    out = torch.full_like(q, float("nan")).to(device)
    ada_decode(q.to(device), cache, num_splits=2, config={"lut_smem": True}, out=out)
    assert_close("lut_smem", decode_attention_reference(q, cache), out, tol)
