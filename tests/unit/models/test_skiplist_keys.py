"""Every skip-list key of every checkpoint format (formulas/checkpoint_formats.yaml ``skip_keys``) keeps the
modules it names in 16 bit.

The check, by hand: a checkpoint whose skip list names every module a format quantizes stores every weight
in its 16-bit dtype, so its weights weigh 2 bytes x the parameters of transformers' own model of the config
(built on the meta device; the vocabulary is 1,024, a multiple of vLLM's 64-row padding, so the serving
estimate adds no padded rows). Without the skip list the same checkpoint weighs otherwise, so each case
tells a skipped module from a quantized one. The cases are written out here, one per format and key, and a last
test checks that they cover every (format, key) pair of the file.
"""

from __future__ import annotations

import pytest

import vramwise
from vramwise.models.checkpoint_formats import formats, select_format

#: a small mixture-of-experts model: fused experts (layers 0, 2, 3) and dense MLP layers (layer 1)
MOE = {"model_type": "qwen3_moe", "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 128,
       "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 4,
       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "mlp_only_layers": [1],
       "torch_dtype": "bfloat16", "tie_word_embeddings": False}
#: every module any format quantizes, by its short name (the experts, the layers' linear layers, the head)
EVERY_MODULE = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "experts", "lm_head"]

#: (format id, the quantization_config that selects it, one of its skip keys)
CASES = [
    ("fp8", {"quant_method": "fp8", "weight_block_size": [32, 32]}, "modules_to_not_convert"),
    ("fp8", {"quant_method": "fp8", "weight_block_size": [32, 32]}, "ignored_layers"),
    ("mxfp4", {"quant_method": "mxfp4"}, "modules_to_not_convert"),
    ("gptq", {"quant_method": "gptq", "bits": 4, "group_size": 32}, "modules_to_not_convert"),
    ("awq_gemv", {"quant_method": "awq", "version": "gemv", "bits": 4, "group_size": 32}, "modules_to_not_convert"),
    ("awq_gemv_fast", {"quant_method": "awq", "version": "gemv_fast", "bits": 4, "group_size": 32},
     "modules_to_not_convert"),
    ("awq", {"quant_method": "awq", "version": "gemm", "bits": 4, "group_size": 32}, "modules_to_not_convert"),
    ("bnb_8bit", {"quant_method": "bitsandbytes", "load_in_8bit": True}, "llm_int8_skip_modules"),
    ("bnb_4bit", {"quant_method": "bitsandbytes", "load_in_4bit": True}, "llm_int8_skip_modules"),
    ("compressed_tensors_pack", {"quant_method": "compressed-tensors", "format": "pack-quantized"}, "ignore"),
    ("compressed_tensors_nvfp4", {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}, "ignore"),
    ("compressed_tensors_mxfp4", {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized"}, "ignore"),
    ("compressed_tensors_8bit", {"quant_method": "compressed-tensors", "format": "float-quantized"}, "ignore"),
    ("modelopt_nvfp4", {"quant_method": "modelopt", "quant_algo": "NVFP4"}, "ignore"),
    ("modelopt_nvfp4", {"quant_method": "modelopt", "quant_algo": "NVFP4"}, "exclude_modules"),
    ("modelopt_fp8", {"quant_method": "modelopt", "quant_algo": "FP8"}, "ignore"),
    ("modelopt_fp8", {"quant_method": "modelopt", "quant_algo": "FP8"}, "exclude_modules"),
]


@pytest.fixture(scope="module")
def sixteen_bit_bytes():
    """2 bytes x the parameters of transformers' model of MOE."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(**MOE)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return 2 * sum(p.numel() for p in model.parameters())


def _weights(quantization_config: dict | None) -> int:
    config = dict(MOE, **({"quantization_config": quantization_config} if quantization_config else {}))
    e = vramwise.estimate(config, profile="vllm", method="inference", gpu_memory=2**34, vllm_version="0.19.0")
    return e.figures["weights"]


def test_the_unquantized_checkpoint_is_two_bytes_a_parameter(sixteen_bit_bytes):
    assert _weights(None) == sixteen_bit_bytes


@pytest.mark.parametrize("fmt, quantization, key", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_a_skip_key_naming_every_module_keeps_the_checkpoint_in_16_bit(sixteen_bit_bytes, fmt, quantization, key):
    assert select_format(quantization)[0].id == fmt  # the case's config selects the format it names
    # quantized without the skip list (smaller, or larger where a format pads such small shapes: AWQ's
    # gemv_fast, vLLM's MXFP4 experts)
    assert _weights(quantization) != sixteen_bit_bytes
    assert _weights({**quantization, key: EVERY_MODULE}) == sixteen_bit_bytes


def test_the_cases_cover_every_format_and_skip_key():
    assert {(f.id, k) for f in formats() for k in f.skip_keys} == {(c[0], c[2]) for c in CASES}
