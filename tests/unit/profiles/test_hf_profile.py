"""The hf profile's formulas, derived by hand from the modelling code (every expected number is
written out as arithmetic). Its agreement with measured steps is tests/measured/test_validation_matrix.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import vramwise
from vramwise import SettingsError, estimate

# 2 layers, 256 wide, 4 heads of 64, 2 KV heads, MLP 768, untied vocabulary 1000
TINY = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False}
# per layer: q 256*256, k 128*256, v 128*256, o 256*256, gate/up/down 768*256 each, two norms of 256
LINEAR_PER_LAYER = 2 * 256 * 256 + 2 * 128 * 256 + 3 * 768 * 256  # 786,432
PARAMS = 2 * 1000 * 256 + 2 * (LINEAR_PER_LAYER + 2 * 256) + 256  # embed + head, layers, final norm


def hf(cfg=TINY, **kw):
    kw.setdefault("attention", "sdpa")
    kw.setdefault("optimizer", "adamw_torch")
    kw.setdefault("gradient_checkpointing", "none")
    return estimate(cfg, profile="hf", **kw)


def trace_value(est, fid):
    return next(t.value for t in est.trace if t.id == fid and t.layer_indices is None)


def test_weights_nf4_storage_and_float32_rest():
    e = hf(method="qlora")
    # bitsandbytes: the 2 x 786,432 linear weights at 1/2 byte + a float32 absmax per 64 (0.0625) = 0.5625 bytes;
    # prepare_model_for_kbit_training leaves everything else float32 (embeddings, head, norms)
    quantized = 2 * LINEAR_PER_LAYER
    assert e.weights == round(quantized * 0.5625 + (PARAMS - quantized) * 4)
    assert hf(method="lora").weights == PARAMS * 2  # bf16


def test_double_quant_bytes_per_weight():
    cfg = dict(TINY, quantization_config={"load_in_4bit": True, "bnb_4bit_use_double_quant": True})
    e = hf(cfg, method="qlora")
    # 1/2 byte + an 8-bit absmax per 64 weights (1/64) + a float32 per 256 blocks (4 / (64 * 256))
    assert trace_value(e, "nf4_bytes_per_weight") == pytest.approx(0.5 + 1 / 64 + 4 / (64 * 256))


def test_full_finetune_state_in_the_parameter_dtype():
    e = hf(method="full", batch_size=1, seq_len=8)
    # AdamW keeps exp_avg and exp_avg_sq like each bf16 parameter: 2 x 2 bytes; gradients 2 bytes
    assert trace_value(e, "optimizer_state_bytes") == PARAMS * 4
    assert trace_value(e, "gradient_bytes") == PARAMS * 2
    # tiny batch: the optimizer step peaks; weights + gradients + states + the foreach AdamW's
    # sqrt(exp_avg_sq) of every parameter at once (one more bf16 copy of the trainable bytes)
    assert e.peak_phase == "optimizer"
    assert e.phases["optimizer"] == PARAMS * 2 + PARAMS * 2 + PARAMS * 4 + PARAMS * 2
    assert e.gradients == PARAMS * 2 and e.optimizer == PARAMS * 4 + PARAMS * 2
    # the fused kernel works in place
    fused = hf(method="full", optimizer="adamw_torch_fused", batch_size=1, seq_len=8)
    assert fused.phases["optimizer"] == PARAMS * 2 + PARAMS * 2 + PARAMS * 4


def test_eight_bit_adamw_state():
    e = hf(method="full", optimizer="adamw_8bit", batch_size=1, seq_len=8)
    # two uint8 states + a float32 absmax per 256-element block for each: 2 + 8 / 256 bytes per parameter
    assert trace_value(e, "optimizer_state_bytes") == pytest.approx(PARAMS * (2 + 8 / 256))


def test_lora_adapters_float32():
    e = hf(method="lora", lora_rank=8)
    # PEFT's r x (in + out) per projection: q 256+256, k 256+128, v 256+128, o 256+256, gate/up 256+768, down 768+256
    io = 512 + 384 + 384 + 512 + 3 * 1024
    assert e.params_trainable == 2 * 8 * io
    assert e.lora == 2 * 8 * io * 4
    assert trace_value(e, "optimizer_state_bytes") == 2 * 8 * io * 8  # two float32 states


def test_logits_phases_standard_loss():
    # the vocabulary dominates: T = 4 x 512 tokens, V = 1000
    T, V = 4 * 512, 1000
    e = hf(method="lora", batch_size=4, seq_len=512)
    # forward: log_softmax's saved float32 output (4TV) + bf16 logits (2TV) + their float32 copy (4TV);
    # backward start: the saved 4TV + nll and log_softmax gradients (8TV); the rest is the same
    assert e.phases["backward"] - e.phases["forward"] == (12 - 10) * T * V
    q = hf(method="qlora", batch_size=4, seq_len=512)
    # QLoRA's float32 head: no bf16 logits and no copy, so 8TV in the forward against 12TV after
    assert q.phases["backward"] - q.phases["forward"] == (12 - 8) * T * V


def test_fused_loss_never_holds_the_logits():
    T, V, H = 4 * 512, 1000, 256
    std = hf(method="lora", batch_size=4, seq_len=512)
    fused = hf(method="lora", batch_size=4, seq_len=512, loss="fused")
    # chunk rows: ceil(T / ceil(V / H)) = ceil(2048 / 4) = 512; two float32 chunks of logits;
    # the input gradient (T x H bf16) is computed in the forward instead of 4TV log-probabilities
    assert trace_value(fused, "loss_chunk_rows") == 512
    assert std.phases["forward"] - fused.phases["forward"] == (4 * T * V + 6 * T * V) - (T * H * 2 + 512 * V * 8)


def test_checkpointing_keeps_one_input_per_layer():
    T, H = 2 * 256, 256
    e = hf(method="lora", batch_size=2, seq_len=256, gradient_checkpointing="true")
    # one bf16 layer input per layer, plus the final norm's float32 input
    assert trace_value(e, "activation_saved_bytes") == 2 * T * H * 2 + T * H * 4


def test_llama_layer_saved_tensors_full_finetune():
    T = 2 * 256
    e = hf(method="full", batch_size=2, seq_len=256)
    # per token: 2 norms x (fp32 input 4 + bf16 normalised 2) x 256 = 3072; linear inputs bf16 (256 + 256 + 768) x 2 = 2560;
    # q (256) + k and v (2 x 128) + output (256) in bf16 = 1536; log-sum-exp 4 heads x 4 = 16;
    # gate, act, up outputs 3 x 768 x 2 = 4608  => 11,792 bytes per token per layer
    # (the storage tracker measured 11,818 per token per layer for this config: rotary tables and scalars apart)
    per_layer = 3072 + 2560 + 1536 + 16 + 4608
    # head: final norm fp32 input + normalised + head input (4 + 2 + 2) x 256
    assert trace_value(e, "activation_saved_bytes") == 2 * T * per_layer + T * 256 * 8


def test_peft_rank_doubles_on_fused_gate_up():
    cfg = {"model_type": "qwen3_moe", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
           "moe_intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 1,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64}
    e = hf(cfg, method="lora", lora_rank=16)
    attention = 16 * (512 + 384 + 384 + 512)
    gate_up = 2 * 16 * 8 * (256 + 2 * 128)  # rank 2r on the (8, 256, 256) gate_up_proj: 2r x E x (in + out)
    down = 16 * 8 * (128 + 256)
    assert e.params_trainable == attention + gate_up + down
    # the merged expert weights (8 x 256 x 256 + 8 x 256 x 128, bf16) are saved in the forward
    assert trace_value(e, "merged_expert_bytes") == (8 * 256 * 256 + 8 * 256 * 128) * 2


def test_profile_refuses_what_it_does_not_model():
    with pytest.raises(SettingsError, match="does not model inference"):
        hf(method="inference")
    with pytest.raises(SettingsError, match="unknown loss"):
        hf(method="lora", loss="sparse")


def test_components_add_up_to_the_device_figure():
    for method in ("full", "lora", "qlora"):
        e = hf(method=method, batch_size=2, seq_len=512)
        assert sum(e.components().values()) == pytest.approx(e.total, abs=6)
        assert e.total == e.figures["device"]
        assert e.figures["tensor_peak"] == max(e.phases.values())
        assert e.min_per_gpu(1) == pytest.approx(e.total, abs=2)
        assert e.figures["tensor_peak"] <= e.figures["reserved"] <= e.figures["device"]


def test_unsloth_profile_unchanged_by_loss_setting():
    a = vramwise.estimate(TINY, method="lora")
    b = vramwise.estimate(TINY, method="lora", loss="fused")
    assert a.total == b.total


_REG = vramwise.Registry.default()


def _own(name: str) -> SimpleNamespace:
    """A family file's own entries (Registry.family_entries: the compiled family's values, no family compiled at
    collection), with the compiled family's attribute names, as Profile.serves reads them."""
    own = _REG.family_entries(name, "model_types", "fallback", "abstract", "examples")
    return SimpleNamespace(name=name, model_types=tuple(own.get("model_types") or ()), fallback=bool(own.get("fallback")),
                           abstract=bool(own.get("abstract")), examples=tuple(own.get("examples") or ()))


_EXAMPLES = [(f.name, f.examples[0]) for f in map(_own, _REG.family_names()) if f.examples and _REG.profile("hf").serves(f)]


@pytest.mark.parametrize("family,example", _EXAMPLES, ids=[f for f, _ in _EXAMPLES])
def test_every_family_estimates_under_hf(family, example):
    """Every family provides what the hf profile needs; its phases and figures hold together."""
    spec = vramwise.load_model(example["config"], registry=_REG)
    for method in ("qlora", "lora", "full"):
        e = vramwise.estimate(spec, profile="hf", method=method, registry=_REG)
        assert e.figures["tensor_peak"] == max(e.phases.values()) > e.weights > 0
        assert e.figures["tensor_peak"] <= e.figures["reserved"] <= e.figures["device"] == e.total
        assert min(e.components().values()) >= 0
