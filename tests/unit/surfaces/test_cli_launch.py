"""--launch on the command line and ``launch`` in the server's body: an estimate through a launch line is the
estimate of the strategy, world size and GPUs per node the line states (given as flags), explicit flags win
over it, the files it names are read as the recipe (the server reads none and says so), the origins say
"launch line", and a bad line is one error line.

The figures each line states are read off it by hand in the comments (processes per node x nodes).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramwise.surfaces.cli.main import main
from vramwise.surfaces.request import read_body

ROOT = Path(__file__).resolve().parents[3]
SMALL = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
FIGURES = ("weights", "lora", "optimizer", "gradients", "activations", "overhead", "total", "per_rank", "min_per_gpu",
           "host_bytes", "strategy", "world_size", "settings")


@pytest.fixture
def cfg(tmp_path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL))
    return str(path)


def _json(args, capsys) -> dict:
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("line,flags", [
    # torchrun on 2 processes x 1 node, nothing else named: ddp, world size 2, 2 GPUs per node
    ("torchrun --nproc_per_node 2 train.py", ["--strategy", "ddp", "--world-size", "2", "--gpus-per-node", "2"]),
    # accelerate's --num_processes counts every machine's: 8 on 2 machines is 4 per node; --use_fsdp is fsdp
    ("accelerate launch --use_fsdp --num_processes 8 --num_machines 2 train.py",
     ["--strategy", "fsdp", "--world-size", "8", "--gpus-per-node", "4"]),
    # accelerate --use_deepspeed --zero_stage 2 on 4 processes: zero2
    ("accelerate launch --use_deepspeed --zero_stage 2 --num_processes 4 train.py",
     ["--strategy", "zero2", "--world-size", "4", "--gpus-per-node", "4"]),
    # tune run's *_distributed recipes shard with FSDP: 4 processes x 2 nodes (no --config: a config named would
    # be read as the recipe, tests/unit/recipes/test_shipped_configs.py)
    ("tune run --nnodes 2 --nproc_per_node 4 full_finetune_distributed",
     ["--strategy", "fsdp", "--world-size", "8", "--gpus-per-node", "4"]),
])
def test_an_estimate_through_launch_equals_the_same_flags(cfg, line, flags, capsys):
    common = [cfg, "--profile", "hf", "--method", "lora", "--json"]
    launched = _json(["estimate", *common, "--launch", line], capsys)
    flagged = _json(["estimate", *common, *flags], capsys)
    assert {k: launched[k] for k in FIGURES} == {k: flagged[k] for k in FIGURES}
    assert launched["launch"]["world_size"] == int(flags[3]) and "launch" not in flagged


def test_explicit_flags_win_over_the_launch_line(cfg, capsys):
    data = _json(["estimate", cfg, "--profile", "hf", "--json", "--world-size", "2", "--strategy", "zero3",
                  "--launch", "torchrun --nproc_per_node 8 --nnodes 2 train.py"], capsys)
    assert data["settings"]["world_size"] == 2 and data["settings"]["strategy"] == "zero3"
    assert data["settings"]["gpus_per_node"] == 8  # not given as a flag: the line's 8 per node


def test_the_files_a_launch_line_names_are_the_recipe(tmp_path, cfg, capsys):
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    line = f"deepspeed --num_gpus 8 train.py --deepspeed {ds}"
    launched = _json(["estimate", cfg, "--json", "--launch", line], capsys)
    # the same estimate as the file given with --recipe and the line's 8 processes on 1 node as flags
    recipe = _json(["estimate", cfg, "--json", "--recipe", str(ds), "--world-size", "8", "--gpus-per-node", "8"], capsys)
    assert {k: launched[k] for k in FIGURES} == {k: recipe[k] for k in FIGURES}
    origins = launched["recipe"]["origins"]
    assert origins["strategy"]["kind"] == "recipe" and launched["settings"]["strategy"] == "zero3"  # the file's stage 3
    assert origins["world_size"] == {**origins["world_size"], "kind": "launch line", "key": "--num_gpus 8",
                                     "text": "launch line --num_gpus 8"}
    assert main(["estimate", cfg, "--launch", line]) == 0
    out = capsys.readouterr().out
    assert "launch line: deepspeed" in out and "world_size" in out and "launch line --num_gpus 8" in out


def test_recipe_wins_over_the_files_of_the_line_and_a_config_name_is_read_without_one(cfg, capsys):
    recipe = str(ROOT / "examples" / "recipes" / "torchtune-lora.yaml")
    line = "tune run --nproc_per_node 4 lora_finetune_distributed --config llama3_1/70B_lora"
    data = _json(["estimate", "--recipe", recipe, "--json", "--launch", line], capsys)
    assert data["settings"]["world_size"] == 4 and data["settings"]["strategy"] == "fsdp"
    assert data["recipe"]["origins"]["strategy"]["text"] == "launch line lora_finetune_distributed"
    assert any("'llama3_1/70B_lora' not read: the recipe given is read instead" in n for n in data["launch"]["notes"])
    # without --recipe, the config the line names is torchtune 0.6.1's shipped one (MODEL replaces its model)
    alone = _json(["estimate", cfg, "--profile", "torchtune", "--method", "lora", "--json", "--launch", line], capsys)
    assert alone["recipe"]["origins"]["lora_rank"]["file"] == "torchtune 0.6.1's shipped config llama3_1/70B_lora"
    assert alone["settings"]["world_size"] == 4


@pytest.mark.parametrize("line,message", [
    ("srun -n 8 train.py", "launch line: 'srun' is not a launcher vramwise reads (launchers: torchrun"),
    ("torchrun --nproc_per_node abc train.py", "launch line: --nproc_per_node abc: the number of processes per node"),
    # the quote follows "torchrun " 9 + "--master_addr " 14 = 23 characters
    ("torchrun --master_addr 'node0 train.py", "launch line: column 24: unbalanced ' quote"),
])
def test_a_bad_line_is_one_error_line(cfg, line, message, capsys):
    assert main(["estimate", cfg, "--launch", line]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_set_needs_a_recipe_file_that_the_line_names(cfg, capsys):
    assert main(["estimate", cfg, "--launch", "deepspeed --num_gpus 2 t.py --deepspeed /no/such/ds.json",
                 "--set", "batch_size=2"]) == 2
    assert "the launch line names no recipe file that exists here" in capsys.readouterr().err


def test_fit_compare_sweep_take_a_launch_line(cfg, capsys):
    line = "torchrun --nproc_per_node 2 train.py"
    for args in (["fit", cfg, "--gpu", "H100", "--profile", "hf"], ["compare", cfg, "--profiles", "hf"],
                 ["sweep", cfg, "--profile", "hf", "--batch-size", "1,2", "--format", "json"]):
        data = _json([*args, *(["--json"] if args[0] != "sweep" else []), "--launch", line], capsys)
        assert data["launch"]["world_size"] == 2, args[0]


def test_fit_is_for_the_launch_lines_gpus_unless_gpus_are_given(cfg, capsys):
    line = "torchrun --nproc_per_node 2 train.py"  # ddp on 2 processes
    common = ["fit", cfg, "--gpu", "H100", "--profile", "hf", "--json"]
    assert _json([*common, "--launch", line], capsys) == {**_json([*common, "--strategy", "ddp", "--world-size", "2",
                                                                   "--gpus", "2", "--gpus-per-node", "2"], capsys),
                                                          "launch": _json([*common, "--launch", line], capsys)["launch"]}
    four = _json([*common, "--gpus", "4", "--launch", line], capsys)  # the GPUs given replace the line's world size
    assert four == {**_json([*common, "--strategy", "ddp", "--gpus", "4", "--gpus-per-node", "2"], capsys),
                    "launch": four["launch"]}


# -- the server's body --------------------------------------------------------------------------

def test_the_body_reads_a_launch_line_and_no_file_it_names():
    body = {"config": SMALL, "profile": "hf", "launch": "deepspeed --num_gpus 4 train.py --deepspeed ds.json "
                                                        "--config recipe.yaml"}
    req = read_body(body)
    # --num_gpus 4 on 1 node: world size 4; the ZeRO stage is in ds.json, which the server does not read, so no
    # strategy is stated and the world size waits for one (a world size is the ranks of a strategy)
    assert req.launch.world_size == 4 and "world_size" not in req.settings and req.settings["gpus_per_node"] == 4
    assert req.recipe is None
    notes = req.launch.notes
    assert any("states no strategy: its world size 4 applies with the strategy" in n for n in notes)
    assert read_body({**body, "strategy": "zero3"}).settings["world_size"] == 4  # a strategy given: the line's 4
    assert any("'ds.json', which is not read here" in n for n in notes)
    assert any("'recipe.yaml', which is not read here" in n for n in notes)
    given = read_body({**body, "world_size": 2, "strategy": "zero3"})  # the body's fields win over the line
    assert (given.settings["world_size"], given.settings["strategy"]) == (2, "zero3")


def test_the_body_launch_line_over_an_uploaded_recipe():
    text = json.dumps({"zero_optimization": {"stage": 2}})
    req = read_body({"config": SMALL, "recipe": [{"name": "ds.json", "text": text}],
                     "launch": "deepspeed --num_gpus 2 --num_nodes 2 train.py --deepspeed ds.json"})
    # 2 per node x 2 nodes; the uploaded ds.json is the file the line names: no note about it
    assert req.settings["world_size"] == 4 and req.settings["strategy"] == "zero2"
    assert req.recipe.origins["world_size"].describe() == "launch line --num_gpus 2 and --num_nodes 2"
    assert not any("not read here" in n for n in req.launch.notes)


def test_a_bad_body_launch_line_is_refused():
    from vramwise.errors import RecipeError, SettingsError

    with pytest.raises(SettingsError, match="launch must be the text"):
        read_body({"config": SMALL, "launch": 8})
    with pytest.raises(RecipeError, match="not a launcher vramwise reads"):
        read_body({"config": SMALL, "launch": "mpirun -np 8 train.py"})


def test_an_estimate_with_a_launch_line_does_not_import_torch(tmp_path, cfg):
    import subprocess
    import sys

    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    code = (
        "import sys; from vramwise.surfaces.cli.main import main; "
        "rc = main(['estimate', sys.argv[1], '--json', '--launch', sys.argv[2]]);"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; print(bad, file=sys.stderr); sys.exit(rc or len(bad))"
    )
    line = f"deepspeed --num_gpus 2 train.py --deepspeed {ds}"
    proc = subprocess.run([sys.executable, "-c", code, cfg, line], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["settings"]["strategy"] == "zero2"  # the file's stage 2


@pytest.mark.parametrize("line,profile", [
    # tune run runs torchtune's recipes: frameworks/torchtune.yaml's default profile is torchtune
    ("tune run --nproc_per_node 2 lora_finetune_distributed --config llama3_1/8B_lora", "torchtune"),
    # litgpt's finetune commands run LitGPT's own model and loop: frameworks/litgpt.yaml's default is litgpt
    ("litgpt finetune_lora meta-llama/Llama-3.1-8B --devices 2", "litgpt"),
    # deepspeed runs a (transformers) script: frameworks/deepspeed.yaml's default profile is hf
    ("deepspeed --num_gpus 2 train.py --deepspeed ds.json", "hf"),
])
def test_a_launcher_that_runs_one_stack_gives_its_profile_unless_one_is_given(cfg, line, profile, capsys):
    """Without a recipe read and without --profile, the profile is the one of the stack the launcher runs; the
    same estimate as --profile of that name; --profile wins; torchrun (a script of any stack) gives none."""
    common = [cfg, "--method", "lora", "--json"]
    launched = _json(["estimate", *common, "--launch", line], capsys)
    assert launched["profile"] == profile and launched["launch"]["profile"] == profile
    named = _json(["estimate", *common, "--launch", line, "--profile", profile], capsys)
    assert {k: launched.get(k) for k in FIGURES} == {k: named.get(k) for k in FIGURES} and launched["total"] > 0
    other = "hf" if profile != "hf" else "torchtune"
    assert _json(["estimate", *common, "--launch", line, "--profile", other], capsys)["profile"] == other
    plain = _json(["estimate", *common, "--launch", "torchrun --nproc_per_node 2 train.py"], capsys)
    assert plain["launch"]["profile"] is None and plain["profile"] == "unsloth"  # vramwise's default


def test_the_server_takes_the_launchers_stack_profile_too():
    body = {"config": SMALL, "method": "lora", "launch": "tune run --nproc_per_node 2 lora_finetune_distributed"}
    assert read_body(body).profile == "torchtune"
    assert read_body({**body, "profile": "hf"}).profile == "hf"


def test_every_launchers_format_is_a_recipe_format_with_a_default_profile():
    from vramwise.recipes.launch import bundled_launchers
    from vramwise.recipes.reader import bundled_formats

    named = [launcher for launcher in bundled_launchers().launchers if launcher.format is not None]
    assert {launcher.name for launcher in named} >= {"tune", "litgpt"}
    for launcher in named:
        fmt = bundled_formats().get(launcher.format)
        assert any(rule.default and not rule.when and isinstance(rule.value, str) for rule in fmt.profile), launcher.name
