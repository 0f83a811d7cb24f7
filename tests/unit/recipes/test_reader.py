"""The recipe reader's rules, on small formats written here (the bundled formats have their own tests).

Each expected value is read off the recipe text in the test: which rule applies, which line the key
is on, which default wins.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import vramwise
from vramwise import RecipeError, SettingsError
from vramwise.errors import FileFormatError
from vramwise.recipes import Formats, bundled_formats, read_recipe

TOY = """\
schema_version: 1
format: toy
description: a small format for the reader's tests
framework:
  name: toyfw
  version: "2.0"
  source: toyfw/config.py
  aliases: [toy-alias]
  releases:
    - {version: "1.9", date: "2025-01-02", source: toyfw v1.9}
    - {version: "2.0", date: "2025-06-01", source: toyfw v2.0}
profile:
  - {key: use_unsloth, map: {"true": unsloth}, strict_map: true}
  - {value: hf, default: true, source: toyfw/train.py:1}
detect:
  requires: [base]
  signals:
    - {key: base, weight: 2}
    - {key: mbs, weight: 3}
model:
  - {key: base}
references:
  - {key: ds, format: toypart, description: a part file}
settings:
  method:
    - {value: qlora, when: {adapter: lora, bits: 4}}
    - {key: adapter, map: {lora: lora, none: full}, strict_map: true}
    - {value: full, default: true, source: toyfw/config.py:10}
  batch_size:
    - {key: mbs}
    - {value: 3, default: true, since: "2.0", source: toyfw/config.py:20 (2.0 and later)}
    - {value: 5, default: true, until: "2.0", source: toyfw/config.py:20 (before 2.0)}
  seq_len:
    - {key: tokens, match: '^(\\d+)tok$'}
  world_size:
    - {key: procs, divide_by: machines}
  gradient_checkpointing:
    - {key: gc, when: [{key: gc_kind, in: [plain, null]}]}
    - {key: gc_kind, when: [{key: gc, truthy: true}], map: {fancy: unsloth}}
extras:
  gradient_accumulation_steps:
    - {key: accum}
unmodelled:
  - {key: packing, why: packed batches vary in length}
ignored: [lr, data]
write:
  batch_size: {"*": {mbs: "{value}"}}
  method: {qlora: {adapter: lora, bits: 4}}
"""

TOYPART = """\
schema_version: 1
format: toypart
part: true
description: a part file (like a DeepSpeed config)
framework: {name: partfw, version: "1.0", source: partfw/config.py}
detect:
  signals:
    - {key: stage, weight: 5}
settings:
  strategy:
    - {key: stage, map: {"3": zero3, "2": zero2}}
  batch_size:
    - {key: micro, skip: [auto]}
  offload:
    - {value: none, default: true, source: partfw/config.py:5}
