"""Framework releases as data: the releases a format file lists (``framework.releases``), the release a recipe is
read under (the one ``--framework NAME@VERSION`` names, else the newest), and rules dated by release.

LitGPT is the format with releases after its pinned one. What each release does was read off the tags of
Lightning-AI/litgpt (git show TAG:FILE):
- v0.5.9 and v0.5.10, finetune/lora.py:149-163: ``if devices * num_nodes > 1:`` builds
  ``FSDPStrategy(auto_wrap_policy={torch.nn.Linear}, activation_checkpointing_policy={Block}, ...)``;
- v0.5.11 (lines 151-163, 517-538) to v0.5.13 (lines 152-164, 522-543): it builds
  ``ModelParallelStrategy(parallelize_fn=parallelize_fn, data_parallel_size=devices * num_nodes)``, and
  ``parallelize_fn(activation_checkpointing=True)`` wraps each Block in ``checkpoint_wrapper`` and calls FSDP2's
  ``fully_shard`` on each Block, each trainable Linear and the model: the same full shard and the same
  activation checkpointing, from another source;
- ``lora_r: int = 8`` is setup()'s default in every one of them (lora.py:55 up to v0.5.12, :56 in v0.5.13).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vramwise
from vramwise.errors import FileFormatError, SettingsError
from vramwise.recipes import Formats, bundled_formats
from vramwise.surfaces.cli.main import main

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "litgpt"
LITGPT_RELEASES = ("0.5.9", "0.5.10", "0.5.11", "0.5.12", "0.5.13")
# A LitGPT LoRA recipe on 4 devices: lora_alpha makes it a finetune/lora.py recipe whose lora_r is setup()'s default
FOUR_DEVICES = {"checkpoint_dir": "checkpoints/meta-llama/Meta-Llama-3.1-8B", "devices": 4, "lora_alpha": 16,
                "train": {"micro_batch_size": 1, "max_seq_length": 512}}


def test_the_litgpt_format_knows_its_releases_and_reads_under_the_newest():
    fmt = bundled_formats().get("litgpt")
    assert tuple(r.version for r in fmt.known_releases()) == LITGPT_RELEASES
    assert fmt.version == "0.5.9" and fmt.newest.version == "0.5.13"  # pinned (line numbers) and newest
    # the tag dates (git for-each-ref refs/tags/v0.5.9, v0.5.13)
    assert (fmt.release("0.5.9").date, fmt.release("0.5.13").date) == ("2025-06-12", "2026-06-29")
    r = vramwise.read_recipe(FOUR_DEVICES)
    assert r.framework_version == "0.5.13"
    assert r.origins["lora_rank"].describe().startswith("litgpt 0.5.13 default (")


@pytest.mark.parametrize("release,lora_lines,model_parallel", [
    ("0.5.9", "lora.py:149-161", False), ("0.5.10", "lora.py:149-161", False),
    ("0.5.11", "lora.py:152-164", True), ("0.5.12", "lora.py:152-164", True), ("0.5.13", "lora.py:152-164", True),
])
def test_a_dated_rule_is_read_under_the_release_named(release, lora_lines, model_parallel):
    r = vramwise.read_recipe(FOUR_DEVICES, framework=f"litgpt@{release}")
    s, o = r.settings, r.origins
    assert r.framework_version == release
    # the same values under every release (a full shard, activation checkpointing, 4 ranks, lora_r 8) ...
    assert (s["strategy"], s["gradient_checkpointing"], s["world_size"], s["lora_rank"]) == ("fsdp", "true", 4, 8)
    # ... from the source of the release read (the newer rules cite v0.5.13's lines and v0.5.11's beside them)
    for name in ("strategy", "gradient_checkpointing"):
        assert (o[name].kind, o[name].key) == ("recipe", "devices")
        assert lora_lines in o[name].source
        assert ("ModelParallelStrategy" in o[name].source) == model_parallel
    # a default's origin names the release read
    assert (o["lora_rank"].kind, o["lora_rank"].framework, o["lora_rank"].version) == \
        ("framework default", "litgpt", release)


def test_the_newest_release_reads_as_the_release_named_newest():
    unnamed = vramwise.read_recipe(FOUR_DEVICES)
    named = vramwise.read_recipe(FOUR_DEVICES, framework="litgpt@0.5.13")
    assert unnamed.settings == named.settings
    assert {k: o.to_dict() for k, o in unnamed.origins.items()} == {k: o.to_dict() for k, o in named.origins.items()}
    assert "ModelParallelStrategy" in unnamed.origins["strategy"].source


def test_the_cli_heading_and_origins_name_the_release(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "vocab_size": 1000, "hidden_size": 256,
                               "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
                               "num_key_value_heads": 2}))
    recipe = FIXTURES / "llama-3.1-8b-lora.yaml"
    for framework, release in ((None, "0.5.13"), ("litgpt@0.5.9", "0.5.9")):
        argv = ["explain", str(cfg), "--recipe", str(recipe)] + (["--framework", framework] if framework else [])
        assert main(argv) == 0
        out = capsys.readouterr().out
        heading = next(line for line in out.splitlines() if line.startswith("recipe: "))
        assert f"(litgpt {release};" in heading, heading
        # the fixture leaves the LoRA switches lora_key... at setup()'s defaults: origins name the release
        assert f"litgpt {release} default" in out


def test_an_unknown_release_is_one_error_line_listing_the_known_ones(capsys):
    with pytest.raises(SettingsError) as e:
        vramwise.read_recipe(FOUR_DEVICES, framework="litgpt@0.4.0")
    message = str(e.value)
    assert "\n" not in message
    assert "litgpt 0.4.0 is not a release the litgpt format knows" in message
    assert "releases: " + ", ".join(LITGPT_RELEASES) in message
    # a format that lists one release knows that one alone
    with pytest.raises(SettingsError, match=r"releases: 0\.18\.0;"):
        vramwise.read_recipe({"base_model": "m", "micro_batch_size": 1}, framework="axolotl@0.17.0")
    assert main(["estimate", "--recipe", str(FIXTURES / "llama-3.1-8b-lora.yaml"), "--framework", "litgpt@0.4.0"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "releases: 0.5.9, 0.5.10, 0.5.11, 0.5.12, 0.5.13" in err


def test_a_version_written_with_more_zeros_is_the_same_release():
    assert vramwise.read_recipe(FOUR_DEVICES, framework="litgpt@0.5.9.0").framework_version == "0.5.9"


# -- the schema and the loader refuse a bad releases list -----------------------------------------

FORMAT = """\
schema_version: 1
format: toy
description: a format with releases
framework:
  name: toyfw
  version: "2.0"
  source: toyfw/config.py
  releases:
