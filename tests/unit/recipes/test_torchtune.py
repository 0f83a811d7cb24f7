"""The torchtune recipe format (frameworks/torchtune.yaml): torchtune 0.6.1's shipped configs read into
vramwise settings, each with the line it came from, and the defaults torchtune's recipes and builders
apply when a key is absent (each expectation cites the torchtune source that gives it).

The fixtures (tests/fixtures/recipes/torchtune/) are torchtune 0.6.1's recipes/configs copied verbatim
below a first-line comment naming the file, so a line number here is the config's own line plus one.
tests/conformance/recipe_formats/test_torchtune.py compares the same fields with torchtune's own config
loader and model builders.
"""

from pathlib import Path

import pytest

import vramwise

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "torchtune"

#: vramwise's (and the torchtune profile's, PEFT's) names of what lora_attn_modules: [q_proj, v_proj,
#: output_proj] with apply_lora_to_mlp: True adapts (torchtune models/convert_weights.py _FROM_HF:
#: output_proj is o_proj, w1 gate_proj, w3 up_proj, w2 down_proj)
QVO_MLP = ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def read(source, **kw):
    return vramwise.read_recipe(source, **kw)


def fixture(name: str) -> str:
    return str(FIXTURES / name)


def assert_from(recipe, name: str, file: str, line: int, key: str) -> None:
    """``name`` came from ``key`` at ``file:line`` (and that line of the fixture does hold the key)."""
    text = Path(file).read_text(encoding="utf-8").splitlines()[line - 1]
    assert text.lstrip().startswith(key.rsplit(".", 1)[-1] + ":"), (line, text)
    o = recipe.origins[name]
    assert (o.kind, o.file, o.line, o.key) == ("recipe", file, line, key), o


def assert_default(recipe, name: str, source: str) -> None:
    """``name`` is torchtune 0.6.1's own default, cited from ``source``."""
    o = recipe.origins[name]
    assert (o.kind, o.framework, o.version) == ("framework default", "torchtune", "0.6.1"), o
    assert source in o.source, o.source


def unknown_keys(recipe) -> list:
    return [w for w in recipe.warnings if "unknown torchtune key" in w]


def test_lora_single_device():
    f = fixture("llama3_1_8B_lora_single_device.yaml")
    r = read(f)
    assert (r.format, r.framework, r.framework_version, r.profile) == ("torchtune", "torchtune", "0.6.1", "torchtune")
    # model._component_: torchtune.models.llama3_1.lora_llama3_1_8b: the Llama 3.1 8B architecture
    assert r.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert_from(r, "model", f, 24, "model._component_")
    s = r.settings
    assert s["method"] == "lora"  # a lora_* builder
    assert_from(r, "method", f, 24, "model._component_")
    assert s["target_modules"] == QVO_MLP  # apply_lora_to_output: False
    assert_from(r, "target_modules", f, 25, "model.lora_attn_modules")
    assert (s["lora_rank"], s["lora_dropout"], r.extras["lora_alpha"]) == (8, 0.0, 16)
    assert_from(r, "lora_rank", f, 28, "model.lora_rank")
    assert_from(r, "lora_dropout", f, 30, "model.lora_dropout")
    assert_from(r, "lora_alpha", f, 29, "model.lora_alpha")
    assert s["batch_size"] == 2
    assert_from(r, "batch_size", f, 59, "batch_size")
    assert r.extras["gradient_accumulation_steps"] == 8
    assert_from(r, "gradient_accumulation_steps", f, 77, "gradient_accumulation_steps")
    # optimizer: torch.optim.AdamW with fused: True
    assert s["optimizer"] == "adamw_torch_fused"
    assert_from(r, "optimizer", f, 63, "optimizer._component_")
    assert s["loss"] == "chunked"
    assert_from(r, "loss", f, 72, "loss._component_")
    # CEWithChunkedOutputLoss without num_output_chunks: its default 8
    # (torchtune/modules/loss/ce_chunked_output_loss.py:30, num_output_chunks: int = 8)
    assert s["loss_chunks"] == 8
    assert_default(r, "loss_chunks", "ce_chunked_output_loss.py:30")
    assert (s["gradient_checkpointing"], s["activation_offloading"], s["compile"]) == ("true", False, False)
    assert_from(r, "gradient_checkpointing", f, 93, "enable_activation_checkpointing")
    assert_from(r, "activation_offloading", f, 94, "enable_activation_offloading")
    assert_from(r, "compile", f, 79, "compile")
    # tokenizer.max_seq_len: null: no truncation, so vramwise's default sequence length, said in a warning
    assert s["seq_len"] == 2048 and r.origins["seq_len"].kind == "vramwise default"
    assert any("tokenizer.max_seq_len" in w and "not modelled" in w and f"{f}:36" in w for w in r.warnings)
    # the LoRA recipes never read optimizer_in_bwd; no FSDP key: one GPU
    assert s["optimizer_in_bwd"] is False and r.origins["optimizer_in_bwd"].kind == "vramwise default"
    assert (s["strategy"], s["offload"], s["world_size"]) == ("none", "none", 1)
    assert unknown_keys(r) == []


