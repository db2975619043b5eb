"""Model/GPU specs: published shapes, derived sizes, FLOP formulas, HF config loading."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pic.engine.specs import GPUS, MODELS, ModelSpec, gpu_from_name, model_from_hf_config, model_from_name

V2L = MODELS["deepseek-v2-lite"]
LLAMA = MODELS["llama-3.1-8b"]


def test_v2_lite_kv_bytes():
    """DeepSeek-V2-Lite caches 27 * (512 + 64) * 2 = 31,104 bytes per token."""
    assert V2L.kv_bytes_per_token == 27 * (512 + 64) * 2 == 31_104


def test_llama_kv_bytes():
    """Llama-3.1-8B caches 32 layers * 2 * 8 heads * 128 * 2 B = 131,072 bytes per token."""
    assert LLAMA.kv_bytes_per_token == 131_072


def test_rope_key_bytes_mla_vs_gqa():
    """MLA's RoPE key is k_r (64 dims per layer); GQA's is all of K (half the KV row)."""
    assert V2L.rope_key_bytes_per_token == 27 * 64 * 2
    assert LLAMA.rope_key_bytes_per_token == LLAMA.kv_bytes_per_token // 2


@pytest.mark.parametrize("name,lo,hi", [("deepseek-v2-lite", 15.0e9, 16.5e9), ("deepseek-v3", 660e9, 690e9),
                                        ("llama-3.1-8b", 7.9e9, 8.2e9), ("qwen3-next-80b-a3b", 78e9, 82e9),
                                        ("granite-4.0-h-small", 31e9, 34e9), ("moonlight-16b", 15e9, 16.5e9)])
def test_total_params_match_published(name, lo, hi):
    """Total parameter counts derived from the shapes land on the published model sizes."""
    assert lo <= MODELS[name].total_params <= hi


def test_active_params_v2_lite():
    """DeepSeek-V2-Lite activates ~2.4B parameters per token (6 of 64 experts + 2 shared)."""
    assert 2.2e9 <= V2L.active_params <= 2.6e9
    assert V2L.active_param_bytes == 2 * V2L.active_params


def test_hybrids_have_state_and_fewer_kv_layers():
    """Hybrid presets keep recurrent state per sequence and KV only on their attention layers."""
    qn, gr = MODELS["qwen3-next-80b-a3b"], MODELS["granite-4.0-h-small"]
    assert qn.num_attn_layers == 12 and qn.count("gdn") == 36
    assert gr.count("mamba2") > 30 and 0 < gr.num_attn_layers < 8
    assert qn.state_bytes > 0 and gr.state_bytes > 0 and V2L.state_bytes == 0
    assert gr.rope_key_bytes_per_token == 0      # Granite-4.0-H attention uses no positional encoding


def test_prefill_flops_small_n_is_two_flops_per_active_param():
    """One new token costs ~2 FLOPs per active parameter (attention term negligible)."""
    for m in (V2L, LLAMA):
        assert m.prefill_flops(1, 0) == pytest.approx(2 * m.active_params, rel=0.01)


def test_prefill_flops_monotone():
    """More new tokens or more cached tokens never cost fewer FLOPs."""
    for m in (V2L, LLAMA, MODELS["qwen3-next-80b-a3b"]):
        for c in (0, 1000, 100_000):
            vals = [m.prefill_flops(n, c) for n in (1, 2, 64, 512, 4096)]
            assert all(a < b for a, b in zip(vals, vals[1:], strict=False))
        for n in (1, 64, 4096):
            vals = [m.prefill_flops(n, c) for c in (0, 10, 1000, 100_000)]
            assert all(a < b for a, b in zip(vals, vals[1:], strict=False))


def test_attention_term_quadratic():
    """Attention FLOPs of a fresh prefill grow ~4x when the prompt doubles (causal n(n+1)/2)."""
    for m in (V2L, LLAMA):
        a, b = m.attention_flops(4096, 0), m.attention_flops(8192, 0)
        assert b / a == pytest.approx(4.0, rel=0.01)


def test_decode_flops_and_bytes_linear_in_context():
    """Decode FLOPs and bytes grow linearly in total context tokens."""
    for m in (V2L, LLAMA):
        d1 = m.decode_bytes(8, 2000) - m.decode_bytes(8, 1000)
        d2 = m.decode_bytes(8, 3000) - m.decode_bytes(8, 2000)
        assert d1 == pytest.approx(d2) and d1 == pytest.approx(1000 * m.kv_bytes_per_token)
        assert m.decode_flops(8, 2000) > m.decode_flops(8, 1000)


def test_weight_bytes_read_grows_with_experts_touched():
    """A one-token forward reads the active weights; a big batch of a MoE model reads (almost) all experts."""
    assert V2L.weight_bytes_read(1) == pytest.approx(V2L.active_param_bytes)
    assert V2L.weight_bytes_read(4096) == pytest.approx((V2L.total_params - V2L.lm_head_params) * 2, rel=0.01)
    assert LLAMA.weight_bytes_read(4096) == pytest.approx(LLAMA.weight_bytes_read(1))


@pytest.mark.parametrize("kwargs,msg", [
    ({"attention": "xyz"}, "attention"),
    ({"num_kv_heads": 5}, "multiple"),
    ({"layer_kinds": ("attn",) * 3}, "entries"),
    ({"layer_kinds": ("attn",) * 31 + ("mamba2",)}, "mamba2"),
    ({"num_layers": 0}, "num_layers"),
])
def test_modelspec_validation(kwargs, msg):
    """Inconsistent shapes raise ValueError naming the problem."""
    base = {"name": "t", "num_layers": 32, "hidden_size": 4096, "num_heads": 32, "attention": "gqa", "head_dim": 128, "num_kv_heads": 8}
    with pytest.raises(ValueError, match=msg):
        ModelSpec(**{**base, **kwargs})


def test_model_from_name_presets_and_unknown():
    """Preset names resolve case-insensitively; unknown names list the presets."""
    assert model_from_name("DeepSeek-V2-Lite") is V2L
    with pytest.raises(ValueError, match="llama-3.1-8b"):
        model_from_name("gpt-5")


def test_gpu_presets():
    """The H200 preset carries the measured figures; unknown GPUs list the names."""
    h = gpu_from_name("H200")
    assert (h.bf16_flops, h.hbm_bytes_per_s, h.busy_watts, h.idle_watts) == (790e12, 4.2e12, 670.0, 120.0)
    assert set(GPUS) >= {"h200", "h100", "a100"}
    with pytest.raises(ValueError, match="h200"):
        gpu_from_name("tpu")


# ---- Hugging Face config.json --------------------------------------------------------------------
def _write(tmp_path, name, cfg) -> str:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d / "config.json")


MLA_CFG = {"model_type": "deepseek_v2", "num_hidden_layers": 27, "hidden_size": 2048, "num_attention_heads": 16,
           "num_key_value_heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
           "v_head_dim": 128, "q_lora_rank": None, "intermediate_size": 10944, "moe_intermediate_size": 1408,
           "n_routed_experts": 64, "num_experts_per_tok": 6, "n_shared_experts": 2, "first_k_dense_replace": 1,
           "vocab_size": 102400, "torch_dtype": "bfloat16"}
GQA_CFG = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "torch_dtype": "bfloat16"}
HYBRID_CFG = {"model_type": "qwen3_next", "num_hidden_layers": 8, "hidden_size": 1024, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 128, "full_attention_interval": 4, "partial_rotary_factor": 0.25,
              "linear_num_key_heads": 8, "linear_num_value_heads": 16, "linear_key_head_dim": 128,
              "linear_value_head_dim": 128, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
              "shared_expert_intermediate_size": 256, "vocab_size": 151936}


def test_hf_mla_config_matches_preset(tmp_path):
    """A DeepSeek-V2-Lite config.json loads to the same shapes as the preset."""
    m = model_from_hf_config(_write(tmp_path, "DeepSeek-V2-Lite", MLA_CFG))
    assert m.name == "deepseek-v2-lite" and m.attention == "mla"
    assert m.kv_bytes_per_token == 31_104 and m.active_params == V2L.active_params


def test_hf_gqa_config_matches_preset(tmp_path):
    """A Llama-3.1-8B config.json loads to the preset's shapes (head_dim derived from hidden/heads)."""
    m = model_from_name(_write(tmp_path, "llama", GQA_CFG))
    assert m.attention == "gqa" and m.head_dim == 128 and m.kv_bytes_per_token == 131_072
    assert m.total_params == LLAMA.total_params


