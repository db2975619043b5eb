"""Float torch references for ADA: encode (codes), decode of codes to keys, reading a paged cache back,
and GQA decode attention over it (float32/float64, loops allowed)."""

from __future__ import annotations

import math

import torch

from pic.engine.angle_codes import pair_codebook, rho_codebook, theta_codebook, tier
from pic.kernels.ada.cache import DENSE, HEADER, UNIT, AdaCache, page_layout, rotation


def encode_reference(k: torch.Tensor, bits: int, seed: int = 0,
                     dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keys [N, D] -> (r̃ [N], θ codes [N, D/2], ρ codes [N, D/2]) of tier ``bits``, computed in ``dtype``."""
    t = tier(bits)
    N, D = k.shape
    pi = rotation(D, seed).to(dtype)
    u = k.to(dtype).cpu() @ pi.T
    x, y = u[:, :D // 2], u[:, D // 2:]
    pr = torch.sqrt(x * x + y * y)
    rho = pr / pr.norm(dim=1, keepdim=True).clamp_min(1e-30)
    th = torch.atan2(y, x) % (2 * math.pi)
    tc = torch.clamp(torch.floor(th * (2 ** t.theta_bits / (2 * math.pi))), 0, 2 ** t.theta_bits - 1).long()
    cuts = torch.from_numpy(rho_codebook(D, t.rho_bits)[1]).to(dtype)
    rc = torch.searchsorted(cuts, rho.contiguous(), right=False)
    ux, uy = _direction(tc, rc, bits, D, dtype)
    uu = (ux * ux + uy * uy).sum(1)
    r = (x * ux + y * uy).sum(1) / torch.where(uu > 0, uu, torch.ones_like(uu))
    return r, tc, rc


def _direction(tc: torch.Tensor, rc: torch.Tensor, bits: int, D: int, dtype: torch.dtype):
    t = tier(bits)
    joint = pair_codebook(D, bits)
    if joint is not None:
        code = tc | (rc << t.theta_bits)
        x, y = (torch.from_numpy(a).to(dtype) for a in joint)
        return x[code], y[code]
    cos, sin = (torch.from_numpy(a).to(dtype) for a in theta_codebook(t.theta_bits))
    rho = torch.from_numpy(rho_codebook(D, t.rho_bits)[0]).to(dtype)
    return rho[rc] * cos[tc], rho[rc] * sin[tc]


def decode_reference(r: torch.Tensor, tc: torch.Tensor, rc: torch.Tensor, bits: int, seed: int = 0,
                     dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Codes -> keys k̃ = r̃ · Π^T (ρ̂ cos θ̂ | ρ̂ sin θ̂), [N, D] in ``dtype``."""
    D = 2 * tc.shape[1]
    ux, uy = _direction(tc, rc, bits, D, dtype)
    return r.to(dtype)[:, None] * (torch.cat([ux, uy], 1) @ rotation(D, seed).to(dtype))


def unpack_page(cache: AdaCache, unit: int, rows: int) -> tuple[int, torch.Tensor, ...]:
    """Read page ``unit`` back on the host: (bits, keys-or-(r̃, θ codes, ρ codes), values [rows, D])."""
    a = cache.arena.cpu()
    p0 = unit * UNIT
    i32 = a[p0:p0 + HEADER].view(torch.int32)
    bits, D, esize = int(i32[0]), cache.head_dim, cache.esize
    v_off, _ = page_layout(bits, cache.page_size, D, esize)
    vals = a[p0 + v_off:p0 + v_off + rows * D * esize].view(cache.dtype).view(rows, D)
    if bits == DENSE:
        return bits, a[p0 + HEADER:p0 + HEADER + rows * D * esize].view(cache.dtype).view(rows, D), vals
    t = tier(bits)
    r = a[p0 + HEADER:p0 + HEADER + 4 * rows].view(torch.float32)
    c0 = p0 + HEADER + 4 * cache.page_size
    words = a[c0:c0 + 4 * rows * t.words(D)].view(torch.int32).view(rows, -1).long() & 0xFFFFFFFF
    p = torch.arange(D // 2)
    code = (words[:, p // t.codes_per_word] >> ((p % t.codes_per_word) * t.pair_bits)) & ((1 << t.pair_bits) - 1)
    return bits, (r, code & ((1 << t.theta_bits) - 1), code >> t.theta_bits), vals


def cache_keys_values(cache: AdaCache, b: int, h: int, dtype: torch.dtype = torch.float64):
    """Sequence b, KV head h as stored: (keys [T, D] — decoded codes or dense keys — values [T, D], bits per token)."""
    n, P = int(cache.seq_lens[b]), cache.page_size
    ks, vs, bs = [], [], []
    for j in range(-(-n // P)):
        rows = min(P, n - j * P)
        bits, key, vals = unpack_page(cache, int(cache.block_table[b, h, j]), rows)
        ks.append(key.to(dtype) if bits == DENSE else decode_reference(*key, bits, cache.seed, dtype))
        vs.append(vals.to(dtype))
        bs.append(torch.full((rows,), bits))
    return torch.cat(ks), torch.cat(vs), torch.cat(bs)


def decode_attention_reference(q: torch.Tensor, cache: AdaCache, sm_scale: float | None = None,
                               dtype: torch.dtype = torch.float64, return_logits: bool = False):
    """softmax(scale · q·k̃^T)·v per sequence and query head over the cache as stored; [B, HQ, D] in ``dtype``
    (and the natural-log-domain logits scale·q·k̃ [B, HQ, max_len], -inf past seq_len, if asked)."""
    B, HQ, D = q.shape
    H = cache.block_table.shape[1]
    g = HQ // H
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    out = torch.empty(B, HQ, D, dtype=dtype)
    lg = torch.full((B, HQ, int(cache.seq_lens.max())), float("-inf"), dtype=dtype)
    for b in range(B):
        for h in range(H):
            k, v, _ = cache_keys_values(cache, b, h, dtype)
            s = q[b, h * g:(h + 1) * g].cpu().to(dtype) @ k.T * scale
            lg[b, h * g:(h + 1) * g, :k.shape[0]] = s
            out[b, h * g:(h + 1) * g] = torch.softmax(s, -1) @ v
    return (out, lg) if return_logits else out


def dense_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_lens, sm_scale=None,
                              dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Exact attention over the original keys/values [B, T, H, D] (what ADA approximates), [B, HQ, D]."""
    B, HQ, D = q.shape
    H = k.shape[2]
    g = HQ // H
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    out = torch.empty(B, HQ, D, dtype=dtype)
    for b in range(B):
        n = int(seq_lens[b])
        kk, vv = k[b, :n].cpu().to(dtype), v[b, :n].cpu().to(dtype)
        for h in range(H):
            s = q[b, h * g:(h + 1) * g].cpu().to(dtype) @ kk[:, h].T * scale
            out[b, h * g:(h + 1) * g] = torch.softmax(s, -1) @ vv[:, h]
    return out