ignored: [fp16]
"""


@pytest.fixture
def formats(tmp_path) -> Formats:
    folder = tmp_path / "formats"
    folder.mkdir()
    (folder / "toy.yaml").write_text(TOY)
    (folder / "toypart.yaml").write_text(TOYPART)
    return Formats.load(folder)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    return p


LLAMA = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4}


def test_keys_rules_and_origins(tmp_path, formats):
    path = _write(tmp_path, "run.yaml", """\
        base: org/model
        adapter: lora
        bits: 4
        mbs: 2
        tokens: 512tok
        accum: 8
        lr: 0.1
        """)
    r = read_recipe(path, formats=formats)
    assert r.format == "toy" and r.framework == "toyfw" and r.framework_version == "2.0"
    assert r.model == "org/model" and r.origins["model"].line == 1
    # adapter lora + bits 4: the first method rule's conditions hold -> qlora, placed at its first condition (adapter, line 2)
    assert r.settings["method"] == "qlora"
    assert (r.origins["method"].kind, r.origins["method"].key, r.origins["method"].line) == ("recipe", "adapter", 2)
    assert r.settings["batch_size"] == 2 and r.origins["batch_size"].line == 4
    assert r.settings["seq_len"] == 512  # the regex group of "512tok"
    assert r.extras == {"gradient_accumulation_steps": 8}
    assert r.profile == "hf" and r.origins["profile"].kind == "framework default"
    # not in the recipe: vramwise's own default, said so
    assert r.settings["lora_rank"] == 16 and r.origins["lora_rank"].kind == "vramwise default"
    assert r.warnings == ()
    assert r.origins["batch_size"].describe() == f"{path}:4 mbs"


def test_framework_defaults_follow_the_version(tmp_path, formats):
    path = _write(tmp_path, "run.yaml", "base: org/model\nadapter: none\n")
    r = read_recipe(path, formats=formats)
    # 2.0 (the file's version): the since-2.0 default, 3
    assert r.settings["batch_size"] == 3
    o = r.origins["batch_size"]
    assert (o.kind, o.framework, o.version, o.source) == ("framework default", "toyfw", "2.0", "toyfw/config.py:20 (2.0 and later)")
    # an older version named with framework=: the until-2.0 default, 5
    old = read_recipe(path, formats=formats, framework="toy@1.9")
    assert old.settings["batch_size"] == 5 and old.origins["batch_size"].version == "1.9"
    assert read_recipe(path, formats=formats, framework="toy-alias").format == "toy"


def test_map_strict_and_unknown_values_warn(tmp_path, formats):
    path = _write(tmp_path, "run.yaml", "base: m\nadapter: prefix\nuse_unsloth: maybe\n")
    r = read_recipe(path, formats=formats)
    # "prefix" is not in the strict map: the rule gives nothing (a warning) and the framework default (full) applies
    assert r.settings["method"] == "full" and r.origins["method"].kind == "framework default"
    assert any("adapter = 'prefix' is not a value vramwise knows for method" in w for w in r.warnings)
    assert any(":3: use_unsloth" in w for w in r.warnings) and r.profile == "hf"


def test_conditions_truthy_and_in(tmp_path, formats):
    plain = read_recipe(_write(tmp_path, "a.yaml", "base: m\ngc: true\n"), formats=formats)
    assert plain.settings["gradient_checkpointing"] == "true"  # gc_kind absent counts as null: in [plain, null]
    fancy = read_recipe(_write(tmp_path, "b.yaml", "base: m\ngc: true\ngc_kind: fancy\n"), formats=formats)
    assert fancy.settings["gradient_checkpointing"] == "unsloth" and fancy.origins["gradient_checkpointing"].line == 3


def test_divide_by(tmp_path, formats):
    r = read_recipe(_write(tmp_path, "a.yaml", "base: m\nprocs: 16\nmachines: 2\n"), formats=formats)
    assert r.settings["world_size"] == 8  # 16 processes / 2 machines
    with pytest.raises(RecipeError, match=r"a.yaml:2: procs \(15\) is not a multiple of machines \(2\)"):
        read_recipe(_write(tmp_path, "a.yaml", "base: m\nprocs: 15\nmachines: 2\n"), formats=formats)


def test_a_referenced_part_and_precedence(tmp_path, formats):
    _write(tmp_path, "configs/ds.json", json.dumps({"stage": 3, "micro": "auto", "fp16": {"enabled": True}}, indent=1))
    path = _write(tmp_path, "run.yaml", "base: m\nds: configs/ds.json\nprocs: 4\nmachines: 1\n")
    r = read_recipe(path, formats=formats)
    assert r.settings["strategy"] == "zero3" and r.origins["strategy"].file == str(tmp_path / "configs/ds.json")
    assert r.origins["strategy"].line == 2  # "stage" is on the JSON's second line
    # micro is "auto" (skipped): the main recipe says nothing either, so the main framework's default (3) applies
    assert r.settings["batch_size"] == 3 and r.origins["batch_size"].framework == "toyfw"
    assert [f for f, _ in r.parts] == ["toy", "toypart"]
    # the main recipe's own key wins over the part's
    _write(tmp_path, "configs/ds.json", json.dumps({"stage": 2, "micro": 6}))
    r2 = read_recipe(_write(tmp_path, "run2.yaml", "base: m\nds: configs/ds.json\nmbs: 1\n"), formats=formats)
    assert r2.settings["batch_size"] == 1 and r2.settings["strategy"] == "zero2"
    # no batch key in the main recipe: the part's 6
    r3 = read_recipe(_write(tmp_path, "run3.yaml", "base: m\nds: configs/ds.json\n"), formats=formats)
    assert r3.settings["batch_size"] == 6


def test_inline_part_and_parts_given_together(tmp_path, formats):
    r = read_recipe({"base": "m", "ds": {"stage": 2}}, formats=formats)
    assert r.settings["strategy"] == "zero2" and r.origins["strategy"].file is None
    part = _write(tmp_path, "ds.json", '{"stage": 3}')
    both = read_recipe([{"base": "m"}, part], formats=formats)
    assert both.settings["strategy"] == "zero3" and [f for f, _ in both.parts] == ["toy", "toypart"]


def test_missing_reference_names_file_line_and_key(tmp_path, formats):
    path = _write(tmp_path, "run.yaml", "base: m\n\nds: nowhere.json\n")
    with pytest.raises(RecipeError) as info:
        read_recipe(path, formats=formats)
    assert str(info.value).startswith(f"{path}:3: ds: the toypart file 'nowhere.json' does not exist")


def test_wrong_type_names_file_line_and_key(tmp_path, formats):
    path = _write(tmp_path, "run.yaml", "base: m\nmbs: many\n")
    with pytest.raises(RecipeError) as info:
        read_recipe(path, formats=formats)
    assert str(info.value).startswith(f"{path}:2: mbs: batch_size must be a positive integer")


def test_unknown_keys_and_unmodelled_keys_warn(tmp_path, formats):
    path = _write(tmp_path, "run.yaml", "base: m\nlr: 1\ndata: {path: x, split: train}\nfoo: 1\nnested: {bar: 2}\npacking: true\n")
    r = read_recipe(path, formats=formats)
    assert f"{path}:4: unknown toy key 'foo': not used" in r.warnings
    assert f"{path}:5: unknown toy key 'nested.bar': not used" in r.warnings
    assert f"{path}:6: packing = true changes memory but is not modelled: packed batches vary in length" in r.warnings
    assert not any("'lr'" in w or "data" in w for w in r.warnings)  # ignored keys cover their subkeys


def test_unknown_and_ambiguous_formats(tmp_path, formats):
    with pytest.raises(RecipeError, match=r"x.yaml:1: not a recipe of a format vramwise reads \(formats: toy, toypart\)"):
        read_recipe(_write(tmp_path, "x.yaml", "hello: world\n"), formats=formats)
    with pytest.raises(SettingsError, match="unknown recipe format 'nope'"):
        read_recipe({"base": "m"}, formats=formats, framework="nope")
    # base (2) + mbs (3) = 5 for toy, stage 5 for toypart: a tie is named, never guessed
    with pytest.raises(RecipeError, match="reads as toy and as toypart alike"):
        read_recipe({"base": "m", "mbs": 1, "stage": 3}, formats=formats)


def test_bad_files(tmp_path, formats):
    with pytest.raises(RecipeError, match="no such file"):
        read_recipe(tmp_path / "absent.yaml", formats=formats)
    with pytest.raises(RecipeError, match=r"bad.yaml:2: not valid YAML or JSON"):
        read_recipe(_write(tmp_path, "bad.yaml", "base: m\n  - : [\n"), formats=formats)
    with pytest.raises(RecipeError, match="a recipe is a mapping"):
        read_recipe(_write(tmp_path, "list.yaml", "- 1\n- 2\n"), formats=formats)
    with pytest.raises(RecipeError, match="empty"):
        read_recipe(_write(tmp_path, "empty.yaml", "# nothing\n"), formats=formats)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8))
    with pytest.raises(RecipeError, match="expands to more than"):
        read_recipe(_write(tmp_path, "bomb.yaml", "base: m\n" + bomb), formats=formats)
    # an anchor used once is fine (recipes use them)
    r = read_recipe(_write(tmp_path, "anchor.yaml", "base: &b org/m\nlr: *b\n"), formats=formats)
    assert r.model == "org/m"


def test_overrides(tmp_path, formats):
    path = _write(tmp_path, "run.yaml", "base: m\nmbs: 2\naccum: 1\n")
    r = read_recipe(path, formats=formats, overrides={"batch_size": "4", "model": "other", "profile": "torchtune",
                                                     "gradient_accumulation_steps": 2})
    # --set values arrive as text: batch_size reads "4" as 4
    assert r.settings["batch_size"] == 4 and r.origins["batch_size"].kind == "override"
    assert r.model == "other" and r.profile == "torchtune" and r.extras["gradient_accumulation_steps"] == 2
    with pytest.raises(SettingsError, match="unknown override.*batchsize"):
        read_recipe(path, formats=formats, overrides={"batchsize": 4})
    with pytest.raises(RecipeError, match="override batch_size: batch_size must be a positive integer"):
        read_recipe(path, formats=formats, overrides={"batch_size": 0})


def test_write_back_in_the_recipes_keys(tmp_path, formats):
    r = read_recipe(_write(tmp_path, "run.yaml", "base: m\nmbs: 8\naccum: 1\n"), formats=formats)
    # batch_size through the write table, the extra through its plain key rule, method qlora through its table;
    # lora_rank has no key in this format: it is not written, and unwritten names it
    changes = {"batch_size": 1, "gradient_accumulation_steps": 8, "method": "qlora", "lora_rank": 8}
    assert r.write(changes) == {"mbs": 1, "accum": 8, "adapter": "lora", "bits": 4}
    assert r.unwritten(changes) == ("lora_rank",)


def test_changes_made_together_are_written_together(tmp_path):
    folder = tmp_path / "formats"
    folder.mkdir()
    (folder / "toy.yaml").write_text(TOY.replace(
        "  method: {qlora: {adapter: lora, bits: 4}}",
        "  method: {qlora: {adapter: lora, bits: 4}}\n"
        "  strategy: {zero3: {ds: zero3.json}}\n"
        "  strategy+offload: {zero3+parameters: {ds: zero3_offload.json}}"))
    (folder / "toypart.yaml").write_text(TOYPART)
    r = read_recipe({"base": "m"}, formats=Formats.load(folder))
    # the joined entry takes both changes; alone, strategy uses its own entry and offload has none
    assert r.write({"strategy": "zero3", "offload": "parameters"}) == {"ds": "zero3_offload.json"}
    assert r.write({"strategy": "zero3"}) == {"ds": "zero3.json"}
    assert r.unwritten({"strategy": "zero3", "offload": "optimizer"}) == ("offload",)


def test_model_paths_are_read_from_the_recipes_folder(tmp_path, formats):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt/config.json").write_text(json.dumps(LLAMA))
    r = read_recipe(_write(tmp_path, "run.yaml", "base: ckpt\nmbs: 2\nadapter: lora\n"), formats=formats)
    assert r.model == str(tmp_path / "ckpt")
    # the estimate of the recipe is the estimate of its model and settings
    e = vramwise.estimate(r)
    direct = vramwise.estimate(str(tmp_path / "ckpt"), profile="hf", **r.settings)
    assert e.total == direct.total and e.profile == "hf" and e.settings.batch_size == 2
    # explicit arguments win over the recipe's
    assert vramwise.estimate(r, batch_size=1).settings.batch_size == 1
    assert vramwise.estimate(r, profile="unsloth").profile == "unsloth"
    with pytest.raises(SettingsError, match="names no model"):
        vramwise.estimate(read_recipe({"stage": 3}, formats=formats))


def test_a_strategy_the_profile_does_not_model_moves_to_one_that_does(tmp_path, formats):
    r = read_recipe({"base": "m", "ds": {"stage": 3}}, formats=formats, overrides={"world_size": 2})
    assert r.profile == "hf"  # the hf profile models zero3 (formulas/strategies/strategies.yaml)
    moved = read_recipe({"base": "m", "use_unsloth": True, "ds": {"stage": 3}}, formats=formats,
                        overrides={"world_size": 2})
    assert moved.profile == "hf" and any("the unsloth profile does not model strategy zero3" in w for w in moved.warnings)
    one = read_recipe({"base": "m", "ds": {"stage": 3}}, formats=formats)
    assert any("on 1 GPU: the recipe does not say how many" in w for w in one.warnings)


def test_bundled_formats_validate_and_reference_each_other():
    folder = Path(str(__import__("importlib").resources.files("vramwise.frameworks")))
    checked = Formats.load(folder, validate=True)
    assert set(checked.names()) == set(bundled_formats().names())
    assert {"axolotl", "llama_factory", "torchtune", "litgpt"} <= set(checked.names())


def test_a_format_file_that_breaks_its_schema_is_named_with_its_line(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "toy.yaml").write_text(TOY.replace("  batch_size:\n    - {key: mbs}", "  batch_size:\n    - {key: mbs, wat: 1}"))
    with pytest.raises(FileFormatError) as info:
        Formats.load(folder)
    assert f"{folder / 'toy.yaml'}:" in str(info.value) and "wat" in str(info.value)
    (folder / "toy.yaml").write_text(TOY.replace("  seq_len:", "  seq_length:"))
    with pytest.raises(FileFormatError, match="'seq_length' is not a vramwise setting"):
        Formats.load(folder)


def test_a_winning_rule_of_a_part_beats_the_main_recipes_key(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "toy.yaml").write_text(TOY.replace("  seq_len:\n", "  optimizer:\n    - {key: optim}\n  seq_len:\n"))
    # the part's optimizer section wins (like DeepSpeed's over the Trainer's optim); its batch key does not
    (folder / "toypart.yaml").write_text(TOYPART.replace(
        "  offload:\n", "  optimizer:\n    - {key: opt.type, map: {AdamW: adamw_torch_fused}, wins: true}\n  offload:\n"))
    formats = Formats.load(folder)
    r = read_recipe({"base": "m", "optim": "sgd", "mbs": 2, "ds": {"stage": 3, "micro": 5, "opt": {"type": "AdamW"}}},
                    formats=formats)
    assert r.settings["optimizer"] == "adamw_torch_fused" and r.settings["batch_size"] == 2


def test_unknown_keys_ignored_by_a_format_that_says_so(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "toy.yaml").write_text(TOY)
    (folder / "toypart.yaml").write_text(TOYPART.replace("part: true\n", "part: true\nunknown_keys: ignore\n"))
    r = read_recipe({"base": "m", "ds": {"stage": 3, "hidden_size": 4096}}, formats=Formats.load(folder))
    assert not any("hidden_size" in w for w in r.warnings)


def test_lora_on_a_4bit_base_is_qlora_and_a_missing_key_has_no_line(tmp_path, formats):
    path = _write(tmp_path, "run.yaml", "base: m\nadapter: lora\n")
    r = read_recipe(path, formats=formats, overrides={"load_in_4bit": True})
    # adapter lora (line 2) with a 4-bit base (the override): QLoRA, placed where the 4-bit base comes from
    assert r.settings["method"] == "qlora" and r.origins["method"].kind == "override"
    # no tokens key: the format could give the sequence length and the recipe does not, which is said
    assert any("the recipe gives no sequence length: vramwise's default 2048" in w for w in r.warnings)
    # a method given over the recipe is kept as given
    r2 = read_recipe(path, formats=formats, overrides={"method": "lora", "load_in_4bit": True})
    assert r2.settings["method"] == "lora"
    # a key the file does not have has no line (it used to take the line of its nearest parent)
    from vramwise.recipes.reader import _load_file

    part = _load_file(path, str(path))
    assert part.line("adapter") == 2 and part.line("adapter.sub") is None and part.line("absent") is None