def test_qlora_single_device():
    f = fixture("llama3_1_8B_qlora_single_device.yaml")
    r = read(f)
    # qlora_llama3_1_8b = partial(lora_llama3_1_8b, quantize_base=True)
    # (torchtune/models/llama3_1/_model_builders.py:251)
    assert r.settings["method"] == "qlora"
    assert_from(r, "method", f, 23, "model._component_")
    assert r.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert r.settings["target_modules"] == QVO_MLP
    assert_from(r, "target_modules", f, 24, "model.lora_attn_modules")
    assert (r.settings["lora_rank"], r.settings["batch_size"], r.settings["optimizer"]) == (8, 2, "adamw_torch_fused")
    assert_from(r, "batch_size", f, 58, "batch_size")
    assert unknown_keys(r) == []


def test_full_single_device():
    f = fixture("llama3_1_8B_full_single_device.yaml")
    r = read(f)
    s = r.settings
    assert s["method"] == "full"  # llama3_1_8b, not a lora_ / qlora_ builder
    assert_from(r, "method", f, 41, "model._component_")
    assert r.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert s["optimizer"] == "paged_adamw_8bit"  # bitsandbytes.optim.PagedAdamW8bit
    assert_from(r, "optimizer", f, 61, "optimizer._component_")
    assert s["optimizer_in_bwd"] is True
    assert_from(r, "optimizer_in_bwd", f, 67, "optimizer_in_bwd")
    assert (s["gradient_checkpointing"], s["batch_size"], r.extras["gradient_accumulation_steps"]) == ("true", 2, 1)
    # a full builder takes no LoRA arguments: no LoRA default applies
    assert r.origins["lora_rank"].kind == "vramwise default"
    assert "lora_alpha" not in r.extras
    assert unknown_keys(r) == []


def test_full_low_memory_offloads_activations():
    f = fixture("llama2_7B_full_low_memory.yaml")
    r = read(f)
    s = r.settings
    assert r.model == "meta-llama/Llama-2-7b-hf" and s["method"] == "full"
    assert s["optimizer"] == "paged_adamw_32bit"  # bitsandbytes.optim.PagedAdamW (32-bit states)
    assert_from(r, "optimizer", f, 59, "optimizer._component_")
    assert (s["activation_offloading"], s["gradient_checkpointing"], s["optimizer_in_bwd"]) == (True, "true", True)
    assert_from(r, "activation_offloading", f, 77, "enable_activation_offloading")
    assert unknown_keys(r) == []


def test_lora_with_output_head_and_rank_64():
    f = fixture("mistral_7B_lora_single_device.yaml")
    r = read(f)
    assert r.model == "mistralai/Mistral-7B-v0.1"
    # apply_lora_to_output: True adds the output head (lm_head in the checkpoint's names)
    assert r.settings["target_modules"] == QVO_MLP + ("lm_head",)
    assert_from(r, "target_modules", f, 41, "model.lora_attn_modules")
    assert (r.settings["lora_rank"], r.settings["batch_size"]) == (64, 4)
    assert_from(r, "lora_rank", f, 44, "model.lora_rank")
    assert_from(r, "batch_size", f, 74, "batch_size")
    assert unknown_keys(r) == []


def test_qwen_lora_without_apply_lora_to_output():
    f = fixture("qwen2_5_3B_lora_single_device.yaml")
    r = read(f)
    assert r.model == "Qwen/Qwen2.5-3B-Instruct"
    # apply_lora_to_output absent: the builder's default False (models/qwen2_5/_model_builders.py)
    assert r.settings["target_modules"] == QVO_MLP
    assert_from(r, "target_modules", f, 25, "model.lora_attn_modules")
    assert unknown_keys(r) == []


