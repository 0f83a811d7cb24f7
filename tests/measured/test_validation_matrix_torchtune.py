"""The torchtune profile against `vramwise measure --stack torchtune` (torchtune's own model, loss and step).

Cells (TORCHTUNE of benchmarks/validation_matrices.py): llama (Llama-3 vocabulary, untied) and qwen2 (Qwen2.5
vocabulary, tied, q/k/v biases) at 256 wide and 2 layers x full / LoRA / QLoRA x checkpointing off / on
x standard / chunked loss x two shapes, plus mistral, optimizer_in_bwd and activation offloading, gemma,
gemma2, phi3 and phi4 x method x checkpointing, and the builders' production max_seq_len (131,072; qwen2
and llama with Llama 3.1's RoPE scaling): 94 cells. Expected values are measurements (CPU storage
tracker under fake tensors; torchao's NF4 runs under FakeTensorMode, and test_qlora_fake_equals_real
shows the peaks equal real storage). The estimate's tensor peak must be within 10 % of the measured peak
in every cell, 5 % in the median.

The unit tests below check single formulas against values derived by hand (derivations in comments).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchtune")
pytest.importorskip("torchao")

from helpers import matrix_checks  # noqa: E402

from vramwise import SettingsError, estimate, measure  # noqa: E402
from validation_matrices import TORCHTUNE as vm  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")

test_cell_within_ten_percent, test_median_within_five_percent = matrix_checks(vm)


def _value(e, fid, layer=False):
    for t in e.trace:
        if t.id == fid:
            return t.value
    raise KeyError(fid)


LLAMA = vm.configs["llama"]


def test_nf4_layout_is_torchao_s():
    """A 768 x 256 weight (n = 196,608) in torchao's NF4: quantized_data n / 2 = 98,304 uint8;
    quantized_scalers n / 64 = 3,072 int8; quantization_factor n / 64 / 256 = 12 bf16 = 24 bytes;
    scaler_mean one bf16 (2 bytes); the NF4 table 16 bf16 (32 bytes): 101,434 bytes. The profile's
    per-weight figure 0.5 + 1/64 + 2/16384 gives 101,400, the 34 per-matrix bytes apart."""
    import torch
    from torchao.dtypes.nf4tensor import to_nf4

    w = to_nf4(torch.randn(768, 256, dtype=torch.bfloat16))
    inner = {a: getattr(w, a).nbytes for a in w.__tensor_flatten__()[0]}
    assert inner == {"quantized_data": 98304, "quantized_scalers": 3072, "quantization_factor": 24,
                     "scaler_mean": 2, "nf4": 32}
    e = estimate(LLAMA, profile="torchtune", method="qlora")
    assert _value(e, "nf4_bytes_per_weight") * 768 * 256 == 101400


def test_qlora_weights_by_hand():
    """llama config, QLoRA. Parameters: embedding and head 2 x 128,256 x 256 = 65,667,072; per layer
    q 65,536 + k 32,768 + v 32,768 + o 65,536 + gate/up/down 3 x 196,608 = 786,432 projection weights
    and 512 norm weights; 2 layers and a final norm of 256: 67,241,216. NF4: the 1,572,864 projection
    weights x (1/2 + 1/64 + 2/16384) = 786,432 + 24,576 + 192 = 811,200 bytes; bf16: (67,241,216 -
    1,572,864) x 2 = 131,336,704; rotary buffers (untied, no RoPE scaling: llama3's LoRA builder, one
    per layer) 2 x (cache 2,048 positions x 64 x 4 = 524,288 + theta 32 x 4 = 128) = 1,048,832.
    Total 133,196,736."""
    e = estimate(LLAMA, profile="torchtune", method="qlora")
    assert e.params_total == 67241216
    assert e.weights == 133196736


def test_lora_adapters_by_hand():
    """Default targets (the recipes' q_proj, v_proj, output_proj and the MLP), rank 16: per layer
    r x (in + out) with q 256+256, v 256+128, o 256+256, gate 256+768, up 256+768, down 768+256 =
    4,480; 2 layers x 16 = 143,360 parameters (what torchtune builds, test below), bf16: 286,720 bytes."""
    e = estimate(LLAMA, profile="torchtune", method="lora", lora_rank=16)
    assert e.params_trainable == 143360
    assert e.lora == 286720


def test_lora_parameters_are_torchtune_s():
    m = measure(LLAMA, stack="torchtune", method="lora", lora_rank=16, batch_size=1, seq_len=16, fake=True, steps=1)
    assert m.params_trainable == 143360  # the hand count above
    assert m.params_total == 67241216 + 143360


def test_layer_activations_by_hand():
    """Full fine-tuning, batch 1 x 128, per token and layer: two RMSNorms x (float32 input + float32
    normalised) = 2 x 256 x 8 = 4,096; bf16 projection inputs (attention input, MLP input, w2 input)
    2 x (256 + 256 + 768) = 2,560 (the contiguous attention output output_proj saves is attention's own
    output buffer); attention: q, k and v expanded to 4 heads, output, 2 x 4 x 256 = 2,048, plus 4 heads
    x 4 bytes of log-sum-exp = 2,064; MLP 2 x 3 x 768 = 4,608. 13,328 bytes x 128 tokens = 1,705,984."""
    e = estimate(LLAMA, profile="torchtune", method="full", batch_size=1, seq_len=128, gradient_checkpointing="none")
    assert _value(e, "layer_saved_bytes") == 1705984


def test_chunked_logits_by_hand():
    """Batch 2 x 256, 8 chunks: a chunk holds 2 x ceil(256 / 8) = 64 rows. Beside the float32
    log-probabilities the forward holds every chunk's bf16 logits, 512 x 128,256 x 2 = 131,334,144, and
    one chunk's float32 copy, 64 x 128,256 x 4 = 32,833,536: 164,167,680."""
    e = estimate(LLAMA, profile="torchtune", method="lora", batch_size=2, seq_len=256, loss="chunked", loss_chunks=8)
    assert _value(e, "logits_forward_transient_bytes") == 164167680
    assert _value(e, "logits_saved_bytes") == 512 * 128256 * 4


def test_optimizer_in_bwd_keeps_one_gradient():
    """optimizer_in_bwd: the largest parameter is the embedding (or head), 128,256 x 256 = 32,833,536
    parameters, so 65,667,072 bytes of gradient at a time instead of 2 x 67,241,216; the optimizer
    phase holds only the resident state."""
    kw = dict(method="full", optimizer="adamw_torch", batch_size=1, seq_len=128)
    e = estimate(LLAMA, profile="torchtune", optimizer_in_bwd=True, **kw)
    assert e.figures["tensor_peak"] < estimate(LLAMA, profile="torchtune", **kw).figures["tensor_peak"]
    assert _value(e, "gradient_bytes") == 65667072
    assert e.phases["optimizer"] == _value(e, "resident_bytes")


def test_qlora_fake_equals_real():
    """torchao's NF4 runs under FakeTensorMode: the fake measurement equals real storage (vocabulary 1000)."""
    cfg = dict(LLAMA, vocab_size=1000)
    kw = dict(method="qlora", batch_size=1, seq_len=64, gradient_checkpointing="true", loss="chunked", steps=2)
    real = measure(cfg, stack="torchtune", fake=False, **kw)
    fake = measure(cfg, stack="torchtune", fake=True, **kw)
    assert real.peak == fake.peak
    assert {k: v.peak for k, v in real.phases.items()} == {k: v.peak for k, v in fake.phases.items()}


def test_unsupported_model_type_is_a_settings_error():
    with pytest.raises(SettingsError, match="llama, mistral, qwen2"):
        measure({"model_type": "gemma3_text", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
                 "num_hidden_layers": 1, "num_attention_heads": 2}, stack="torchtune", fake=True)


def test_offloading_needs_checkpointing():
    with pytest.raises(SettingsError, match="checkpointing"):
        measure(LLAMA, stack="torchtune", method="lora", activation_offloading=True, gradient_checkpointing="none",
                fake=True, batch_size=1, seq_len=16)
    e = estimate(LLAMA, profile="torchtune", method="lora", activation_offloading=True, gradient_checkpointing="none")
    assert any("offloading" in w for w in e.warnings)


def test_settings_the_profile_reads():
    """loss, loss_chunks, activation_offloading, optimizer_in_bwd and compile change the estimate."""
    base = dict(method="full", batch_size=2, seq_len=256, gradient_checkpointing="true", optimizer="adamw_torch")
    peak = estimate(LLAMA, profile="torchtune", **base).figures["tensor_peak"]
    for extra in ({"loss": "chunked"}, {"loss": "chunked", "loss_chunks": 2}):
        assert estimate(LLAMA, profile="torchtune", **base, **extra).figures["tensor_peak"] != peak, extra
    # the optimizer step is the peak at batch 1 x 128 with chunked logits: optimizer_in_bwd removes it
    small = dict(base, batch_size=1, seq_len=128, loss="chunked")
    assert (estimate(LLAMA, profile="torchtune", optimizer_in_bwd=True, **small).figures["tensor_peak"]
            < estimate(LLAMA, profile="torchtune", **small).figures["tensor_peak"])
    # offloading: the saved layer inputs leave the device (b 2 x 256, LoRA, chunked: the forward is the peak)
    lora = dict(base, method="lora", loss="chunked")
    assert (estimate(LLAMA, profile="torchtune", activation_offloading=True, **lora).figures["tensor_peak"]
            < estimate(LLAMA, profile="torchtune", **lora).figures["tensor_peak"])
    # compile: the compiled chunked loss keeps the bf16 chunks, not their float32 log-probabilities (the logits
    # make this peak; tests/unit/profiles/test_torchtune_compile.py)
    chunked = dict(base, loss="chunked")
    e = estimate(LLAMA, profile="torchtune", compile=True, **chunked)
    assert e.figures["tensor_peak"] < estimate(LLAMA, profile="torchtune", **chunked).figures["tensor_peak"]
    assert not [w for w in e.warnings if "compile" in w]
