"""The inventory: every module of a resolved model with exact shapes, and the totals formulas read.

A family's module rules give each layer class and the model level (embeddings, final norm,
lm_head, towers the config describes) their modules (:func:`build_modules`); :func:`take_inventory`
sums them into the :class:`~vramwise.models.model.Inventory` the formula files read.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Iterable, Mapping

from vramwise.errors import ConfigError, EvaluationError
from vramwise.models.facts import short_repr
from vramwise.models.family import Family, ModuleRule
from vramwise.models.model import Inventory, LayerClass, Module, module_groups
from vramwise.models.plan import IndexSet
from vramwise.models.skiplists import read_skip_list, skipped_quantizable

__all__ = ["build_module", "build_modules", "take_inventory", "MAX_DIMENSION", "MAX_COPIES"]


#: Largest dimension of a module, and most numbered copies of one (beyond them a config is not a model).
MAX_DIMENSION = 2**40
MAX_COPIES = 2**20


def _whole(value: Any, least: int, most: int) -> int | None:
    """``value`` as an int in [least, most] (an integral float counts), else None."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
        return None
    return value


def build_module(rule: ModuleRule, env: Mapping, where_layer: str) -> Module | None:
    """The module ``rule`` describes over ``env`` (facts and layer attributes), or None when its
    condition is false or it has no copies; shapes, LoRA parts and copies checked as whole numbers."""
    if rule.when is not None and not rule.when.evaluate(env):
        return None
    raw = tuple(e.evaluate(env) for e in rule.shape)
    shape = tuple(_whole(d, 1, MAX_DIMENSION) for d in raw)
    if None in shape:
        raise ConfigError(
            f"module {rule.name}{where_layer} gets shape {short_repr(list(raw))} from the config; every dimension "
            f"must be a whole number from 1 to {MAX_DIMENSION:,} (rule at {rule.where})"
        )
    parts = []
    for p in rule.lora:
        raw_part = (p.in_features.evaluate(env), p.out_features.evaluate(env), p.count.evaluate(env) if p.count is not None else 1)
        fin, fout, n = (_whole(raw_part[0], 1, MAX_DIMENSION), _whole(raw_part[1], 1, MAX_DIMENSION),
                        _whole(raw_part[2], 0, MAX_COPIES))
        if None in (fin, fout, n):
            raise ConfigError(f"module {rule.name}{where_layer} gets LoRA part {p.target} of {short_repr(list(raw_part))} "
                              f"(in, out, count); they must be whole numbers in range (rule at {rule.where})")
        parts.append((p.target, fin, fout, n, p.explicit_only))
    raw_repeat = rule.repeat.evaluate(env) if rule.repeat is not None else 1
    repeat = _whole(raw_repeat, 0, MAX_COPIES)
    if repeat is None:
        raise ConfigError(f"module {rule.name}{where_layer} gets repeat {short_repr(raw_repeat)}; it must be a whole "
                          f"number from 0 to {MAX_COPIES:,}")
    if repeat == 0:
        return None
    return Module(
        name=rule.name, kind=rule.kind, group=rule.group, path=rule.path, shape=shape,
        bias=bool(rule.bias.evaluate(env)), quantizable=rule.quantizable, lora_parts=tuple(parts),
        repeat=repeat, input=rule.input,
    )



def build_modules(family: Family, env: Mapping, layers: Iterable[tuple[IndexSet, dict]]) -> tuple[tuple, tuple]:
    """The layer classes with their modules, and the model-level modules, over the facts ``env``
    and the distinct layers (their indices and attributes)."""
    classes = []
    try:
        for indices, values in layers:
            lenv = {**env, **values}
            label = f" (layer {indices[0]})"
            mods = tuple(m for m in (build_module(r, lenv, label) for r in family.layer_modules) if m is not None)
            classes.append(LayerClass(indices=indices, attributes=MappingProxyType(values), modules=mods))
        model_mods = tuple(m for m in (build_module(r, env, "") for r in family.model_modules) if m is not None)
    except EvaluationError as e:  # a module's shape cannot be computed from these values
        raise ConfigError(f"the config's values do not fit the family's modules: {e}") from None
    return tuple(classes), model_mods


def take_inventory(family: Family, facts: Mapping[str, Any], classes: tuple, model_mods: tuple, n_layers: int,
                   checkpoint_bytes: int | None, skip_lists: dict | None = None) -> tuple[Inventory, dict]:
    """The inventory totals of a model, and its parameters per module group (``skip_lists``: the skip lists
    read for this model so far, :func:`~vramwise.models.skiplists.read_skip_list`)."""
    by_group: dict[str, int] = {}
    quantizable = 0
    linear_quantizable = 0
    total = 0
    for count, _, mods in module_groups(model_mods, classes):
        for m in mods:
            by_group[m.group] = by_group.get(m.group, 0) + count * m.params
            total += count * m.params
            if m.quantizable:
                quantizable += count * m.weight_params
                if m.kind == "linear":
                    linear_quantizable += count * m.weight_params
    layers_params = sum(lc.count * lc.params for lc in classes)
    largest_module = max((m.params // m.repeat for _, _, mods in module_groups(model_mods, classes) for m in mods), default=0)
    largest = max(classes, key=lambda lc: lc.params, default=None)
    largest_q = largest_lq = 0
    for m in largest.modules if largest is not None else ():
        if m.quantizable:
            largest_q += m.weight_params
            if m.kind == "linear":
                largest_lq += m.weight_params
    skip = facts.get(family.skip_modules_fact) if family.skip_modules_fact else None
    skip = read_skip_list(skip, family.path_roots, skip_lists) if skip else None  # read once for both readings below
    skipped = skipped_quantizable(module_groups(model_mods, classes), skip, family.path_roots) if skip else 0
    skipped_v5 = (skipped_quantizable(module_groups(model_mods, classes), skip, family.path_roots, inner=False)
                  if skip else 0)
    inventory = Inventory(
        params_total=total, quantizable_params=quantizable, linear_quantizable_params=linear_quantizable,
        non_quantizable_params=total - quantizable, skipped_quantizable_params=skipped,
        skipped_quantizable_params_v5=skipped_v5,
        checkpoint_bytes=checkpoint_bytes, num_layers=n_layers, layers_params=layers_params,
        largest_layer_params=largest.params if largest is not None else 0,
        largest_layer_quantizable_params=largest_q, largest_layer_linear_quantizable_params=largest_lq,
        largest_module_params=largest_module,
        embedding_params=by_group.get("embeddings", 0), head_params=by_group.get("lm_head", 0),
        norm_params=by_group.get("norms", 0), router_params=by_group.get("router", 0),
    )
    return inventory, by_group
