"""MemoryCheckCallback end to end: a small llama-shaped model through transformers' own Trainer with PEFT
LoRA on CPU, the run recorded in the runs database and listed by ``vramwise runs``, and the measured
tensor peak within the hf profile's validated bound of the prediction (benchmarks/validation_matrices.py
CELL_LIMIT: every cell of the validation matrix within 10 %; docs/accuracy.md)."""

from __future__ import annotations

import json
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from validation_matrices import CELL_LIMIT  # noqa: E402 - benchmarks/ is on pytest's path

from vramwise.errors import SettingsError  # noqa: E402
from vramwise.integrations.transformers import MemoryCheckCallback, MemoryCheckWarning  # noqa: E402
from vramwise.records.runs import RunsDB  # noqa: E402
from vramwise.surfaces.cli.main import main  # noqa: E402

BATCH, SEQ, RANK, VOCAB = 2, 128, 8, 4096
TARGETS = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]


def _model(attention="sdpa"):
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=512)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation=attention)


def _trainer(tmp_path, callback, steps=3):
    from peft import LoraConfig, get_peft_model
    from transformers import Trainer, TrainingArguments

    model = _model()
    model.config._name_or_path = "tiny-llama"
    model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=2 * RANK, target_modules=TARGETS, lora_dropout=0.0))
    gen = torch.Generator().manual_seed(1)
    data = []
    for _ in range(4 * BATCH):
        ids = torch.randint(0, VOCAB, (SEQ,), generator=gen)
        data.append({"input_ids": ids, "labels": ids.clone()})
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=BATCH, max_steps=steps,
                             optim="adamw_torch", use_cpu=True, report_to=[], save_strategy="no",
                             logging_strategy="no", disable_tqdm=True, learning_rate=1e-4)
    return Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])


def test_trainer_run_is_estimated_measured_recorded_and_listed(tmp_path, capsys):
    db = tmp_path / "runs.sqlite3"
    check = MemoryCheckCallback(db_path=db)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MemoryCheckWarning)
        _trainer(tmp_path, check).train()
    said = [str(w.message) for w in caught if issubclass(w.category, MemoryCheckWarning)]
    assert not [m for m in said if "per GPU" in m or "no estimate" in m], said  # a CPU run without gpu= is not fitted

    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert _get_current_dispatch_mode() is None  # the CPU tracker is gone after the measured steps
    report = check.report
    assert report["method"] == "lora" and report["profile"] == "hf" and report["steps"] == 2
    assert report["batch_shape"] == (BATCH, SEQ)  # read from the first batch by the forward pre-hook
    assert abs(report["predicted_peak"] / report["measured_peak"] - 1) <= CELL_LIMIT, report

    (run,) = RunsDB(db).runs()
    assert run.id == check.run_id and run.model == "tiny-llama" and run.device == "cpu"
    # the settings the Trainer ran, as written in _trainer
    s = run.settings
    assert (s["method"], s["batch_size"], s["seq_len"], s["lora_rank"]) == ("lora", BATCH, SEQ, RANK)
    assert sorted(s["target_modules"]) == TARGETS
    assert (s["optimizer"], s["attention"], s["gradient_checkpointing"]) == ("adamw_torch", "sdpa", "none")
    assert run.measured_peak == report["measured_peak"] and run.predicted_peak == report["predicted_peak"]
    assert run.measured_steps == 2 and run.measured["tracker"].startswith("vramwise.measuring.tracker")
    assert run.predicted["settings"]["seq_len"] == SEQ
    assert {"vramwise", "torch", "transformers", "peft"} <= set(run.versions)

    capsys.readouterr()  # what the training printed
    assert main(["runs", "--json", "--db", str(db)]) == 0
    listed = json.loads(capsys.readouterr().out)
    (row,) = listed["runs"]
    assert row["id"] == run.id and row["measured_peak"] == report["measured_peak"]
    assert row["error_percent"] == pytest.approx(report["error_percent"])
    (group,) = listed["summary"]
    assert (group["profile"], group["method"], group["measured"]) == ("hf", "lora", 1)
    assert group["max_abs_error_percent"] <= CELL_LIMIT * 100


def test_a_run_that_does_not_fit_warns_or_raises(tmp_path):
    # the model's weights alone exceed 1 MiB (two embeddings of 4096 x 128 bf16 values: 2 MiB)
    db = tmp_path / "runs.sqlite3"
    with pytest.raises(SettingsError, match="per GPU"):
        _trainer(tmp_path, MemoryCheckCallback(strict=True, db_path=db, gpu="1MiB"), steps=1).train()
    assert RunsDB(db).runs() == []  # raised before the run was recorded
    check = MemoryCheckCallback(db_path=db, gpu="1MiB")
    with pytest.warns(MemoryCheckWarning, match="`vramwise fit`"):
        _trainer(tmp_path, check, steps=1).train()
    (run,) = RunsDB(db).runs()
    assert run.device_bytes == 2**20 and run.measured_steps == 1


def test_what_the_live_objects_say(tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import TrainingArguments

    from vramwise.integrations.transformers import recipe_parts

    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=3, optim="sgd", use_cpu=True,
                             report_to=[], gradient_checkpointing=True)
    model = get_peft_model(_model("eager"), LoraConfig(r=4, target_modules="all-linear", lora_dropout=0.1))
    model.activation_checkpointing_enable()
    parts, overrides, fallback = recipe_parts(args, model)
    train, adapter = parts  # no DeepSpeed, no quantization config
    assert train["per_device_train_batch_size"] == 3 and train["optim"] == "sgd"
    # PEFT expands all-linear to every linear layer but the output head: the seven projections
    assert adapter["target_modules"] == TARGETS and adapter["r"] == 4
    assert overrides["model"]["model_type"] == "llama" and overrides["model"]["vocab_size"] == VOCAB
    assert (overrides["method"], overrides["attention"], overrides["gradient_checkpointing"]) == ("lora", "eager", "true")
    assert "world_size" not in overrides and "strategy" not in overrides  # one process
    assert fallback == {"load_in_4bit": False, "batch_size": 3, "optimizer": "sgd", "lora_rank": 4,
                        "target_modules": tuple(TARGETS), "lora_dropout": 0.1}
    full_parts, full, _ = recipe_parts(args, _model())
    assert len(full_parts) == 1 and full["method"] == "full" and full["gradient_checkpointing"] == "none"


def test_without_the_recipe_reader_the_live_values_are_used(tmp_path, monkeypatch):
    from peft import LoraConfig, get_peft_model
    from transformers import TrainerControl, TrainerState, TrainingArguments

    import vramwise.recipes
    from vramwise.errors import RecipeError

    def refuse(*a, **k):
        raise RecipeError("the recipe mapping:1: not a recipe of a format vramwise reads")

    monkeypatch.setattr(vramwise.recipes, "read_recipe", refuse)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=3, optim="sgd", use_cpu=True,
                             report_to=[])
    model = get_peft_model(_model(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    check = MemoryCheckCallback(db_path=tmp_path / "runs.sqlite3")
    check.on_train_begin(args, TrainerState(), TrainerControl(), model=model, optimizer=None)
    check.close()
    (run,) = RunsDB(tmp_path / "runs.sqlite3").runs()
    s = run.settings
    assert (s["method"], s["batch_size"], s["optimizer"], s["lora_rank"]) == ("lora", 3, "sgd", 4)
    assert sorted(s["target_modules"]) == ["q_proj", "v_proj"] and run.profile == "hf"
    assert check.recipe is None and any("could not read" in n for n in run.notes)
    assert run.measured_peak is None  # closed before any step
