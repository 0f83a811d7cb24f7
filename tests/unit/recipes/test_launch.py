"""Launch lines (vramwise.recipes.launch, frameworks/launchers.yaml): each launcher on the lines its own
docs write, the figures and the words they came from, the strategy, the files named, bad lines in one
RecipeError line, the grammar file's schema, and a launch line's settings in a recipe's origins.

Every expected figure is read off the line by hand: processes per node times nodes is the world size
(accelerate's --num_processes counts every machine's processes already, launch.py's help).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from vramwise.errors import FileFormatError, RecipeError
from vramwise.recipes import read_recipe
from vramwise.recipes.formats import Formats
from vramwise.recipes.launch import (MAX_LAUNCH_CHARS, bundled_launchers, launch_parts, load_launchers,
                                     read_launch)

ROOT = Path(__file__).resolve().parents[3]
LAUNCHERS = ROOT / "frameworks" / "launchers.yaml"
RECIPES = ROOT / "examples" / "recipes"


# -- each launcher, on its docs' lines ------------------------------------------------------------

def test_torchrun_single_node():
    # docs.pytorch.org/docs/stable/elastic/run.html, "Single-node multi-worker":
    # torchrun --standalone --nnodes=1 --nproc-per-node=$NUM_TRAINERS YOUR_TRAINING_SCRIPT.py (NUM_TRAINERS=4)
    line = read_launch("torchrun --standalone --nnodes=1 --nproc-per-node=4 YOUR_TRAINING_SCRIPT.py --arg1 x")
    assert (line.launcher, line.program) == ("torchrun", "torchrun")
    assert (line.processes_per_node, line.nodes, line.world_size) == (4, 1, 4)  # 4 x 1
    assert line.sources["processes_per_node"] == "--nproc-per-node=4" and line.sources["nodes"] == "--nnodes=1"
    assert line.sources["world_size"] == "--nproc-per-node=4 and --nnodes=1"
    # torchrun alone on more than one process, nothing else named: data parallel, implied (a recipe key wins)
    assert line.strategy == "ddp" and line.implied == {"strategy"}
    assert line.entry == "YOUR_TRAINING_SCRIPT.py" and line.files == ()


def test_torchrun_multi_node_and_elastic():
    # the same page, "Fault tolerant": torchrun --nnodes=$NUM_NODES --nproc-per-node=$NUM_TRAINERS --max-restarts=3
    # --rdzv-id=$JOB_ID --rdzv-backend=c10d --rdzv-endpoint=$HOST_NODE_ADDR YOUR_TRAINING_SCRIPT.py (2 nodes, 8 each)
    line = read_launch("torchrun --nnodes=2 --nproc-per-node=8 --max-restarts=3 --rdzv-id=1 --rdzv-backend=c10d "
                       "--rdzv-endpoint=node0:29400 YOUR_TRAINING_SCRIPT.py")
    assert (line.processes_per_node, line.nodes, line.world_size) == (8, 2, 16)  # 8 x 2
    assert line.settings()["gpus_per_node"][0] == 8
    # "Elastic (min=1, max=4)": --nnodes=1:4 is a range, so the world size is not stated
    elastic = read_launch("torchrun --nnodes=1:4 --nproc-per-node=8 --rdzv-backend=c10d "
                          "--rdzv-endpoint=node0:29400 YOUR_TRAINING_SCRIPT.py")
    assert elastic.nodes is None and elastic.world_size is None and elastic.strategy is None
    assert any("--nnodes=1:4" in n and "states no world size" in n for n in elastic.notes)
    assert read_launch("torchrun --nnodes 2:2 --nproc_per_node 2 t.py").world_size == 4  # 2:2 is 2 nodes


def test_python_m_torch_distributed_forms():
    # torch/distributed/launch.py's docstring: python -m torch.distributed.launch --nproc-per-node=NUM_GPUS_YOU_HAVE
    # YOUR_TRAINING_SCRIPT.py (and --use-env, a switch)
    line = read_launch("python -m torch.distributed.launch --nproc-per-node=2 --use-env YOUR_TRAINING_SCRIPT.py")
    assert (line.launcher, line.world_size, line.strategy) == ("torchrun", 2, "ddp")
    run = read_launch("/usr/bin/python3.11 -m torch.distributed.run --nproc_per_node 4 train.py")
    assert (run.launcher, run.program, run.world_size) == ("torchrun", "/usr/bin/python3.11 -m torch.distributed.run", 4)


def test_tune_run_distributed_recipe_with_a_config_name():
    # torchtune's docs (tutorials/llama3, the recipe's own header): tune run --nproc_per_node 8
    # lora_finetune_distributed --config llama3_1/70B_lora
    line = read_launch("tune run --nproc_per_node 8 lora_finetune_distributed --config llama3_1/70B_lora "
                       "batch_size=2 gradient_accumulation_steps=8")
    assert (line.launcher, line.framework, line.program) == ("tune", "torchtune", "tune run")
    assert (line.processes_per_node, line.nodes, line.world_size) == (8, 1, 8)
    # recipes/lora_finetune_distributed.py shards the model with FSDP (training.shard_model)
    assert line.strategy == "fsdp" and line.sources["strategy"] == "lora_finetune_distributed"
    assert "strategy" not in line.implied
    assert line.config_names == ("llama3_1/70B_lora",) and line.files == ()
    assert line.overrides == (("batch_size", "2"), ("gradient_accumulation_steps", "8"))
    _, notes = launch_parts(line, read_files=True)
    assert any("torchtune config 'llama3_1/70B_lora'" in n and "not with vramwise" in n and "--recipe FILE" in n
               for n in notes)
    # read from torchtune 0.6.1's release as shipped with vramwise (tests/unit/recipes/test_shipped_configs.py),
    # it is not noted
    _, read = launch_parts(line, read_files=True, shipped_read=True)
    assert not any("not with vramwise" in n for n in read)
    assert any("batch_size=2" in n and "not applied" in n for n in notes)


def test_tune_run_single_device_and_a_config_file():
    # tune run lora_finetune_single_device --config llama3_1/8B_lora_single_device (torchtune's README): no torchrun
    line = read_launch("tune run lora_finetune_single_device --config llama3_1/8B_lora_single_device")
    assert (line.strategy, line.world_size) == ("none", 1) and line.notes == ()
    own = read_launch("tune run --nnodes 1 --nproc_per_node 2 full_finetune_distributed --config ./my_8B_full.yaml")
    assert own.files == (("config", "./my_8B_full.yaml"),) and own.config_names == ()
    assert (own.world_size, own.strategy) == (2, "fsdp")


def test_accelerate_launch():
    # huggingface.co/docs/accelerate/basic_tutorials/launch: accelerate launch --num_processes 4 --use_fsdp train.py
    line = read_launch("accelerate launch --num_processes 4 --use_fsdp train.py")
    assert (line.launcher, line.world_size, line.nodes, line.processes_per_node) == ("accelerate", 4, 1, 4)
    assert line.strategy == "fsdp" and line.sources["strategy"] == "--use_fsdp" and line.implied == {"profile"}  # accelerate runs the hf stack (implied)
    # --num_processes is every machine's processes: 16 on 2 machines is 8 per node; --zero_stage 3 is ZeRO-3
    ds = read_launch("accelerate launch --use_deepspeed --zero_stage 3 --num_processes 16 --num_machines 2 train.py")
    assert (ds.world_size, ds.nodes, ds.processes_per_node, ds.strategy) == (16, 2, 8, "zero3")
    hybrid = read_launch("accelerate launch --use_fsdp --fsdp_sharding_strategy HYBRID_SHARD --num_processes 8 t.py")
    assert hybrid.strategy == "fsdp_hybrid"  # the sharding strategy named wins over --use_fsdp's full shard
    multi = read_launch("accelerate launch --multi_gpu --num-processes=2 train.py --config cfg.yaml")
    assert (multi.strategy, multi.world_size, multi.files) == ("ddp", 2, (("config", "cfg.yaml"),))
    # the config file gives the count: the line does not, and says so
    cfg = read_launch("accelerate launch --config_file fsdp.yaml train.py")
    assert cfg.world_size is None and cfg.files == (("accelerate", "fsdp.yaml"),)
    assert any("does not say how many processes" in n for n in cfg.notes)
    # a config named on the line holds the strategy: no data parallel implied even on several processes
    named = read_launch("accelerate launch --config_file fsdp.yaml --num_processes 4 train.py")
    assert named.strategy is None and "the strategy is the accelerate config's (fsdp.yaml)" in named.notes
    ds = read_launch("torchrun --nproc_per_node 4 train.py --deepspeed ds_z3.json")
    assert ds.strategy is None and "the ZeRO stage is the DeepSpeed config's (ds_z3.json)" in ds.notes


def test_accelerate_running_axolotl_as_a_module():
    # axolotl's README (before its own CLI): accelerate launch -m axolotl.cli.train examples/openllama-3b/lora.yml
    line = read_launch("accelerate launch --num_processes 2 -m axolotl.cli.train examples/openllama-3b/lora.yml")
    assert (line.launcher, line.runs, line.world_size, line.strategy) == ("accelerate", "axolotl", 2, "ddp")
    assert line.files == (("config", "examples/openllama-3b/lora.yml"),) and "strategy" in line.implied
    module = read_launch("python -m axolotl.cli.train examples/openllama-3b/lora.yml")  # one process, no launcher
    assert (module.launcher, module.files, module.world_size) == ("axolotl", (("config", "examples/openllama-3b/lora.yml"),), None)
    cli = read_launch("axolotl train examples/llama-3/lora-1b.yml")  # docs.axolotl.ai/docs/cli.html
    assert cli.launcher == "axolotl" and cli.files == (("config", "examples/llama-3/lora-1b.yml"),)
    assert cli.world_size is None


def test_axolotl_train_hands_the_words_after_the_separator_to_its_launcher():
    # docs.axolotl.ai/docs/cli.html (axolotl v0.18.0 docs/cli.qmd:32-35): axolotl train config.yml --launcher torchrun
    # -- --nproc_per_node=2 --nnodes=1, and --launcher accelerate -- --config_file=accelerate_config.yml
    # --num_processes=4 (cli/main.py:119-120: the words after -- go to the launcher)
    tr = read_launch("axolotl train config.yml --launcher torchrun -- --nproc_per_node=2 --nnodes=1")
    assert (tr.launcher, tr.world_size, tr.nodes, tr.files) == ("axolotl", 2, 1, (("config", "config.yml"),))
    # two processes under torchrun and nothing naming a strategy: torchrun's data parallel, implied
    assert tr.strategy == "ddp" and "strategy" in tr.implied
    acc = read_launch("axolotl train config.yml --launcher accelerate -- --config_file=accelerate_config.yml "
                      "--num_processes=4")
    assert acc.world_size == 4 and acc.strategy is None  # the accelerate config holds the strategy
    assert acc.files == (("config", "config.yml"), ("accelerate", "accelerate_config.yml"))
    # accelerate is axolotl train's launcher by default (cli/main.py:102)
    plain = read_launch("axolotl train config.yml -- --num_processes 2")
    assert (plain.world_size, plain.strategy, plain.sources["world_size"]) == (2, "ddp", "--num_processes 2")
    # --launcher python runs one process in place: the words after -- are not read, and said
    python = read_launch("axolotl train config.yml --launcher python -- --nproc_per_node=2")
    assert python.world_size is None and any("runs without a launcher" in n for n in python.notes)
    other = read_launch("axolotl train config.yml --launcher deepspeed -- --num_gpus 2")
    assert other.world_size is None and any("not a launcher axolotl train runs under" in n for n in other.notes)
    assert read_launch("axolotl train config.yml").world_size is None  # nothing after --: not stated


def test_deepspeed_launcher():
    # huggingface.co/docs/transformers/deepspeed: deepspeed --num_gpus=2 your_program.py <normal cl args>
    # --deepspeed ds_config.json; deepspeed.ai getting-started: deepspeed --num_gpus 8 train.py --deepspeed ...
    line = read_launch("deepspeed --num_gpus 8 train.py --deepspeed ds_config.json")
    assert (line.launcher, line.processes_per_node, line.world_size) == ("deepspeed", 8, 8)
    assert line.strategy is None  # the ZeRO stage is the config's, read from the file
    assert line.files == (("deepspeed", "ds_config.json"),)
    assert any("ZeRO stage is the DeepSpeed config's (ds_config.json)" in n for n in line.notes)
    hosts = read_launch("deepspeed --hostfile=myhostfile train.py --deepspeed --deepspeed_config ds.json")
    assert hosts.nodes is None and hosts.world_size is None and hosts.files == (("deepspeed", "ds.json"),)
    # without --num_gpus it starts one process per visible GPU
    visible = read_launch("CUDA_VISIBLE_DEVICES=0,1,2 deepspeed train.py --deepspeed ds.json")
    assert visible.world_size == 3 and visible.sources["processes_per_node"] == "CUDA_VISIBLE_DEVICES=0,1,2"


def test_llamafactory_environment():
    # LLaMA-Factory examples/README.md: FORCE_TORCHRUN=1 NNODES=2 NODE_RANK=0 MASTER_ADDR=192.168.0.1
    # MASTER_PORT=29500 llamafactory-cli train examples/train_lora/llama3_lora_sft.yaml
    line = read_launch("FORCE_TORCHRUN=1 NNODES=2 NODE_RANK=0 MASTER_ADDR=192.168.0.1 MASTER_PORT=29500 "
                       "llamafactory-cli train examples/train_lora/llama3_lora_sft.yaml")
    assert (line.launcher, line.nodes, line.sources["nodes"]) == ("llamafactory", 2, "NNODES=2")
    # the processes per node are the device count: not on the line, so not stated
    assert line.processes_per_node is None and line.world_size is None and line.strategy is None
    assert any("one process per visible GPU" in n for n in line.notes)
    assert line.files == (("config", "examples/train_lora/llama3_lora_sft.yaml"),)
    stated = read_launch("FORCE_TORCHRUN=1 NNODES=2 NPROC_PER_NODE=4 llamafactory-cli train x.yaml")
    assert (stated.world_size, stated.strategy) == (8, "ddp")  # 4 x 2; torchrun under the Trainer: DDP
    counted = read_launch("CUDA_VISIBLE_DEVICES=0,1 llamafactory-cli train x.yaml")
    assert counted.world_size == 2
    # the same README's single-GPU line: CUDA_VISIBLE_DEVICES=0 llamafactory-cli train examples/train_lora/...yaml
    one = read_launch("CUDA_VISIBLE_DEVICES=0 llamafactory-cli train examples/train_lora/llama3_lora_sft.yaml")
    assert (one.world_size, one.strategy, one.notes) == (1, None, ())  # one process: no multi-GPU strategy stated


def test_litgpt_finetune():
    # written after LitGPT's tutorials/finetune_lora.md (litgpt finetune_lora CHECKPOINT, --devices N for several GPUs)
    line = read_launch("litgpt finetune_lora checkpoints/stabilityai/stablelm-base-alpha-3b --devices 4")
    assert (line.launcher, line.program, line.world_size) == ("litgpt", "litgpt finetune_lora", 4)
    # litgpt/finetune/lora.py: FSDPStrategy when devices * num_nodes > 1
    assert line.strategy == "fsdp" and "strategy" in line.implied
    before = read_launch("litgpt finetune --devices 2 --num_nodes 2 --config config_hub/finetune/llama-2-7b/lora.yaml")
    assert (before.world_size, before.files) == (4, (("config", "config_hub/finetune/llama-2-7b/lora.yaml"),))
    assert read_launch("litgpt finetune_full ckpt --devices auto").world_size is None


# -- the line's text ----------------------------------------------------------------------------

def test_continuations_comments_prompt_and_visible_devices():
    text = ("$ CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun \\\n"
            "    --nproc_per_node gpu \\\n"
            "    train.py --deepspeed 'my ds.json'  # four GPUs\n")
    line = read_launch(text)
    assert (line.processes_per_node, line.world_size) == (4, 4)
    assert line.sources["processes_per_node"] == "--nproc_per_node gpu and CUDA_VISIBLE_DEVICES=0,1,2,3"
    assert line.files == (("deepspeed", "my ds.json"),)
    several = read_launch("torchrun --nproc_per_node 2\n  train.py")  # lines without backslashes: one command
    assert several.world_size == 2 and several.entry == "train.py"
    gpu = read_launch("torchrun --nproc_per_node gpu train.py")  # gpu and no CUDA_VISIBLE_DEVICES: not stated
    assert gpu.world_size is None and any("states no world size" in n for n in gpu.notes)
    assert read_launch("torchrun train.py").world_size is None  # no count: not stated, never a guess


@pytest.mark.parametrize("text,message", [
    ("srun --ntasks 8 train.py", "'srun' is not a launcher vramwise reads (launchers: torchrun,"),
    # the quote follows 44 characters: "torchrun " 9 + "--nproc_per_node " 17 + "2 " 2 + "train.py " 9 + "--name " 7
    ("torchrun --nproc_per_node 2 train.py --name 'unclosed", "column 45: unbalanced ' quote"),
    # on the second line after "  " 2 + "--nproc_per_node " 17 + "2 " 2 = 21 characters
    ("torchrun \\\n  --nproc_per_node 2 \"x", "line 2, column 22: unbalanced \" quote"),
    ("torchrun --nproc_per_node abc train.py", "--nproc_per_node abc: the number of processes per node must be a "
                                               "whole number from 1 (or gpu, auto, cpu, xpu), got 'abc'"),
    ("torchrun --nproc_per_node 0 train.py", "got '0'"),
    ("torchrun --nnodes 2:x t.py", "--nnodes 2:x: the number of nodes"),
    ("NPROC_PER_NODE=many llamafactory-cli train x.yaml", "NPROC_PER_NODE=many"),
    ("torchrun --nproc_per_node", "--nproc_per_node needs a value"),
    ("CUDA_VISIBLE_DEVICES=0", "no command in it"),
    ("torchrun " + "x" * MAX_LAUNCH_CHARS, f"a launch line holds at most {MAX_LAUNCH_CHARS:,}"),
])
def test_a_bad_line_is_one_recipe_error_line(text, message):
    with pytest.raises(RecipeError) as info:
        read_launch(text)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith("launch line: ")


_WORDS = ["torchrun", "tune", "run", "accelerate", "launch", "deepspeed", "llamafactory-cli", "train", "axolotl",
          "litgpt", "finetune", "python", "-m", "torch.distributed.run", "axolotl.cli.train", "--nproc_per_node",
          "--nnodes", "--num_processes", "--num_gpus", "--devices", "--use_fsdp", "--zero_stage", "--config",
          "--deepspeed", "--", "-", "=", "gpu", "auto", "1:4", "0", "8", "-1", "x.yaml", "a=b", "~k", "NNODES=2",
          "CUDA_VISIBLE_DEVICES=0,1", "'", '"', "\\", "\\\n", "\n", "#", "$", " ", "lora_finetune_distributed"]


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.lists(st.sampled_from(_WORDS), max_size=14), st.text(max_size=12))
def test_any_text_is_a_launch_line_or_one_recipe_error(words, noise):
    text = " ".join(words) + noise
    try:
        line = read_launch(text)
    except RecipeError as e:
        assert "\n" not in str(e) and str(e).startswith("launch line: ")
        return
    assert line.world_size is None or line.world_size >= 1
    assert line.strategy in (None, "none", "ddp", "fsdp", "fsdp_shard_grad_op", "fsdp_hybrid", "zero1", "zero2", "zero3")


def test_an_unknown_launcher_flag_is_skipped_with_its_value_and_said():
    line = read_launch("torchrun --some-new-flag 7 --nproc_per_node 2 train.py")
    assert (line.world_size, line.entry) == (2, "train.py")
    assert any("--some-new-flag 7" in n for n in line.notes)


# -- the grammar file ---------------------------------------------------------------------------

def test_the_bundled_grammar_validates_and_is_not_a_recipe_format():
    checked = load_launchers(LAUNCHERS, validate=True)
    names = {launcher.name for launcher in checked.launchers}
    assert names == {"torchrun", "tune", "accelerate", "deepspeed", "llamafactory", "axolotl", "litgpt"}
    assert names == {launcher.name for launcher in bundled_launchers().launchers}
    assert "launchers" not in Formats.load(LAUNCHERS.parent, validate=True).names()


def test_the_schema_rejects_an_unknown_key_with_its_position(tmp_path):
    text = LAUNCHERS.read_text(encoding="utf-8")
    anchor = "    entry: script\n"
    bad = tmp_path / "launchers.yaml"
    bad.write_text(text.replace(anchor, anchor + "    wat: 1\n", 1), encoding="utf-8")
    line = bad.read_text(encoding="utf-8").splitlines().index("    wat: 1") + 1
    with pytest.raises(FileFormatError) as info:
        load_launchers(bad)
    # the key's own line, column 5 (four spaces of indent), and its JSON path
    assert f"{bad}:{line}:5: $.launchers[0].wat: unknown key 'wat'" in str(info.value)
    flag = tmp_path / "flag.yaml"  # inside a flag, the flag's own path
    flag.write_text(text.replace("{names: [--nnodes], value: true, gives: nodes}",
                                 "{names: [--nnodes], value: true, gives: nodes, typo: 1}", 1), encoding="utf-8")
    with pytest.raises(FileFormatError, match=r"flag\.yaml:\d+:\d+: \$\.launchers\[0\]\.flags\[1\]"):
        load_launchers(flag)


def test_a_launcher_passed_to_must_exist(tmp_path):
    bad = tmp_path / "launchers.yaml"
    bad.write_text(LAUNCHERS.read_text(encoding="utf-8").replace("{accelerate: accelerate, torchrun: torchrun,",
                                                                 "{accelerate: accelerat, torchrun: torchrun,"),
                   encoding="utf-8")
    with pytest.raises(FileFormatError, match=r"launchers\.yaml:\d+:\d+: \$\.launchers\[\d\]\.passes_to\.launchers"
                                              r"\.accelerate: unknown launcher 'accelerat'"):
        load_launchers(bad)


def test_an_inherited_launcher_must_exist(tmp_path):
    bad = tmp_path / "launchers.yaml"
    bad.write_text(LAUNCHERS.read_text(encoding="utf-8").replace("inherit: torchrun", "inherit: torchrunn"),
                   encoding="utf-8")
    with pytest.raises(FileFormatError, match=r"launchers\.yaml:\d+:\d+: \$\.launchers\[1\]\.inherit: unknown "
                                              r"launcher 'torchrunn'"):
        load_launchers(bad)


# -- in a recipe --------------------------------------------------------------------------------

def test_the_launch_line_comes_over_the_recipes_keys_with_its_origin():
    # accelerate-fsdp.yaml says num_processes 8 and distributed_type FSDP; the line says 4 processes
    line = read_launch(f"accelerate launch --config_file {RECIPES / 'accelerate-fsdp.yaml'} --num_processes 4 "
                       f"train.py --config {RECIPES / 'trl-sft.yaml'}")
    paths, notes = launch_parts(line, read_files=True)
    assert [Path(p).name for p in paths] == ["trl-sft.yaml", "accelerate-fsdp.yaml"] and notes == ()
    r = read_recipe(paths, launch=line)
    assert r.settings["world_size"] == 4 and r.origins["world_size"].kind == "launch line"
    assert r.origins["world_size"].describe() == "launch line --num_processes 4"
    assert r.settings["gpus_per_node"] == 4
    # the launcher's implied data parallel gives way to the recipe's own FSDP
    assert r.settings["strategy"] == "fsdp" and r.origins["strategy"].kind == "recipe"
    # an override wins over the line
    over = read_recipe(paths, launch=line, overrides={"world_size": 2})
    assert over.settings["world_size"] == 2 and over.origins["world_size"].kind == "override"


def test_a_stated_strategy_wins_over_the_recipes_and_an_implied_one_gives_way():
    zero3 = str(RECIPES / "trl-sft-zero3.yaml")  # deepspeed: ds_zero3.json (stage 3)
    implied = read_recipe(zero3, launch=read_launch("torchrun --nproc_per_node 2 train.py"))
    assert implied.settings["strategy"] == "zero3" and implied.settings["world_size"] == 2
    stated = read_recipe(zero3, launch=read_launch("accelerate launch --use_fsdp --num_processes 2 train.py"))
    assert stated.settings["strategy"] == "fsdp" and stated.origins["strategy"].describe() == "launch line --use_fsdp"


def test_a_world_size_without_a_strategy_is_not_used_and_said():
    # deepspeed --num_gpus 4 names no DeepSpeed config, and the recipe (LLaMA-Factory, no deepspeed key) no strategy
    line = read_launch("deepspeed --num_gpus 4 train.py")
    assert line.world_size == 4 and line.strategy is None
    r = read_recipe(str(RECIPES / "llama-factory-lora.yaml"), launch=line)
    assert r.settings["strategy"] == "none" and r.settings["world_size"] == 1
    assert r.origins["world_size"].kind == "vramwise default"
    assert any("world size 4 (launch line --num_gpus 4) is not used" in w for w in r.warnings)
    # with the strategy given, the line's world size applies
    given = read_recipe(str(RECIPES / "llama-factory-lora.yaml"), launch=line, overrides={"strategy": "zero2"})
    assert given.settings["world_size"] == 4 and given.origins["world_size"].kind == "launch line"


def test_files_are_not_read_where_files_are_not_read():
    line = read_launch("deepspeed --num_gpus 2 train.py --deepspeed ds_config.json --config recipe.yaml")
    paths, notes = launch_parts(line, read_files=False, given_names=frozenset({"recipe.yaml"}))
    assert paths == []
    assert notes == ("the launch line names the deepspeed file 'ds_config.json', which is not read here: give its "
                     "text as a part of the recipe",)
    missing, said = launch_parts(line, read_files=True)
    assert missing == [] and len(said) == 2 and all("does not exist here" in n for n in said)
