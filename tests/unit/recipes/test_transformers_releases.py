"""The TRL releases of the transformers recipe format (frameworks/transformers.yaml framework.releases).

Release names are TRL's; transformers' TrainingArguments is the same in 5.24.0 and 5.25.0 (training_args.py
byte for byte). What each release does was read off huggingface/trl's tags v0.26.0..v1.9.0 (git show TAG:FILE)
and the wheels of trl 1.10.0..1.16.0 (and transformers 5.24.0 / 5.25.0):
- dtype: ModelConfig.dtype default None in 0.26.0 (model_config.py:92-93), "float32" from 0.27.0
  (model_config.py:91-92; 1.16.0 :89-90), and SFTTrainer's create_model_from_path reads a missing dtype as
  "auto" in 0.26.0 (trainer/utils.py:2007) and "float32" from 0.27.0 (utils.py:1154; 1.16.0 :1332);
- the loss: 0.26.0 to 1.3.0 leave it to the model (loss_type "nll", the full logits), or Liger's fused linear
  cross-entropy with use_liger_kernel (transformers/trainer.py:1494-1495); 1.4.0 adds loss_type "chunked_nll"
  (sft_config.py:264; sft_trainer.py:72, 192: the LM head in checkpointed chunks of 256 tokens); 1.7.0 to 1.14.x
  read an unset loss_type as "chunked_nll" unless use_liger_kernel (sft_config.py:335-336; 1.14.0 :333-334);
  1.15.0 and 1.16.0 score every batch through add_fused_lm_head (sft_trainer.py:1137 / :1144; trainer/utils.py
  :1545 / :1548), set Liger's fused_linear_cross_entropy False (sft_trainer.py:1133 / :1140) and build the full
  logits only for label smoothing with loss_type nll (sft_trainer.py:1599 / :1601);
- keys: ModelConfig.torch_dtype (model_config.py:184) and ScriptArguments.gradient_checkpointing_use_reentrant
  (scripts/utils.py:206) exist in 0.26.x only; SFTConfig.truncation_mode from 1.0.0 (sft_config.py:185),
  router_aux_loss_coef from 1.7.0 (sft_config.py:156); loss_type "chunked_nll" from 1.4.0.
- unchanged 0.26.0 to 1.16.0: max_length 1024 (sft_config.py:194 / :202-203), gradient_checkpointing True
  (sft_config.py:118 / base_config.py:62-63), lora_r 16 (model_config.py:118 / :107-108).
Tag dates: git for-each-ref refs/tags/vX --format='%(creatordate:short)'; 1.15.0 and 1.16.0 by their wheels'
file dates.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import vramwise
from vramwise.errors import FileFormatError, SettingsError
from vramwise.recipes import Formats, bundled_formats

pytestmark = pytest.mark.unit

TF = Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "transformers"
RELEASES = ("0.26.0", "0.27.0", "1.0.0", "1.4.0", "1.7.0", "1.15.0", "1.16.0")
# TRL's example LoRA config (use_peft, lora_r 16, no dtype, no loss_type, no use_liger_kernel)
SKILL = TF / "trl_skill_sft_config.yaml"


def trl_yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sft.yaml"
    path.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\n" + text)
    return path


def float32_warnings(r) -> list:
    return [w for w in r.warnings if "float32" in w and "not modelled" in w]


def test_the_format_lists_trl_s_releases_oldest_first_with_their_dates():
    fmt = bundled_formats().get("transformers")
    assert tuple(r.version for r in fmt.known_releases()) == RELEASES
    assert (fmt.framework, fmt.version, fmt.newest.version) == ("TRL", "0.26.0", "1.16.0")
    # the tags' creator dates (v0.26.0, v0.27.0, v1.7.0) and the 1.16.0 wheel's file date
    assert [fmt.release(v).date for v in ("0.26.0", "0.27.0", "1.7.0", "1.16.0")] == [
        "2025-12-09", "2026-01-16", "2026-06-25", "2026-10-15"]
    assert "transformers 5.25.0" in fmt.newest.source and "transformers 5.24.0" in fmt.release("0.26.0").source


def test_the_same_trl_yaml_under_the_pinned_and_the_newest_release():
    old = vramwise.read_recipe(SKILL, framework="transformers@0.26.0")
    new = vramwise.read_recipe(SKILL)
    assert (old.framework, old.framework_version, new.framework_version) == ("TRL", "0.26.0", "1.16.0")
    for r in (old, new):  # defaults unchanged 0.26.0 -> 1.16.0 (see the module docstring)
        assert (r.settings["seq_len"], r.settings["gradient_checkpointing"], r.settings["lora_rank"]) == (1024, "true", 16)
    # 0.26.0: the model's own loss over the full logits; 1.16.0: SFTTrainer's fused LM head
    assert old.settings["loss"] == "standard" and new.settings["loss"] == "fused"
    o = new.origins["loss"]
    assert o.kind == "framework default" and o.version == "1.16.0" and "sft_trainer.py:1144" in o.source
    # an unset dtype: "auto" in 0.26.0, float32 from 0.27.0 (not modelled, so said)
    assert float32_warnings(old) == []
    (w,) = float32_warnings(new)
    assert "model_config.py:89-90" in w


@pytest.mark.parametrize("release,text,loss", [
    ("1.4.0", "", "standard"),                     # loss_type default "nll"
    ("1.4.0", "loss_type: chunked_nll\n", "fused"),  # checkpointed chunks of 256 tokens
    ("1.7.0", "", "fused"),                        # unset -> chunked_nll
    ("1.7.0", "loss_type: nll\n", "standard"),     # named nll: the full logits
    ("1.7.0", "use_liger_kernel: true\n", "fused"),  # unset -> nll, with Liger's fused linear cross-entropy
    ("1.7.0", "use_liger_kernel: true\nliger_kernel_config: {fused_linear_cross_entropy: false}\n", "standard"),
    ("1.15.0", "loss_type: nll\n", "fused"),       # nll itself goes through the fused LM head
    ("1.16.0", "use_liger_kernel: true\nliger_kernel_config: {fused_linear_cross_entropy: false}\n", "fused"),
    ("1.16.0", "label_smoothing_factor: 0.1\n", "standard"),  # LabelSmoother on the full logits
    ("1.16.0", "label_smoothing_factor: 0.1\nloss_type: dft\n", "fused"),  # dft skips the label smoother
])
def test_the_loss_each_release_gives(tmp_path, release, text, loss):
    r = vramwise.read_recipe(trl_yaml(tmp_path, text), framework=f"trl@{release}")
    assert r.framework_version == release and r.settings["loss"] == loss


def test_a_plain_training_arguments_file_keeps_the_trainer_s_loss_under_every_release():
    # a saved TrainingArguments (no SFTConfig key) is run by transformers' Trainer, not SFTTrainer
    for release in (None, "transformers@0.26.0"):
        r = vramwise.read_recipe(TF / "trainingarguments_fsdp_saved.json", framework=release)
        assert r.settings["loss"] == "standard" and float32_warnings(r) == []


def test_a_saved_sftconfig_under_the_newest_release():
    # written by trl 0.26.0: loss_type "nll", model_init_kwargs null, max_length 2048
    r = vramwise.read_recipe(TF / "sftconfig_saved.json")
    assert r.framework_version == "1.16.0" and r.settings["loss"] == "fused" and r.settings["seq_len"] == 2048
    (w,) = float32_warnings(r)
    assert "model_init_kwargs.dtype" in w and "utils.py:1332" in w
    assert float32_warnings(vramwise.read_recipe(TF / "sftconfig_saved.json", framework="transformers@0.26.0")) == []


def test_a_dtype_given_is_not_warned(tmp_path):
    r = vramwise.read_recipe(trl_yaml(tmp_path, "dtype: bfloat16\n"))
    assert r.framework_version == "1.16.0" and float32_warnings(r) == []
    r = vramwise.read_recipe(trl_yaml(tmp_path, "dtype: float32\n"), framework="transformers@0.26.0")
    assert len(float32_warnings(r)) == 1  # float32 named: warned under every release


@pytest.mark.parametrize("text,release", [
    ("torch_dtype: bfloat16\n", "0.26.0"),                 # removed at 0.27.0
    ("gradient_checkpointing_use_reentrant: true\n", "0.26.0"),  # removed at 0.27.0
    ("truncation_mode: keep_start\n", "1.16.0"),           # from 1.0.0
    ("router_aux_loss_coef: 0.01\n", "1.16.0"),            # from 1.7.0
])
def test_the_release_a_key_tells(tmp_path, text, release):
    r = vramwise.read_recipe(trl_yaml(tmp_path, text))
    assert r.framework_version == release
    key = text.split(":")[0]
    if release == "0.26.0":  # the key chose an older release than the newest: the heading says which
        assert r.release_basis and key in r.release_basis[0] and "before 0.27.0" in r.release_basis[0]
        assert r.settings["loss"] == "standard" and float32_warnings(r) == []
    assert not any("unknown" in w for w in r.warnings)


def test_a_named_release_a_key_rules_out_is_warned(tmp_path):
    r = vramwise.read_recipe(trl_yaml(tmp_path, "router_aux_loss_coef: 0.01\n"), framework="trl@1.4.0")
    assert r.framework_version == "1.4.0"
    assert any("read under TRL 1.4.0 as named" in w and "router_aux_loss_coef" in w and "from 1.7.0" in w
               for w in r.warnings)


def test_a_transformers_version_is_not_a_release_name():
    with pytest.raises(SettingsError, match=r"TRL 5\.25\.0 is not a release the transformers format knows "
                                            r"\(releases: 0\.26\.0, 0\.27\.0, 1\.0\.0, 1\.4\.0, 1\.7\.0, 1\.15\.0, "
                                            r"1\.16\.0"):
        vramwise.read_recipe(SKILL, framework="transformers@5.25.0")


# -- unmodelled keys dated by release (generic: a toy format) ---------------------------------------

TOY = """\
schema_version: 1
format: toy
description: a format with releases
framework:
  name: toyfw
  version: "2.0"
  source: toyfw/config.py
  releases:
    - {version: "1.9", date: "2025-01-02", source: toyfw v1.9}
    - {version: "2.0", date: "2025-06-01", source: toyfw v2.0}
