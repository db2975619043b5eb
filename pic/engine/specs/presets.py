"""Model presets with published shapes (sources: docs/models.md). CLI names are lower-case."""

from __future__ import annotations

from pic.engine.specs.models import ModelSpec

_DEEPSEEK_MLA = {"attention": "mla", "head_dim": 192, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                     "v_head_dim": 128}


def _presets() -> dict[str, ModelSpec]:
    qwen3_next_kinds = ("gdn", "gdn", "gdn", "attn") * 12
    olmo_hybrid_kinds = ("gdn", "gdn", "gdn", "attn") * 8
    granite_kinds = tuple("attn" if i in (5, 15, 25, 35) else "mamba2" for i in range(40))
    specs = [
        ModelSpec(name="deepseek-v2-lite", num_layers=27, hidden_size=2048, num_heads=16, num_kv_heads=16,
                  **_DEEPSEEK_MLA, q_lora_rank=0, intermediate_size=10944, moe_intermediate_size=1408,
                  num_experts=64, num_experts_active=6, num_shared_experts=2, first_dense_layers=1,
                  vocab_size=102400),
        ModelSpec(name="deepseek-v3", num_layers=61, hidden_size=7168, num_heads=128, num_kv_heads=128,
                  **_DEEPSEEK_MLA, q_lora_rank=1536, intermediate_size=18432, moe_intermediate_size=2048,
                  num_experts=256, num_experts_active=8, num_shared_experts=1, first_dense_layers=3,
                  vocab_size=129280),
        ModelSpec(name="moonlight-16b", num_layers=27, hidden_size=2048, num_heads=16, num_kv_heads=16,
                  **_DEEPSEEK_MLA, q_lora_rank=0, intermediate_size=11264, moe_intermediate_size=1408,
                  num_experts=64, num_experts_active=6, num_shared_experts=2, first_dense_layers=1,
                  vocab_size=163840),
        ModelSpec(name="llama-3.1-8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                  attention="gqa", head_dim=128, intermediate_size=14336, vocab_size=128256),
        ModelSpec(name="llama-3.1-70b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
                  attention="gqa", head_dim=128, intermediate_size=28672, vocab_size=128256),
        ModelSpec(name="qwen2.5-7b", num_layers=28, hidden_size=3584, num_heads=28, num_kv_heads=4,
                  attention="gqa", head_dim=128, intermediate_size=18944, vocab_size=152064),
        ModelSpec(name="qwen3-next-80b-a3b", num_layers=48, hidden_size=2048, num_heads=16, num_kv_heads=2,
                  attention="gqa", head_dim=256, rotary_fraction=0.25, layer_kinds=qwen3_next_kinds,
                  intermediate_size=5120, moe_intermediate_size=512, num_experts=512, num_experts_active=10,
                  num_shared_experts=1, shared_expert_intermediate_size=512, vocab_size=151936,
                  gdn_num_key_heads=16, gdn_num_value_heads=32, gdn_key_head_dim=128, gdn_value_head_dim=128),
        ModelSpec(name="granite-4.0-h-small", num_layers=40, hidden_size=4096, num_heads=32, num_kv_heads=8,
                  attention="gqa", head_dim=128, rotary_fraction=0.0, layer_kinds=granite_kinds,
                  moe_intermediate_size=768, num_experts=72, num_experts_active=10, num_shared_experts=1,
                  shared_expert_intermediate_size=1536, vocab_size=100352, mamba_num_heads=128,
                  mamba_head_dim=64, mamba_state_dim=128, mamba_num_groups=1),
        ModelSpec(name="olmo-hybrid-7b", num_layers=32, hidden_size=3840, num_heads=30, num_kv_heads=30,
                  attention="gqa", head_dim=128, layer_kinds=olmo_hybrid_kinds, intermediate_size=11008,
                  vocab_size=100352, gdn_num_key_heads=30, gdn_num_value_heads=30, gdn_key_head_dim=96,
                  gdn_value_head_dim=192),
    ]
    return {s.name: s for s in specs}


#: CLI name -> ModelSpec
MODELS: dict[str, ModelSpec] = _presets()

#: alternative spellings accepted by ``model_from_name``
ALIASES = {
    "moonlight-16b-a3b": "moonlight-16b",
    "kimi-moonlight-16b": "moonlight-16b",
    "qwen3-next": "qwen3-next-80b-a3b",
    "granite-4-h-small": "granite-4.0-h-small",
    "olmo-hybrid": "olmo-hybrid-7b",
}
