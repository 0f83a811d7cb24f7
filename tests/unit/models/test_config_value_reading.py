"""How config values are read where they are not written as the family's type says: a flag given as 0 or 1,
a size given as an integral float (32.0), a number with a fraction where the reference estimator applies int(),
and a null or 0 head_dim. Each is read as the reference estimator reads it (seed,
/work/shared/seed/vram-estimator-seed.txt; docs/unsloth-profile.md#untyped-configs), or refused with one
ConfigError that names the field; never read as another number without a word."""

from __future__ import annotations

import copy

import pytest

import vramwise
from vramwise.estimation.registry import Registry

# Llama-2-7B's shapes: per layer q, k, v, o 4 x 4096^2 = 67,108,864, gate/up/down 3 x 4096 x 11008 = 135,266,304,
# two norms 8,192: 202,383,360; x 32 layers = 6,476,267,520; embedding and untied head 2 x 32000 x 4096 =
# 262,144,000; final norm 4,096: 6,738,415,616 (Meta's published count for Llama 2 7B)
LLAMA2_7B = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32}
LLAMA2_7B_PARAMS = 6_738_415_616


def test_integral_floats_read_as_ints():
    floats = {**LLAMA2_7B, "num_hidden_layers": 32.0, "hidden_size": 4096.0, "intermediate_size": 11008.0,
              "vocab_size": 32000.0, "num_attention_heads": 32.0}
    ints = vramwise.estimate(LLAMA2_7B)
    read = vramwise.estimate(floats)
    assert ints.params_total == LLAMA2_7B_PARAMS
    assert read.params_total == LLAMA2_7B_PARAMS
    assert read.total == ints.total
    assert read.to_dict() == ints.to_dict()  # every figure, phase and setting
    assert type(read.model.facts["num_hidden_layers"]) is int
    assert not [w for w in read.warnings if "int()" in w]  # nothing was dropped, nothing to say


SMALL = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


@pytest.mark.parametrize("field, delta", [
    # untied: the output head adds vocab x hidden = 1000 x 256 = 256,000 parameters
    ("tie_word_embeddings", -1000 * 256),
    # q, k, v, o biases: 256 + 2 x (2 heads x 64) + 256 = 768 per layer, 1,536 over 2 layers
    ("attention_bias", 2 * (256 + 2 * 2 * 64 + 256)),
    # gate and up biases 2 x 512, down 256: 1,280 per layer, 2,560 over 2 layers
    ("mlp_bias", 2 * (2 * 512 + 256)),
])
def test_flags_given_as_0_or_1(field, delta):
    # the reference reads its flags by truthiness (seed line 1: bool(getattr(config, ...)) and `not tie_embeddings`),
    # so 0 and 1 are false and true; each reads exactly as the bool does
    false = vramwise.estimate({**SMALL, field: False})
    true = vramwise.estimate({**SMALL, field: True})
    zero = vramwise.estimate({**SMALL, field: 0})
    one = vramwise.estimate({**SMALL, field: 1})
    assert one.params_total - zero.params_total == delta
    assert (zero.params_total, zero.total) == (false.params_total, false.total)
    assert (one.params_total, one.total) == (true.params_total, true.total)
    assert one.model.facts[field] is True and zero.model.facts[field] is False


def _meta_params(cfg: dict) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    conf = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(conf)
    return sum({id(p): p.numel() for p in model.parameters()}.values())  # shared (tied) weights once


@pytest.mark.parametrize("config, flags", [
    (SMALL, {"tie_word_embeddings": 0, "attention_bias": 1, "mlp_bias": 1}),
    ({**SMALL, "model_type": "cohere"}, {"use_qk_norm": 1, "tie_word_embeddings": 0}),
])
def test_0_1_flags_count_what_transformers_builds_from_the_bools(config, flags):
    # transformers 5 refuses 0/1 where a bool is typed, so its model is built from the bools they stand for
    expected = _meta_params({**config, **{k: bool(v) for k, v in flags.items()}})
    assert vramwise.estimate({**config, **flags}).params_total == expected


