"""LoRA on a GPTQ or AWQ checkpoint (the hf profile): PEFT wraps the packed layers, which stay as stored, so
the base weighs what the checkpoint's format stores (formulas/checkpoint_formats.yaml) plus the other
parameters in bf16."""

from __future__ import annotations

import vramwise

# 2 layers, hidden 512, 8 heads of 64 (2 KV heads), MLP 1536, vocabulary 1000, untied
BASE = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1536, "num_attention_heads": 8,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000, "tie_word_embeddings": False}


def _gptq(in_f: int, out_f: int) -> int:
    """GPTQ 4-bit, group 128 (GPTQModel _register_gptq_buffers): qweight int32 [in*4/32, out], qzeros int32
    [in/128, out*4/32], scales float16 [in/128, out], g_idx int32 [in]."""
    groups = in_f // 128
    return 4 * (in_f * 4 // 32) * out_f + 4 * groups * (out_f * 4 // 32) + 2 * groups * out_f + 4 * in_f


def test_lora_on_gptq_keeps_the_packed_layers():
    q = {**BASE, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}}
    e = vramwise.estimate(q, profile="hf", method="lora")
    # per layer: q and o 512 x 512, k and v 128 x 512, gate and up 1536 x 512, down 512 x 1536
    layer = 2 * _gptq(512, 512) + 2 * _gptq(512, 128) + 2 * _gptq(512, 1536) + _gptq(1536, 512)
    assert layer == 1_584_640
    packed_params = 2 * (2 * 512 * 512 + 2 * 128 * 512 + 3 * 1536 * 512)  # 6,029,312
    total_params = packed_params + 2 * 2 * 512 + 2 * 1000 * 512 + 512  # norms, embedding, head, final norm
    assert e.weights == 2 * layer + (total_params - packed_params) * 2
    # the same model in bf16 under LoRA, and QLoRA (bitsandbytes re-quantizes it) are unchanged by the checkpoint
    assert vramwise.estimate(BASE, profile="hf", method="lora").weights == 2 * total_params
    assert (vramwise.estimate(q, profile="hf", method="qlora").weights
            == vramwise.estimate(BASE, profile="hf", method="qlora").weights)


def test_lora_on_awq_gemm():
    q = {**BASE, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}}
    e = vramwise.estimate(q, profile="hf", method="lora")

    def awq(in_f, out_f):  # AutoAWQ gemm.py: qweight int32 [in, out/8], qzeros int32 [in/128, out/8], scales fp16 [in/128, out]
        return 4 * in_f * (out_f // 8) + 4 * (in_f // 128) * (out_f // 8) + 2 * (in_f // 128) * out_f

    layer = 2 * awq(512, 512) + 2 * awq(512, 128) + 2 * awq(512, 1536) + awq(1536, 512)
    packed_params = 2 * (2 * 512 * 512 + 2 * 128 * 512 + 3 * 1536 * 512)
    rest = 2 * 2 * 512 + 2 * 1000 * 512 + 512
    assert e.weights == 2 * layer + rest * 2 and packed_params == e.model.inventory.checkpoint_quantized_params
