"""Settings the training stacks expose, the experts layout, and profiles sharing formula files.

Expected values are derived by hand in the comments from the formulas they exercise
(formulas/hf/weights.yaml) and the module shapes of transformers' Mixtral.
"""

from __future__ import annotations

import shutil
from importlib import resources

import pytest

import vramwise
from vramwise import SettingsError
from vramwise.inputs import installed
from vramwise.profiles.settings import installed_experts_layout

# A tiny Mixtral: H 64, 2 layers, 4 heads of 16, 2 KV heads (k/v 32 wide), 4 experts of 128, vocabulary 100.
TINY_MIXTRAL = dict(model_type="mixtral", vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                    tie_word_embeddings=False)
# Per layer: attention q 64*64 + k 32*64 + v 32*64 + o 64*64 = 12,288; router (an nn.Linear in
# transformers 5) 4*64 = 256; experts 4 x (gate, up, down) 3*128*64 = 98,304.
# Outside the 4-bit candidates: embedding 100*64 + head 100*64 + norms 2*2*64 + 64 = 13,120.
ATTENTION, ROUTER, EXPERTS, REST = 2 * 12288, 2 * 256, 2 * 98304, 13120
NF4 = 0.5 + 4 / 64  # half a byte per weight + one float32 absmax per 64 (no double quantization)
FP32 = 4  # prepare_model_for_kbit_training upcasts every weight that is not 4-bit


def test_fused_experts_stay_unquantized_in_float32():
    e = vramwise.estimate(TINY_MIXTRAL, profile="hf", method="qlora", experts_layout="fused")
    # 4-bit: attention and router (nn.Linear); float32: experts (3-D parameters) and the rest
    assert e.weights == pytest.approx((ATTENTION + ROUTER) * NF4 + (EXPERTS + REST) * FP32)
    assert any("keeps the fused expert tensors" in w for w in e.warnings)


def test_per_expert_linears_are_quantized():
    e = vramwise.estimate(TINY_MIXTRAL, profile="hf", method="qlora", experts_layout="per_expert")
    assert e.weights == pytest.approx((ATTENTION + ROUTER + EXPERTS) * NF4 + REST * FP32)
    assert not any("fused expert tensors" in w for w in e.warnings)


def test_layout_does_not_change_lora_in_16_bit():
    a = vramwise.estimate(TINY_MIXTRAL, profile="hf", method="lora", experts_layout="fused")
    b = vramwise.estimate(TINY_MIXTRAL, profile="hf", method="lora", experts_layout="per_expert")
    assert a.weights == b.weights == (ATTENTION + ROUTER + EXPERTS + REST) * 2


def test_default_layout_follows_the_installed_transformers(monkeypatch):
    monkeypatch.setattr(installed, "distribution_version", lambda name: "4.57.1")
    assert installed_experts_layout() == "per_expert"
    monkeypatch.setattr(installed, "distribution_version", lambda name: "5.0.0")
    assert installed_experts_layout() == "fused"
    monkeypatch.setattr(installed, "distribution_version", lambda name: None)  # not installed
    assert installed_experts_layout() == "fused"


@pytest.mark.parametrize("bad", ["stacked", 3, ["fused"]])
def test_unknown_layout_is_rejected(bad):
    with pytest.raises(SettingsError, match="experts layout"):
        vramwise.estimate(TINY_MIXTRAL, experts_layout=bad)


@pytest.mark.parametrize("name,bad", [("optimizer_in_bwd", "maybe"), ("activation_offloading", 2),
                                      ("compile", None), ("loss_chunks", 0), ("loss_chunks", 2**16 + 1)])
def test_stack_settings_are_validated(name, bad):
    with pytest.raises(SettingsError, match=name):
        vramwise.estimate(TINY_MIXTRAL, **{name: bad})


def test_a_setting_the_profile_never_reads_is_named():
    e = vramwise.estimate(TINY_MIXTRAL, profile="unsloth", method="lora", optimizer_in_bwd=True, loss_chunks=4)
    assert "loss_chunks=4, optimizer_in_bwd=True are not modelled by the unsloth profile: ignored" in e.warnings
    plain = vramwise.estimate(TINY_MIXTRAL, profile="unsloth", method="lora")
    assert e.total == plain.total
    assert not any("not modelled" in w for w in plain.warnings)


def _copy_profile(tmp_path, name: str):
    dst = tmp_path / "formulas" / name
    dst.mkdir(parents=True)
    for item in resources.files("vramwise.formulas").joinpath(name).iterdir():
        if item.name.endswith(".yaml"):
            (dst / item.name).write_text(item.read_text(encoding="utf-8"))
    return dst


def test_a_profile_may_list_a_sibling_profiles_file(tmp_path):
    hf = _copy_profile(tmp_path, "hf")
    _copy_profile(tmp_path, "shared")  # the files hf lists as shared/...
    twin = tmp_path / "formulas" / "twin"
    shutil.copytree(hf, twin)
    manifest = (twin / "profile.yaml").read_text().replace("profile: hf", "profile: twin", 1)
    manifest = manifest.replace("\n  - weights.yaml", "\n  - hf/weights.yaml", 1)
    (twin / "profile.yaml").write_text(manifest)
    (twin / "weights.yaml").unlink()
    families = resources.files("vramwise.families")
    reg = vramwise.Registry(families_dir=families, formulas_dir=tmp_path / "formulas")
    prof = reg.profile("twin")
    assert any(str(hf / "weights.yaml") in f.expr.where for f in prof.formulas if f.id == "weights_bytes")
    a = vramwise.estimate(TINY_MIXTRAL, profile="twin", registry=reg, method="qlora")
    b = vramwise.estimate(TINY_MIXTRAL, profile="hf", registry=reg, method="qlora")
    assert a.total == b.total


@pytest.mark.parametrize("entry,message", [("nosuch/weights.yaml", "is not another profile"),
                                           ("twin/weights.yaml", "is not another profile"),
                                           ("hf/nosuch.yaml", "does not exist")])
def test_a_bad_sibling_reference_is_located(tmp_path, entry, message):
    _copy_profile(tmp_path, "hf")
    _copy_profile(tmp_path, "shared")
    twin = tmp_path / "formulas" / "twin"
    shutil.copytree(tmp_path / "formulas" / "hf", twin)
    manifest = (twin / "profile.yaml").read_text().replace("profile: hf", "profile: twin", 1)
    (twin / "profile.yaml").write_text(manifest.replace("\n  - weights.yaml", f"\n  - {entry}", 1))
    (twin / "weights.yaml").unlink()
    reg = vramwise.Registry(families_dir=resources.files("vramwise.families"), formulas_dir=tmp_path / "formulas")
    with pytest.raises(vramwise.FileFormatError, match=message) as info:
        reg.profile("twin")
    assert str(twin / "profile.yaml") in str(info.value)
