"""What the registry keeps between estimates: resolved models, stages and settings.

A cache may only make estimates faster: a changed mapping or file is resolved again,
inputs are never modified, and the caches are bounded and can be emptied.
"""

from __future__ import annotations

import copy
import json
import os

import pytest

import vramwise

SMALL = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


@pytest.fixture()
def reg():
    return vramwise.Registry()


def test_a_mapping_is_resolved_once_per_content(reg):
    cfg = copy.deepcopy(SMALL)
    a = vramwise.load_model(cfg, registry=reg)
    assert vramwise.load_model(copy.deepcopy(SMALL), registry=reg) is a  # equal content, new object
    cfg["num_hidden_layers"] = 3  # the caller changes its dict afterwards
    b = vramwise.load_model(cfg, registry=reg)
    assert b is not a and b.num_layers == 3 and a.num_layers == 2
    assert cfg == dict(SMALL, num_hidden_layers=3)  # never modified


def test_nested_change_is_seen(reg):
    cfg = dict(SMALL, quantization_config={"llm_int8_skip_modules": ["lm_head"]})
    a = vramwise.load_model(cfg, registry=reg)
    cfg["quantization_config"]["llm_int8_skip_modules"].append("q_proj")
    b = vramwise.load_model(cfg, registry=reg)
    assert b is not a
    # q_proj: 256 x 256 per layer, 2 layers, now kept in 16 bit on top of nothing (lm_head is not quantizable here)
    assert b.aggregates["skipped_quantizable_params"] - a.aggregates["skipped_quantizable_params"] == 2 * 256 * 256


def test_a_file_is_resolved_again_when_it_changes(reg, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL))
    a = vramwise.load_model(str(path), registry=reg)
    assert vramwise.load_model(str(path), registry=reg) is a
    path.write_text(json.dumps(dict(SMALL, num_hidden_layers=4)))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a new version, even within the clock's resolution
    b = vramwise.load_model(str(path), registry=reg)
    assert b is not a and b.num_layers == 4
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 10)  # weights appear beside it
    c = vramwise.load_model(str(tmp_path), registry=reg)
    assert c.aggregates["checkpoint_bytes"] == 10


def test_estimates_agree_with_a_fresh_registry(reg):
    for b, s in ((1, 128), (8, 4096), (1, 128)):
        cached = vramwise.estimate(SMALL, registry=reg, batch_size=b, seq_len=s, method="lora")
        fresh = vramwise.estimate(SMALL, registry=vramwise.Registry(), batch_size=b, seq_len=s, method="lora")
        assert cached.to_dict() == fresh.to_dict()


def test_settings_that_python_calls_equal_are_kept_apart(reg):
    vramwise.estimate(SMALL, registry=reg, lora_rank=1)
    with pytest.raises(vramwise.SettingsError):
        vramwise.estimate(SMALL, registry=reg, lora_rank=True)  # True == 1, but it is not a rank
    assert vramwise.estimate(SMALL, registry=reg, lora_rank=1.0).settings.lora_rank == 1


def test_caches_are_bounded_and_can_be_cleared(reg):
    for n in range(300):
        vramwise.load_model(dict(SMALL, vocab_size=1000 + n), registry=reg)
    assert len(reg.models) == 256
    vramwise.estimate(SMALL, registry=reg)
    assert len(reg.stages) and len(reg.settings)
    reg.clear_caches()
    assert len(reg.models) == len(reg.stages) == len(reg.settings) == 0


def test_an_unhashable_target_list_is_accepted(reg):
    e = vramwise.estimate(SMALL, registry=reg, method="lora", target_modules=["q_proj", "v_proj"])
    assert e.lora_targets == ("q_proj", "v_proj")


# --- the identity of a mapping ------------------------------------------------------------------------------------

ROPE = dict(SMALL, rope_scaling={"type": "longrope", "long_factor": [1.0 + i / 64 for i in range(48)],
                                 "short_factor": [1.0] * 48})


def test_a_mapping_key_tells_apart_what_python_calls_equal():
    from vramwise.estimation.caches import config_key

    # 1 == 1.0 == True and 0.0 == -0.0 in Python, yet a config may be read differently for each
    keys = {config_key(dict(SMALL, tie_word_embeddings=v)) for v in (1, 1.0, True)}
    assert len(keys) == 3
    assert config_key(dict(SMALL, rope_theta=0.0)) != config_key(dict(SMALL, rope_theta=-0.0))
    assert config_key(copy.deepcopy(ROPE)) == config_key(ROPE)  # equal content, new objects


def test_a_change_deep_in_a_long_list_is_seen(reg):
    from vramwise.estimation.caches import config_key

    changed = copy.deepcopy(ROPE)
    changed["rope_scaling"]["long_factor"][-1] += 2 ** -40  # the last entry's last bits
    assert config_key(changed) != config_key(ROPE)
    a = vramwise.load_model(ROPE, registry=reg)
    assert vramwise.load_model(changed, registry=reg) is not a


def test_a_mapping_of_other_types_is_still_cached_by_content(reg):
    from collections import OrderedDict

    ordered = OrderedDict(SMALL)  # not a plain dict: identified as before, by its printed form
    a = vramwise.load_model(ordered, registry=reg)
    assert vramwise.load_model(OrderedDict(SMALL), registry=reg) is a
    assert vramwise.load_model(OrderedDict(SMALL, num_hidden_layers=3), registry=reg).num_layers == 3


def test_a_mapping_with_a_field_over_ten_thousand_entries_is_resolved_each_time():
    from vramwise.estimation.caches import config_key

    assert config_key(dict(SMALL, layer_types=["full_attention"] * 10_000)) is not None
    assert config_key(dict(SMALL, layer_types=["full_attention"] * 10_001)) is None
    assert config_key(dict(SMALL, extra={str(i): i for i in range(10_001)})) is None

    class Entries(list):
        pass

    assert config_key(dict(SMALL, layer_types=Entries(["full_attention"] * 10_001))) is None  # a list subclass too
    assert config_key(dict(SMALL, layer_types=Entries(["full_attention"] * 2))) is not None
    # many fields each within the bound make a long key, but are still kept
    assert config_key(dict(SMALL, **{f"f{i}": list(range(5_000)) for i in range(3)})) is not None