def test_hf_hybrid_config(tmp_path):
    """A Qwen3-Next-style config gives GDN layers with one full-attention layer in four."""
    m = model_from_hf_config(tmp_path.joinpath(_write(tmp_path, "qn", HYBRID_CFG)).parent)
    assert m.layer_kinds == ("gdn", "gdn", "gdn", "attn") * 2
    assert m.kv_bytes_per_token == 2 * 2 * 2 * 128 * 2 and m.state_bytes > 0
    assert m.num_shared_experts == 1 and m.rotary_fraction == 0.25


def test_hf_mamba_hybrid_config(tmp_path):
    """A Granite-4.0-H-style config maps 'mamba' layers to Mamba-2 with its state shapes; NoPE has no RoPE key."""
    cfg = {"model_type": "granitemoehybrid", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
           "num_key_value_heads": 2, "layer_types": ["mamba", "attention", "mamba", "mamba"],
           "mamba_n_heads": 16, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1,
           "position_embedding_type": "nope", "num_local_experts": 0, "intermediate_size": 1024,
           "shared_intermediate_size": 1024, "vocab_size": 1000}
    m = model_from_hf_config(_write(tmp_path, "g", cfg))
    assert m.count("mamba2") == 3 and m.mamba_state_dim == 128 and m.rope_key_bytes_per_token == 0


