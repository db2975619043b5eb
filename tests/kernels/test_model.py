"""Model pieces: HF safetensors round trip, spec from a config.json, grouped-GEMM MoE vs the per-expert loop."""

from __future__ import annotations

import json

import pytest
import torch

from pic.engine.specs import MODELS
from pic.kernels._testing import rel_rms
from pic.kernels.model import exec_spec, load_hf_weights, random_weights, save_hf_weights, tiny_model_spec
from pic.kernels.model.layers import moe


def test_safetensors_round_trip(tmp_path):
    """Weights saved in the DeepSeek-V2 layout load back bit-exact (dense and MoE layers)."""
    spec = exec_spec(tiny_model_spec(num_layers=2))
    w = random_weights(spec, dtype=torch.bfloat16, seed=1)
    save_hf_weights(w, spec, tmp_path / "model.safetensors")
    back = load_hf_weights(tmp_path, spec)
    for a, b in zip(w["layers"], back["layers"], strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k
    assert torch.equal(w["lm_head"], back["lm_head"])


def test_safetensors_errors_name_the_tensor(tmp_path):
    """A missing tensor or a wrong shape is one ValueError naming it."""
    spec = exec_spec(tiny_model_spec(num_layers=2))
    save_hf_weights(random_weights(spec, seed=1), spec, tmp_path / "model.safetensors")
    bigger = exec_spec(tiny_model_spec(num_layers=3))
    with pytest.raises(ValueError, match=r"model.layers.2.input_layernorm.weight' missing"):
        load_hf_weights(tmp_path, bigger)
    other = exec_spec(MODELS["deepseek-v2-lite"], layers=1)
    with pytest.raises(ValueError, match=r"shape .* expected"):
        load_hf_weights(tmp_path, other)
    with pytest.raises(ValueError, match="no \\*.safetensors"):
        load_hf_weights(tmp_path / "nothing", spec)


def test_spec_reads_yarn_from_config(tmp_path):
    """rope_scaling / rms_norm_eps / routing come from config.json; the softmax scale carries YaRN's mscale²."""
    cfg = {"rope_theta": 10000, "rms_norm_eps": 1e-5, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
           "rope_scaling": {"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                            "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    spec = exec_spec(MODELS["deepseek-v3"], hf_config=tmp_path)
    assert spec.rope.factor == 40 and spec.rms_eps == 1e-5 and spec.norm_topk_prob and spec.routed_scaling_factor == 2.5
    assert spec.sm_scale == pytest.approx(192 ** -0.5 * (0.1 * 1.0 * torch.log(torch.tensor(40.0)).item() + 1) ** 2)
    lite = exec_spec(MODELS["deepseek-v2-lite"])
    assert lite.rope.factor == 40 and lite.rope.mscale == 0.707 and lite.first_dense_layers == 1
    with pytest.raises(ValueError, match="MLA decoder layers"):
        exec_spec(MODELS["llama-3.1-8b"])
    with pytest.raises(ValueError, match="layers"):
        exec_spec(MODELS["deepseek-v2-lite"], layers=28)


def test_grouped_moe_equals_loop():
    """The grouped GEMM over expert-sorted tokens = the per-expert loop; experts touched are counted."""
    spec = exec_spec(tiny_model_spec(num_layers=2, num_experts=8))
    w = random_weights(spec, dtype=torch.float32, seed=3)["layers"][1]
    x = torch.randn(37, spec.hidden_size, generator=torch.Generator().manual_seed(0))
    touched: list[int] = []
    a = moe(w, x, spec, grouped=True, touched=touched)
    b = moe(w, x, spec, grouped=False)
    assert rel_rms(b, a) < 1e-6 and 1 <= touched[0] <= 8