def test_distributed_lora_is_told_by_its_header():
    # 8B_lora.yaml (lora_finetune_distributed) differs from 8B_lora_single_device.yaml only in comments,
    # output_dir and enable_activation_checkpointing: no key says FSDP or how many processes, but its header
    # comment (fixture line 10) holds "tune run --nproc_per_node 2 lora_finetune_distributed --config
    # llama3_1/8B_lora": 2 processes on torchtune's default of 1 node, FSDP for the _distributed recipe
    # (frameworks/launchers.yaml, tune's entry_rules).
    f = fixture("llama3_1_8B_lora.yaml")
    r = read(f)
    assert r.settings["gradient_checkpointing"] == "none"
    assert_from(r, "gradient_checkpointing", f, 92, "enable_activation_checkpointing")
    assert (r.settings["strategy"], r.settings["world_size"]) == ("fsdp", 2)
    for name in ("strategy", "world_size"):
        assert r.origins[name].kind == "launch line"
        assert f"in the header comment of {f}:10" in r.origins[name].key
    r2 = read(f, overrides={"strategy": "fsdp", "world_size": 2})
    assert (r2.settings["strategy"], r2.settings["world_size"]) == ("fsdp", 2)
    assert r2.origins["world_size"].kind == "override" and r2.origins["strategy"].kind == "override"
    assert unknown_keys(r) == []


def test_distributed_full_with_cpu_offload():
    f = fixture("llama3_1_70B_full.yaml")
    r = read(f)
    s = r.settings
    assert r.model == "meta-llama/Llama-3.1-70B-Instruct" and s["method"] == "full"
    # fsdp_cpu_offload is read by the distributed recipes only: FSDP, and CPUOffloadPolicy moves the
    # parameters, gradients and optimizer step to the CPU (torchtune/training/_distributed.py:551-552)
    assert (s["strategy"], s["offload"]) == ("fsdp", "parameters")
    assert_from(r, "strategy", f, 79, "fsdp_cpu_offload")
    assert_from(r, "offload", f, 79, "fsdp_cpu_offload")
    assert s["optimizer"] == "adamw_torch"  # torch.optim.AdamW with fused: False
    assert_from(r, "optimizer", f, 60, "optimizer._component_")
    assert s["optimizer_in_bwd"] is False
    assert_from(r, "optimizer_in_bwd", f, 82, "optimizer_in_bwd")
    # the number of processes is not in the config's keys: its header comment (fixture line 10) gives
    # "tune run --nproc_per_node 8 full_finetune_distributed": 8 processes on 1 node
    assert s["world_size"] == 8
    assert r.origins["world_size"].kind == "launch line" and f"{f}:10" in r.origins["world_size"].key
    assert not any("world_size" in w for w in r.warnings)
    # tensor_parallel_dim: 1 is no tensor parallelism
    assert not any("tensor_parallel_dim" in w for w in r.warnings)
    assert unknown_keys(r) == []


def test_multinode_packed_compiled():
    f = fixture("llama3_3_70B_full_multinode.yaml")
    r = read(f)
    s = r.settings
    # llama3_3_70b = llama3_1_70b (torchtune/models/llama3_3/_model_builders.py:17)
    assert r.model == "meta-llama/Llama-3.1-70B-Instruct"
    assert_from(r, "model", f, 30, "model._component_")
    assert (s["seq_len"], s["batch_size"], s["compile"]) == (1024, 4, True)
    assert_from(r, "seq_len", f, 19, "tokenizer.max_seq_len")
    assert_from(r, "compile", f, 67, "compile")
    # fsdp_cpu_offload: False is still a distributed recipe's key
    assert (s["strategy"], s["offload"]) == ("fsdp", "none")
    assert_from(r, "strategy", f, 65, "fsdp_cpu_offload")
    # packed: True is named as not modelled (block-causal masks), with its line
    assert any("dataset.packed" in w and f"{f}:24" in w and "not modelled" in w for w in r.warnings)
    assert unknown_keys(r) == []


# -- defaults and rules on hand-written recipes ---------------------------------------------------