@pytest.mark.parametrize("content,msg", [
    ("{not json", r":1: invalid JSON"),
    ("[1, 2]", "JSON object"),
    (json.dumps({k: v for k, v in GQA_CFG.items() if k != "hidden_size"}), "hidden_size: missing"),
    (json.dumps({**GQA_CFG, "num_key_value_heads": "eight"}), "num_key_value_heads: expected"),
    (json.dumps({**GQA_CFG, "num_key_value_heads": 5}), "multiple"),
    (json.dumps({**HYBRID_CFG, "layer_types": ["weird"] * 8}), r"layer_types\[0\]"),
])
def test_hf_bad_configs(tmp_path, content, msg):
    """Broken config.json files fail with the file name and the field."""
    p = tmp_path / "config.json"
    p.write_text(content)
    with pytest.raises(ValueError, match=msg) as e:
        model_from_hf_config(p)
    assert str(p) in str(e.value)


def test_hf_missing_file(tmp_path):
    """A missing config.json is a ValueError naming the path."""
    with pytest.raises(ValueError, match="cannot read"):
        model_from_hf_config(tmp_path / "nope.json")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_bound_attention_flops_equal_the_method_bit_for_bit(name):
    """CostModel prices every batch step with ``attention_flops_fn()``: the same floats as the method
    (GQA and MLA, empty chunks, long contexts) on fresh random inputs."""
    m = MODELS[name]
    f = m.attention_flops_fn()
    rng = np.random.default_rng()
    for n, c in zip(rng.integers(-3, 70_000, 500).tolist(), rng.integers(0, 1_000_000, 500).tolist(), strict=True):
        assert f(n, c) == m.attention_flops(n, c), (n, c)
    assert f(0, 5) == 0.0 and f(1, 0) == m.attention_flops(1, 0)
