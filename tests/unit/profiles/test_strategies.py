"""Multi-GPU strategies (formulas/strategies): per-rank figures derived by hand from the shapes,
properties every strategy must keep, and the ZeRO model-state terms against DeepSpeed's own estimators.

The measured side (DDP and FSDP in CPU processes) is tests/measured/test_validation_matrix_strategies.py.
"""

from __future__ import annotations

import math

import pytest

import vramwise
from vramwise import Registry, SettingsError, estimate
from helpers import require_deepspeed

# Llama laid out by hand: hidden 64, 2 layers, vocabulary 256, 4 heads of 16 with 4 key/value heads,
# MLP 128, untied head. Per layer: q, k, v, o 4 x 64 x 64 = 16,384; gate, up 2 x 128 x 64 = 16,384;
# down 64 x 128 = 8,192; two norms 2 x 64 = 128 -> 41,088. Root: embeddings 256 x 64 = 16,384, final
# norm 64, lm_head 256 x 64 = 16,384 -> 32,832. Total 2 x 41,088 + 32,832 = 115,008 parameters.
TINY = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "tie_word_embeddings": False}
LAYER, ROOT, TOTAL = 41_088, 32_832, 115_008
RUN = dict(batch_size=1, seq_len=32, optimizer="adamw_torch", gradient_checkpointing="none", profile="hf")
SHARDING = ("fsdp", "fsdp_shard_grad_op", "fsdp_hybrid", "zero1", "zero2", "zero3")


def values(est) -> dict:
    """Every model-scope formula of the estimate by id (from its trace)."""
    return {t.id: t.value for t in est.trace if t.layer_indices is None}


def test_the_layout_written_out_is_the_model():
    spec = vramwise.load_model(TINY)
    inv = spec.inventory
    assert (inv.params_total, inv.layers_params, inv.largest_layer_params) == (TOTAL, 2 * LAYER, LAYER)
    assert inv.largest_module_params == 256 * 64  # the embeddings (and the head) are the largest modules


def test_fsdp_full_shard_per_rank_terms_by_hand():
    # full fine-tuning in bf16 with AdamW: weights 2 B, two states 2 B each, gradients 2 B per parameter
    single = estimate(TINY, method="full", **RUN)
    e = estimate(TINY, method="full", strategy="fsdp", world_size=2, **RUN)
    v = values(e)
    assert v["rank_weights_bytes"] == TOTAL * 2 / 2  # 115,008
    assert v["rank_optimizer_state_bytes"] == TOTAL * 4 / 2  # 230,016
    assert v["rank_gradient_bytes"] == TOTAL * 2 / 2
    # forward: the root gathered (32,832 x 2 = 65,664) and one layer (41,088 x 2 = 82,176)
    assert v["in_flight_forward_bytes"] == ROOT * 2 + LAYER * 2  # 147,840
    # inside the layers' forward: the root, the running layer, the next one and its all-gather buffer
    assert v["in_flight_layers_bytes"] == ROOT * 2 + 3 * LAYER * 2  # 312,192
    # backward: the root, two layers (the running one and the prefetched one), one layer's gradients and the
    # root's gradients (full fine-tuning, bf16), reduced only when the root's backward ends
    assert v["in_flight_backward_bytes"] == ROOT * 2 + 2 * LAYER * 2 + LAYER * 2 + ROOT * 2  # 377,856
    assert v["in_flight_end_bytes"] == ROOT * 2 + ROOT * 2  # 131,328
    # at the loss the forward is the single GPU's with the states halved and the gathered bytes added
    sv = values(single)
    assert v["rank_forward_loss_bytes"] == pytest.approx(
        single.phases["forward"] - sv["resident_bytes"] + sv["resident_bytes"] / 2 + ROOT * 2 + LAYER * 2)
    assert e.phases["forward"] == round(max(v["rank_forward_loss_bytes"], v["rank_forward_layers_bytes"]))
    assert e.per_rank[0].count == 2 and e.per_rank[0].total == e.total
    assert e.host_bytes == 0


def test_fsdp_offload_moves_the_states_to_host_memory():
    e = estimate(TINY, method="full", strategy="fsdp", world_size=4, offload="parameters", gpus_per_node=4, **RUN)
    v = values(e)
    assert v["rank_model_states_bytes"] == 0
    # per rank: (weights 2 + states 4 + gradients 2 + AdamW's foreach step 2) bytes x 115,008 / 4; 4 ranks a machine
    assert e.host_bytes == TOTAL * (2 + 4 + 2 + 2) / 4 * 4


