"""Weights of the executed model: random tensors of the real shapes, or Hugging Face safetensors.

Layout (per layer ``i``), with the Hugging Face DeepSeek-V2 names they are loaded from:

* ``q`` [H·(nope+rope), h] ``self_attn.q_proj`` — or ``q_a`` [r_q, h], ``q_a_norm`` [r_q], ``q_b`` [H·(nope+rope), r_q]
* ``kv_a`` [r + rope, h] ``self_attn.kv_a_proj_with_mqa``; ``kv_a_norm`` [r] ``self_attn.kv_a_layernorm``
* ``w_uk`` [H, nope, r] and ``w_uv`` [H, v, r]: the two halves of ``self_attn.kv_b_proj`` [H·(nope+v), r]
* ``o`` [h, H·v] ``self_attn.o_proj``; ``in_norm`` / ``post_norm`` [h] the two RMSNorms
* dense MLP: ``gate_up`` [2I, h] (``mlp.gate_proj`` ; ``mlp.up_proj``), ``down`` [h, I]
* MoE: ``router`` [E, h] ``mlp.gate``; ``e_gate_up`` [E, 2I_e, h], ``e_down`` [E, h, I_e] (``mlp.experts.j.*``);
  shared experts ``s_gate_up`` / ``s_down`` (``mlp.shared_experts.*``)

plus ``embed`` [V, h], ``norm`` [h], ``lm_head`` [V, h]. Random weights are N(0, 1/fan_in) so activations
stay O(1) through every layer; norms are 1.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

from pic.kernels.model.spec import ExecSpec

_ST_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64}


def _shapes(spec: ExecSpec, layer: int) -> dict[str, tuple[int, ...]]:
    h, H, r = spec.hidden_size, spec.num_heads, spec.kv_lora_rank
    qk = spec.nope_dim + spec.rope_dim
    s: dict[str, tuple[int, ...]] = {"in_norm": (h,), "post_norm": (h,), "kv_a": (r + spec.rope_dim, h),
                                     "kv_a_norm": (r,), "w_uk": (H, spec.nope_dim, r), "w_uv": (H, spec.v_dim, r),
                                     "o": (h, H * spec.v_dim)}
    if spec.q_lora_rank:
        s.update(q_a=(spec.q_lora_rank, h), q_a_norm=(spec.q_lora_rank,), q_b=(H * qk, spec.q_lora_rank))
    else:
        s["q"] = (H * qk, h)
    if spec.is_moe(layer):
        E, ie = spec.num_experts, spec.moe_intermediate_size
        s.update(router=(E, h), e_gate_up=(E, 2 * ie, h), e_down=(E, h, ie))
        if spec.num_shared_experts:
            s.update(s_gate_up=(2 * spec.shared_intermediate_size, h), s_down=(h, spec.shared_intermediate_size))
    else:
        s.update(gate_up=(2 * spec.intermediate_size, h), down=(h, spec.intermediate_size))
    return s


def random_weights(spec: ExecSpec, device: str | torch.device = "cpu", dtype: torch.dtype = torch.bfloat16,
                   seed: int = 0) -> dict:
    """``{"layers": [dict per layer], "embed", "norm", "lm_head"}`` drawn on ``device`` from ``seed``."""
    g = torch.Generator(device=device).manual_seed(seed)

    def draw(shape: tuple[int, ...], name: str) -> torch.Tensor:
        if name.endswith("norm"):
            return torch.ones(shape, dtype=dtype, device=device)
        t = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
        return t.mul_(shape[-1] ** -0.5).to(dtype)

    layers = [{k: draw(v, k) for k, v in _shapes(spec, i).items()} for i in range(spec.num_layers)]
    h, V = spec.hidden_size, spec.vocab_size
    return {"layers": layers, "embed": draw((V, h), "embed").mul_(h ** 0.5), "norm": draw((h,), "norm"),
            "lm_head": draw((V, h), "lm_head")}


def to(weights: dict, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> dict:
    """A copy of ``weights`` on ``device`` / in ``dtype``."""
    def cv(t: torch.Tensor) -> torch.Tensor:
        return t.to(device=device, dtype=dtype)
    return {"layers": [{k: cv(v) for k, v in layer.items()} for layer in weights["layers"]],
            **{k: cv(weights[k]) for k in ("embed", "norm", "lm_head")}}


# ---- Hugging Face safetensors ------------------------------------------------------------------------
def load_hf_weights(folder: str | Path, spec: ExecSpec, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.bfloat16) -> dict:
    """Load DeepSeek-V2-layout safetensors from ``folder`` (``model.layers.{i}.…`` names) into the layout
    above, for the first ``spec.num_layers`` layers. Raises ValueError naming the file and tensor when a
    tensor is missing or has the wrong shape."""
    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{folder}: no *.safetensors files")
    where: dict[str, Path] = {}
    for f in files:
        for name in _header(f):
            where[name] = f
    readers: dict[Path, _SafeFile] = {}

    def get(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        f = where.get(name)
        if f is None:
            raise ValueError(f"{folder}: tensor {name!r} missing from the safetensors files")
        t = readers.setdefault(f, _SafeFile(f)).tensor(name)
        if tuple(t.shape) != shape:
            raise ValueError(f"{f}: {name}: shape {tuple(t.shape)}, expected {shape} for {spec.name}")
        return t.to(device=device, dtype=dtype)

    H, r = spec.num_heads, spec.kv_lora_rank
    qk = spec.nope_dim + spec.rope_dim
    layers = []
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        s = _shapes(spec, i)
        w: dict[str, torch.Tensor] = {
            "in_norm": get(p + "input_layernorm.weight", s["in_norm"]),
            "post_norm": get(p + "post_attention_layernorm.weight", s["post_norm"]),
            "kv_a": get(p + "self_attn.kv_a_proj_with_mqa.weight", s["kv_a"]),
            "kv_a_norm": get(p + "self_attn.kv_a_layernorm.weight", s["kv_a_norm"]),
            "o": get(p + "self_attn.o_proj.weight", s["o"])}
        kv_b = get(p + "self_attn.kv_b_proj.weight", (H * (spec.nope_dim + spec.v_dim), r)).view(H, -1, r)
        w["w_uk"], w["w_uv"] = kv_b[:, :spec.nope_dim].contiguous(), kv_b[:, spec.nope_dim:].contiguous()
        if spec.q_lora_rank:
            w["q_a"] = get(p + "self_attn.q_a_proj.weight", s["q_a"])
            w["q_a_norm"] = get(p + "self_attn.q_a_layernorm.weight", s["q_a_norm"])
            w["q_b"] = get(p + "self_attn.q_b_proj.weight", (H * qk, spec.q_lora_rank))
        else:
            w["q"] = get(p + "self_attn.q_proj.weight", s["q"])
        if spec.is_moe(i):
            ie, h = spec.moe_intermediate_size, spec.hidden_size
            w["router"] = get(p + "mlp.gate.weight", s["router"])
            w["e_gate_up"] = torch.stack([torch.cat([get(f"{p}mlp.experts.{e}.gate_proj.weight", (ie, h)),
                                                     get(f"{p}mlp.experts.{e}.up_proj.weight", (ie, h))])
                                          for e in range(spec.num_experts)])
            w["e_down"] = torch.stack([get(f"{p}mlp.experts.{e}.down_proj.weight", (h, ie))
                                       for e in range(spec.num_experts)])
            if spec.num_shared_experts:
                si = spec.shared_intermediate_size
                w["s_gate_up"] = torch.cat([get(p + "mlp.shared_experts.gate_proj.weight", (si, h)),
                                            get(p + "mlp.shared_experts.up_proj.weight", (si, h))])
                w["s_down"] = get(p + "mlp.shared_experts.down_proj.weight", (h, si))
        else:
            it, h = spec.intermediate_size, spec.hidden_size
            w["gate_up"] = torch.cat([get(p + "mlp.gate_proj.weight", (it, h)), get(p + "mlp.up_proj.weight", (it, h))])
            w["down"] = get(p + "mlp.down_proj.weight", (h, it))
        layers.append(w)
    V, h = spec.vocab_size, spec.hidden_size
    return {"layers": layers, "embed": get("model.embed_tokens.weight", (V, h)),
            "norm": get("model.norm.weight", (h,)), "lm_head": get("lm_head.weight", (V, h))}


def _header(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            head = json.loads(fh.read(n))
    except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a safetensors file ({e})") from None
    head.pop("__metadata__", None)
    return head


class _SafeFile:
    """Minimal safetensors reader (header + memory-mapped tensors); the format is 8 bytes of header length,
    a JSON header ``{name: {dtype, shape, data_offsets}}`` and the raw little-endian data."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.head = _header(path)
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
        self.base = 8 + n
        self.data = torch.from_file(str(path), shared=False, size=path.stat().st_size, dtype=torch.uint8)

    def tensor(self, name: str) -> torch.Tensor:
        info = self.head[name]
        dt = _ST_DTYPES.get(info["dtype"])
        if dt is None:
            raise ValueError(f"{self.path}: {name}: unsupported dtype {info['dtype']}")
        a, b = info["data_offsets"]
        return self.data[self.base + a:self.base + b].view(dt).reshape(info["shape"])