@pytest.mark.parametrize("value", [2, -1, 0.5, "true", "0", [1]])
def test_other_flag_values_stay_one_error(value):
    # only 0 and 1 are read as flags: 2 or "false" would be true by truthiness, a silent surprise
    with pytest.raises(vramwise.ConfigError, match=r"tie_word_embeddings\) should be a bool \(true or false; 0 and 1"):
        vramwise.estimate({**SMALL, "tie_word_embeddings": value})


@pytest.mark.parametrize("field, value", [
    ("num_hidden_layers", 32.5),  # the reference's range(num_hidden_layers) fails
    ("hidden_size", 4096.5),      # the reference's products would hold fractions of parameters
    ("intermediate_size", 11008.5),
    ("num_attention_heads", 31.9),
    ("vocab_size", 32000.25),
])
def test_a_fraction_the_reference_does_not_truncate_is_refused(field, value):
    with pytest.raises(vramwise.ConfigError, match=rf"config field {field} should be an int, got {value}"):
        vramwise.estimate({**LLAMA2_7B, field: value})


MOE = {"model_type": "some_new_arch", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96,
       "num_hidden_layers": 4, "num_attention_heads": 4, "num_experts": 4, "moe_intermediate_size": 16,
       "num_experts_per_tok": 2}


@pytest.mark.parametrize("field, fraction, integer", [
    # seed line 1 ("top-k MoE activations", "MoE top-k aliases"): num_experts_per_tok = int(...) of the first alias
    ("num_experts_per_tok", 2.7, 2),
    ("moe_top_k", 3.5, 3),
    # the dense-layer rules: range(min(int(first_k_dense_replace), L)), {int(i) for i in mlp_only_layers},
    # {int(i) for i in moe_layers}, int(moe_layer_start_index / end / interval)
    ("first_k_dense_replace", 1.5, 1),
    ("mlp_only_layers", [1.9, 3.2], [1, 3]),
    ("moe_layers", [1.7], [1]),
    ("moe_layer_interval", 2.5, 2),
    # "extend MoE family extraction": dense_intermediate_size = int(intermediate_size_mlp)
    ("intermediate_size_mlp", 128.9, 128),
])
def test_a_fraction_where_the_reference_applies_int_is_truncated_with_a_warning(field, fraction, integer):
    base = {k: v for k, v in MOE.items() if not (field == "moe_top_k" and k == "num_experts_per_tok")}
    if field == "moe_layer_interval":
        base["moe_layer_start_index"] = 0
    cut = vramwise.estimate({**base, field: fraction})
    whole = vramwise.estimate({**base, field: integer})
    assert cut.total == whole.total and cut.params_total == whole.params_total
    said = [w for w in cut.warnings if "int()" in w]
    assert len(said) == 1 and field in said[0]
    assert not [w for w in whole.warnings if "int()" in w]


def test_a_truncated_value_still_meets_its_bound():
    # int(0.5) = 0 experts per token would silently drop every routed expert from the activations: refused,
    # the message saying what the value was read as
    with pytest.raises(vramwise.ConfigError, match=r"num_experts_per_tok is 0.5 \(read as 0\); it must be at least 1"):
        vramwise.estimate({**MOE, "num_experts_per_tok": 0.5})


def test_a_step_the_reference_does_not_truncate_is_refused():
    # the reference computes (i + 1) % decoder_sparse_step with the value as given: 1.5 marks layers 2 and 5
    # ((i + 1) % 1.5 == 0 for i + 1 = 3, 6): no integer step does that, so it is refused
    with pytest.raises(vramwise.ConfigError, match=r"decoder_sparse_step should be an int, got 1.5"):
        vramwise.estimate({**MOE, "decoder_sparse_step": 1.5})


