"""Multi-GPU strategies on the torchtune and litgpt profiles, and QLoRA under FSDP without
prepare_model_for_kbit_training (formulas/strategies: steps per profile, strategies per profile)."""

from __future__ import annotations

import pytest

import vramwise
from helpers import traced
from vramwise import SettingsError

# One decoder layer, untied head: parameters by hand
#   embeddings 1000 x 64 = 64,000; output head 64,000
#   layer: q 64 x 64 = 4,096, k and v 64 x 32 = 2,048 each, o 4,096 (12,288); MLP 3 x 64 x 128 = 24,576;
#          two norms 128 -> 36,992
#   final norm 64                                   total 165,056 parameters = 330,112 bf16 bytes
TINY = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
        "tie_word_embeddings": False, "max_position_embeddings": 128}
FULL = dict(method="full", batch_size=1, seq_len=16, optimizer="adamw_torch")


def test_torchtune_fsdp_shards_parameters_and_keeps_the_rotary_buffers_whole():
    # torchtune's RotaryPositionalEmbeddings (modules/position_embeddings.py): a float32 cache of
    # max_seq_len x head_dim (128 x 16 x 4 = 8,192 bytes) and theta, head_dim / 2 float32 (32 bytes),
    # one module for the model: 8,224 bytes that fully_shard leaves whole on each rank.
    e = vramwise.estimate(TINY, profile="torchtune", strategy="fsdp", world_size=2, **FULL)
    assert e.strategy == "fsdp" and e.world_size == 2
    assert e.weights == 330_112 // 2 + 8_224



# TINY with two layers, the units FSDP2 gathers by hand: the root (embeddings 64,000, output head
# 64,000, final norm 64) 128,064 parameters = 256,128 bf16 bytes; a layer 36,992 = 73,984 bytes; with
# full fine-tuning each has a bf16 gradient of the same size, and a rank keeps half of every gradient:
# the layers' shards 2 x 73,984 / 2 = 73,984 bytes. 16 tokens x 1,000 logits.
TWO = dict(TINY, num_hidden_layers=2)
ROOT, UNIT = 256_128, 73_984


def test_torchtune_fsdp_gathers_the_root_again_beside_the_outputs_gradient():
    # the root's pre-backward: its all-gather output and its unsharded parameters (2 x 256,128) beside the
    # model output's gradient, float32 logits (16 x 1,000 x 4 = 64,000) or every bf16 chunk (32,000)
    for loss, grad in (("standard", 64_000), ("chunked", 32_000)):
        e = vramwise.estimate(TWO, profile="torchtune", strategy="fsdp", world_size=2, loss=loss, **FULL)
        assert traced(e, "root_regather_bytes") == 2 * ROOT
        assert traced(e, "rank_backward_root_bytes") == (traced(e, "rank_resident_bytes")
                                                         + traced(e, "rank_activation_saved_bytes") + grad + 2 * ROOT)
    sgo = vramwise.estimate(TWO, profile="torchtune", strategy="fsdp_shard_grad_op", world_size=2, **FULL)
    assert traced(sgo, "root_regather_bytes") == ROOT + 2 * UNIT  # nothing gathered again: every unit still is


def test_torchtune_fsdp_units_in_flight_by_hand():
    e = vramwise.estimate(TWO, profile="torchtune", strategy="fsdp", world_size=2, **FULL)
    resident, saved = traced(e, "rank_resident_bytes"), traced(e, "rank_layers_saved_bytes")
    # the head's forward: the root and the last layer's all-gather output, freed at the root's post-forward
    assert traced(e, "head_in_flight_bytes") == ROOT + UNIT
    # the layers' forward: three units with the first layer's activations, two with both layers'
    assert traced(e, "rank_forward_layers_bytes") == resident + ROOT + max(saved / 2 + 3 * UNIT, saved + 2 * UNIT)
    # the layers' backward, beside the head's gradient, the root, a layer and its unreduced gradients:
    # the second layer with both layers' activations and the first prefetched, or the first with its own
    # activations, the second's gradient shard and reduce-scatter input
    # (the recomputed layer beside them: torchtune's recipes checkpoint by default)
    head, recompute = traced(e, "rank_head_gradient_bytes"), traced(e, "rank_recompute_bytes")
    assert recompute > 0
    assert traced(e, "rank_backward_layers_bytes") == resident + recompute + head + ROOT + UNIT + UNIT + max(
        saved + UNIT, (saved + UNIT) / 2 + UNIT)

