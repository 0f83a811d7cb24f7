"""Stack facts live in per-stack overlays (families/stacks/<stack>/<family>.yaml), merged into their
family by the loader: the values, their inheritance and their file:line provenance, and the errors that
keep a stack's facts out of the family files and a foreign fact out of a stack's overlay."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest
import yaml

import vramwise
from vramwise.errors import FileFormatError
from vramwise.models.stack_manifest import stack_manifest

FAMILIES = Path(str(resources.files("vramwise.families")))
GEMMA = {"model_type": "gemma", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16}


def _line_of(path: Path, key: str) -> int:
    """1-based line of ``  key:`` (a fact entry) in ``path``, read from the text itself."""
    return next(k for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if line == f"  {key}:")


def test_no_family_file_holds_a_stack_fact():
    prefixes = tuple(s.facts_prefix for s in stack_manifest().stacks.values())
    for path in sorted(FAMILIES.glob("*.yaml")):
        facts = yaml.safe_load(path.read_text(encoding="utf-8")).get("facts") or {}
        assert not [f for f in facts if f.startswith(prefixes)], path.name


def test_the_overlays_hold_every_stack_fact_of_the_families():
    # the counts the families held before the move (the project's issue counts 32 torchtune_, 16 litgpt_
    # and 42 transformers_ fact entries); each overlay holds its own stack's facts only
    counts = {}
    for stack in stack_manifest().stacks.values():
        for path in sorted((FAMILIES / "stacks" / stack.name).glob("*.yaml")):
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
            assert (data["stack"], data["family"]) == (stack.name, path.stem)
            assert all(f.startswith(stack.facts_prefix) for f in data["facts"]), path
            assert (FAMILIES / f"{path.stem}.yaml").is_file(), path
            counts[stack.name] = counts.get(stack.name, 0) + len(data["facts"])
    assert counts == {"hf": 42, "torchtune": 32, "litgpt": 16}


def test_an_overlay_fact_is_read_and_named_at_its_file_and_line():
    spec = vramwise.load_model(GEMMA)
    # families/stacks/litgpt/gemma.yaml: default "GemmaMLP"; torchtune/gemma.yaml: default "gemma"
    assert spec.facts["litgpt_mlp_class_name"] == "GemmaMLP" and spec.facts["torchtune_builder"] == "gemma"
    for stack, fact in (("litgpt", "litgpt_mlp_class_name"), ("torchtune", "torchtune_builder")):
        path = FAMILIES / "stacks" / stack / "gemma.yaml"
        origin = spec.fact_origins[fact]
        assert origin.how == "default"
        assert origin.where == f"families/stacks/{stack}/gemma.yaml:{_line_of(path, fact)}:3"
    # an inherited overlay fact names the ancestor's overlay: gemma has no hf overlay, decoder's says
    # every kernel runs
    origin = spec.fact_origins["transformers_attention"]
    assert origin.where == f"families/stacks/hf/decoder.yaml:{_line_of(FAMILIES / 'stacks/hf/decoder.yaml', 'transformers_attention')}:3"
    assert spec.facts["transformers_attention"] == ["eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"]


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "families"
    shutil.copytree(FAMILIES, dst)
    return dst


def test_a_child_family_inherits_its_parents_overlay_and_its_own_overrides_it(tmp_path):
    fams = _copy(tmp_path)
    (fams / "toy.yaml").write_text("schema_version: 1\nfamily: toy\ndescription: x\nsource: y\nextends: gemma\nmodel_types: [toy]\n")
    reg = vramwise.Registry(fams, validate=True)
    spec = reg.model({**GEMMA, "model_type": "toy"})
    assert spec.facts["torchtune_builder"] == "gemma"  # gemma's overlay, inherited
    assert spec.fact_origins["torchtune_builder"].where.startswith(f"{fams / 'stacks/torchtune/gemma.yaml'}:")
    (fams / "stacks" / "torchtune" / "toy.yaml").write_text(
        "schema_version: 1\nstack: torchtune\nfamily: toy\nfacts:\n  torchtune_builder:\n    default: llama3\n")
    spec = vramwise.Registry(fams, validate=True).model({**GEMMA, "model_type": "toy"})
    assert spec.facts["torchtune_builder"] == "llama3"
    assert spec.fact_origins["torchtune_builder"].where == f"{fams / 'stacks/torchtune/toy.yaml'}:5:3"
    # the fields the child does not write stay the parent's (the description, from gemma's overlay)
    rule = next(r for r in vramwise.Registry(fams).family("toy").facts if r.name == "torchtune_builder")
    assert rule.description.startswith("torchtune's gemma component builders")


def test_a_stack_fact_in_a_family_file_says_where_it_belongs(tmp_path):
    fams = _copy(tmp_path)
    text = (fams / "gemma.yaml").read_text()
    text = text.replace("facts:\n", "facts:\n  litgpt_bias:\n    description: x\n    default: true\n", 1)
    (fams / "gemma.yaml").write_text(text)
    line = _line_of(fams / "gemma.yaml", "litgpt_bias")
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(fams).family("gemma")
    assert str(info.value) == (
        f"{fams / 'gemma.yaml'}:{line}:3: $.facts.litgpt_bias: fact 'litgpt_bias' belongs to the litgpt stack "
        "(prefix 'litgpt_', formulas/stacks.yaml): write it in families/stacks/litgpt/gemma.yaml")


@pytest.mark.parametrize("folder,name,text,needle", [
    ("litgpt", "gemma", "schema_version: 1\nstack: litgpt\nfamily: gemma\nfacts:\n  torchtune_x: {default: 1}\n",
     "gemma.yaml:5:3: $.facts.torchtune_x: fact 'torchtune_x' is not the litgpt stack's: its facts start with 'litgpt_'"),
    ("litgpt", "gemma", "schema_version: 1\nstack: hf\nfamily: gemma\nfacts:\n  litgpt_x: {default: 1}\n",
     "gemma.yaml:2:8: $.stack: stack 'hf' differs from the file's folder 'litgpt'"),
    ("litgpt", "gemma", "schema_version: 1\nstack: litgpt\nfamily: gemma\nfacts:\n  litgpt_x: {default: 1, units: flag}\n",
     "gemma.yaml:5:26: $.facts.litgpt_x.units: unknown key 'units'"),
])
def test_a_broken_overlay_is_named_with_its_position(tmp_path, folder, name, text, needle):
    fams = _copy(tmp_path)
    (fams / "stacks" / folder / f"{name}.yaml").write_text(text)
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(fams, validate=True).family(name)
    assert f"{fams / 'stacks' / folder}/{needle}" in str(info.value)


def test_an_overlay_of_no_stack_or_no_family_is_refused_when_the_registry_is_made(tmp_path):
    fams = _copy(tmp_path)
    (fams / "stacks" / "axolotl").mkdir()
    (fams / "stacks" / "axolotl" / "llama.yaml").write_text("schema_version: 1\n")
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(fams)
    assert "axolotl/llama.yaml:1:1: $: the folder names no stack of formulas/stacks.yaml ('axolotl'; known: hf, torchtune, litgpt)" in str(info.value)
    shutil.rmtree(fams / "stacks" / "axolotl")
    (fams / "stacks" / "hf" / "nosuch.yaml").write_text("schema_version: 1\n")
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(fams)
    assert "hf/nosuch.yaml:1:1: $: no family 'nosuch' to add the hf stack's facts to" in str(info.value)
