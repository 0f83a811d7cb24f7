"""The torchtune profile's weights against the model torchtune's own builders make.

For each family the torchtune profile serves, the model `vramwise measure --stack torchtune` builds
(torchtune 0.6.1's component builders, on the meta device, then faked: shapes and dtypes are real) is
the independent source: the bytes of its parameters (torchao NF4 tensors by their inner tensors) and
of every buffer it holds (the rotary caches and their base frequencies) must equal the estimate's
weights and LoRA adapters, and its buffers alone the estimate's rotary buffers, byte for byte, for
full fine-tuning, LoRA and QLoRA and for adapter sets that change what the builders quantize.

The one difference allowed is counted from the model, not from the estimate: torchao keeps beside each
NF4 matrix a bf16 scaler_mean and the 16-entry bf16 NF4 table (34 bytes), which the profile leaves out
(formulas/torchtune/weights.yaml nf4_bytes_per_weight).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchtune")
pytest.importorskip("torchao")

import torch  # noqa: E402

from vramwise import estimate  # noqa: E402
from vramwise.profiles.settings import normalise_settings  # noqa: E402
from vramwise.measuring.stacks import torchtune as stack  # noqa: E402

from helpers import slow_unless, traced  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")

#: Small models of each family, shaped as the real ones (vocabulary apart); max_position_embeddings
#: 4096 or absent (the builders then get 2048), so the rotary caches weigh as much as a layer.
CONFIGS = {
    "llama": {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
              "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
              "tie_word_embeddings": False, "max_position_embeddings": 4096},
    "llama_tied_no_max": {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
                          "num_hidden_layers": 2, "num_attention_heads": 4, "tie_word_embeddings": True},
    "qwen2": {"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
              "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
              "tie_word_embeddings": True, "max_position_embeddings": 4096},
    "qwen2_untied": {"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
                     "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8,
                     "tie_word_embeddings": False, "max_position_embeddings": 1024},
    "mistral": {"model_type": "mistral", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
                "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
                "tie_word_embeddings": False, "max_position_embeddings": 4096},
    "gemma": {"model_type": "gemma", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
              "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 128,
              "max_position_embeddings": 4096},  # tied by GemmaConfig's default; head_dim above hidden / heads
    "gemma2": {"model_type": "gemma2", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
               "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128,
               "max_position_embeddings": 4096, "sliding_window": 128, "query_pre_attn_scalar": 128},
    "phi3": {"model_type": "phi3", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
             "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
             "tie_word_embeddings": False, "max_position_embeddings": 4096, "sliding_window": 2047},
}
#: (method, LoRA targets): the recipes' default adapters, adapters on q and v alone (the MLP and k/o
#: without: what qwen2's QLoRA builder then quantizes differs), every projection and the output head.
RUNS = [("full", None), ("lora", None), ("lora", "q_proj,v_proj"), ("qlora", None), ("qlora", "q_proj,v_proj"),
        ("qlora", "all-linear")]
UNTIED_HEAD = [("lora", "q_proj,v_proj,lm_head"), ("qlora", "all-linear,lm_head")]


def _cases():
    for name in CONFIGS:
        for method, targets in RUNS + (UNTIED_HEAD if CONFIGS[name].get("tie_word_embeddings") is False else []):
            yield pytest.param(name, method, targets, id=f"{name}-{method}-{targets or 'default'}")


def built(cfg: dict, method: str, targets: str | None):
    """The model the torchtune stack builds for ``cfg``: (its parameter and buffer bytes, its buffer
    bytes, NF4 matrices, parameters, trainable parameters)."""
    from torchao.dtypes.nf4tensor import NF4Tensor

    settings = normalise_settings(method=method, lora_rank=8, target_modules=targets, gradient_checkpointing="none",
                                  optimizer="adamw_torch", batch_size=1, seq_len=8)
    model = stack.prepare(cfg, settings, dtype=torch.bfloat16, device="cpu", fake=True).net
    param_bytes = nf4 = params = trainable = 0
    for p in model.parameters():  # each tensor once (tied weights are one)
        if isinstance(p, NF4Tensor):
            param_bytes += sum(getattr(p, a).nbytes for a in p.__tensor_flatten__()[0])
            nf4 += 1
        else:
            param_bytes += p.nbytes
        params += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    buffer_bytes = sum(b.nbytes for b in model.buffers())
    return param_bytes + buffer_bytes, buffer_bytes, nf4, params, trainable


# the default run: every run of "llama" and each model's QLoRA of every projection; .ci/run's slow tier: the rest
@pytest.mark.parametrize("name, method, targets", slow_unless(
    list(_cases()), lambda v: v[0] == "llama" or (v[1], v[2]) == ("qlora", "all-linear")))
def test_weights_and_buffers_equal_torchtunes_model(name, method, targets):
    cfg = CONFIGS[name]
    total, buffers, nf4, params, trainable = built(cfg, method, targets)
    e = estimate(cfg, profile="torchtune", method=method, lora_rank=8, target_modules=targets)
    assert (e.params_total + e.params_trainable * (method != "full"), e.params_trainable) == (params, trainable)
    assert traced(e, "rope_cache_bytes") == buffers
    assert e.weights + e.lora == total - 34 * nf4


def test_rotary_buffers_by_hand():
    """qwen2 (head_dim 256 / 4 = 64, max_position_embeddings 4096, 3 layers). Qwen2's cache is
    [4096, 4 x 32] float32 = 2,097,152 bytes, theta 32 float32 = 128: 2,097,280 per module. The full
    builder shares one module; lora_qwen2_self_attention builds one per layer: 3 x 2,097,280 = 6,291,840.
    llama (the same dims): [4096, 32, 2] float32 = 1,048,576 + 128 per module; untied without RoPE
    scaling (llama3's builders) one per layer in LoRA, with Llama 3.1's scaling (llama3_1's) one shared."""
    assert built(CONFIGS["qwen2"], "full", None)[1] == 2097280
    assert built(CONFIGS["qwen2"], "lora", None)[1] == 3 * 2097280
    assert built(CONFIGS["llama"], "lora", None)[1] == 3 * (1048576 + 128)
    scaled = dict(CONFIGS["llama"], rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    assert built(scaled, "lora", None)[1] == 1048576 + 128
    assert traced(estimate(scaled, profile="torchtune", method="lora"), "rope_cache_bytes") == 1048576 + 128
    assert traced(estimate(CONFIGS["qwen2"], profile="torchtune", method="lora"), "rope_cache_bytes") == 3 * 2097280
