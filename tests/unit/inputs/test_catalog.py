"""The offline model catalog: its file, the lookup rule (local path > catalog > hub), and `vramwise catalog`."""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stdout
from importlib import resources

import pytest

import vramwise
from vramwise.inputs import config as _source
from vramwise.surfaces.cli import main as cli
from vramwise.inputs.catalog import find_model, list_models

from helpers import SHARED

SETTINGS_GRID = [
    {},
    {"method": "lora", "batch_size": 2, "seq_len": 4096, "lora_rank": 64},
    {"method": "full", "gradient_checkpointing": "true", "optimizer": "adamw_torch"},
    {"method": "inference", "batch_size": 8, "seq_len": 8192},
]


def _data() -> dict:
    return json.loads(resources.files("vramwise.catalog").joinpath("models.json").read_text(encoding="utf-8"))


@pytest.fixture
def no_hub(monkeypatch):
    """Any attempt to reach the hub fails the test."""
    def refuse(repo, trust):  # pragma: no cover - reached only on a bug
        raise AssertionError(f"the hub was asked for {repo!r}")

    monkeypatch.setattr(_source, "_read_hub", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_catalog_file_matches_its_schema():
    import jsonschema

    schema = json.loads(resources.files("vramwise.schemas").joinpath("catalog-1.schema.json").read_text())
    jsonschema.validate(_data(), schema)


def test_catalog_holds_the_corpus_and_flagship_sizes():
    ids = {m["id"] for m in _data()["models"]}
    names = ids | {a for m in _data()["models"] for a in m["aliases"]}
    assert len(ids) >= 80
    for hub_id in ("meta-llama/Llama-3.1-8B", "Qwen/Qwen3-8B", "mistralai/Mixtral-8x7B-v0.1", "deepseek-ai/DeepSeek-V3"):
        assert hub_id in ids
    for example in ("qwen3-8b", "mixtral-8x7b", "falcon-7b", "bloom-560m"):  # families' flagship examples
        assert example in names
    kinds = {m["kind"] for m in _data()["models"]}
    assert kinds == {"hub config", "family example"}


def test_every_entry_estimates_offline_and_equals_its_config(no_hub):
    for m in _data()["models"]:
        for settings in SETTINGS_GRID[:2]:
            by_name = vramwise.estimate(m["id"], **settings)
            by_dict = vramwise.estimate(m["config"], **settings)
            assert by_name.to_dict() == by_dict.to_dict(), m["id"]
        assert vramwise.load_model(m["id"]).params_total == m["params"]


def test_kept_fields_reproduce_the_full_shared_configs(no_hub):
    """Each entry keeps only the fields families read; the estimate equals the full config's (every figure)."""
    import csv

    checked = 0
    for folder in ("configs", "configs_extra"):
        index = SHARED / folder / "INDEX.tsv"
        if not index.is_file():
            continue
        with index.open(encoding="utf-8") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                entry = find_model(row["hub_id"])
                path = SHARED / folder / row["file"]
                if entry is None or not path.is_file() or not entry.source.startswith(f"config.json of {row['hub_id']} ("):
                    continue
                full = json.loads(path.read_text(encoding="utf-8"))
                for settings in SETTINGS_GRID:
                    for profile in ("unsloth", "hf"):
                        if profile == "hf" and settings.get("method") == "inference":
                            continue
                        a = vramwise.estimate(row["hub_id"], profile=profile, **settings).to_dict()
                        b = vramwise.estimate(full, profile=profile, **settings).to_dict()
                        assert a == b, (row["hub_id"], profile, settings)
                checked += 1
    if not checked:
        pytest.skip("the shared config corpus (../shared) is not here")
    assert checked >= 70


def test_llama_31_8b_by_hub_id_needs_no_network(no_hub):
    e = vramwise.estimate("meta-llama/Llama-3.1-8B")
    assert e.to_dict() == vramwise.estimate("examples/llama-3.1-8b.json").to_dict()
    assert vramwise.load_model("meta-llama/Llama-3.1-8B").source == "catalog:meta-llama/Llama-3.1-8B"


def test_lookup_is_exact_then_case_insensitive_and_aliases(no_hub):
    assert find_model("meta-llama/Llama-3.1-8B").id == "meta-llama/Llama-3.1-8B"
    assert find_model("META-LLAMA/llama-3.1-8b").id == "meta-llama/Llama-3.1-8B"
    assert find_model("qwen3-8b").id == "Qwen/Qwen3-8B"  # a family example of the same dimensions is an alias
    assert find_model("no/such-model") is None
    with pytest.raises(vramwise.ConfigError, match="not in the model catalog"):
        vramwise.estimate("catalog:no/such-model")


def test_a_local_path_wins_over_the_catalog(tmp_path, monkeypatch, no_hub):
    folder = tmp_path / "meta-llama" / "Llama-3.1-8B"
    folder.mkdir(parents=True)
    cfg = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": 2, "num_attention_heads": 4}
    (folder / "config.json").write_text(json.dumps(cfg))
    monkeypatch.chdir(tmp_path)
    assert vramwise.estimate("meta-llama/Llama-3.1-8B").to_dict() == vramwise.estimate(cfg).to_dict()


def test_hub_prefix_and_cli_hub_flag_go_to_the_hub(monkeypatch):
    asked = []

    def fake_hub(repo, trust):
        asked.append(repo)
        return json.loads((resources.files("vramwise.catalog") / "models.json").read_text())["models"][0]["config"]

    monkeypatch.setattr(_source, "_read_hub", fake_hub)
    vramwise.estimate("hub:meta-llama/Llama-3.1-8B")
    assert asked == ["meta-llama/Llama-3.1-8B"]
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["estimate", "meta-llama/Llama-3.1-8B", "--hub", "--json"]) == 0
    assert asked == ["meta-llama/Llama-3.1-8B"] * 2
    with pytest.raises(vramwise.ConfigError, match="give a hub id"):
        vramwise.estimate("hub:not a hub id")


