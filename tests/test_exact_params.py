"""Parameter counts equal the model transformers builds on the meta device, per module and per kind.

The reference is transformers itself (``AutoModelForCausalLM.from_config`` on the meta device),
for each family's default config, a minimal config that leaves optional fields to their defaults,
and every config of the family in ../shared/configs (skipped when that folder is absent).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import vramwise  # noqa: E402
from helpers import by_kind, reference_params, shared_configs  # noqa: E402

# model type built by transformers for each family's checks
FAMILY_TYPES = {
    "llama": "llama",
    "mistral": "mistral",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "phi3": "phi3",
    "gemma2": "gemma2",
    "gemma3_text": "gemma3_text",
    "mixtral": "mixtral",
    "qwen2_moe": "qwen2_moe",
    "qwen3_moe": "qwen3_moe",
    "olmoe": "olmoe",
    "phimoe": "phimoe",
    "deepseek_v2": "deepseek_v2",
    "deepseek_v3": "deepseek_v3",
    "glm4_moe": "glm4_moe",
    "glm4_moe_lite": "glm4_moe_lite",
    "exaone_moe": "exaone_moe",
    "gpt_oss": "gpt_oss",
    "llama4": "llama4_text",
    "ernie4_5_moe": "ernie4_5_moe",
    "hunyuan_v1_moe": "hunyuan_v1_moe",
    "qwen3_next": "qwen3_next",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "gemma4": "gemma4_text",
    "dbrx": "dbrx",
    "ernie4_5_vl_moe": "ernie4_5_vl_moe",
    "gemma3n": "gemma3n_text",
    "solar_open": "solar_open",
    "minimax_m2": "minimax_m2",
    "gemma": "gemma",
    "phi": "phi",
}
# fields some default configs leave unusable (None) that the model code needs
DEFAULT_FIXES = {"hunyuan_v1_moe": {"head_dim": 128}, "dbrx": {"attn_config": {"rope_theta": 10000.0}}}

REFERENCE_TYPE = {"kimi_k2": "deepseek_v3"}

# Small configs with only the fields no default covers: the family's defaults must match the
# config class defaults for every field left out (head_dim, KV heads, ties, biases, ...).
MINIMAL = {"vocab_size": 270000, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 3,
           "num_attention_heads": 8}


# families whose configs use other field names
MINIMAL_NAMES = {
    "dbrx": {"vocab_size": 270000, "d_model": 256, "n_layers": 3, "n_heads": 8},
    # the default 15 KV-shared layers need more than 3 layers
    "gemma3n": {**MINIMAL, "num_kv_shared_layers": 1},
}


def _minimal(family: str) -> dict:
    return dict(MINIMAL_NAMES.get(family, MINIMAL))


# composite configs whose vision tower cannot be built around a minimal text tower
NO_MINIMAL = {"ernie4_5_vl_moe"}


def _compare(config: dict) -> None:
    spec = vramwise.load_model(config)
    ours = spec.module_params()
    ref = reference_params(config)
    assert set(ours) == set(ref), (
        f"modules only here: {sorted(set(ours) - set(ref))[:5]}; only in transformers: {sorted(set(ref) - set(ours))[:5]}"
    )
    diff = {p: (ours[p], ref[p]) for p in ours if ours[p] != ref[p]}
    assert not diff, f"parameter counts differ: {dict(list(diff.items())[:5])}"
    assert {k: v for k, v in spec.params_by_group.items() if v} == by_kind(ref)
    assert spec.params_total == sum(ref.values())


def _default_config(model_type: str) -> dict:
    from transformers import AutoConfig

    cfg = json.loads(AutoConfig.for_model(model_type).to_json_string(use_diff=False))
    return cfg


def _merge(base: dict, fixes: dict) -> dict:
    out = dict(base)
    for k, v in fixes.items():
        out[k] = _merge(out.get(k) or {}, v) if isinstance(v, dict) else v
    return out


def test_every_concrete_family_is_covered(registry):
    concrete = {f.name for f in registry.families.values() if not f.abstract and not f.fallback}
    assert concrete == set(FAMILY_TYPES)


@pytest.mark.parametrize("family", sorted(FAMILY_TYPES))
def test_default_config(family):
    cfg = _merge(_default_config(FAMILY_TYPES[family]), DEFAULT_FIXES.get(family, {}))
    assert vramwise.load_model(cfg).family == family
    _compare(cfg)


@pytest.mark.parametrize("family", sorted(set(FAMILY_TYPES) - NO_MINIMAL))
def test_minimal_config_defaults(family):
    minimal = _minimal(family)
    _compare(_merge({"model_type": FAMILY_TYPES[family], **minimal}, DEFAULT_FIXES.get(family, {})))


def test_gemma3_vision_language_text_tower():
    from transformers import AutoConfig

    cfg = json.loads(AutoConfig.for_model("gemma3").to_json_string(use_diff=False))
    cfg["text_config"]["num_hidden_layers"] = 4
    cfg["text_config"]["layer_types"] = cfg["text_config"]["layer_types"][:4]
    cfg["vision_config"]["num_hidden_layers"] = 1
    spec = vramwise.load_model(cfg)
    assert spec.family == "gemma3_text"
    _compare(cfg)


def test_generic_family_matches_llama_layout():
    cfg = {"model_type": "my_custom_llm", **MINIMAL, "num_key_value_heads": 2}
    spec = vramwise.load_model(cfg)
    assert spec.family == "generic"
    assert any("my_custom_llm" in w for w in spec.warnings)
    ref = reference_params({**cfg, "model_type": "llama"})
    assert spec.module_params() == ref


_SHARED = [(fam, name, path) for fam, mt in FAMILY_TYPES.items() for name, path in shared_configs(
    set(next(f for f in vramwise.Registry.default().families.values() if f.name == fam).model_types))]


@pytest.mark.skipif(not _SHARED, reason="../shared/configs is absent")
@pytest.mark.parametrize("family,name,path", _SHARED, ids=[n for _, n, _ in _SHARED] or None)
def test_shared_config(family, name, path):
    cfg = json.loads(path.read_text())
    assert vramwise.load_model(cfg).family == family
    # model types transformers does not know are built as the architecture they reuse
    cfg = {**cfg, "model_type": REFERENCE_TYPE.get(cfg["model_type"], cfg["model_type"])}
    _compare(cfg)
