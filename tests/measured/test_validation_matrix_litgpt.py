"""The litgpt profile against `vramwise measure --stack litgpt` (LitGPT 0.5.9's own model, LoRA,
bitsandbytes NF4, chunked_cross_entropy and optimizers), plus unit tests of the profile's formulas.

Cells (LITGPT of benchmarks/validation_matrices.py): llama, qwen3 (tied checkpoint, q/k norms), qwen2 (q/k/v
biases, no grouped queries), phi3 (Phi-4's fused checkpoint layout, multi-query), phi4_mini (partial rotary, tied),
olmo2 (post-norms, q / k norms over whole projections) and gemma (GemmaMLP, scaled embeddings, RMSNorm's unit
offset) at 256 wide, 2 layers and their real vocabularies x full / LoRA / QLoRA x standard / chunked loss x two
shapes (batch 1 x 128, batch 2 x 256): 84 cells, measured under fake
tensors (one QLoRA cell is checked against real bitsandbytes storage to the byte). Every estimate must
be within the matrix's cell limit of the measured peak and the median within its median limit (1 % and
0.5 %, LitgptMatrix). A second check isolates the per-layer
terms: the growth of the peak from 2 to 4 layers (vocabulary 1000, batch 2 x 512).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("litgpt")
pytest.importorskip("lightning")
pytest.importorskip("bitsandbytes")

from helpers import matrix_checks  # noqa: E402

# bitsandbytes' paged optimizer falls back to plain tensors on a CPU (what the measurement wants)
pytestmark = pytest.mark.filterwarnings("ignore:Paged optimizers are not supported on CPU")

from vramwise import SettingsError, VramwiseError, estimate, measure  # noqa: E402
from validation_matrices import LITGPT as vm, METHODS, OPTIMIZER, STEPS  # noqa: E402

test_cell_within_ten_percent, test_median_within_five_percent = matrix_checks(vm)


def test_fake_qlora_equals_real_4bit_storage():
    """bitsandbytes 0.50.2 quantizes and runs MatMul4Bit on the CPU: the real step and the fake one
    (fake packed weights and block scales) give the same peak in every phase, to the byte."""
    cell = ("llama", "qlora", "chunked", 1, 128)
    kw = vm.settings(cell)
    real = measure(vm.configs["llama"], stack="litgpt", steps=STEPS, fake=False, **kw)
    fake = measure(vm.configs["llama"], stack="litgpt", steps=STEPS, fake=True, **kw)
    assert {k: v.peak for k, v in real.phases.items()} == {k: v.peak for k, v in fake.phases.items()}
    assert real.params_total == fake.params_total and real.params_trainable == fake.params_trainable


# LoRA with the default targets (q, v), and with every switch but the head (all-linear).
GROWTH = [(n, m, t) for n in sorted(vm.configs) for m in METHODS for t in ((None, "all-linear") if m != "full" else (None,))]


@pytest.mark.parametrize("name,method,targets", GROWTH, ids=[f"{n}-{m}-{t or 'default'}" for n, m, t in GROWTH])
def test_two_more_layers_cost_what_the_estimate_says(name, method, targets):
    """Within 5 %: the profile models a GPU, where the attention output reshape is a view; on a CPU
    it is a copy, which full fine-tuning (proj) and an adapted proj save: 2 x q_dim bytes per token
    and layer more measured here (about 3 % of the growth)."""
    kw = dict(method=method, batch_size=2, seq_len=512, gradient_checkpointing="none", loss="chunked",
              optimizer=OPTIMIZER, target_modules=targets)
    measured = {n: measure(vm.small_vocab(name, n), stack="litgpt", fake=True, **kw).peak for n in (2, 4)}
    estimated = {n: estimate(vm.small_vocab(name, n), profile="litgpt", **kw).figures["tensor_peak"] for n in (2, 4)}
    ratio = (estimated[4] - estimated[2]) / (measured[4] - measured[2])
    assert abs(ratio - 1) <= 0.05, (measured, estimated)


# --- what the litgpt stack refuses -------------------------------------------------------------

def test_measure_refuses_what_litgpt_cannot_run():
    cfg = vm.small_vocab("llama", 2)
    base = dict(method="lora", batch_size=1, seq_len=64, fake=True, stack="litgpt")
    with pytest.raises(SettingsError, match="no gradient checkpointing"):
        measure(cfg, gradient_checkpointing="true", **base)
    with pytest.raises(SettingsError, match="chunked_cross_entropy"):
        measure(cfg, gradient_checkpointing="none", loss="fused", **base)
    with pytest.raises(SettingsError, match="one switch"):
        measure(cfg, gradient_checkpointing="none", target_modules="gate_proj", **base)
    with pytest.raises(VramwiseError, match="llama, mistral, qwen2, qwen3"):
        measure({"model_type": "gemma3_text", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
                 "num_hidden_layers": 1, "num_attention_heads": 2}, gradient_checkpointing="none", **base)


def test_profile_refuses_a_fused_loss_and_warns_on_checkpointing_and_compile():
    cfg = vm.small_vocab("llama", 2)
    with pytest.raises(SettingsError, match="loss"):
        estimate(cfg, profile="litgpt", method="lora", loss="fused", gradient_checkpointing="none")
    e = estimate(cfg, profile="litgpt", method="lora", gradient_checkpointing="true", compile=True)
    text = " ".join(e.warnings)
    assert "no activation checkpointing" in text and "compile is a no-op" in text


# --- unit tests of the profile's formulas (expected values derived by hand) ---------------------



TINY = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True}


def test_weights_full_untie_the_head():
    # params_total (tied, counted once): 2 x (q 64x64 + k,v 32x64 each + o 64x64 + 3 x 128x64 + 2 x 64) + 64 + 1000x64
    #   = 2 x (4096 + 4096 + 4096 + 24576 + 128) + 64 + 64000 = 73984 + 64064 = 138048
    # LitGPT adds its own head: + 64000 -> 202048 bf16 params = 404096 bytes
    # rope cache: cos and sin, 16 positions x head_dim 16; no max_position_embeddings, so the block size is
    # the sequence and the tables stay as Fabric cast them, bf16: 2 x 16 x 16 x 2 = 1024
    e = estimate(TINY, profile="litgpt", method="full", batch_size=1, seq_len=16, gradient_checkpointing="none")
    assert e.weights == 404096 + 1024
    # with 4096 positions the setter rebuilds them for the 16-position sequence in float32: 2 x 16 x 16 x 4 = 2048
    e = estimate(dict(TINY, max_position_embeddings=4096), profile="litgpt", method="full", batch_size=1, seq_len=16,
                 gradient_checkpointing="none")
    assert e.weights == 404096 + 2048


def test_weights_qlora_quantize_every_linear_and_add_the_stable_embedding_norm():
    # quantized: the layers' linears 2 x (4096 + 2048 + 2048 + 4096 + 3 x 8192) = 73728, plus the head 64000
    #   = 137728 weights x (0.5 + 4 / 64) = 77472 bytes
    # bf16: embedding 64000 + norms 2 x 128 + 64 + StableEmbedding LayerNorm 128 = 64448 x 2 = 128896 bytes
    # rope cache 2048 (float32: bnb.nf4's convert_module casts nothing) -> 77472 + 128896 + 2048 = 208416
    e = estimate(TINY, profile="litgpt", method="qlora", batch_size=1, seq_len=16, gradient_checkpointing="none")
    assert e.weights == 208416


def test_lora_adapters_are_bf16_and_default_to_query_and_value():
    # default targets q (64 -> 64) and v (64 -> 32): r x (in + out) = 8 x (128 + 96) = 1792 per layer,
    # 2 layers -> 3584 params x 2 bytes = 7168
    e = estimate(TINY, profile="litgpt", method="lora", lora_rank=8, batch_size=1, seq_len=16,
                 gradient_checkpointing="none")
    assert e.params_trainable == 3584 and e.lora == 7168


def test_qlora_optimizer_is_paged_adamw_32bit_and_the_embedding_trains_unoptimized():
    # PagedAdamW: 3584 adapter params x 8 bytes = 28672 whatever the optimizer name
    # trainable: 3584 + StableEmbedding 64000 + its LayerNorm 128 = 67712
    e = estimate(TINY, profile="litgpt", method="qlora", lora_rank=8, batch_size=1, seq_len=16,
                 gradient_checkpointing="none", optimizer="adamw_8bit")
    assert e.params_trainable == 67712
    assert e.optimizer == 28672


def test_lora_chunked_backward_is_two_logits_and_two_chunks():
    # batch 2 x 256 tokens, vocabulary 1000: float32 logits 512 x 1000 x 4 = 2,048,000 bytes; one chunk
    # 2 x 128 x 1000 x 4 = 1,024,000. Start of the backward: 2 x 2,048,000 + 2 x 1,024,000 = 6,144,000,
    # standard loss: 4 x 2,048,000 = 8,192,000. Both on top of the same resident bytes and activations.
    kw = dict(method="lora", batch_size=2, seq_len=256, gradient_checkpointing="none", optimizer="adamw_torch")
    chunked = estimate(TINY, profile="litgpt", loss="chunked", **kw)
    standard = estimate(TINY, profile="litgpt", loss="standard", **kw)
    assert standard.figures["tensor_peak"] - chunked.figures["tensor_peak"] == 8_192_000 - 6_144_000
