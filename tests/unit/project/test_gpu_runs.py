"""The corpus of published GPU memory measurements (benchmarks/gpu_runs/*.yaml; schemas/gpu-runs-1.schema.json).

Every file is read through the data-file reader and validated against its schema; across the folder the run ids
are unique; each run names an https source with a verbatim quote, a hub model id, and settings that vramwise
knows by name and accepts by value, none both stated and read from defaults. No network.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from vramwise.errors import FileFormatError, SettingsError
from vramwise.profiles.settings import SETTING_NAMES, SETTINGS
from vramwise.rules.datafiles import load_data_file, load_schema, read_data_text

ROOT = Path(__file__).resolve().parents[3]
FOLDER = ROOT / "benchmarks" / "gpu_runs"
SCHEMA = "gpu-runs-1.schema.json"
FILES = sorted(FOLDER.glob("*.yaml"))
PARSE = {s.name: s.parse for s in SETTINGS}


def _load(path: Path):
    shown = f"benchmarks/gpu_runs/{path.name}"
    return load_data_file(read_data_text(path, shown), shown, SCHEMA)


def _runs():
    for path in FILES:
        for index, run in enumerate(_load(path).data["runs"]):
            yield path.name, index, run


def test_the_folder_has_files():
    assert FILES, f"no *.yaml in {FOLDER}"


def test_schema_is_valid_json_schema():
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(load_schema(SCHEMA))


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_file_loads_and_validates(path):
    data = _load(path).data
    assert data["schema_version"] == 1 and data["runs"]


def test_ids_are_unique_across_files():
    seen: dict[str, str] = {}
    clashes = []
    for name, index, run in _runs():
        if run["id"] in seen:
            clashes.append(f"{run['id']}: {seen[run['id']]} and {name}[{index}]")
        seen.setdefault(run["id"], f"{name}[{index}]")
    assert not clashes, clashes


def test_sources_are_https_with_a_quote():
    bad = [f"{name}[{index}] {run['id']}" for name, index, run in _runs()
           if not run["source"]["url"].startswith("https://") or not run["source"]["quote"].strip()]
    assert not bad, bad


def test_dates_are_dates():
    """An unquoted YYYY-MM-DD reaches the schema as a date (which it admits as "no JSON type"): anything else of no
    JSON type is refused here."""
    bad = [f"{name}[{index}] {run['id']}: {run['source']['date']!r}" for name, index, run in _runs()
           if "date" in run["source"] and not isinstance(run["source"]["date"], (str, datetime.date))]
    assert not bad, bad


def test_model_is_a_hub_id():
    bad = []
    for name, index, run in _runs():
        owner, _, model = run["model"].partition("/")
        if not owner or not model or "/" in model:
            bad.append(f"{name}[{index}] {run['id']}: {run['model']!r}")
    assert not bad, bad


def _setting_problems(run: dict) -> list[str]:
    """What is wrong with a run's settings by vramwise's rules: names it does not know, values its settings refuse."""
    problems = []
    for part in ("stated", "from_defaults"):
        for key, value in (run["settings"].get(part) or {}).items():
            where = f"{run['id']}: settings.{part}.{key}"
            if key not in SETTING_NAMES:
                problems.append(f"{where}: not a vramwise setting")
                continue
            try:
                PARSE[key](key, value)
            except SettingsError as e:
                problems.append(f"{where}: {e}")
    return problems


def test_settings_are_vramwise_settings_with_accepted_values():
    problems = [f"{name}[{index}] {p}" for name, index, run in _runs() for p in _setting_problems(run)]
    assert not problems, problems


def test_setting_check_refuses_what_the_schema_lets_through():
    # the schema types these loosely (a string, an integer); vramwise's settings refuse them: an attention kernel
    # it does not know, and a rank above its limit (vocabularies.limits: lora_rank at most 65,536)
    run = {"id": "x", "settings": {"stated": {"attention": "flash_attn", "lora_rank": 65537, "lora_r": 8},
                                   "from_defaults": {"gradient_checkpointing": "offload"}}}
    problems = _setting_problems(run)
    assert len(problems) == 4, problems
    assert any("settings.stated.lora_r: not a vramwise setting" in p for p in problems)
    assert any(p.startswith("x: settings.stated.attention: unknown attention") for p in problems)
    assert any(p.startswith("x: settings.stated.lora_rank: lora_rank must be a positive integer of at most 65,536") for p in problems)
    assert any(p.startswith("x: settings.from_defaults.gradient_checkpointing: unknown gradient checkpointing mode") for p in problems)


def test_stated_and_defaulted_settings_do_not_overlap():
    both = []
    for name, index, run in _runs():
        common = set(run["settings"]["stated"]) & set(run["settings"].get("from_defaults") or {})
        if common:
            both.append(f"{name}[{index}] {run['id']}: {sorted(common)}")
    assert not both, both



def test_answerais_qlora_runs_are_read_without_kbit_preparation():
    """Answer.AI's train.py (50efa1e, the release its benchmarks ran) never calls PEFT's
    prepare_model_for_kbit_training and loads every weight in bf16 (lines 523-524, 621-627): each of its
    QLoRA runs says so, whatever its strategy, rather than taking vramwise's default (PEFT's float32 upcast
    outside FSDP)."""
    qlora = [run for _, _, run in _runs() if run["framework"] == "fsdp-qlora"
             and {**run["settings"].get("from_defaults", {}), **run["settings"]["stated"]}.get("method") == "qlora"]
    assert len(qlora) >= 20
    for run in qlora:
        settings = {**run["settings"].get("from_defaults", {}), **run["settings"]["stated"]}
        assert settings.get("kbit_prepare") is False, run["id"]
        assert "prepare_model_for_kbit_training" in run["settings"]["defaults_source"], run["id"]

def test_schema_settings_are_vramwise_settings():
    """The schema's setting names are vramwise's (a renamed setting shows here, not as refused corpus files)."""
    names = set(load_schema(SCHEMA)["$defs"]["setting_values"]["properties"])
    assert names <= SETTING_NAMES, sorted(names - SETTING_NAMES)


_GOOD_RUN = """\
  - id: example-run
    source:
      url: https://example.org/post
      quote: "| 8 GB | 2,972 | OOM |"
    framework: unsloth
    model: meta-llama/Llama-3.1-8B-Instruct
    gpu: {name: "8 GB", count: 1}
    settings:
      stated: {method: qlora, lora_rank: 32, batch_size: 1}
    statistic: largest_seq_len
    value: 2972
    unit: tokens
