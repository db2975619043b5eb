"""A Qwen3-Next-like layer stack for the LinearKV GPU benchmark (random bf16 weights, real widths).

Layers: ``(3 Gated DeltaNet + 1 attention) x blocks``; every layer is RMSNorm -> mixer -> residual ->
RMSNorm -> SwiGLU MLP -> residual. Widths follow Qwen3-Next-80B-A3B (hidden 2048; GDN 16 key / 32 value
heads of 128, conv 4; attention 16 query / 2 KV heads of 256, RoPE on the first 64 dims), with one dense
SwiGLU MLP of 5632 = 10 x 512 + 512 standing in for the 512-expert MoE (the same active FLOPs; the real
model's 80B parameters would not fit the GPU in bf16). The attention output gate and the embedding gather
are left out. :func:`standin_spec` is the matching ``ModelSpec`` for the simulator.

Two forwards: ``full(x)`` prefills all N tokens from zero states, writing the KV cache; ``partial(...)``
is LinearKV's: only the recomputed tokens ``pos`` (sorted) run, the recurrent layers start from given
states, the attention layers rotate the moved cached keys, write the recomputed rows and attend over the
whole cache (:func:`pic.kernels.gqa_extend.gqa_extend`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from pic.kernels.gqa_extend import gqa_extend
from pic.kernels.recurrent import gdn_chunk


@dataclass(frozen=True)
class Dims:
    hidden: int = 2048
    blocks: int = 12                 # layers = 4 x blocks (3 GDN + 1 attention each)
    gdn_kh: int = 16
    gdn_vh: int = 32
    dk: int = 128
    dv: int = 128
    heads: int = 16
    kv_heads: int = 2
    head_dim: int = 256
    rotary: int = 64
    mlp: int = 5632
    vocab: int = 151936
    conv: int = 4

    @property
    def num_layers(self) -> int:
        return 4 * self.blocks

    @property
    def kinds(self) -> tuple[str, ...]:
        return ("gdn", "gdn", "gdn", "attn") * self.blocks


TINY = Dims(hidden=64, blocks=1, gdn_kh=2, gdn_vh=4, dk=16, dv=16, heads=4, kv_heads=2, head_dim=32, rotary=8,
            mlp=96, vocab=500)


def standin_spec(d: Dims):
    """The ModelSpec the simulator prices for this stack (Qwen3-Next shapes, dense MLP, no MoE)."""
    from pic.engine.specs import MODELS
    return replace(MODELS["qwen3-next-80b-a3b"], name="qwen3-next-standin", num_layers=d.num_layers,
                   hidden_size=d.hidden, num_heads=d.heads, num_kv_heads=d.kv_heads, head_dim=d.head_dim,
                   rotary_fraction=d.rotary / d.head_dim, layer_kinds=d.kinds, intermediate_size=d.mlp,
                   moe_intermediate_size=0, num_experts=0, num_experts_active=0, num_shared_experts=0,
                   shared_expert_intermediate_size=0, vocab_size=d.vocab, gdn_num_key_heads=d.gdn_kh,
                   gdn_num_value_heads=d.gdn_vh, gdn_key_head_dim=d.dk, gdn_value_head_dim=d.dv,
                   conv_kernel=d.conv)


def _w(*shape, device, dtype, scale=None):
    scale = 1.0 / math.sqrt(shape[0]) if scale is None else scale
    return (torch.randn(*shape, device=device, dtype=torch.float32) * scale).to(dtype)


class Stack:
    """Weights, KV caches and the two forwards. ``n`` = prompt length (KV cache rows)."""

    def __init__(self, d: Dims, n: int, device: str, dtype=torch.bfloat16, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.d, self.n, self.device, self.dtype = d, n, device, dtype
        kw = {"device": device, "dtype": dtype}
        nk, nv = d.gdn_kh * d.dk, d.gdn_vh * d.dv
        self.layers = []
        for kind in d.kinds:
            L = {"mlp_in": _w(d.hidden, 2 * d.mlp, **kw), "mlp_out": _w(d.mlp, d.hidden, **kw)}
            if kind == "gdn":
                L.update(qkvz=_w(d.hidden, 2 * nk + 2 * nv, **kw), ba=_w(d.hidden, 2 * d.gdn_vh, **kw),
                         conv=_w(2 * nk + nv, d.conv, scale=0.5, **kw), out=_w(nv, d.hidden, **kw),
                         a_log=torch.rand(d.gdn_vh, device=device).mul(2).log1p(),
                         dt_bias=torch.rand(d.gdn_vh, device=device) * 0.1)
            else:
                L.update(qkv=_w(d.hidden, (d.heads + 2 * d.kv_heads) * d.head_dim, **kw),
                         out=_w(d.heads * d.head_dim, d.hidden, **kw),
                         k_cache=torch.randn(n, d.kv_heads, d.head_dim, **kw),
                         v_cache=torch.randn(n, d.kv_heads, d.head_dim, **kw))
            self.layers.append((kind, L))
        self.lm_head = _w(d.hidden, d.vocab, **kw)
        half = d.rotary // 2
        self.inv_freq = 1.0 / (1e7 ** (torch.arange(half, device=device, dtype=torch.float32) / half))
        self.block = {"block_m": 64, "block_n": 32, "num_warps": 4, "num_stages": 2}
        self.attn_impl = "triton"     # or "sdpa" (full prefill only: torch's causal flash path)

    # ---- building blocks --------------------------------------------------------------------------
    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Rotate the first ``rotary`` dims of ``x [T, H, D]`` (NeoX halves) to positions ``pos [T]``."""
        r, half = self.d.rotary, self.d.rotary // 2
        ang = pos.float()[:, None] * self.inv_freq[None, :]
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        x1, x2 = x[..., :half].float(), x[..., half:r].float()
        rot = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)
        return torch.cat([rot, x[..., r:]], -1)

    def rotate_cached(self, L, idx: torch.Tensor, delta: int) -> None:
        """RoPE correction of moved cached keys (rows ``idx``) by ``delta`` positions, in place."""
        if idx.numel() == 0:
            return
        kc = L["k_cache"]
        rows = kc.index_select(0, idx)
        kc.index_copy_(0, idx, self._rope(rows, torch.full((idx.numel(),), delta, device=idx.device)))

    def _gdn(self, L, x: torch.Tensor, state, want_state: bool):
        """``state``: ``(ssm [1, HV, K, V], conv [conv - 1, C])`` or None (zero); returns the new pair."""
        d = self.d
        nk, nv, t = d.gdn_kh * d.dk, d.gdn_vh * d.dv, x.shape[0]
        qkvz = x @ L["qkvz"]
        raw, z = qkvz[:, :2 * nk + nv], qkvz[:, 2 * nk + nv:]
        ba = (x @ L["ba"]).float()
        ssm, conv = (None, None) if state is None else state
        hist = raw if conv is None else torch.cat([conv.to(raw.dtype), raw])
        mixed = F.conv1d(hist.t()[None], L["conv"][:, None, :], padding=d.conv - 1, groups=raw.shape[1])
        mixed = F.silu(mixed[0, :, hist.shape[0] - t:hist.shape[0]].t())
        q = F.normalize(mixed[:, :nk].view(1, t, d.gdn_kh, d.dk).float(), dim=-1).to(x.dtype)
        k = F.normalize(mixed[:, nk:2 * nk].view(1, t, d.gdn_kh, d.dk).float(), dim=-1).to(x.dtype)
        v = mixed[:, 2 * nk:].reshape(1, t, d.gdn_vh, d.dv)
        beta = torch.sigmoid(ba[:, :d.gdn_vh])[None]
        g = (-L["a_log"].exp() * F.softplus(ba[:, d.gdn_vh:] + L["dt_bias"]))[None]
        o, s = gdn_chunk(q, k, v, g, beta, initial_state=ssm, output_final_state=want_state)
        o = o[0].float()
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + 1e-6) * F.silu(z.view(t, d.gdn_vh, d.dv).float())
        new = (s, F.pad(hist, (0, 0, max(0, d.conv - 1 - hist.shape[0]), 0))[-(d.conv - 1):]) if want_state else None
        return o.to(x.dtype).reshape(t, nv) @ L["out"], new

    def _attn(self, L, x: torch.Tensor, pos: torch.Tensor, full: bool):
        d = self.d
        t = x.shape[0]
        qkv = (x @ L["qkv"]).view(t, d.heads + 2 * d.kv_heads, d.head_dim)
        q = self._rope(qkv[:, :d.heads], pos)
        k = self._rope(qkv[:, d.heads:d.heads + d.kv_heads], pos)
        v = qkv[:, d.heads + d.kv_heads:]
        if full and self.attn_impl == "sdpa":
            L["k_cache"][:t], L["v_cache"][:t] = k, v
            o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                               v.transpose(0, 1)[None], is_causal=True, enable_gqa=True)
            o = o[0].transpose(0, 1)
        else:
            L["k_cache"].index_copy_(0, pos, k)
            L["v_cache"].index_copy_(0, pos, v)
            o = gqa_extend(q.contiguous(), L["k_cache"], L["v_cache"], pos, **self.block)
        return o.reshape(t, d.heads * d.head_dim) @ L["out"]

    @staticmethod
    def _norm(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

    def _mlp(self, L, x: torch.Tensor) -> torch.Tensor:
        gu = x @ L["mlp_in"]
        return (F.silu(gu[:, :self.d.mlp]) * gu[:, self.d.mlp:]) @ L["mlp_out"]

    # ---- forwards ---------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, pos: torch.Tensor, states=None, *, full: bool, upto: int | None = None,
                timer=None, want_states: bool = False):
        """Run tokens ``x [T, hidden]`` at positions ``pos`` through layers ``[0, upto)``; GDN layer ``i``
        starts from ``states[i] = (ssm, conv window)`` (None: zero). Returns ``(x, final GDN states or None)``. ``timer(kind,
        start|stop)`` brackets each layer (per-kind time split)."""
        out_states, gi = [], 0
        for li, (kind, L) in enumerate(self.layers[:upto]):
            if timer:
                timer(kind, True)
            h = self._norm(x)
            if kind == "gdn":
                s0 = None if states is None else states[gi]
                y, s = self._gdn(L, h, s0, want_states)
                out_states.append(s)
                gi += 1
            else:
                y = self._attn(L, h, pos, full)
            x = x + y
            x = x + self._mlp(L, self._norm(x))
            if timer:
                timer(kind, False)
            del li
        return x, (out_states if want_states else None)

    def logits_last(self, x: torch.Tensor) -> torch.Tensor:
        return self._norm(x[-1:]) @ self.lm_head

    def probe_keys(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """CacheBlend's selection pass: layers below the first attention layer over ``x``, then that layer's
        fresh keys ``[T, kv_heads, head_dim]`` (RoPE'd at ``pos``)."""
        j = self.d.kinds.index("attn")
        h, _ = self.forward(x, pos, None, full=True, upto=j)
        d = self.d
        L = self.layers[j][1]
        kv = (self._norm(h) @ L["qkv"][:, d.heads * d.head_dim:(d.heads + d.kv_heads) * d.head_dim])
        return self._rope(kv.view(-1, d.kv_heads, d.head_dim), pos)