def save_hf_weights(weights: dict, spec: ExecSpec, path: str | Path) -> None:
    """Write ``weights`` as one safetensors file in the DeepSeek-V2 layout (tests, and exporting random
    weights for another engine)."""
    tensors: dict[str, torch.Tensor] = {"model.embed_tokens.weight": weights["embed"],
                                        "model.norm.weight": weights["norm"], "lm_head.weight": weights["lm_head"]}
    for i, w in enumerate(weights["layers"]):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = w["in_norm"]
        tensors[p + "post_attention_layernorm.weight"] = w["post_norm"]
        tensors[p + "self_attn.kv_a_proj_with_mqa.weight"] = w["kv_a"]
        tensors[p + "self_attn.kv_a_layernorm.weight"] = w["kv_a_norm"]
        tensors[p + "self_attn.o_proj.weight"] = w["o"]
        tensors[p + "self_attn.kv_b_proj.weight"] = torch.cat([w["w_uk"], w["w_uv"]], dim=1).reshape(
            -1, spec.kv_lora_rank)
        if spec.q_lora_rank:
            tensors[p + "self_attn.q_a_proj.weight"] = w["q_a"]
            tensors[p + "self_attn.q_a_layernorm.weight"] = w["q_a_norm"]
            tensors[p + "self_attn.q_b_proj.weight"] = w["q_b"]
        else:
            tensors[p + "self_attn.q_proj.weight"] = w["q"]
        if spec.is_moe(i):
            ie = spec.moe_intermediate_size
            tensors[p + "mlp.gate.weight"] = w["router"]
            for e in range(spec.num_experts):
                tensors[f"{p}mlp.experts.{e}.gate_proj.weight"] = w["e_gate_up"][e, :ie]
                tensors[f"{p}mlp.experts.{e}.up_proj.weight"] = w["e_gate_up"][e, ie:]
                tensors[f"{p}mlp.experts.{e}.down_proj.weight"] = w["e_down"][e]
            if spec.num_shared_experts:
                si = spec.shared_intermediate_size
                tensors[p + "mlp.shared_experts.gate_proj.weight"] = w["s_gate_up"][:si]
                tensors[p + "mlp.shared_experts.up_proj.weight"] = w["s_gate_up"][si:]
                tensors[p + "mlp.shared_experts.down_proj.weight"] = w["s_down"]
        else:
            it = spec.intermediate_size
            tensors[p + "mlp.gate_proj.weight"] = w["gate_up"][:it]
            tensors[p + "mlp.up_proj.weight"] = w["gate_up"][it:]
            tensors[p + "mlp.down_proj.weight"] = w["down"]
    inv = {v: k for k, v in _ST_DTYPES.items()}
    head, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().cpu().view(torch.uint8).flatten().numpy().tobytes()
        head[name] = {"dtype": inv[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    raw = json.dumps(head).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for b in blobs:
            fh.write(b)