"""
_HEAD = "schema_version: 1\ndescription: x\nruns:\n"


def _check_text(tmp_path, text: str) -> str:
    path = tmp_path / "broken.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(FileFormatError) as info:
        load_data_file(read_data_text(path, "broken.yaml"), "broken.yaml", SCHEMA)
    return str(info.value)


def test_the_example_run_is_accepted(tmp_path):
    path = tmp_path / "good.yaml"
    path.write_text(_HEAD + _GOOD_RUN, encoding="utf-8")
    assert load_data_file(read_data_text(path, "good.yaml"), "good.yaml", SCHEMA).data["runs"][0]["value"] == 2972


def test_an_unknown_key_is_refused_at_its_position(tmp_path):
    # line 4 is "  - id: ...", so the added key "gpus" on the run's fifth line sits at line 4 + 5 = 9, column 5
    text = _HEAD + _GOOD_RUN.replace("    framework: unsloth\n", "    framework: unsloth\n    gpus: 2\n")
    assert "broken.yaml:9:5: $.runs[0].gpus: unknown key 'gpus'" in _check_text(tmp_path, text)


def test_a_missing_quote_is_refused_at_the_source(tmp_path):
    # the source mapping starts on line 6 (url), column 7; its quote line is taken out
    text = _HEAD + _GOOD_RUN.replace('      quote: "| 8 GB | 2,972 | OOM |"\n', "")
    assert "broken.yaml:6:7: $.runs[0].source: 'quote' is a required property" in _check_text(tmp_path, text)


def test_defaults_need_their_source(tmp_path):
    text = _HEAD + _GOOD_RUN.replace("      stated: {method: qlora, lora_rank: 32, batch_size: 1}\n",
                                     "      stated: {method: qlora, lora_rank: 32, batch_size: 1}\n"
                                     "      from_defaults: {optimizer: adamw_8bit}\n")
    assert "'defaults_source' is a required property" in _check_text(tmp_path, text)


def test_a_fits_run_holds_true_in_bool(tmp_path):
    text = _HEAD + _GOOD_RUN.replace("statistic: largest_seq_len", "statistic: fits")
    message = _check_text(tmp_path, text)
    assert "broken.yaml:" in message and "$.runs[0]." in message