detect:
  signals:
    - {key: base, weight: 2}
model:
  - {key: base}
settings:
  batch_size:
    - {value: 3, default: true, source: toyfw/config.py:20}
unmodelled:
  - {key: fp32, when: [{key: fp32, present: false}], SINCE, why: an unset fp32 is true from 2.0}
"""


def _toy(tmp_path, since):
    folder = tmp_path / "f"
    folder.mkdir(exist_ok=True)
    (folder / "toy.yaml").write_text(TOY.replace("SINCE", since))
    return Formats.load(folder)


def test_an_unmodelled_key_dated_by_release_is_warned_under_those_releases_only(tmp_path):
    formats = _toy(tmp_path, 'since: "2.0"')
    warned = lambda r: [w for w in r.warnings if "an unset fp32" in w]  # noqa: E731
    assert len(warned(vramwise.read_recipe({"base": "m"}, formats=formats))) == 1  # the newest, 2.0
    assert warned(vramwise.read_recipe({"base": "m"}, formats=formats, framework="toy@1.9")) == []


def test_an_unmodelled_key_dated_by_an_unlisted_release_is_refused_at_its_line(tmp_path):
    with pytest.raises(FileFormatError, match=r"toy\.yaml:\d+:\d+: \$\.unmodelled\[0\]\.since: since 2\.1 is not a "
                                              r"release the file lists \(releases: 1\.9, 2\.0\)"):
        _toy(tmp_path, 'since: "2.1"')
