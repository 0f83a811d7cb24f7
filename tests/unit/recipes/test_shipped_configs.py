"""torchtune's shipped configs (frameworks/torchtune_configs/0.6.1/, vramwise.recipes.shipped): the folder is
what scripts/build_torchtune_configs.py writes from the installed torchtune and ships in the wheel; a config name
on a launch line (``--config llama3_1/70B_lora``) reads that config as the recipe, on the command line and in the
server; an unknown name is one error line with the nearest names; and a torchtune config's header comment
(``#   tune run --nproc_per_node 8 lora_finetune_distributed ...``) is its launch line where none is given.

Every expected setting is read off the config file by hand in the comments (line numbers are the file's own).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import shutil
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import vramwise
from vramwise.errors import RecipeError
from vramwise.recipes.launch import read_launch
from vramwise.recipes.reader import bundled_formats
from vramwise.recipes.shipped import launch_shipped, shipped_config, shipped_names, shipped_versions
from vramwise.rules.datafiles import package_files
from vramwise.surfaces.cli.main import main
from vramwise.surfaces.request import read_body

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "frameworks" / "torchtune_configs" / "0.6.1"
LINE_70B = "tune run --nproc_per_node 8 lora_finetune_distributed --config llama3_1/70B_lora"
SHIPPED_70B = "torchtune 0.6.1's shipped config llama3_1/70B_lora"
#: lora_attn_modules: ['q_proj', 'v_proj', 'output_proj'] with apply_lora_to_mlp: True (torchtune's output_proj is
#: o_proj; w1, w3, w2 are gate_proj, up_proj, down_proj: models/convert_weights.py _FROM_HF)
QVO_MLP = ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _torchtune_installed() -> bool:
    try:
        metadata.distribution("torchtune")
    except metadata.PackageNotFoundError:
        return False
    return importlib.util.find_spec("recipes") is not None


# -- the data folder ----------------------------------------------------------------------------

@pytest.mark.skipif(not _torchtune_installed(), reason="torchtune is not installed (the test extra; .ci/run installs it)")
def test_the_folder_is_what_the_script_writes_from_the_installed_torchtune():
    spec = importlib.util.spec_from_file_location("build_torchtune_configs",
                                                  ROOT / "scripts" / "build_torchtune_configs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert metadata.version("torchtune") == "0.6.1", "frameworks/torchtune.yaml is pinned to torchtune 0.6.1"
    assert module.main(["--check"]) == 0, "run python scripts/build_torchtune_configs.py"


def test_the_folder_holds_the_configs_the_license_and_the_index():
    files = [p for p in CONFIGS.rglob("*.yaml")]
    assert len(files) == 156  # torchtune 0.6.1's wheel: recipes/configs/**/*.yaml
    license_text = (CONFIGS / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("BSD 3-Clause License") and "Copyright 2024 Meta" in license_text
    assert "BSD 3-Clause" in (CONFIGS / "NOTICE").read_text(encoding="utf-8")
    index = json.loads((CONFIGS / "index.json").read_text(encoding="utf-8"))
    assert index["version"] == "0.6.1"
    # torchtune/_recipe_registry.py: llama3_1/70B_lora is listed under lora_finetune_distributed
    assert index["configs"]["llama3_1/70B_lora"] == {"file": "llama3_1/70B_lora.yaml",
                                                     "recipes": ["lora_finetune_distributed"]}
    assert all((CONFIGS / e["file"]).is_file() for e in index["configs"].values())


def test_the_folder_is_package_data_found_through_package_files():
    # every file of the folder matches a glob of pyproject's package-data for vramwise.frameworks
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = data["tool"]["setuptools"]
    assert setuptools["package-dir"]["vramwise.frameworks"] == "frameworks"
    globs = setuptools["package-data"]["vramwise.frameworks"]
    base = ROOT / "frameworks"
    matched = {p for g in globs for p in base.glob(g) if p.is_file()}
    assert {p for p in CONFIGS.rglob("*") if p.is_file()} <= matched
    assert not any(fnmatch.fnmatch(p.name, "*.py") for p in matched)  # only data, never torchtune's Python
    found = package_files("vramwise.frameworks").joinpath("torchtune_configs", "0.6.1", "index.json")
    assert found.is_file()
    fmt = bundled_formats().get("torchtune")
    assert shipped_versions(fmt) == ("0.6.1",) and "llama3_1/70B_lora" in shipped_names(fmt)


# -- a config name on a launch line ---------------------------------------------------------------

def test_a_launch_lines_config_name_reads_the_shipped_config():
    line = read_launch(LINE_70B)
    parts = launch_shipped(line)
    assert [p.name for p in parts] == [SHIPPED_70B]
    r = vramwise.read_recipe(parts, launch=line)
    s, o = r.settings, r.origins
    # 70B_lora.yaml by hand: model._component_ torchtune.models.llama3_1.lora_llama3_1_70b (line 15): LoRA on
    # Llama 3.1 70B; lora_rank: 16 (19), lora_alpha: 32 (20), batch_size: 2 (46), torch.optim.AdamW with fused: True
    # (50-51), CEWithChunkedOutputLoss (59), enable_activation_checkpointing: True (78)
    assert r.model == "meta-llama/Llama-3.1-70B-Instruct" and s["method"] == "lora"
    assert (s["lora_rank"], o["lora_rank"].file, o["lora_rank"].line) == (16, SHIPPED_70B, 19)
    assert o["lora_rank"].key == "model.lora_rank"
    assert (s["batch_size"], s["target_modules"], s["optimizer"]) == (2, QVO_MLP, "adamw_torch_fused")
    assert (s["loss"], s["gradient_checkpointing"]) == ("chunked", "true")
    # the line: 8 processes on tune run's default of 1 node; lora_finetune_distributed shards with FSDP
    assert (s["world_size"], s["strategy"], s["gpus_per_node"]) == (8, "fsdp", 8)
    assert o["world_size"].kind == "launch line" and o["strategy"].key == "lora_finetune_distributed"
    assert r.profile == "torchtune"


def test_the_shipped_70b_lora_estimates_as_its_settings_given_by_hand():
    line = read_launch(LINE_70B)
    parts = launch_shipped(line, "torchtune@0.6.1")
    launched = vramwise.estimate(vramwise.read_recipe(parts, launch=line))
    # the same run given setting by setting, read off 70B_lora.yaml (see above); tokenizer.max_seq_len: null (26) is
    # the dataset's length, so vramwise's default 2048 in both; lora_dropout: 0.0 (21); compile: False (66)
    by_hand = vramwise.estimate("meta-llama/Llama-3.1-70B-Instruct", profile="torchtune", method="lora", lora_rank=16,
                                batch_size=2, seq_len=2048, target_modules=QVO_MLP, gradient_checkpointing="true",
                                optimizer="adamw_torch_fused", loss="chunked", lora_dropout=0.0,
                                strategy="fsdp", world_size=8, gpus_per_node=8)
    figures = ("weights", "lora", "optimizer", "gradients", "activations", "overhead", "total", "per_rank",
               "params_total", "params_trainable")
    a, b = launched.to_dict(), by_hand.to_dict()
    assert {k: a[k] for k in figures} == {k: b[k] for k in figures} and a["total"] > 0


def test_the_cli_reads_the_shipped_config_of_a_launch_line(tmp_path, capsys):
    # a local config.json as MODEL replaces the config's model: the settings and the line are the config's
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "vocab_size": 1000, "hidden_size": 256,
                               "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
                               "num_key_value_heads": 2}))
    assert main(["estimate", str(cfg), "--json", "--launch", LINE_70B, "--framework", "torchtune@0.6.1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["lora_rank"] == 16 and data["settings"]["strategy"] == "fsdp"
    assert data["settings"]["world_size"] == 8 and data["launch"]["world_size"] == 8
    assert data["recipe"]["origins"]["lora_rank"]["file"] == SHIPPED_70B
    # explicit flags win over the line and the config
    assert main(["estimate", str(cfg), "--json", "--launch", LINE_70B, "--world-size", "2", "--lora-rank", "4"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["settings"]["world_size"], data["settings"]["lora_rank"]) == (2, 4)
    # the table's heading names the shipped config once, not after its format's name again
    assert main(["estimate", str(cfg), "--launch", LINE_70B]) == 0
    heading = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("recipe: "))
    assert heading.startswith(f"recipe: {SHIPPED_70B} (torchtune 0.6.1;"), heading


def test_an_unknown_config_name_is_one_error_line_with_the_nearest_names(capsys):
    with pytest.raises(RecipeError) as e:
        launch_shipped(read_launch(LINE_70B.replace("70B_lora", "70B_lorra")))
    message = str(e.value)
    assert "\n" not in message and "'llama3_1/70B_lorra' is not a config torchtune 0.6.1 ships" in message
    assert "nearest: llama3_1/70B_lora" in message
    assert main(["estimate", "--launch", LINE_70B.replace("70B_lora", "70B_lorra")]) == 2
    err = capsys.readouterr().err
    assert "nearest: llama3_1/70B_lora" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_release_whose_configs_are_not_shipped_is_said(capsys):
    assert main(["estimate", "--launch", LINE_70B, "--framework", "torchtune@0.5.0"]) == 2
    err = capsys.readouterr().err
    assert "the configs of torchtune 0.5.0 are not shipped with vramwise (shipped: 0.6.1)" in err
    fmt = bundled_formats().get("torchtune")
    assert shipped_config(fmt, "llama3_1/70B_lora.yaml").name == SHIPPED_70B  # the file name reads as the name


def test_the_server_reads_shipped_configs():
    # no file is read for a request, but the shipped configs are vramwise's own data
    body = {"launch": "tune run lora_finetune_single_device --config llama3_1/8B_lora_single_device"}
    req = read_body(body)
    # 8B_lora_single_device.yaml: torchtune.models.llama3_1.lora_llama3_1_8b (line 23), lora_rank: 8 (27); the line
    # runs a _single_device recipe: one device, no strategy
    assert req.recipe.model == "meta-llama/Llama-3.1-8B-Instruct" and req.recipe.settings["lora_rank"] == 8
    assert req.recipe.origins["lora_rank"].line == 27
    assert (req.recipe.settings["strategy"], req.recipe.settings["world_size"]) == ("none", 1)
    with pytest.raises(RecipeError, match="nearest"):
        read_body({"launch": body["launch"].replace("8B_lora", "8B_lorra")})


# -- the header comment's launch line -----------------------------------------------------------

def test_a_copy_of_a_shipped_config_gets_its_headers_launch_line(tmp_path):
    copy = tmp_path / "my_70B_lora.yaml"
    shutil.copy(CONFIGS / "llama3_1" / "70B_lora.yaml", copy)
    # line 9: "#   tune run --nproc_per_node 8 lora_finetune_distributed --config llama3_1/70B_lora"
    r = vramwise.read_recipe(str(copy))
    assert (r.settings["world_size"], r.settings["strategy"], r.settings["gpus_per_node"]) == (8, "fsdp", 8)
    for name in ("world_size", "strategy"):
        assert r.origins[name].kind == "launch line"
        assert r.origins[name].key.endswith(f"in the header comment of {copy}:9")
    assert r.origins["world_size"].key.startswith("--nproc_per_node 8")
    # a launch line given wins over the header; settings given win over both
    given = vramwise.read_recipe(str(copy), launch=read_launch(f"tune run --nproc_per_node 4 "
                                                                f"lora_finetune_distributed --config {copy}"))
    assert given.settings["world_size"] == 4 and given.origins["world_size"].key == "--nproc_per_node 4"
    over = vramwise.read_recipe(str(copy), overrides={"world_size": 2, "strategy": "ddp"})
    assert (over.settings["world_size"], over.settings["strategy"]) == (2, "ddp")


def test_the_cli_reads_the_header_of_a_recipe_file(tmp_path, capsys):
    copy = tmp_path / "70B_lora.yaml"
    shutil.copy(CONFIGS / "llama3_1" / "70B_lora.yaml", copy)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "vocab_size": 1000, "hidden_size": 256,
                               "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
                               "num_key_value_heads": 2}))
    assert main(["estimate", str(cfg), "--recipe", str(copy), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["settings"]["world_size"], data["settings"]["strategy"]) == (8, "fsdp")
    assert main(["estimate", str(cfg), "--recipe", str(copy), "--json", "--strategy", "none",
                 "--world-size", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["settings"]["world_size"], data["settings"]["strategy"]) == (1, "none")


def test_a_single_device_configs_header_gives_no_strategy(tmp_path):
    copy = tmp_path / "8B_lora_single_device.yaml"
    shutil.copy(CONFIGS / "llama3_1" / "8B_lora_single_device.yaml", copy)
    # line 9: "#   tune run lora_finetune_single_device --config llama3_1/8B_lora_single_device": one device
    r = vramwise.read_recipe(str(copy))
    assert (r.settings["strategy"], r.settings["world_size"]) == ("none", 1)
    assert r.origins["strategy"].kind == "launch line"
    assert r.origins["strategy"].key == f"lora_finetune_single_device, in the header comment of {copy}:9"


def test_a_recipe_without_a_header_line_or_of_another_format_has_no_launch(tmp_path):
    text = (CONFIGS / "llama3_1" / "70B_lora.yaml").read_text(encoding="utf-8")
    body = text[text.index("output_dir:"):]
    bare = tmp_path / "bare.yaml"
    bare.write_text("# my config\n" + body + "# tune run --nproc_per_node 4 lora_finetune_distributed\n")
    r = vramwise.read_recipe(str(bare))  # a line after the first key is not the header
    assert r.origins["world_size"].kind == "vramwise default" and r.settings["world_size"] == 1
    # a header line that does not read as a launch line is only a comment: the next one that reads is taken
    odd = tmp_path / "odd.yaml"
    odd.write_text("# tune run --nproc_per_node abc lora_finetune_distributed\n"
                   "# tune run --nproc_per_node 4 lora_finetune_distributed --config x\n" + body)
    r = vramwise.read_recipe(str(odd))
    assert r.settings["world_size"] == 4 and r.origins["world_size"].key.endswith(f"{odd}:2")
    axolotl = tmp_path / "axolotl.yaml"
    axolotl.write_text("# tune run --nproc_per_node 8 lora_finetune_distributed\nbase_model: meta-llama/Llama-3.1-8B\n"
                       "adapter: lora\nlora_r: 8\nmicro_batch_size: 1\nsequence_len: 512\n")
    assert vramwise.read_recipe(str(axolotl)).origins["world_size"].kind == "vramwise default"


def test_a_config_name_given_as_recipe_says_to_name_it_on_its_launch_line(capsys):
    # --recipe takes files: a shipped config's name there is one error line with the launch line that reads it
    # (torchtune/_recipe_registry.py lists llama3_1/70B_lora under lora_finetune_distributed)
    assert main(["estimate", "--recipe", "llama3_1/70B_lora"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "llama3_1/70B_lora is a config torchtune 0.6.1 ships" in err
    assert '--launch "tune run lora_finetune_distributed --config llama3_1/70B_lora"' in err
    assert main(["estimate", "--recipe", "no/such_config"]) == 2
    assert "no/such_config: no such file" in capsys.readouterr().err
