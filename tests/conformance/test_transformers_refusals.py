"""The facts that say what transformers' own model classes refuse agree with the installed transformers.

Two kinds of input make transformers refuse to build a model, and the families state both as facts:

- ``transformers_attention``: the attention kernels the causal-LM class of the family's (text) model type
  runs. The reference is the class's own attributes, read as ``get_correct_attn_implementation`` reads
  them: eager always, sdpa when ``_supports_sdpa``, flash_attention_2 and 3 when ``_supports_flash_attn``,
  flex_attention when ``_supports_flex_attn``.
- ``embedding_padding_idx`` and ``embedding_padding_rows``: the config's pad_token_id (its config
  class's default when absent) as the padding_idx of tables of that many rows. The reference is a
  build on the meta device of the family's ``reference:`` config: with pad_token_id = rows - 1 it builds,
  with pad_token_id = rows it does not (torch's nn.Embedding asserts the index lies in the table) where
  the family reads the id, and builds where it does not.

Families transformers cannot build (no ``reference:`` block, or one that names a hand-derived test)
have no class to compare with. ``vramwise measure`` reads the same attributes at run time
(``vramwise.measuring.refusals``); the hf profile's warnings read these facts.
"""

from __future__ import annotations

import pytest

from helpers import require_installed

require_installed("torch", "transformers")  # imported by the tests that use them

import vramwise  # noqa: E402
from helpers import reference_default_config, reference_minimal_config, sample_families  # noqa: E402

_REG = vramwise.Registry.default()


def _buildable(own: dict) -> bool:
    """Of a family file's own entries (Registry.family_entries: the compiled family's values, read without
    compiling every family at collection)."""
    ref = own.get("reference") or {}
    return (not own.get("abstract") and not own.get("fallback") and bool(own.get("model_types")) and bool(ref)
            and not ref.get("hand_derived"))


FAMILIES = sorted(name for name in _REG.family_names()
                  if _buildable(_REG.family_entries(name, "abstract", "fallback", "model_types", "reference")))


def _config(family: str) -> dict:
    ref = _REG.family(family).reference
    return reference_minimal_config(ref) or reference_default_config(ref)


def _text_config(config: dict):
    """transformers' text config of ``config`` (the one AutoModelForCausalLM builds, as measure builds it)."""
    from transformers import AutoConfig

    d = dict(config)
    return AutoConfig.for_model(d.pop("model_type"), **d).get_text_config()


def _causal_lm_class(text_config):
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(text_config.model_type)
    if name is None:
        pytest.skip(f"transformers has no causal LM for model_type {text_config.model_type!r}")
    return getattr(transformers, name)


def _with_pad(config: dict, value) -> dict:
    """``config`` with pad_token_id ``value`` where the text model reads it (its text_config when it has
    one), or without it (``value`` None); as measure builds the text config."""
    out = {k: v for k, v in config.items() if k != "pad_token_id"}
    text = dict(out["text_config"]) if isinstance(out.get("text_config"), dict) else None
    if text is not None:
        text.pop("pad_token_id", None)
        out["text_config"] = text
    if value is not None:
        (text if text is not None else out)["pad_token_id"] = value
    return out


def _build(text_config, **changes) -> None:
    """Build the causal LM of ``text_config`` with ``changes`` on the meta device (nothing allocated)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    d = {k: v for k, v in text_config.to_dict().items() if k not in ("model_type", "transformers_version")}
    d.update(changes)
    cfg = AutoConfig.for_model(text_config.model_type, **d)
    with torch.device("meta"):
        AutoModelForCausalLM.from_config(cfg)


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_kernels_are_the_class_attributes(family):
    config = _config(family)
    cls = _causal_lm_class(_text_config(config))
    expected = ["eager"]
    if cls._supports_sdpa:
        expected.append("sdpa")
    if cls._supports_flash_attn:
        expected += ["flash_attention_2", "flash_attention_3"]
    if cls._supports_flex_attn:
        expected.append("flex_attention")
    got = vramwise.load_model(config).facts["transformers_attention"]
    assert sorted(got) == sorted(expected), (
        f"{cls.__name__}: _supports_sdpa {cls._supports_sdpa}, _supports_flash_attn {cls._supports_flash_attn}, "
        f"_supports_flex_attn {cls._supports_flex_attn}; write transformers_attention: default: [{', '.join(expected)}] "
        f"in families/stacks/hf/{family}.yaml")


@pytest.mark.parametrize("family", sample_families(FAMILIES))  # two meta-device builds a family: a sample
def test_padding_idx_is_the_pad_token_id_transformers_builds_with(family):
    config = _config(family)
    text = _text_config(config)
    _causal_lm_class(text)
    facts = vramwise.load_model(_with_pad(config, None)).facts
    rows = facts["embedding_padding_rows"]
    reads = vramwise.load_model(_with_pad(config, rows)).facts["embedding_padding_idx"] == rows
    if reads:
        # the config class's own default when the config names none
        assert facts["embedding_padding_idx"] == getattr(type(text)(), "pad_token_id", None)
        _build(text, pad_token_id=rows - 1)  # the last row: builds
        with pytest.raises((AssertionError, IndexError)):  # one past it: the table refuses it
            _build(text, pad_token_id=rows)
    else:
        assert facts["embedding_padding_idx"] is None
        _build(text, pad_token_id=rows + 10**6)  # an id far outside every table: not read, so it builds