def test_cli_estimate_json_equals_the_library(no_hub):
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["estimate", "meta-llama/Llama-3.1-8B", "--batch-size", "8", "--json"]) == 0
    data = json.loads(out.getvalue())
    assert data["total"] == vramwise.estimate("meta-llama/Llama-3.1-8B", batch_size=8).total


def test_cli_catalog_lists_and_searches(capsys):
    assert cli.main(["catalog", "qwen3", "moe"]) == 0
    text = capsys.readouterr().out
    assert "Qwen/Qwen3-30B-A3B" in text and "qwen3_moe" in text and "Qwen/Qwen3-8B " not in text
    assert cli.main(["catalog", "--json", "llama", "3.1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [m["id"] for m in data["models"]] == [m.id for m in list_models("llama 3.1")]
    assert "meta-llama/Llama-3.1-8B" in [m["id"] for m in data["models"]]
    assert "config" not in data["models"][0]
    assert cli.main(["catalog", "zzz-nothing"]) == 0
    assert "no model of the catalog matches" in capsys.readouterr().out


def test_catalog_file_is_what_the_script_generates_now():
    """A family that learns a new field or gains a flagship example changes the catalog: a stale file fails.
    (That the kept fields give each full config's estimate is the script's own check when it writes the
    file, and test_kept_fields_reproduce_the_full_shared_configs here: this test does not redo it.)"""
    import importlib.util
    from pathlib import Path

    if not (SHARED / "configs" / "INDEX.tsv").is_file():
        pytest.skip("the shared config corpus (../shared) is not here")
    repo = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("vramwise_build_catalog", repo / "scripts" / "build_catalog.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    text = script.dump(script.build(SHARED, verify=False))
    on_disk = (repo / "catalog" / "models.json").read_text(encoding="utf-8")
    assert on_disk == text, "catalog/models.json is out of date: run python scripts/build_catalog.py"


# -- a hub id the catalog lacks, when the hub cannot be reached --------------------------------------

def test_near_models_put_the_same_model_without_its_variant_words_first():
    from vramwise.inputs.catalog import find_model, near_models

    # Qwen/Qwen3-30B-A3B-Instruct-2507-FP8 is the FP8 checkpoint of Qwen/Qwen3-30B-A3B-Instruct-2507 (same
    # architecture): without the organisation, "instruct" and "fp8" both read "qwen3-30b-a3b-2507", so the
    # bf16 model comes first
    assert find_model("Qwen/Qwen3-30B-A3B-Instruct-2507") is not None
    assert find_model("Qwen/Qwen3-30B-A3B-Instruct-2507-FP8") is None
    assert near_models("Qwen/Qwen3-30B-A3B-Instruct-2507-FP8")[0] == "Qwen/Qwen3-30B-A3B-Instruct-2507"
    # "instruct" and "awq" are variant words alike: the base and its chat tuning tie, and the ids' order decides
    assert near_models("someone/Qwen2.5-32B-AWQ")[0] == "Qwen/Qwen2.5-32B"
    assert near_models("zzzz/qqqq-xyzzy") == []  # nothing close: no guess
    assert near_models("x" * 301) == []


@pytest.mark.parametrize("name,params", [
    ("Qwen/Qwen2.5-14B-Instruct", "--params 14B"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", "--params 8B"),
    ("google/gemma-3-27b-it", "--params 27B"),
    ("Qwen/Qwen1.5-0.5B", "--params 0.5B"),
    ("mistralai/Mixtral-8x7B-v0.1", None),  # 8x7B is a product of experts, not the parameter count
    ("allenai/OLMoE-1B-7B-0924", None),  # two sizes (active and total): no guess
])
def test_ways_on_name_the_catalog_a_local_config_the_size_and_going_online(name, params):
    from vramwise.inputs.catalog import ways_on

    text = ways_on(name)
    assert "a local config.json or model folder as MODEL" in text and "HF_HUB_OFFLINE=1" in text
    if params is None:
        assert "--params" not in text
    else:
        assert f"{params} (an estimate from the size alone)" in text