def test_truncate_applies_only_to_ints(tmp_path):
    families = tmp_path / "families"
    families.mkdir()
    (families / "toy.yaml").write_text(
        "schema_version: 1\nfamily: toy\ndescription: d\nsource: s\nmodel_types: [toy]\n"
        "facts:\n  n: {description: d, unit: count, aliases: [n], type: int, default: 1}\n"
        "  f: {description: d, unit: flag, aliases: [f], type: bool, truncate: true, default: false}\n"
        "layers:\n  count: n\n  modules: {}\n",
        encoding="utf-8")
    with pytest.raises(vramwise.FileFormatError, match=r"toy.yaml:\d+:\d+: .*truncate applies to an int fact or a list of ints"):
        Registry(families_dir=families).family("toy")


# --- head_dim null or 0: hidden_size // num_attention_heads -------------------------------------------------


def test_a_null_head_dim_is_read_as_transformers_reads_it():
    # independent source: GlmConfig keeps head_dim None (typed int | None) and GLM's rotary embedding then takes
    # its width as `getattr(config, "head_dim", None) or hidden_size // num_attention_heads` (modeling_glm.py):
    # 256 // 8 = 32, of which partial_rotary_factor 0.5 rotates 16, 8 frequencies
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.glm import modeling_glm

    conf = transformers.GlmConfig(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                  num_attention_heads=8, num_key_value_heads=2, head_dim=None)
    assert conf.head_dim is None
    with torch.device("cpu"):
        rope = modeling_glm.GlmRotaryEmbedding(conf)
    width = 2 * rope.inv_freq.numel() / conf.rope_parameters.get("partial_rotary_factor", 1.0)
    glm = {"model_type": "glm", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2}
    null = vramwise.estimate({**glm, "head_dim": None})
    assert null.model.facts["head_dim"] == width == 256 // 8
    assert null.params_total == vramwise.estimate({**glm, "head_dim": 32}).params_total
    # left out, GlmConfig's default of 128 applies instead
    assert vramwise.estimate(glm).model.facts["head_dim"] == transformers.GlmConfig().head_dim == 128


def _family_configs():
    """One config per concrete family: its minimal reference config, else its first example's (from the files' own
    entries, the compiled families' values: Registry.family_entries, no family compiled at collection)."""
    reg = Registry.default()
    for name in reg.family_names():
        fam = reg.family_entries(name, "abstract", "reference", "model_types", "examples")
        if fam.get("abstract"):
            continue
        ref = fam.get("reference") or {}
        model_types = fam.get("model_types") or ()
        if ref.get("minimal"):
            cfg = dict(ref["minimal"])
            model_type = ref.get("model_type") or (model_types[0] if model_types else None)
            if model_type:
                cfg.setdefault("model_type", model_type)
        elif fam.get("examples"):
            cfg = copy.deepcopy(fam["examples"][0]["config"])
        else:
            continue
        yield pytest.param(name, cfg, id=name)


@pytest.mark.parametrize("name, config", list(_family_configs()))
@pytest.mark.parametrize("value", [None, 0])
def test_every_family_builds_with_head_dim_null_or_zero(name, config, value):
    # The reference reads a head width as `head_dim or hidden_size // num_attention_heads` (seed, "Symbols": K from
    # H / num_attention_heads); transformers' Llama4TextConfig fills a None head_dim the same way, and GLM's
    # rotary embedding reads it so (above). A family that reads head_dim from the config reads null and 0 so;
    # the others compute their head width from other fields and ignore it.
    reg = Registry.default()
    given = reg.resolve({**config, "head_dim": value}, family=name)
    assert given.params_total > 0
    fam = reg.family(name)
    reads_it = any(a.path == ("head_dim",) for f in fam.facts for a in f.aliases)
    if reads_it:
        facts = given.facts
        legacy = facts["hidden_size"] // facts["num_attention_heads"]
        spelled = reg.resolve({**config, "head_dim": legacy}, family=name)
        assert given.params_total == spelled.params_total