def test_hybrid_shards_within_one_machine():
    full = estimate(TINY, method="full", strategy="fsdp", world_size=4, **RUN)
    hybrid = estimate(TINY, method="full", strategy="fsdp_hybrid", world_size=8, gpus_per_node=4, **RUN)
    assert hybrid.total == full.total  # 8 ranks on 2 machines of 4: shards of 4, replicated twice


@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
@pytest.mark.parametrize("ws", [2, 8])
def test_ddp_is_one_gpu_plus_the_gradient_buckets(method, ws):
    single = estimate(TINY, method=method, **RUN)
    ddp = estimate(TINY, method=method, strategy="ddp", world_size=ws, **RUN)
    buckets = values(single)["gradient_bytes"]
    assert ddp.figures["buffers"] == buckets > 0
    assert ddp.phases == {k: v + buckets for k, v in single.phases.items()}
    assert ddp.figures["tensor_peak"] == single.figures["tensor_peak"] + buckets


def _configs():
    """The tiny model, and three real configs where ../shared is present (a dense, two mixtures of experts)."""
    import json

    from helpers import CONFIGS, from_shared, shared_present

    out = [pytest.param("tiny", TINY, id="tiny")]
    if not shared_present():
        return from_shared(out, 2)
    for name in ("meta-llama__Llama-3.1-8B", "Qwen__Qwen3-30B-A3B", "mistralai__Mixtral-8x7B-v0.1"):
        out.append(pytest.param(name, json.loads((CONFIGS / f"{name}.json").read_text(encoding="utf-8")), id=name))
    return out


@pytest.mark.parametrize("strategy", SHARDING)
@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
@pytest.mark.parametrize("name,cfg", _configs())
def test_sharding_never_grows_with_more_ranks(name, cfg, method, strategy):
    kw = dict(RUN, method=method, strategy=strategy, batch_size=1, seq_len=512, gpus_per_node=64)
    if strategy in ("zero1", "zero2", "zero3") and method == "qlora":
        kw["offload"] = "none"
    ests = [estimate(cfg, world_size=n, **kw) for n in (1, 2, 4, 8, 16, 64)]
    totals = [e.total for e in ests]
    reserved = [e.figures["reserved"] for e in ests]
    states = [e.figures["model_states"] for e in ests]
    # torch's reserve never grows; the device total neither, from two ranks on: one rank has no NCCL
    # communicator, two or more hold one each, the same at any count (formulas/shared/constants.yaml
    # nccl_communicator_bytes)
    assert reserved == sorted(reserved, reverse=True), reserved
    assert totals[1:] == sorted(totals[1:], reverse=True), totals
    assert states == sorted(states, reverse=True), states
    if strategy != "zero1" or method == "full":
        assert states[-1] < states[0]


def test_single_gpu_figures_do_not_change_with_strategies_loaded():
    reg = Registry()
    before = estimate(TINY, method="full", registry=reg, **RUN).to_dict()
    estimate(TINY, method="full", strategy="zero3", world_size=4, registry=reg, **RUN)
    assert estimate(TINY, method="full", registry=reg, **RUN).to_dict() == before
    assert "per_rank" not in before and "strategy" not in before


# -- ZeRO: the model-state terms against DeepSpeed's estimators ---------------------------------------

def _zero(cfg, stage, ws, gpn, offload="none"):
    return estimate(cfg, method="full", strategy=f"zero{stage}", world_size=ws, gpus_per_node=gpn, offload=offload,
                    **RUN)


