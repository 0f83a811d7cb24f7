"""The layer plan groups layers exactly as visiting every layer does.

The reference here is the definition: evaluate every per-layer attribute at every index
and group indices by equal attributes. The planner must give the same classes (same
indices, same attribute values, same order) for real configs and for random dispatch
fields, and the same error where visiting every layer fails.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vramwise
from vramwise.models.model import _hashable
from vramwise.models.facts import resolve_facts
from vramwise.models.plan import IndexSet, analyse, layer_classes
from vramwise.inputs.config import text_view
from helpers import from_shared, shared_configs

REG = vramwise.Registry.default()


def brute_force(family, facts, n):
    fixed = {}
    for a in family.attributes:
        if not a.per_layer:
            fixed[a.name] = a.expr.evaluate({**facts, **fixed})
    groups = {}
    for i in range(n):
        values = dict(fixed)
        env = {**facts, **fixed, "i": i}
        for a in family.attributes:
            if a.per_layer:
                values[a.name] = env[a.name] = a.expr.evaluate(env)
        key = tuple(_hashable(values[a.name]) for a in family.attributes)
        groups.setdefault(key, (values, []))[1].append(i)
    return [(tuple(idx), values) for values, idx in groups.values()]


def planned(spec):
    return [(tuple(lc.indices), dict(lc.attributes)) for lc in spec.layer_classes]


def check(config, reg=REG):
    """None when the config loads and its plan is the definition's; else the load's error, after checking
    that the planner failed only where visiting every layer fails too."""
    try:
        spec = vramwise.load_model(config, registry=reg)
    except vramwise.VramwiseError as e:
        spec, error = None, str(e)
    family = reg.family_for([config.get("model_type")])[0]
    if spec is not None:
        assert planned(spec) == brute_force(family, dict(spec.facts), spec.num_layers)
        return None
    # the load failed: resolve the facts as the load does; where they resolve, plan the layers on them
    try:
        facts = resolve_facts(family, config, text_view(config), [], {})
    except vramwise.VramwiseError:
        return error  # the facts fail before any layer is planned
    n = facts[family.layer_count]
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return error  # no layer count to plan
    try:
        plan = layer_classes(family, dict(facts), n)
    except vramwise.VramwiseError:
        plan = None
    if plan is None:
        # the planner may only fail where visiting every layer fails too
        with pytest.raises(vramwise.VramwiseError):
            brute_force(family, facts, n)
    else:  # the load failed after the plan (modules, inventory): the plan itself is still the definition's
        assert [(tuple(idx), dict(values)) for idx, values in plan] == brute_force(family, facts, n)
    return error


PLAN_FAILS = """\
schema_version: 1
family: planfails
description: a llama whose layer kinds are read from a list without a bound
source: none
extends: llama
model_types: [planfails]
facts:
  kinds: {description: the kind of each layer, unit: list, aliases: [kinds], type: list, items: string, default: null}
