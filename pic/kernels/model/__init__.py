"""DeepSeek-V2-style decoder layers (MLA through the project's absorbed kernels, dense MLP, MoE) built
from a ``ModelSpec``: random bf16 weights of the real shapes or Hugging Face safetensors."""

from pic.kernels.model.layers import Batch
from pic.kernels.model.model import Model
from pic.kernels.model.reference import prefill_reference
from pic.kernels.model.spec import ExecSpec, exec_spec, tiny_model_spec
from pic.kernels.model.weights import load_hf_weights, random_weights, save_hf_weights

__all__ = ["Batch", "ExecSpec", "Model", "exec_spec", "load_hf_weights", "prefill_reference", "random_weights",
           "save_hf_weights", "tiny_model_spec"]