def lora_recipe(**top):
    model = {"_component_": "torchtune.models.llama3_1.lora_llama3_1_8b", "lora_attn_modules": ["q_proj", "v_proj"]}
    model.update(top.pop("model", {}))
    return {"model": model, "batch_size": 1, "gradient_accumulation_steps": 1,
            "loss": {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss"},
            "optimizer": {"_component_": "torch.optim.AdamW", "lr": 3e-4}, **top}


def test_defaults_of_an_absent_key():
    r = read(lora_recipe(), framework="torchtune")
    s = r.settings
    # torchtune/models/llama3_1/_model_builders.py:86-90: apply_lora_to_mlp / apply_lora_to_output False,
    # lora_rank 8, lora_alpha 16, lora_dropout 0.0 (the same in every lora_* builder of 0.6.1)
    assert s["target_modules"] == ("q_proj", "v_proj")
    assert s["lora_rank"] == 8
    assert_default(r, "lora_rank", "_model_builders.py:88")
    assert s["lora_dropout"] == 0.0
    assert_default(r, "lora_dropout", "_model_builders.py:90")
    assert r.extras["lora_alpha"] == 16
    assert_default(r, "lora_alpha", "_model_builders.py:89")
    # recipes/lora_finetune_single_device.py:161-165: cfg.get("enable_activation_checkpointing", False),
    # cfg.get("enable_activation_offloading", False)
    assert s["gradient_checkpointing"] == "none"
    assert_default(r, "gradient_checkpointing", "lora_finetune_single_device.py:161")
    assert s["activation_offloading"] is False
    assert_default(r, "activation_offloading", "lora_finetune_single_device.py:164")
    # recipes/lora_finetune_distributed.py:272: cfg.get("compile", False)
    assert s["compile"] is False
    assert_default(r, "compile", "lora_finetune_distributed.py:272")
    # torch.optim.AdamW without fused: torch's foreach AdamW
    assert s["optimizer"] == "adamw_torch"
    assert s["loss_chunks"] == 8
    assert_default(r, "loss_chunks", "ce_chunked_output_loss.py:30")
    assert r.profile == "torchtune"
    assert_default(r, "profile", "lora_finetune_single_device.py")


def test_full_recipe_default_optimizer_in_bwd():
    # recipes/full_finetune_distributed.py:181: cfg.get("optimizer_in_bwd", False)
    r = read(lora_recipe(model={"_component_": "torchtune.models.llama3_2.llama3_2_1b"}), framework="torchtune")
    assert r.settings["method"] == "full" and r.model == "meta-llama/Llama-3.2-1B-Instruct"
    assert r.settings["optimizer_in_bwd"] is False
    assert_default(r, "optimizer_in_bwd", "full_finetune_distributed.py:181")


def test_lora_recipes_do_not_read_optimizer_in_bwd():
    r = read(lora_recipe(optimizer_in_bwd=True), framework="torchtune")
    assert r.settings["optimizer_in_bwd"] is False and r.origins["optimizer_in_bwd"].kind == "vramwise default"
    assert unknown_keys(r) == []


@pytest.mark.parametrize("attn, mlp, output, expected", [
    # any order of lora_attn_modules
    (["output_proj", "k_proj", "q_proj"], None, None, ("q_proj", "k_proj", "o_proj")),
    (["v_proj"], True, True, ("v_proj", "gate_proj", "up_proj", "down_proj", "lm_head")),
    (["q_proj", "k_proj", "v_proj", "output_proj"], True, False,
     ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")),
    (["k_proj", "output_proj"], False, True, ("k_proj", "o_proj", "lm_head")),
])
def test_target_modules(attn, mlp, output, expected):
    model = {"lora_attn_modules": attn}
    if mlp is not None:
        model["apply_lora_to_mlp"] = mlp
    if output is not None:
        model["apply_lora_to_output"] = output
    r = read(lora_recipe(model=model), framework="torchtune")
    assert r.settings["target_modules"] == expected


def test_quantize_base_on_a_lora_builder_is_qlora():
    # lora_llama3_1_8b(quantize_base=True) is what qlora_llama3_1_8b builds (_model_builders.py:92, 251)
    r = read(lora_recipe(model={"quantize_base": True}), framework="torchtune")
    assert r.settings["method"] == "qlora"
    assert r.origins["method"].key == "model.quantize_base"


def test_chunk_count_and_plain_loss():
    r = read(lora_recipe(loss={"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss",
                               "num_output_chunks": 16}), framework="torchtune")
    assert (r.settings["loss"], r.settings["loss_chunks"]) == ("chunked", 16)
    assert r.origins["loss_chunks"].kind == "recipe"
    r = read(lora_recipe(loss={"_component_": "torch.nn.CrossEntropyLoss"}), framework="torchtune")
    assert r.settings["loss"] == "standard"
    assert r.origins["loss_chunks"].kind == "vramwise default"  # no chunks without the chunked loss


def test_unknown_loss_is_a_warning():
    r = read(lora_recipe(loss={"_component_": "torchtune.rlhf.loss.DPOLoss"}), framework="torchtune")
    assert r.origins["loss"].kind == "vramwise default"
    assert any("loss._component_" in w and "DPOLoss" in w for w in r.warnings)


def test_linear_cross_entropy_loss_of_a_main_branch_config():
    # torchtune's main branch after 0.6.1 (pytorch/torchtune bd2a0fc7) ships this config with
    # loss._component_: torchtune.modules.loss.LinearCrossEntropyLoss (its line 71, here 72)
    f = str(FIXTURES / "main" / "llama3_1_8B_lora_single_device.yaml")
    r = read(f)
    assert r.settings["loss"] == "linear_chunked"
    assert_from(r, "loss", f, 72, "loss._component_")
    assert "after 0.6.1" in r.origins["loss"].rule  # no release has it
    # no num_output_chunks: LinearCrossEntropyLoss's own default, num_output_chunks: int = 8
    # (torchtune/modules/loss/cross_entropy_loss.py:36 at bd2a0fc7)
    assert r.settings["loss_chunks"] == 8
    assert r.origins["loss_chunks"].kind == "framework default"
    assert "cross_entropy_loss.py:36" in r.origins["loss_chunks"].source
    assert not any("LinearCrossEntropyLoss" in w for w in r.warnings)


def test_linear_cross_entropy_loss_chunks_and_write():
    r = read(lora_recipe(loss={"_component_": "torchtune.modules.loss.LinearCrossEntropyLoss",
                               "num_output_chunks": 16}), framework="torchtune")
    assert (r.settings["loss"], r.settings["loss_chunks"]) == ("linear_chunked", 16)
    assert r.origins["loss_chunks"].kind == "recipe"
    assert r.write({"loss": "linear_chunked"}) == {"loss._component_": "torchtune.modules.loss.LinearCrossEntropyLoss"}


@pytest.mark.parametrize("component, fused, expected", [
    ("torch.optim.AdamW", True, "adamw_torch_fused"),
    ("torch.optim.AdamW", False, "adamw_torch"),
    ("torch.optim.SGD", None, "sgd"),
    ("bitsandbytes.optim.PagedAdamW8bit", None, "paged_adamw_8bit"),
    ("bitsandbytes.optim.AdamW8bit", None, "adamw_bnb_8bit"),
    # torchao's 8-bit AdamW: two uint8 states and a float32 scale per 256, bitsandbytes' bytes
    ("torchao.optim.AdamW8bit", None, "adamw_8bit"),
])
def test_optimizers(component, fused, expected):
    opt = {"_component_": component, "lr": 1e-5}
    if fused is not None:
        opt["fused"] = fused
    assert read(lora_recipe(optimizer=opt), framework="torchtune").settings["optimizer"] == expected


def test_reshard_after_forward_false_is_shard_grad_op():
    # recipes/lora_finetune_distributed.py:280: reshard_after_forward=cfg.get("fsdp_reshard_after_forward", True)
    r = read(lora_recipe(fsdp_reshard_after_forward=False), framework="torchtune", overrides={"world_size": 4})
    assert (r.settings["strategy"], r.settings["world_size"]) == ("fsdp_shard_grad_op", 4)
    assert r.origins["strategy"].key == "fsdp_reshard_after_forward"


def test_unmapped_builder_falls_back_to_the_checkpoint_folder():
    # gemma2_27b is not in the builder map (frameworks/torchtune.yaml names it among the builders left out): the
    # checkpoint folder instead
    r = read(lora_recipe(model={"_component_": "torchtune.models.gemma2.lora_gemma2_27b"},
                         checkpointer={"_component_": "torchtune.training.FullModelHFCheckpointer",
                                       "checkpoint_dir": "/tmp/gemma-2-27b"}), framework="torchtune")
    assert r.model == "/tmp/gemma-2-27b"
    assert r.origins["model"].key == "checkpointer.checkpoint_dir"
    assert any("lora_gemma2_27b" in w for w in r.warnings)
    assert r.settings["method"] == "lora"


@pytest.mark.parametrize("key, value, word", [
    ("dtype", "fp32", "bf16"),
    ("model", {"use_dora": True}, "DoRA"),
    ("tensor_parallel_dim", 2, "tensor parallelism"),
    ("ac_mode", "selective", "selective"),
])
def test_unmodelled_keys_warn(key, value, word):
    r = read(lora_recipe(**{key: value}), framework="torchtune")
    assert any("not modelled" in w and word in w for w in r.warnings), r.warnings


@pytest.mark.parametrize("layers, head_units", [
    (["tok_embeddings", "output"], True),   # the shipped full configs' list
    (["output", "tok_embeddings"], True),   # the same names in another order
    (["tok_embeddings"], False),            # the embeddings alone: not modelled, said so
])
def test_custom_sharded_layers_give_head_units(layers, head_units):
    r = read(lora_recipe(custom_sharded_layers=layers), framework="torchtune", overrides={"world_size": 2})
    assert r.settings["strategy"] == "fsdp"
    assert r.settings.get("fsdp_head_units") is head_units
    if head_units:
        assert r.origins["fsdp_head_units"].key == "custom_sharded_layers"
    else:
        assert any("not modelled" in w and "custom_sharded_layers" in w for w in r.warnings), r.warnings


def test_bf16_is_not_warned_and_unknown_keys_are():
    r = read(lora_recipe(dtype="bf16", my_new_switch=True), framework="torchtune")
    assert not any("dtype" in w for w in r.warnings)
    assert any("my_new_switch" in w for w in unknown_keys(r))


def test_detected_without_naming_the_format():
    r = read(lora_recipe(checkpointer={"_component_": "torchtune.training.FullModelHFCheckpointer"}))
    assert r.format == "torchtune"


def test_write_back_in_torchtune_keys():
    r = read(fixture("llama3_1_8B_lora_single_device.yaml"))
    assert r.write({"batch_size": 1, "gradient_accumulation_steps": 16}) == \
        {"batch_size": 1, "gradient_accumulation_steps": 16}
    assert r.write({"gradient_checkpointing": "true"}) == {"enable_activation_checkpointing": True}
    assert r.write({"activation_offloading": True}) == \
        {"enable_activation_checkpointing": True, "enable_activation_offloading": True}
    assert r.write({"lora_rank": 4, "seq_len": 1024}) == {"model.lora_rank": 4, "tokenizer.max_seq_len": 1024}
    assert r.write({"loss_chunks": 16}) == {"loss._component_": "torchtune.modules.loss.CEWithChunkedOutputLoss",
                                            "loss.num_output_chunks": 16}
    assert r.write({"optimizer": "paged_adamw_8bit"}) == {"optimizer._component_": "bitsandbytes.optim.PagedAdamW8bit"}
    assert r.write({"method": "qlora", "load_in_4bit": True}) == {"model.quantize_base": True}
    # advice's "attention modules only" (the current attention targets, sorted) in torchtune's switches
    assert r.write({"target_modules": ("o_proj", "q_proj", "v_proj")}) == {
        "model.lora_attn_modules": ["q_proj", "v_proj", "output_proj"],
        "model.apply_lora_to_mlp": False, "model.apply_lora_to_output": False}


def test_estimate_of_the_lora_recipe():
    r = read(fixture("llama3_1_8B_lora_single_device.yaml"), overrides={"seq_len": 2048})
    e = vramwise.estimate(r)
    assert e.profile == "torchtune"
    assert sorted(e.lora_targets) == sorted(QVO_MLP)
    # Llama 3.1 8B (hidden 4096, 1024-wide k/v, MLP 14336, 32 layers), r = 8, r x (in + out) per adapter:
    # q 8 x 8192 = 65,536; v 8 x 5120 = 40,960; o 65,536; gate, up, down 8 x 18,432 = 147,456 each
    # -> 614,400 per layer x 32 = 19,660,800
    assert e.params_trainable == 19_660_800


def test_estimate_with_the_output_head():
    r = read(fixture("mistral_7B_lora_single_device.yaml"), overrides={"seq_len": 512})
    e = vramwise.estimate(r)
    # Mistral 7B (hidden 4096, k/v 1024, MLP 14336, 32 layers, vocabulary 32000), r = 64:
    # q 64 x 8192 = 524,288; v 64 x 5120 = 327,680; o 524,288; gate, up, down 64 x 18,432 = 1,179,648 each
    # -> 4,915,200 per layer x 32 = 157,286,400; output head 64 x (4096 + 32000) = 2,310,144
    assert e.params_trainable == 157_286_400 + 2_310_144