layers:
  attributes:
    kind: {description: the layer's kind, unit: text, expr: "kinds[i]"}
"""


@pytest.fixture(scope="module")
def plan_fails(tmp_path_factory):
    """The bundled families and ``planfails``, whose plan fails at the first layer beyond its list."""
    import shutil
    from importlib import resources

    folder = tmp_path_factory.mktemp("families")
    for item in resources.files("vramwise.families").iterdir():
        if item.name.endswith(".yaml"):
            shutil.copyfile(item, folder / item.name)
    (folder / "planfails.yaml").write_text(PLAN_FAILS)
    return vramwise.Registry(folder)


def test_a_plan_that_fails_fails_where_visiting_every_layer_fails(plan_fails):
    config = dict(LLAMA, model_type="planfails", num_hidden_layers=4)
    # kinds for every layer: planned as the definition groups them
    assert check(dict(config, kinds=["a", "b", "a", "b"]), plan_fails) is None
    spec = vramwise.load_model(dict(config, kinds=["a", "b", "a", "b"]), registry=plan_fails)
    assert [tuple(lc.indices) for lc in spec.layer_classes] == [(0, 2), (1, 3)]
    # two kinds for four layers: layer 2 reads beyond the list, for the planner and the definition alike
    error = check(dict(config, kinds=["a", "b"]), plan_fails)
    assert error is not None and "layer 2" in error


def test_every_family_is_planned_from_atoms():
    for name, fam in REG.families.items():
        if not fam.abstract:
            assert fam.layer_atoms is not None, name


# every model type a family serves (the files' own entries: Registry.family_entries, no family compiled at collection)
_MODEL_TYPES = {t for name in REG.family_names() for t in REG.family_entries(name, "model_types").get("model_types") or ()}


@pytest.mark.parametrize("name,path", from_shared(shared_configs(_MODEL_TYPES), 2))
def test_shared_configs(name, path):
    assert check(json.loads(path.read_text())) is None


LLAMA = {"model_type": "qwen2_moe", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
         "num_attention_heads": 4, "num_key_value_heads": 2, "moe_intermediate_size": 32,
         "shared_expert_intermediate_size": 64}

small_ints = st.integers(min_value=-3, max_value=40)
index_lists = st.lists(st.one_of(small_ints, st.sampled_from([1.0, 7.0])), max_size=12)
kinds = st.lists(st.sampled_from(["sliding_attention", "full_attention", "linear_attention"]), max_size=40)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model_type=st.sampled_from(["qwen2_moe", "llama4_text", "ernie4_5_moe", "deepseek_v3", "exaone_moe", "gemma2", "gemma3_text", "qwen3_next", "qwen2"]),
    n=st.integers(min_value=1, max_value=40),
    fields=st.fixed_dictionaries({}, optional={
        "num_experts": st.sampled_from([0, 4, 8]),
        "layer_types": kinds,
        "mlp_layer_types": st.lists(st.sampled_from(["dense", "sparse", "Dense", "moe"]), max_size=40),
        "moe_layers": index_lists,
        "interleave_moe_layer_step": st.integers(min_value=1, max_value=7),
        "moe_layer_start_index": st.integers(min_value=0, max_value=10),  # fact bounds: see test_bad_list_elements
        "moe_layer_end_index": st.integers(min_value=-1, max_value=30),
        "moe_layer_interval": st.integers(min_value=1, max_value=5),
        "first_k_dense_replace": st.integers(min_value=0, max_value=45),
        "decoder_sparse_step": st.integers(min_value=1, max_value=6),
        "mlp_only_layers": index_lists,
        "sliding_window_pattern": st.integers(min_value=1, max_value=7),
        "full_attention_interval": st.integers(min_value=1, max_value=6),
        "use_sliding_window": st.booleans(),
        "max_window_layers": st.integers(min_value=-2, max_value=45),
        "sliding_window": st.sampled_from([None, 128]),
    }),
)
def test_random_dispatch_fields(model_type, n, fields):
    config = dict(LLAMA, model_type=model_type, num_hidden_layers=n, **fields)
    if model_type == "deepseek_v3":
        config.update(kv_lora_rank=16, q_lora_rank=None, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                      n_routed_experts=fields.get("num_experts", 4))
    check(config)


def test_a_million_alternating_layers_are_two_progressions():
    n = 1_000_000
    config = dict(LLAMA, model_type="llama", num_hidden_layers=n, sliding_window=4096,
                  layer_types=["sliding_attention", "full_attention"] * (n // 2))
    spec = vramwise.load_model(config, registry=REG)
    assert [lc.indices.runs for lc in spec.layer_classes] == [(range(0, n, 2),), (range(1, n, 2),)]
    assert [lc.attributes["kv_window"] for lc in spec.layer_classes] == [4096, None]


def test_index_set():
    s = IndexSet([range(1, 10, 2), range(0, 10, 2)])
    assert list(s) == list(range(10)) and len(s) == 10 and s[0] == 0 and s[3] == 3 and 7 in s and 11 not in s
    assert IndexSet.of([0, 2, 4, 5, 6, 9]).runs == (range(0, 5, 2), range(5, 7), range(9, 10))
    assert IndexSet.of([3]) == (3,)


def test_index_used_otherwise_visits_every_layer():
    from vramwise.models.family import AttributeRule
    from vramwise.rules.expr.language import compile_expression

    rule = AttributeRule("x", compile_expression("i * 2", allowed={"i"}), True, "")
    assert analyse([rule]) is None


@pytest.mark.parametrize("field,value,message", [
    ("moe_layers", [1, "3"], "moe_layers[1] should be an int"),
    ("mlp_only_layers", [None], "mlp_only_layers[0] should be an int"),
    ("layer_types", ["full_attention", 3], "layer_types[1] should be a string"),
    ("num_experts_per_tok", [1, "a"], "num_experts_per_tok"),
])
def test_bad_list_elements_are_named(field, value, message):
    with pytest.raises(vramwise.ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        vramwise.load_model(dict(LLAMA, num_hidden_layers=4, num_experts=4, **{field: value}), registry=REG)