def test_torchtune_head_units_by_hand():
    # fsdp_head_units (custom_sharded_layers ['tok_embeddings', 'output']): the embeddings (64,000 x 2 =
    # 128,000 bytes) and the output head (128,000) are units of their own, the root keeps the final norm
    # (64 x 2 = 128 bytes); the output's gradient, 128,000 bytes, reduced after its own backward, so a rank
    # keeps the layers' shards (73,984) and the output's (64,000) during the layers' backward
    E = O = 128_000
    NORM = 128
    assert ROOT == E + O + NORM
    base = vramwise.estimate(TWO, profile="torchtune", strategy="fsdp", world_size=2, **FULL)
    e = vramwise.estimate(TWO, profile="torchtune", strategy="fsdp", world_size=2, fsdp_head_units=True, **FULL)
    assert not e.warnings
    resident, saved = traced(e, "rank_resident_bytes"), traced(e, "rank_layers_saved_bytes")
    head, recompute = traced(e, "rank_head_gradient_bytes"), traced(e, "rank_recompute_bytes")
    assert (resident, saved, head) == (traced(base, "rank_resident_bytes"), traced(base, "rank_layers_saved_bytes"), O)
    # the head's forward: the final norm and the output head (its own all-gather output not held)
    assert traced(e, "head_in_flight_bytes") == NORM + O
    # the root's and then the output's pre-backward: all-gather output and parameters of each
    assert traced(e, "root_regather_bytes") == 2 * (NORM + O)
    # the head's backward: the final norm, the output head and the last layer prefetched
    assert traced(e, "head_backward_in_flight_bytes") == NORM + O + UNIT
    # the layers' forward: as without head units, with the final norm for the root
    assert traced(e, "rank_forward_layers_bytes") == resident + NORM + max(saved / 2 + 3 * UNIT, saved + 2 * UNIT)
    # the layers' backward: the output's unreduced gradient beside the second layer (the first in the
    # backward order) only; beside the first, the layers' and the output's gradient shards
    assert traced(e, "rank_backward_layers_bytes") == resident + recompute + NORM + UNIT + UNIT + max(
        head + saved + UNIT, (saved + UNIT + O // 2) / 2 + UNIT)
    # the end of the backward: the embeddings' unit and the norm gathered, with their full gradients
    assert traced(e, "rank_backward_end_bytes") == (resident + traced(e, "rank_gradient_bytes") + head
                                                    + 2 * (E + NORM))
    assert e.figures["tensor_peak"] < base.figures["tensor_peak"]


def test_torchtune_head_units_are_modelled_under_full_shard_only():
    sgo = dict(TWO), dict(profile="torchtune", strategy="fsdp_shard_grad_op", world_size=2, **FULL)
    a = vramwise.estimate(sgo[0], **sgo[1])
    b = vramwise.estimate(sgo[0], fsdp_head_units=True, **sgo[1])
    assert a.total == b.total
    assert any("fsdp_head_units is modelled under full shard" in w for w in b.warnings)
    one = vramwise.estimate(TWO, profile="torchtune", fsdp_head_units=True, **FULL)  # no strategy: nothing to shard
    assert any("fsdp_head_units=True is not modelled" in w for w in one.warnings), one.warnings


def test_litgpt_fsdp_shards_parameters_and_keeps_its_rope_buffers_whole():
    # LitGPT's cos and sin buffers: 2 x seq_len x head_dim float32 = 2 x 16 x 16 x 4 = 2,048 bytes
    e = vramwise.estimate(TINY, profile="litgpt", strategy="fsdp", world_size=2, **FULL)
    assert e.weights == 330_112 // 2 + 2_048


def test_strategies_name_the_profiles_they_serve():
    reg = vramwise.Registry.default()
    assert reg.strategy_info("fsdp")["profiles"] == ("hf", "torchtune", "litgpt")
    assert reg.strategy_info("fsdp_shard_grad_op")["profiles"] == ("hf", "torchtune")
    assert reg.strategy_info("ddp")["profiles"] == ("hf", "unsloth", "studio")
    assert reg.strategy_info("zero3")["profiles"] == ("hf",)
    assert reg.strategies_of("litgpt") == ["fsdp"]


def test_a_strategy_a_stack_does_not_train_with_is_refused_naming_what_it_does():
    with pytest.raises(SettingsError) as e:
        vramwise.estimate(TINY, profile="torchtune", strategy="ddp", world_size=2, **FULL)
    assert "modelled on the hf, unsloth, studio profiles" in str(e.value)
    assert "profile torchtune models: fsdp, fsdp_shard_grad_op" in str(e.value)


def test_litgpt_refuses_qlora_on_several_devices_as_its_scripts_do():
    with pytest.raises(SettingsError) as e:
        vramwise.estimate(TINY, profile="litgpt", strategy="fsdp", world_size=2, method="qlora")
    assert "does not model qlora" in str(e.value) and "Quantization is currently not supported" in str(e.value)


def test_kbit_prepare_defaults_to_the_recipe_of_the_strategy():
    one = vramwise.estimate(TINY, method="qlora", profile="hf")
    fsdp = vramwise.estimate(TINY, method="qlora", profile="hf", strategy="fsdp", world_size=2)
    assert one.settings.kbit_prepare is True and fsdp.settings.kbit_prepare is False
    assert vramwise.estimate(TINY, method="lora", profile="hf").settings.kbit_prepare is None


def test_kbit_prepare_false_keeps_the_unquantized_weights_in_bf16():
    # Under 4-bit loading the embeddings, the head and the norms stay unquantized: 64,000 + 64,000 + 2 x 64
    # + 64 = 128,192 parameters, float32 after prepare_model_for_kbit_training, bf16 without it:
    # 128,192 x (4 - 2) = 256,384 bytes apart.
    on = vramwise.estimate(TINY, method="qlora", profile="hf", kbit_prepare=True)
    off = vramwise.estimate(TINY, method="qlora", profile="hf", kbit_prepare=False)
    assert on.weights - off.weights == 128_192 * 2


def test_fsdp_qlora_is_below_lora():
    cfg = dict(TINY, num_hidden_layers=8, hidden_size=512, intermediate_size=1536, num_attention_heads=8,
               num_key_value_heads=8, vocab_size=4000)
    kw = dict(strategy="fsdp", world_size=8, batch_size=2, seq_len=512, gradient_checkpointing="true", profile="hf")
    assert vramwise.estimate(cfg, method="qlora", **kw).total < vramwise.estimate(cfg, method="lora", **kw).total


def test_unsloth_under_ddp_is_its_one_gpu_total_plus_the_buckets():
    # LoRA rank 16 on the seven projections of TINY: r x (in + out) summed over q (64+64), k and v (64+32 each),
    # o (64+64), gate and up (64+128 each), down (128+64) = 16 x 1,024 = 16,384 trainable parameters;
    # DDP's buckets hold one float32 gradient each (formulas/shared/gradient_bytes.yaml): 65,536 bytes per GPU,
    # with the allocator's 15 % on top (formulas/strategies/ddp_unsloth.yaml): 65,536 x 1.15 = 75,366.4 more,
    # and the NCCL communicator's 1,600,000,000 bytes on each of the 4 GPUs (formulas/shared/constants.yaml)
    kw = dict(method="lora", batch_size=1, seq_len=16)
    one = vramwise.estimate(TINY, profile="unsloth", **kw)
    ddp = vramwise.estimate(TINY, profile="unsloth", strategy="ddp", world_size=4, **kw)
    assert abs(ddp.total - (one.total + 75_366.4 + 1_600_000_000)) <= 1
    assert ddp.figures["buffers"] == 65_536 and ddp.per_rank[0].count == 4
    with pytest.raises(SettingsError, match="profile unsloth models: ddp"):
        vramwise.estimate(TINY, profile="unsloth", strategy="fsdp", world_size=4, **kw)
