"""catalog/sources: the project's own config.json files for the offline catalog (read by scripts/build_catalog.py).

Every row of catalog/sources/INDEX.tsv names where its config was found and at least one independent
cross-check; every config resolves, and the catalog holds it under its hub id with the parameter count it
resolves to. The script's own check proves the kept fields give the full config's estimate; here a few counts
are compared with independent sources (keras-hub's published preset sizes, transformers' model built on the
meta device).
"""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

import vramwise
from vramwise.inputs.catalog import find_model

from helpers import SHARED, every_nth, slow_unless

REPO = Path(__file__).resolve().parents[3]
SOURCES = REPO / "catalog" / "sources"
KINDS = ("verbatim copy of the hub config", "transcription of the hub config",
         "architecture keys copied from the hub config", "reconstructed")


def _rows() -> list[dict]:
    with (SOURCES / "INDEX.tsv").open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def _config(row: dict) -> dict:
    return json.loads((SOURCES / row["file"]).read_text(encoding="utf-8"))


def _script():
    spec = importlib.util.spec_from_file_location("vramwise_build_catalog_sources", REPO / "scripts" / "build_catalog.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ROWS = _rows()


def test_the_index_has_the_shared_corpus_columns_and_one_row_a_file():
    with (SOURCES / "INDEX.tsv").open(encoding="utf-8") as fh:
        header = fh.readline().rstrip("\n").split("\t")
    assert header == ["file", "hub_id", "model_type", "kind", "source", "cross_checks", "notes"]
    files = sorted(p.name for p in SOURCES.glob("*.json"))
    assert files == sorted(r["file"] for r in ROWS)  # no config without a row, no row without its file
    assert len({r["hub_id"] for r in ROWS}) == len(ROWS)
    assert len(ROWS) >= 15


# every entry in .ci/run's slow tier, every fourth in the default run
@pytest.mark.parametrize("row", slow_unless(ROWS, every_nth(4)), ids=[r["hub_id"] for r in ROWS])
def test_every_entry_has_a_source_a_cross_check_and_resolves(row):
    assert row["file"] == row["hub_id"].replace("/", "__") + ".json"
    assert row["kind"].startswith(KINDS), row["kind"]
    assert len(row["source"]) > 20 and len(row["cross_checks"]) > 20  # where it was found, and what agrees with it
    config = _config(row)
    assert config["model_type"] == row["model_type"]
    spec = vramwise.load_model(config)
    entry = find_model(row["hub_id"])
    assert entry is not None and entry.id == row["hub_id"]
    assert entry.kind == "hub config" and entry.source.startswith(f"config.json of {row['hub_id']} ({row['kind']}: ")
    assert entry.params == spec.params_total
    assert vramwise.estimate(row["hub_id"], method="qlora").to_dict() == vramwise.estimate(config, method="qlora").to_dict()


def test_no_entry_repeats_the_shared_corpus():
    shared = set()
    for folder in ("configs", "configs_extra"):
        index = SHARED / folder / "INDEX.tsv"
        if index.is_file():
            with index.open(encoding="utf-8") as fh:
                shared |= {r["hub_id"] for r in csv.DictReader(fh, delimiter="\t")}
    if not shared:
        pytest.skip("the shared config corpus (../shared) is not here")
    assert not shared & {r["hub_id"] for r in ROWS}


# Parameter counts published by keras-hub (keras-team/keras-hub at 71453d0, the "params" of each preset's
# metadata), an independent implementation of the same checkpoints.
KERAS_HUB_PARAMS = {
    "meta-llama/Meta-Llama-3-8B": 8_030_261_248,  # llama3_presets.py llama3_8b_en
    "meta-llama/Meta-Llama-3-8B-Instruct": 8_030_261_248,  # llama3_instruct_8b_en
    "meta-llama/Meta-Llama-3.1-8B": 8_030_261_248,  # llama3.1_8b
    # llama3.2_1b is 1,498,482,688: keras-hub counts the tied output matrix a second time, 128256 x 2048
    "meta-llama/Llama-3.2-1B": 1_498_482_688 - 128256 * 2048,
    "google/gemma-2-2b": 2_614_341_888,  # gemma_presets.py gemma2_2b_en
    "google/gemma-2-9b": 9_241_705_984,  # gemma2_9b_en
    "google/gemma-2-27b": 27_227_128_320,  # gemma2_27b_en (and gemma2_instruct_27b_en)
    "meta-llama/Llama-2-7b-chat-hf": 6_738_415_616,  # llama_presets.py llama2_instruct_7b_en
    "unsloth/Mistral-7B-v0.2": 7_241_732_096,  # mistral_presets.py mistral_7b_en (the same dimensions)
    "mistralai/Mistral-7B-Instruct-v0.2": 7_241_732_096,  # mistral_0.2_instruct_7b_en
    "mistralai/Mistral-7B-v0.3": 7_248_023_552,  # mistral_0.3_7b_en
    "Qwen/Qwen2.5-0.5B": 494_032_768,  # qwen_presets.py qwen2.5_0.5b_en
    "Qwen/Qwen2.5-0.5B-Instruct": 494_032_768,  # qwen2.5_instruct_0.5b_en
    "Qwen/Qwen2.5-72B": 72_706_203_648,  # qwen_presets.py qwen2.5_instruct_72b_en (LitGPT: one entry for both)
    # gemma3_presets.py gemma3_instruct_27b_text is 27,009,002,240 with a 262144-token vocabulary; the hub's text
    # config leaves vocab_size to Gemma3TextConfig's default 262208: 64 more embedding rows of 5376
    "google/gemma-3-27b-it": 27_009_002_240 + 64 * 5376,
    # gemma3_instruct_4b_text and gemma3_instruct_12b_text, with the same 64 rows (hidden 2560 and 3840)
    "google/gemma-3-4b-it": 3_880_099_328 + 64 * 2560,
    "google/gemma-3-12b-it": 11_765_788_416 + 64 * 3840,
}


# Total parameters in the table of EleutherAI/pythia's README.md ("Total params"); the deduplicated models
# have the same shapes
PYTHIA_PARAMS = {"EleutherAI/pythia-14m": 14_067_712, "EleutherAI/pythia-70m-deduped": 70_426_624,
                 "EleutherAI/pythia-410m": 405_334_016, "EleutherAI/pythia-1b-deduped": 1_011_781_632,
                 "EleutherAI/pythia-2.8b": 2_775_208_960, "EleutherAI/pythia-12b": 11_846_072_320}


@pytest.mark.parametrize("hub_id,params", sorted(PYTHIA_PARAMS.items()))
def test_counts_equal_the_pythia_readmes_totals(hub_id, params):
    assert find_model(hub_id).params == params


# Unsloth's uploads (unslothai/unsloth unsloth/models/mapper.py names the checkpoint each re-uploads or quantizes):
# the 16-bit copy is the base's model, the -bnb-4bit one the same model with the quantization_config Unsloth
# writes for a 4-bit load (unsloth/models/loader.py: NF4, double quantization, no skip list)
UNSLOTH_UPLOADS = [("unsloth/llama-3-8b", "meta-llama/Meta-Llama-3-8B"),
                   ("unsloth/llama-3-8b-bnb-4bit", "meta-llama/Meta-Llama-3-8B"),
                   ("unsloth/mistral-7b-v0.3-bnb-4bit", "mistralai/Mistral-7B-v0.3"),
                   ("unsloth/gemma-2b-bnb-4bit", "google/gemma-2b"),
                   ("unsloth/Mixtral-8x7B-v0.1-bnb-4bit", "mistralai/Mixtral-8x7B-v0.1")]


@pytest.mark.parametrize("hub_id,base", UNSLOTH_UPLOADS)
def test_unsloths_uploads_are_their_base_model_and_the_4bit_ones_say_so(hub_id, base):
    row = next(r for r in ROWS if r["hub_id"] == hub_id)
    assert base in row["source"] and "unsloth/models/mapper.py" in row["source"]
    assert find_model(hub_id).params == find_model(base).params
    spec = vramwise.load_model(_config(row))
    if hub_id.endswith("-bnb-4bit"):
        q = _config(row)["quantization_config"]
        assert (q["quant_method"], q["load_in_4bit"], q["bnb_4bit_quant_type"], q["bnb_4bit_use_double_quant"]) == (
            "bitsandbytes", True, "nf4", True)
        assert spec.checkpoint_format == "bnb_4bit"
    else:
        assert "quantization_config" not in _config(row) and spec.checkpoint_format is None


@pytest.mark.parametrize("hub_id,params", sorted(KERAS_HUB_PARAMS.items()))
def test_counts_equal_keras_hubs_published_sizes(hub_id, params):
    assert find_model(hub_id).params == params


@pytest.mark.parametrize("hub_id", ["bigcode/gpt_bigcode-santacoder", "tiiuae/falcon-7b", "bigscience/bloomz-7b1",
                                    "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", "google/gemma-2-2b",
                                    "Qwen/Qwen2.5-1.5B", "HuggingFaceTB/SmolLM2-1.7B", "unsloth/Mistral-7B-v0.2",
                                    "codellama/CodeLlama-7b-hf", "Qwen/Qwen2.5-Coder-1.5B", "Qwen/Qwen2.5-Math-1.5B",
                                    "Qwen/Qwen3-0.6B-Base", "google/gemma-2b-it", "codellama/CodeLlama-70b-hf",
                                    "mistralai/mathstral-7B-v0.1", "microsoft/Phi-4-mini-reasoning",
                                    "Qwen/Qwen3-30B-A3B-Base", "EleutherAI/pythia-1.4b", "tiiuae/falcon-40b-instruct",
                                    "allenai/OLMo-1B-hf", "allenai/OLMo-2-0325-32B", "BSC-LT/salamandra-2b",
                                    "stabilityai/stablelm-3b-4e1t", "mistralai/Ministral-8B-Instruct-2410",
                                    "openai-community/gpt2", "bigcode/starcoder2-7b", "CohereForAI/aya-23-8B",
                                    "unsloth/Qwen2.5-7B-Instruct"])
def test_counts_equal_transformers_model_on_the_meta_device(hub_id):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    row = next(r for r in ROWS if r["hub_id"] == hub_id)
    config = transformers.AutoConfig.for_model(**_config(row))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    # tied weights are one tensor: parameters() yields it once
    assert find_model(hub_id).params == sum(p.numel() for p in model.parameters())


def test_a_row_without_a_cross_check_stops_the_script_naming_its_line(tmp_path):
    script = _script()
    (tmp_path / "x__y.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    header = "\t".join(script.SOURCE_COLUMNS)
    (tmp_path / "INDEX.tsv").write_text(f"{header}\nx__y.json\tx/y\tllama\treconstructed\tsomewhere\t\t\n",
                                        encoding="utf-8")
    with pytest.raises(SystemExit, match=r"INDEX\.tsv:2: column 'cross_checks' is empty"):
        script.read_sources(tmp_path)


def test_a_config_that_is_not_json_stops_the_script_with_its_position(tmp_path):
    script = _script()
    (tmp_path / "x__y.json").write_text('{"model_type": "llama",\n  "hidden_size": }', encoding="utf-8")
    header = "\t".join(script.SOURCE_COLUMNS)
    (tmp_path / "INDEX.tsv").write_text(f"{header}\nx__y.json\tx/y\tllama\treconstructed\tsomewhere\tsomething\t\n",
                                        encoding="utf-8")
    with pytest.raises(SystemExit, match=r"x__y\.json:2:18: "):
        script.read_sources(tmp_path)


def test_the_script_reads_no_sources_when_the_folder_has_no_index(tmp_path):
    assert _script().read_sources(tmp_path) == []