@pytest.mark.parametrize("ws,gpn", [(8, 8), (16, 8), (4, 4)])
def test_zero_model_states_by_hand(ws, gpn):
    # Psi = 115,008 parameters, all trainable. ZeRO paper (K = 12) plus DeepSpeed's float32 gradient partition:
    # stage 1: 2 Psi + 2 Psi + 16 Psi / N; stage 2: 2 Psi + 18 Psi / N; stage 3: 18 Psi / N + 4 x largest module
    # (256 x 64 = 16,384: bf16 parameters and gradients of the module gathered)
    psi = TOTAL
    z1, z2, z3 = (values(_zero(TINY, s, ws, gpn))["zero_model_states_bytes"] for s in (1, 2, 3))
    assert z1 == pytest.approx(4 * psi + 16 * psi / ws)
    assert z2 == pytest.approx(2 * psi + 18 * psi / ws)
    assert z3 == pytest.approx(18 * psi / ws + 4 * 16_384)
    # host memory of a machine, DeepSpeed's 1.5 margin: stage 2 without offload 4 Psi per GPU of the machine
    assert _zero(TINY, 2, ws, gpn).host_bytes == round(psi * 4 * gpn * 1.5)
    # stage 3 with parameters offloaded: 18 Psi over the machines
    assert _zero(TINY, 3, ws, gpn, "parameters").host_bytes == round(psi * 18 / (ws // gpn) * 1.5)


def _meta_model(cfg):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    conf = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(conf)


def _params_of(model):
    """Total parameters (shared ones once) and the most parameters of one module, as DeepSpeed's
    model_to_params counts them (by identity here: meta tensors have no data pointers)."""
    total = sum({id(p): p.numel() for p in model.parameters()}.values())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return total, largest


@pytest.mark.external  # needs deepspeed beside torch: run with -m external (.ci/run does)
@pytest.mark.parametrize("offload", ["none", "optimizer", "parameters"])
@pytest.mark.parametrize("ws,gpn", [(8, 8), (16, 8)])
def test_zero_against_deepspeeds_own_estimators(offload, ws, gpn):
    """DeepSpeed's pure-Python estimators (deepspeed 0.19) on the parameter counts of transformers' own
    model: the GPU figure is our model states (plus ZeRO-3's gathered module), the CPU figure our host memory."""
    require_deepspeed()  # .ci/run installs deepspeed and asks for this check to run
    from deepspeed.runtime.zero import stage3, stage_1_and_2 as stage12
    total, largest = _params_of(_meta_model(TINY))
    nodes = ws // gpn
    cpu2, gpu2 = stage12.estimate_zero2_model_states_mem_needs(total, gpn, nodes, cpu_offload=offload != "none")
    cpu3, gpu3, _ = stage3.estimate_zero3_model_states_mem_needs(
        total, largest, gpn, nodes, cpu_offload=offload != "none", cpu_offload_params=offload == "parameters")
    e2, e3 = _zero(TINY, 2, ws, gpn, offload), _zero(TINY, 3, ws, gpn, offload)
    assert abs(values(e2)["zero_model_states_bytes"] - gpu2) <= 1  # DeepSpeed truncates to int
    assert abs(values(e3)["zero_model_states_bytes"] - gpu3) <= 1
    assert abs(e2.host_bytes - cpu2) <= 1
    assert abs(e3.host_bytes - cpu3) <= 1


def test_bad_strategy_settings_are_one_clear_error():
    with pytest.raises(SettingsError, match="world_size 4 needs a multi-GPU strategy"):
        estimate(TINY, world_size=4, **RUN)
    with pytest.raises(SettingsError, match="offload"):
        estimate(TINY, offload="optimizer", **RUN)
    with pytest.raises(SettingsError, match="unknown strategy"):
        estimate(TINY, strategy="zero4", **RUN)
    with pytest.raises(SettingsError, match="does not offload"):
        estimate(TINY, method="full", strategy="ddp", world_size=2, offload="optimizer", **RUN)
    with pytest.raises(SettingsError, match="profile"):
        estimate(TINY, method="full", strategy="fsdp", world_size=2)  # the unsloth profile models no strategy
    with pytest.raises(SettingsError, match="world_size must be a positive integer"):
        estimate(TINY, method="full", strategy="fsdp", world_size=0, **RUN)


def test_inference_ignores_a_strategy_with_a_warning():
    e = estimate(TINY, method="inference", strategy="fsdp", world_size=2)
    assert e.strategy is None and any("strategy" in w for w in e.warnings)


def test_to_dict_carries_the_ranks_and_host_memory():
    d = estimate(TINY, method="lora", strategy="zero3", world_size=4, offload="optimizer", **RUN).to_dict()
    assert d["strategy"] == "zero3" and d["world_size"] == 4
    assert d["per_rank"][0]["count"] == 4 and d["per_rank"][0]["total"] == d["total"]
    assert d["host_bytes"] > 0 and d["settings"]["offload"] == "optimizer"
    assert math.isfinite(d["host_bytes"])


def test_device_map_places_layers_and_root_by_hand():
    # 2 GPUs: one layer each; the embeddings (256 x 64) on the first, final norm (64) and untied head (256 x 64)
    # on the last; bf16 weights of a full fine-tuning
    e = estimate(TINY, method="full", strategy="device_map", world_size=2, **RUN)
    v = values(e)
    assert (v["first_layers"], v["last_layers"], v["middle_gpus"]) == (1, 1, 0)
    assert v["first_root_weight_bytes"] == 256 * 64 * 2  # 32,768
    assert v["last_root_weight_bytes"] == (64 + 256 * 64) * 2  # 32,896
    # the two GPUs hold every weight once: two layers of 41,088 and the root 32,832, 2 bytes each
    assert (v["first_root_weight_bytes"] + v["last_root_weight_bytes"]
            + 2 * (v["weights_bytes"] - v["root_weight_bytes"]) / 2) == TOTAL * 2
    # the untied head's logits and loss buffers are on the last GPU only
    assert v["first_head_bytes"] == 0 and v["last_head_bytes"] > 0
    roles = [r.role for r in e.per_rank]
    assert len(roles) == 2 and roles[0].startswith("the first") and roles[1].startswith("the last")
    assert e.total == max(r.total for r in e.per_rank)


def test_device_map_with_a_tied_head_computes_the_logits_on_the_first_gpu():
    e = estimate(dict(TINY, tie_word_embeddings=True), method="lora", strategy="device_map", world_size=4, **RUN)
    v = values(e)
    assert v["head_tied"] and v["last_head_bytes"] == 0 and v["first_head_bytes"] > 0
    assert [r.count for r in e.per_rank] == [1, 1]  # 2 layers on 4 GPUs: the first and the last hold one each
    with pytest.raises(SettingsError, match="at least 2 GPUs"):
        estimate(TINY, method="lora", strategy="device_map", world_size=1, **RUN)


# -- the command line ----------------------------------------------------------------------------

LLAMA8B = str(__import__("pathlib").Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json")
FSDP8 = ["--profile", "hf", "--method", "full", "--strategy", "fsdp", "--world-size", "8", "--batch-size", "1",
         "--seq-len", "2048", "--gradient-checkpointing", "true"]


def test_cli_estimate_prints_the_ranks_and_host_memory(capsys):
    from vramwise.surfaces.cli.main import main

    assert main(["estimate", LLAMA8B, *FSDP8]) == 0
    out = capsys.readouterr().out
    e = estimate(LLAMA8B, profile="hf", method="full", strategy="fsdp", world_size=8, batch_size=1, seq_len=2048,
                 gradient_checkpointing="true")
    assert f"per rank: 8 x {e.total / 2**30:,.2f} GiB (each rank)" in out
    assert f"model states {e.figures['model_states'] / 2**30:,.2f} GiB" in out
    assert "host memory per machine (8 GPUs): 0.00 GiB" in out and "minimum per GPU" not in out
    assert main(["estimate", LLAMA8B, *FSDP8, "--json"]) == 0
    data = __import__("json").loads(capsys.readouterr().out)
    assert data["per_rank"] == [r.to_dict() for r in e.per_rank] and data["min_per_gpu"] == {"8": e.total}


def test_cli_fit_uses_the_per_rank_figure(capsys):
    from vramwise.surfaces.cli.main import main

    # headroom 0: the whole GPU (at the device band's headroom no count of 24 GiB GPUs holds a rank)
    assert main(["fit", LLAMA8B, "--gpu", "24GiB", "--gpus", "4", "--headroom", "0", "--profile", "hf", "--method", "full",
                 "--strategy", "fsdp"]) == 0
    out = capsys.readouterr().out
    f = vramwise.fit(LLAMA8B, gpu="24GiB", gpus=4, headroom=0, profile="hf", method="full", strategy="fsdp")
    need = f.estimate.total
    assert f.estimate.world_size == 4
    assert f"strategy fsdp on 4 GPUs, {need / 2**30:,.2f} GiB on each" in out
    assert f.fits == (need <= f.usable_bytes)
    k = f.min_gpus
    assert k is not None and f"fewest GPUs: {k} x" in out
    # the fewest: k GPUs fit, k - 1 do not
    assert f.estimate.at_world_size(k).total <= f.usable_bytes < f.estimate.at_world_size(k - 1).total


def test_cli_errors_for_strategies_are_one_line(capsys):
    from vramwise.surfaces.cli.main import main

    assert main(["estimate", LLAMA8B, "--strategy", "fsdp", "--world-size", "8"]) == 2  # the unsloth profile
    err = capsys.readouterr().err
    assert "strategy fsdp is modelled on the hf, torchtune, litgpt profiles, not on unsloth" in err
    assert "Traceback" not in err
    assert main(["estimate", LLAMA8B, "--world-size", "8"]) == 2
    assert "needs a multi-GPU strategy" in capsys.readouterr().err


def test_gpu_selection_takes_the_fewest_gpus_whose_ranks_fit():
    from unit.gpus.test_gpus import GIB, FakeNvml, gpu  # tests/ is on sys.path (pyproject.toml: pythonpath)

    from vramwise import discover_gpus, select_gpus

    e = estimate(LLAMA8B, profile="hf", method="full", strategy="fsdp", batch_size=1, seq_len=2048,
                 gradient_checkpointing="true")
    d = discover_gpus(nvml=FakeNvml([gpu(i, 24) for i in range(8)]), env={})
    sel = select_gpus(e, discovery=d)
    need = {n: e.at_world_size(n).total for n in range(1, 9)}
    k = min(n for n in need if need[n] <= 24 * GIB)  # each rank's figure on n GPUs against 24 GiB free
    assert sel.fits and len(sel.gpu_ids) == k and sel.min_per_gpu_bytes == need[k]
    assert need[k - 1] > 24 * GIB


def test_device_map_on_one_gpu_is_the_whole_run():
    e = estimate(TINY, method="lora", strategy="device_map", world_size=2, **RUN)
    assert e.min_per_gpu(1) == estimate(TINY, method="lora", **RUN).total
    assert e.min_per_gpu(2) == e.total


def test_compare_marks_the_profiles_a_strategy_is_not_modelled_on():
    c = vramwise.compare(TINY, methods=("lora", "full"), profiles=("hf", "unsloth"), strategy="zero2", world_size=4,
                         optimizer="adamw_torch")
    by = {(p, m): (e, problem) for p, m, e, problem, _ in c.cells}
    for m in ("lora", "full"):
        assert by[("hf", m)][0].total == estimate(TINY, profile="hf", method=m, strategy="zero2", world_size=4,
                                                  optimizer="adamw_torch").total
        assert by[("unsloth", m)][0] is None and "modelled on the hf profile" in by[("unsloth", m)][1]


def test_none_stands_for_no_strategy_and_no_offload():
    # estimate(..., strategy="fsdp", world_size=8, offload=None): None is the default of both
    e = estimate(TINY, method="full", strategy="fsdp", world_size=8, offload=None, **RUN)
    assert e.settings.offload == "none" and e.host_bytes == 0
    assert estimate(TINY, method="full", strategy=None, **RUN).strategy is None


def test_a_strategy_file_that_is_not_utf8_is_a_file_error(tmp_path):
    import shutil
    from pathlib import Path

    from vramwise import FileFormatError

    formulas = tmp_path / "formulas"
    shutil.copytree(Path(__file__).resolve().parents[3] / "formulas", formulas)
    with open(formulas / "strategies" / "ddp.yaml", "ab") as f:
        f.write(b"\xff\xfe")
    reg = Registry(formulas_dir=formulas)
    with pytest.raises(FileFormatError, match="ddp.yaml:1:1: .*not UTF-8"):
        estimate(TINY, method="full", strategy="ddp", world_size=2, registry=reg, **RUN)


@pytest.mark.parametrize("profile", ["hf", "torchtune", "litgpt", "unsloth"])
def test_no_term_of_any_strategy_is_a_negative_number_of_bytes(profile):
    # a byte count below zero is a term that subtracts what is not there (torchtune's FSDP with its shards in host
    # memory took the root's gradient shard off a GPU gradient of 0); every strategy, offload, method and a few
    # world sizes the profile accepts
    from vramwise.errors import VramwiseError

    negative = []
    for strategy in ("ddp", "fsdp", "fsdp_shard_grad_op", "fsdp_hybrid", "zero1", "zero2", "zero3", "device_map"):
        for offload in ("none", "optimizer", "parameters"):
            for method in ("full", "lora", "qlora"):
                for ws in (1, 2, 8):
                    try:
                        e = estimate(LLAMA8B, profile=profile, strategy=strategy, offload=offload, method=method,
                                     world_size=ws, batch_size=2, seq_len=1024)
                    except VramwiseError:
                        continue
                    negative += [(strategy, offload, method, ws, t.id) for t in e.trace
                                 if t.id.endswith("bytes") and isinstance(t.value, (int, float)) and t.value < 0]
    assert not negative, negative[:5]
