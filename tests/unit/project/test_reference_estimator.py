"""The speed benchmark's reference (benchmarks/reference_estimator.py) is a real estimator of the seed's
arithmetic: on a plain dense config its figures are the studio profile's, so timing it beside vramwise compares
two programs that do the same work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vramwise
from reference_estimator import estimate_training_vram

LLAMA = json.loads((Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json").read_text())


@pytest.mark.parametrize("method", ["qlora", "lora", "full"])
@pytest.mark.parametrize("checkpointing", ["none", "true", "unsloth"])
def test_the_reference_gives_the_studio_profile_figures_on_llama(method, checkpointing):
    settings = dict(method=method, gradient_checkpointing=checkpointing, batch_size=2, seq_len=1024, lora_rank=8)
    ref = estimate_training_vram(LLAMA, **settings)
    ours = vramwise.estimate(LLAMA, profile="studio", **settings)
    # the seed's non-quantizable term is 2*H*L + V*H (+ V*H untied): the model's final norm (H weights, 16 bit)
    # is the one tensor it leaves out, which the profile counts from the family's inventory
    assert ours.params_total - ref["params_total"] == LLAMA["hidden_size"]
    assert ours.weights - ref["weights"] == LLAMA["hidden_size"] * 2
    assert ref["lora"] == ours.lora and ref["activations"] == ours.activations
    for part in ("optimizer", "gradients", "overhead"):
        # under full fine-tuning those 4,096 weights are trained too (a share of 4,096 / 8.03e9 = 5.1e-7); under
        # QLoRA the gradient floor is 15 % of the weights: 0.15 x 8,192 bytes on about 0.97e9, 1.3e-6
        assert ref[part] == pytest.approx(getattr(ours, part), rel=1.5e-6), part


def test_the_reference_by_hand_on_a_small_config():
    cfg = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False}
    r = estimate_training_vram(cfg, method="lora", lora_rank=4, batch_size=1, seq_len=8,
                               gradient_checkpointing="none", optimizer="adamw_torch")
    # K = 64 / 4 * 2 = 32; per layer QKVO (64+32+32+64)*64 = 12,288 and MLP 3*64*128 = 24,576: 36,864 x 2 layers
    # = 73,728 quantizable; non-quantizable 2*64*2 + 2 * 1000*64 = 128,256; 16-bit: (73,728 + 128,256) * 2
    assert r["weights"] == (73_728 + 128_256) * 2
    # LoRA per layer: 4 * ((64+64) + (64+32) + (64+32) + (64+64) + (64+128) * 2 + (128+64)) = 4 * 1,024 = 4,096
    assert r["params_trainable"] == 2 * 4_096 and r["lora"] == 2 * 4_096 * 2
    assert r["optimizer"] == 2 * 4_096 * 6
    # per layer (S*B*(H+2K) + 2*S*B + 2*S*B*M) * 2 * 1.25 = (8*128 + 16 + 16*128) * 2.5 = 7,720, both layers held
    assert r["activations"] == 2 * 7_720
    # gradients: max(8,192 * 2, min(0.15 * weights, max(activations, optimizer)))
    assert r["gradients"] == max(16_384, min(0.15 * 403_968, max(15_440, 49_152)))
