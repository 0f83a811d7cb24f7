"""The rules of the strategies manifest (formulas/strategies/strategies.yaml) that fit's advice reads:
each strategy's ``data_parallel`` (whether its GPUs each run a micro-batch) with its source, and
``advice.shards_in_order`` (the strategy changes the advice proposes, mildest first). A manifest that
breaks them is refused at file:line:col with the JSON path, by ``vramwise check`` and by the registry."""

from __future__ import annotations

import importlib.util
import shutil
from importlib import resources
from pathlib import Path

import pytest
import yaml

import vramwise
from vramwise import FileFormatError, Registry
from vramwise.profiles import settings
from vramwise.surfaces.cli.main import main

from helpers import DEEPSPEED_MISSING

STRATEGIES = Path(str(resources.files("vramwise.formulas").joinpath("strategies")))
TEXT = (STRATEGIES / "strategies.yaml").read_text(encoding="utf-8")
MANIFEST = yaml.safe_load(TEXT)


def _source(package: str, *parts: str) -> str:
    """The text of an installed package's module, found without importing the package."""
    spec = importlib.util.find_spec(package)
    return Path(spec.origin).parent.joinpath(*parts).read_text(encoding="utf-8")


def test_each_strategy_says_whether_its_gpus_multiply_the_batch_with_a_source():
    for name, entry in MANIFEST["strategies"].items():
        assert isinstance(entry["data_parallel"], bool), name
        assert entry["data_parallel_source"].strip(), name
    # DDP, FSDP and ZeRO start one process per GPU, each with its own micro-batch; device_map is one process
    # driving one replica laid over the GPUs: every strategy of the manifest but device_map
    expected = tuple(s for s in MANIFEST["strategies"] if s != "device_map")
    assert tuple(settings.DATA_PARALLEL_STRATEGIES) == expected
    assert "none" not in settings.DATA_PARALLEL_STRATEGIES  # one GPU is one replica


def test_the_sources_say_what_the_manifest_says():
    # transformers' Trainer: a model spread over several GPUs by its hf_device_map is model parallel and
    # runs with n_gpu 1, so its batch is the per-device batch (not multiplied by the GPUs)
    trainer = _source("transformers", "trainer.py")
    assert "if self.is_model_parallel:\n            self.args._n_gpu = 1" in trainer
    assert "train_batch_size = self.per_device_train_batch_size * max(1, self.n_gpu)" in _source(
        "transformers", "training_args.py")


def test_deepspeed_says_its_gpus_multiply_the_batch():
    # DeepSpeed: the batch is the micro-batch of each GPU x accumulation steps x the GPUs (read without importing
    # it; the README's test install has no DeepSpeed, .ci/run's has, and VRAMWISE_REQUIRE_DEEPSPEED=1 fails this skip)
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip(DEEPSPEED_MISSING)
    assert "train_batch == micro_batch * grad_acc * self.world_size" in _source("deepspeed", "runtime", "config.py")


def test_the_advice_order_is_the_manifest_s():
    # docs/fit-advice.md, kind 10: FSDP (full shard) or ZeRO-3 on the same GPUs, then ZeRO-3 offloading the
    # optimizer, then the parameters too
    expected = (("fsdp", "none"), ("zero3", "none"), ("zero3", "optimizer"), ("zero3", "parameters"))
    assert tuple(settings.SHARDS_IN_ORDER) == expected
    listed = tuple((e["strategy"], e["offload"]) for e in MANIFEST["advice"]["shards_in_order"])
    assert listed == expected
    # the registry's reading, checked against the strategies and their offloads, is the same
    assert Registry.default().strategy_shards_in_order() == expected


def _broken(tmp_path, old: str, new: str) -> Path:
    folder = tmp_path / "strategies"
    shutil.copytree(STRATEGIES, folder)
    path = folder / "strategies.yaml"
    assert TEXT.count(old) == 1, old
    path.write_text(TEXT.replace(old, new), encoding="utf-8")
    return path


def _at(text: str, needle: str, offset: int = 0) -> str:
    """``line:col`` (1-based) of the first ``needle`` in ``text``, ``offset`` characters on."""
    before = text[:text.index(needle) + offset]
    return f"{before.count(chr(10)) + 1}:{len(before) - before.rfind(chr(10))}"


@pytest.mark.parametrize("old, new, needle, offset, path, says", [
    # a strategy the manifest does not have: the position of its name
    ("- {strategy: zero3, offload: none}", "- {strategy: zero4, offload: none}", "zero4", 0,
     "$.advice.shards_in_order[1].strategy", "'zero4' is not a strategy of the manifest"),
    # an offload the strategy does not model: ddp offloads nothing (offload: [none])
    ("- {strategy: zero3, offload: parameters}", "- {strategy: ddp, offload: parameters}", "ddp, offload: parameters",
     len("ddp, offload: "), "$.advice.shards_in_order[3].offload", "ddp does not offload 'parameters' (its offload: none)"),
    # the same change twice: the position of the second entry
    ("- {strategy: zero3, offload: parameters}", "- {strategy: zero3, offload: none}",
     "- {strategy: zero3, offload: optimizer}\n    - {", len("- {strategy: zero3, offload: optimizer}\n    - "),
     "$.advice.shards_in_order[3]", "zero3 with offload none is listed twice"),
    # an offload that is no offload setting at all: the schema's
    ("- {strategy: zero3, offload: optimizer}", "- {strategy: zero3, offload: host}", "offload: host}",
     len("offload: "),
     "$.advice.shards_in_order[2].offload", "'host'"),
    # data_parallel is a yes or no
    ("    data_parallel: false\n", "    data_parallel: one\n", "data_parallel: one", len("data_parallel: "),
     "$.strategies.device_map.data_parallel", "'one' is not of type 'boolean'"),
])
def test_a_broken_advice_rule_is_refused_at_its_position(tmp_path, capsys, old, new, needle, offset, path, says):
    given = _broken(tmp_path, old, new)
    text = given.read_text(encoding="utf-8")
    where = f"{given}:{_at(text, needle, offset)}: {path}: "
    problems = vramwise.check([given])
    assert len(problems) == 1 and problems[0].startswith(where) and says in problems[0], (where, problems)
    assert main(["check", str(given)]) == 1
    out = capsys.readouterr()
    assert where in out.out + out.err and "Traceback" not in out.out + out.err


def test_a_strategy_without_data_parallel_is_refused(tmp_path):
    given = _broken(tmp_path, "    data_parallel: false\n", "")
    text = given.read_text(encoding="utf-8")
    # a missing key is placed at the entry itself: its first key (device_map's profiles)
    entry = "  device_map:\n    "
    where = f"{given}:{_at(text, entry + 'profiles', len(entry))}: $.strategies.device_map: "
    problems = vramwise.check([given])
    assert problems == [where + "'data_parallel' is a required property"], problems


def test_the_registry_refuses_a_broken_advice_list_when_it_is_read(tmp_path):
    given = _broken(tmp_path, "- {strategy: zero3, offload: none}", "- {strategy: zero4, offload: none}")
    formulas = tmp_path / "formulas"
    shutil.copytree(STRATEGIES.parent, formulas)
    shutil.copy(given, formulas / "strategies" / "strategies.yaml")
    reg = Registry(formulas_dir=formulas)
    with pytest.raises(FileFormatError, match=r"strategies\.yaml:\d+:18: \$\.advice\.shards_in_order\[1\]\.strategy"):
        reg.strategy_shards_in_order()
