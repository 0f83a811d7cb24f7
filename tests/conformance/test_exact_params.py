"""Parameter counts equal the model transformers builds on the meta device, per module and per kind.

The reference is transformers itself (``AutoModelForCausalLM.from_config`` on the meta device),
for each family's default config, a minimal config that leaves optional fields to their defaults,
and every config of the family in ../shared/configs (skipped when that folder is absent).
What is built for a family is stated in its file's ``reference:`` block (model type, fixes for
the default config, the minimal config, aliases of shared model types); no family is named here.
"""

from __future__ import annotations

import json

import pytest

from helpers import require_installed

require_installed("torch", "transformers")  # imported by the tests (helpers.reference_params)

import vramwise  # noqa: E402
from helpers import FAST_FAMILIES, by_kind, from_shared, reference_default_config, reference_minimal_config, reference_params, sample_families, shared_configs, slow_unless  # noqa: E402

_REG = vramwise.Registry.default()


def _concrete(fam) -> bool:
    """Neither abstract nor the fallback, and served by a model type (what transformers can build)."""
    return not fam.abstract and not fam.fallback and bool(fam.model_types)


def _hand_derived(fam) -> str | None:
    """The test file a family whose model type transformers cannot build names as its reference."""
    return (fam.reference or {}).get("hand_derived")


class _Own:
    """A family file's own entries (Registry.family_entries: the compiled family's values, read without compiling
    every family at collection), with the compiled family's attribute names."""

    def __init__(self, name: str):
        own = _REG.family_entries(name, "model_types", "fallback", "abstract", "reference")
        self.model_types = tuple(own.get("model_types") or ())
        self.fallback, self.abstract = bool(own.get("fallback")), bool(own.get("abstract"))
        self.reference = own.get("reference")


#: every concrete family, by name
CONCRETE = {name: own for name in _REG.family_names() if _concrete(own := _Own(name))}
#: the concrete families transformers can build (the rest name a hand-derived test instead)
BUILDABLE = {name: own for name, own in CONCRETE.items() if not _hand_derived(own)}


def _reference(family: str) -> dict:
    """The family's ``reference:`` block; a concrete family without one fails the test that asks."""
    fam = _REG.family(family)
    if fam.reference is None:
        pytest.fail(f"family {family!r} has no reference: block ({fam.file})", pytrace=False)
    return dict(fam.reference)


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


def test_reference_blocks_only_on_concrete_families(registry):
    missing = sorted(n for n, f in registry.families.items() if _concrete(f) and f.reference is None)
    assert not missing, f"concrete families without a reference: block: {missing}"
    extra = sorted(n for n, f in registry.families.items() if (f.abstract or f.fallback) and f.reference is not None)
    assert not extra, f"abstract or fallback families with a reference: block: {extra}"


# the default run builds FAST_FAMILIES (tests/helpers.py); .ci/run's slow tier builds every family
@pytest.mark.parametrize("family", slow_unless(sorted(BUILDABLE), lambda v: v[0] in FAST_FAMILIES))
def test_default_config(family):
    ref = _reference(family)
    cfg = reference_default_config(ref)
    assert vramwise.load_model(cfg).family == family
    _compare(cfg)


# a family without a reference block is listed too (and fails); `minimal: null` opts out
@pytest.mark.parametrize("family", sample_families(
    sorted(n for n, f in CONCRETE.items() if f.reference is None or f.reference.get("minimal") is not None)))
def test_minimal_config_defaults(family):
    """Small configs with only the fields no default covers: the family's defaults must match the
    config class defaults for every field left out (head_dim, KV heads, ties, biases, ...)."""
    ref = _reference(family)
    _compare(reference_minimal_config(ref))


@pytest.mark.parametrize("family", sorted(set(CONCRETE) - set(BUILDABLE)))
def test_hand_derived_reference_exists(family):
    """A family that cannot be built names a test file that exists and derives its counts."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / _hand_derived(CONCRETE[family])
    assert path.is_file(), f"{family}: {path} is missing"
    text = path.read_text(encoding="utf-8")
    assert "def test_" in text and CONCRETE[family].reference["model_type"] in text


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
    llama = _reference("llama")
    cfg = {"model_type": "my_custom_llm", **llama["minimal"], "num_key_value_heads": 2}
    spec = vramwise.load_model(cfg)
    assert spec.family == "generic"
    assert any("my_custom_llm" in w for w in spec.warnings)
    ref = reference_params({**cfg, "model_type": llama["model_type"]})
    assert spec.module_params() == ref


def _first_of_a_fast_family(seen: set):
    def keep(values) -> bool:  # the default run: one shared config of each of FAST_FAMILIES
        fresh = values[0] in FAST_FAMILIES and values[0] not in seen
        seen.add(values[0])
        return fresh
    return keep


_SHARED = from_shared(slow_unless([pytest.param(name, cfg, path, id=cfg) for name, fam in sorted(BUILDABLE.items())
                                   for cfg, path in shared_configs(set(fam.model_types))],
                                  _first_of_a_fast_family(set())), 3)


@pytest.mark.parametrize("family,name,path", _SHARED)
def test_shared_config(family, name, path):
    cfg = json.loads(path.read_text())
    assert vramwise.load_model(cfg).family == family
    # model types transformers does not know are built as the architecture they reuse
    aliases = (_REG.family(family).reference or {}).get("aliases") or {}
    cfg = {**cfg, "model_type": aliases.get(cfg["model_type"], cfg["model_type"])}
    _compare(cfg)
