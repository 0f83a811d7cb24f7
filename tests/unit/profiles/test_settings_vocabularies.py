"""The training settings' vocabularies are formulas/settings.yaml's (``vocabularies:``): the settings
table, its spellings, its method groups and its limits read them from there, measure's refusals read
what each attention kernel needs, and a broken vocabulary is refused at its file:line:col by the schema
(settings-1) and by ``vramwise check``."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

import vramwise
from vramwise import FileFormatError, SettingsError
from vramwise.profiles.settings import (ATTENTION_KERNELS, ATTENTION_KINDS, CHECKPOINTING_MODES, CHECKPOINTING_SAVINGS,
                                        COMPARED_METHODS, EXPERTS_LAYOUTS, LIMITS, LOSS_MODES, LOSS_SAVINGS, METHODS,
                                        SETTINGS, SWEEPABLE, compile_settings_file, normalise_settings, unused_settings)
from vramwise.rules.datafiles import load_data_file

RULES = Path(str(resources.files("vramwise.formulas"))) / "settings.yaml"
DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_the_vocabularies_are_the_documented_names():
    # docs/cli.md and docs/profiles.md: the methods, the checkpointing modes (none, transformers', Unsloth's),
    # torchtune's chunked and linear chunked (LinearCrossEntropyLoss) and Liger's fused loss, transformers'
    # attn_implementation names, the experts layouts
    assert METHODS == ("qlora", "lora", "full", "inference")
    assert CHECKPOINTING_MODES == ("none", "true", "unsloth")
    assert LOSS_MODES == ("standard", "chunked", "linear_chunked", "fused")
    assert ATTENTION_KINDS == ("flash_attention_2", "flash_attention_3", "sdpa", "flex_attention", "eager")
    assert EXPERTS_LAYOUTS == ("fused", "per_expert")
    assert SWEEPABLE == ("method", "batch_size", "seq_len", "lora_rank", "gradient_checkpointing", "optimizer",
                         "attention", "loss")


def test_the_orders_of_the_advice_and_compares_methods_are_the_documented_ones():
    # docs/fit-advice.md's table of kinds: "| 2 | `checkpointing` | gradient checkpointing `true`; `unsloth` ..." and
    # "| 4 | `loss` | a `chunked`, then a `fused` cross-entropy |": the modes the change's column names, in the order
    # of their first mention
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| \d+ \| `(\w+)` \| ([^|]*) \|",
                                                         (DOCS / "fit-advice.md").read_text(encoding="utf-8"), re.M)}
    assert tuple(dict.fromkeys(w for w in re.findall(r"`(\w+)`", rows["checkpointing"]) if w in CHECKPOINTING_MODES)) \
        == CHECKPOINTING_SAVINGS == ("true", "unsloth")
    assert tuple(w for w in re.findall(r"`(\w+)`", rows["loss"]) if w in LOSS_MODES) == LOSS_SAVINGS == ("chunked", "fused")
    # docs/python-api.md: `compare(model, *, methods=("qlora", "lora", "full"), ...)`; the API, the command line and
    # the server default to them
    documented = re.search(r"`compare\(model, \*, methods=\(([^)]*)\)", (DOCS / "python-api.md").read_text(encoding="utf-8"))
    assert tuple(re.findall(r'"(\w+)"', documented.group(1))) == COMPARED_METHODS == ("qlora", "lora", "full")
    import inspect

    from vramwise.surfaces.cli.parser import build_parser

    assert inspect.signature(vramwise.compare).parameters["methods"].default == COMPARED_METHODS
    compare = build_parser()._subparsers._group_actions[0].choices["compare"]
    assert next(a for a in compare._actions if "--methods" in a.option_strings).default == "qlora,lora,full"


def test_the_limits_are_the_ranges_docs_limits_states():
    # docs/limits.md, Settings: "`batch_size` 1 to 1,048,576, `seq_len` 1 to 33,554,432, ..."
    text = (DOCS / "limits.md").read_text(encoding="utf-8").split("## Settings", 1)[1]
    documented = {name: int(top.replace(",", "")) for name, top in re.findall(r"`(\w+)`\s+1 to ([\d,]+)", text)}
    assert documented == {"batch_size": 2**20, "seq_len": 2**25, "lora_rank": 2**16, "loss_chunks": 2**16,
                          "world_size": 2**16, "gpus_per_node": 2**10}
    assert {k: LIMITS[k] for k in documented} == documented
    normalise_settings(batch_size=2**20)
    with pytest.raises(SettingsError, match=r"^batch_size must be a positive integer of at most 1,048,576, got 1048577$"):
        normalise_settings(batch_size=2**20 + 1)


@pytest.mark.parametrize("given, mode", [
    ("none", "none"), ("off", "none"), ("no", "none"), ("0", "none"), ("false", "none"), (False, "none"), (None, "none"),
    ("true", "true"), ("on", "true"), ("Yes", "true"), ("1", "true"), (True, "true"), (" unsloth ", "unsloth"),
])
def test_the_spellings_of_a_checkpointing_mode(given, mode):
    assert normalise_settings(gradient_checkpointing=given).gradient_checkpointing == mode


def test_an_unknown_mode_lists_the_modes_and_a_flag_takes_the_boolean_spellings():
    with pytest.raises(SettingsError, match=r"^unknown gradient checkpointing mode 'sometimes' \(choose one of: none, true, unsloth\)$"):
        normalise_settings(gradient_checkpointing="sometimes")
    assert normalise_settings(activation_offloading="yes").activation_offloading is True
    assert normalise_settings(activation_offloading="off").activation_offloading is False
    with pytest.raises(SettingsError, match=r"^activation_offloading must be true or false"):
        normalise_settings(activation_offloading="unsloth")


def test_the_method_groups_say_which_methods_a_setting_applies_to():
    # PEFT's LoraConfig settings apply to the adapter methods; the step's settings to the training methods;
    # vLLM's to inference
    by_group = {}
    for s in SETTINGS:
        by_group.setdefault(s.applies_to, []).append(s.name)
    assert by_group[("qlora", "lora")] == ["lora_rank", "target_modules", "lora_dropout"]
    assert "optimizer" in by_group[("qlora", "lora", "full")] and "loss" in by_group[("qlora", "lora", "full")]
    assert "kv_cache_dtype" in by_group[("inference",)]
    static = {"method": "full", "lora_rank": 64, "lora_dropout": 0.1}
    assert unused_settings({**normalise_settings(method="full").as_names(), **static}) == ["lora_rank", "lora_dropout"]


def test_the_attention_kernels_are_transformers_own():
    pytest.importorskip("transformers")
    import transformers.utils as tu
    from transformers.modeling_utils import AttentionInterface, PreTrainedModel

    # transformers' attn_implementation names: AttentionInterface's functions and eager
    assert set(ATTENTION_KINDS) <= set(AttentionInterface._global_mapping) | {"eager"}
    assert list(ATTENTION_KERNELS) == ["eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"]
    for kernel, facts in ATTENTION_KERNELS.items():
        if "class_flag" in facts:  # PreTrainedModel declares each flag, False until a model class sets it
            assert getattr(PreTrainedModel, facts["class_flag"]) is False, kernel
        if "cuda_check" in facts:
            assert callable(getattr(tu, facts["cuda_check"])), kernel
            assert facts["package"], kernel


def test_measure_reads_each_kernels_class_flag():
    from vramwise.measuring.refusals import check_device, class_kernels

    class OnlySdpa:  # a model class as transformers marks one: sdpa, no flash or flex attention
        _supports_sdpa = True

    class Every:
        _supports_sdpa = _supports_flash_attn = _supports_flex_attn = True

    assert class_kernels(OnlySdpa) == ("eager", "sdpa")
    assert class_kernels(Every) == ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
    check_device("sdpa", "cpu")
    check_device("eager", "cpu")
    with pytest.raises(SettingsError, match=r"^--attention flex_attention is not runnable here: torch's flex attention"):
        check_device("flex_attention", "cpu")


# -- a broken vocabulary is refused where it is written -----------------------------------------------------------


def _rules(tmp_path: Path, old: str, new: str) -> Path:
    text = RULES.read_text(encoding="utf-8")
    assert text.count(old) == 1
    p = tmp_path / "settings.yaml"
    p.write_text(text.replace(old, new), encoding="utf-8")
    return p


def _line(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if needle in line)


def _load(p: Path):
    return load_data_file(p.read_text(encoding="utf-8"), str(p), "settings-1.schema.json")


def test_an_unknown_key_of_a_vocabulary_is_refused(tmp_path):
    p = _rules(tmp_path, "    setting: loss\n", "    setting: loss\n    colour: red\n")
    with pytest.raises(FileFormatError, match=rf"settings\.yaml:{_line(p, 'colour:')}:5: \$\.vocabularies\.loss\.colour: "
                                              r"unknown key 'colour'"):
        _load(p)
    problems = vramwise.check([p])
    assert len(problems) == 1 and problems[0].startswith(f"{p}:{_line(p, 'colour:')}:5: ")


def test_an_unknown_vocabulary_is_refused(tmp_path):
    p = _rules(tmp_path, "  experts_layout:\n", "  expert_layouts:\n")
    with pytest.raises(FileFormatError, match=rf"settings\.yaml:{_line(p, 'expert_layouts:')}:3: "
                                              r"\$\.vocabularies\.expert_layouts: unknown key 'expert_layouts'"):
        _load(p)


def test_a_kernel_facts_unknown_key_is_refused(tmp_path):
    p = _rules(tmp_path, "        class_flag: _supports_sdpa\n", "        class_flag: _supports_sdpa\n        cpu: fine\n")
    with pytest.raises(FileFormatError, match=rf"settings\.yaml:{_line(p, 'cpu: fine')}:9: "
                                              r"\$\.vocabularies\.attention\.kernels\.sdpa\.cpu: unknown key 'cpu'"):
        _load(p)


@pytest.mark.parametrize("old, new, needle, message", [
    ("      adapters: [qlora, lora]", "      adapters: [qlora, dora]", "adapters: [qlora, dora]",
     r"\$\.vocabularies\.method_groups\.groups\.adapters\[1\]: 'dora' is not a method"),
    ('      "on": "true"\n', '      "on": "yes please"\n', '"on": "yes please"',
     r"\$\.vocabularies\.gradient_checkpointing\.aliases\.on: 'yes please' is not a gradient checkpointing mode"),
    ("      eager: {}\n", "      eagre: {}\n", "eagre: {}",
     r"\$\.vocabularies\.attention\.kernels\.eagre: 'eagre' is not an attention kernel"),
    ("      gpus_per_node: 1024", "      gpus_per_host: 1024", "gpus_per_host:",
     r"\$\.vocabularies\.limits\.limits\.gpus_per_host: 'gpus_per_host' is not a setting"),
    ("    setting: loss\n", "    setting: losses\n", "setting: losses",
     r"\$\.vocabularies\.loss\.setting: 'losses' is not a setting"),
    ("      names: [qlora, lora, full]\n", "      names: [qlora, dora, full]\n", "names: [qlora, dora, full]",
     r"\$\.vocabularies\.methods\.compared\.names\[1\]: 'dora' is not a method"),
    ('      names: ["true", unsloth]\n', '      names: ["true", offload]\n', 'names: ["true", offload]',
     r"\$\.vocabularies\.gradient_checkpointing\.saves_memory_in_order\.names\[1\]: 'offload' is not one of "
     r"gradient_checkpointing's names \(none, true, unsloth\)"),
    ("      names: [chunked, fused]\n", "      names: [chunked, liger]\n", "names: [chunked, liger]",
     r"\$\.vocabularies\.loss\.saves_memory_in_order\.names\[1\]: 'liger' is not one of loss's names"),
])
def test_a_name_its_vocabulary_lacks_is_refused(tmp_path, old, new, needle, message):
    p = _rules(tmp_path, old, new)
    line = _line(p, needle)
    with pytest.raises(FileFormatError, match=rf"settings\.yaml:{line}:\d+: {message}"):
        compile_settings_file(_load(p))
    problems = vramwise.check([p])
    assert any(q.startswith(f"{p}:{line}:") for q in problems), problems


def test_a_kernel_without_its_entry_is_refused(tmp_path):
    p = _rules(tmp_path, "      eager: {}\n", "")
    with pytest.raises(FileFormatError, match=r"\$\.vocabularies\.attention\.kernels: no entry for eager"):
        compile_settings_file(_load(p))


def test_an_order_of_the_modes_that_save_memory_is_required_and_closed(tmp_path):
    p = _rules(tmp_path, "      names: [chunked, fused]\n", "      names: [chunked, fused]\n      strongest: fused\n")
    with pytest.raises(FileFormatError, match=rf"settings\.yaml:{_line(p, 'strongest: fused')}:7: "
                                              r"\$\.vocabularies\.loss\.saves_memory_in_order\.strongest: unknown key"):
        _load(p)
    p = _rules(tmp_path, "    saves_memory_in_order:\n      names: [chunked, fused]\n", "    saves_memory:\n      names: [chunked, fused]\n")
    with pytest.raises(FileFormatError, match=r"\$\.vocabularies\.loss: 'saves_memory_in_order' is a required property"):
        _load(p)