RELEASES
detect:
  signals:
    - {key: base, weight: 2}
model:
  - {key: base}
settings:
  batch_size:
    - {key: mbs}
    - {value: 3, default: true, since: "2.0", source: toyfw/config.py:20}
    - {value: 5, default: true, until: "2.0", source: toyfw/config.py:20}
"""
GOOD = """\
    - {version: "1.9", date: "2025-01-02", source: toyfw v1.9}
    - {version: "2.0", date: "2025-06-01", source: toyfw v2.0, note: the pinned release}"""


def _load(tmp_path, releases):
    folder = tmp_path / "f"
    folder.mkdir(exist_ok=True)
    (folder / "toy.yaml").write_text(FORMAT.replace("RELEASES", releases))
    return Formats.load(folder)


def test_a_good_releases_list_loads(tmp_path):
    fmt = _load(tmp_path, GOOD).get("toy")
    assert [r.version for r in fmt.known_releases()] == ["1.9", "2.0"] and fmt.newest.note == "the pinned release"
    r = vramwise.read_recipe({"base": "m"}, formats=_load(tmp_path, GOOD), framework="toy@1.9")
    assert r.settings["batch_size"] == 5  # the until-2.0 default


@pytest.mark.parametrize("releases,where,why", [
    # line 9 is the first release's line in FORMAT (8 lines before RELEASES); the entry starts at column 7
    (GOOD.replace('date: "2025-01-02", ', ""), r"toy\.yaml:9:7: \$\.framework\.releases\[0\]", "date"),
    (GOOD.replace("source: toyfw v1.9", "source: toyfw v1.9, commit: abc"),
     r"toy\.yaml:9:\d+: \$\.framework\.releases\[0\]\.commit: unknown key", "commit"),
    (GOOD.replace("2025-01-02", "Jan 2 2025"), r"toy\.yaml:9:\d+: \$\.framework\.releases\[0\]\.date", "Jan 2 2025"),
    (GOOD.replace('version: "1.9"', "version: one"), r"toy\.yaml:9:\d+: \$\.framework\.releases\[0\]\.version", "one"),
])
def test_the_schema_refuses_a_bad_release_entry(tmp_path, releases, where, why):
    with pytest.raises(FileFormatError, match=where) as e:
        _load(tmp_path, releases)
    assert why in str(e.value)


def test_a_releases_list_without_the_pinned_version_or_with_an_unlisted_dated_rule_is_refused(tmp_path):
    without_pinned = GOOD.replace('version: "2.0"', 'version: "2.1"')
    with pytest.raises(FileFormatError, match=r"toy\.yaml:9:5: \$\.framework\.releases: the pinned version 2\.0 is "
                                              r"not among the releases") as e:
        _load(tmp_path, without_pinned)
    # the rules dated 2.0 now name a release the file does not list: each said at its own line
    message = str(e.value)
    assert "$.settings.batch_size[1].since: since 2.0 is not a release the file lists (releases: 1.9, 2.1)" in message
    assert "$.settings.batch_size[2].until" in str(e.value)
    twice = GOOD + '\n    - {version: "2.0.0", date: "2025-06-02", source: again}'
    with pytest.raises(FileFormatError, match=r"toy\.yaml:11:\d+: \$\.framework\.releases\[2\]\.version: release "
                                              r"2\.0\.0 is listed twice"):
        _load(tmp_path, twice)


def test_every_bundled_release_list_holds_its_pinned_version_and_is_dated():
    for fmt in bundled_formats():
        assert fmt.release(fmt.version) is not None, fmt.name
        for r in fmt.releases:
            assert r.date and r.source, (fmt.name, r.version)


# -- the release a recipe's own keys tell (framework.release_signals) ------------------------------

THREE = GOOD + '\n    - {version: "2.1", date: "2025-09-01", source: toyfw v2.1}'
SIGNALS = """
  release_signals:
    - {when: [{key: old_knob, present: true}], until: "2.0", description: removed in 2.0, source: toyfw/config.py:7}
    - {when: [{key: new_knob, present: true}], since: "2.1", source: toyfw v2.1 config.py:9}"""


def test_a_key_a_release_removed_reads_the_recipe_under_the_newest_release_before_it(tmp_path):
    formats = _load(tmp_path, THREE + SIGNALS)
    plain = vramwise.read_recipe({"base": "m"}, formats=formats)
    assert (plain.framework_version, plain.release_basis, plain.settings["batch_size"]) == ("2.1", (), 3)
    # old_knob is read until 2.0 (exclusive): of 1.9, 2.0 and 2.1 only 1.9 reads it, whose default batch is 5
    old = vramwise.read_recipe({"base": "m", "old_knob": 1}, formats=formats)
    assert (old.framework_version, old.settings["batch_size"]) == ("1.9", 5)
    assert old.release_basis == ("old_knob (removed in 2.0): releases before 2.0",)
    assert old.origins["batch_size"].version == "1.9" and not old.warnings
    # new_knob says 2.1 or later: the newest, which the recipe would be read under anyway
    new = vramwise.read_recipe({"base": "m", "new_knob": 1}, formats=formats)
    assert (new.framework_version, new.release_basis) == ("2.1", ("new_knob: releases from 2.1",))


def test_keys_that_allow_no_release_or_a_named_release_they_rule_out_are_warned(tmp_path):
    formats = _load(tmp_path, THREE + SIGNALS)
    both = vramwise.read_recipe({"base": "m", "old_knob": 1, "new_knob": 1}, formats=formats)
    assert both.framework_version == "2.1" and both.release_basis == ()
    assert any("allow no release of toyfw" in w and "read under the newest, 2.1" in w for w in both.warnings)
    named = vramwise.read_recipe({"base": "m", "old_knob": 1}, formats=formats, framework="toy@2.0")
    assert named.framework_version == "2.0" and named.release_basis == () and named.settings["batch_size"] == 3
    assert any("read under toyfw 2.0 as named" in w and "old_knob" in w for w in named.warnings)


@pytest.mark.parametrize("signals,where,why", [
    (SIGNALS.replace('until: "2.0"', 'until: "3.0"'), r"\$\.framework\.release_signals\[0\]\.until",
     "until 3.0 is not a release the file lists"),
    (SIGNALS.replace('until: "2.0", ', ""), r"\$\.framework\.release_signals\[0\]", "since"),
    (SIGNALS.replace('until: "2.0"', 'since: "2.1", until: "2.0"'), r"\$\.framework\.release_signals\[0\]",
     "allows none of the releases"),
])
def test_a_bad_release_signal_is_refused_at_its_line(tmp_path, signals, where, why):
    with pytest.raises(FileFormatError, match=where) as e:
        _load(tmp_path, THREE + signals)
    assert why in str(e.value)


def test_litgpt_train_max_time_tells_a_release_from_0_5_11(capsys):
    # litgpt/args.py: TrainArgs.max_time is at line 31 of v0.5.11 and absent from v0.5.10's TrainArgs
    recipe = dict(FOUR_DEVICES, train=dict(FOUR_DEVICES["train"], max_time=3600))
    r = vramwise.read_recipe(recipe)
    assert r.framework_version == "0.5.13" and r.release_basis and "from 0.5.11" in r.release_basis[0]
    assert not any("max_time" in w for w in r.warnings)  # a known key: the release it tells, nothing unused
    older = vramwise.read_recipe(recipe, framework="litgpt@0.5.10")
    assert older.framework_version == "0.5.10"
    assert any("litgpt 0.5.10 as named" in w and "train.max_time" in w for w in older.warnings)
    assert not any("as named" in w for w in vramwise.read_recipe(recipe, framework="litgpt@0.5.11").warnings)
