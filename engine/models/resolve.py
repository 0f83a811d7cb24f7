"""From a config mapping and a family to a resolved model: facts, layer plan, modules, inventory.

The result, :class:`~vramwise.models.model.ModelSpec`, is what every profile is evaluated on.
Each step has its module: :mod:`~vramwise.models.facts` (the values read from the config),
:mod:`~vramwise.models.plan` (which layers are alike), :mod:`~vramwise.models.inventory` (modules
and totals, with :mod:`~vramwise.models.skiplists`).
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from vramwise.errors import ConfigError
from vramwise.rules.expr.language import render
from vramwise.models.facts import FactOrigin, resolve_facts, short_repr
from vramwise.models.family import Family
from vramwise.models.checkpoint_formats import checkpoint_storage
from vramwise.models.inventory import build_modules, take_inventory
from vramwise.models.model import ModelSpec, stored_inventory
from vramwise.models.plan import layer_classes

__all__ = ["resolve_model"]


def resolve_model(
    family: Family,
    root: Mapping,
    text: Mapping,
    *,
    model_type: str | None,
    warnings: Iterable[str] = (),
    origin: str = "",
    checkpoint_bytes: int | None = None,
    checkpoint_origin: str | None = None,
    checkpoint_as_stored: str | None = None,
    stored_placement: Any = None,
) -> ModelSpec:
    """Resolve ``family`` on a config (``root``: whole config, ``text``: its text view; ``origin``: where it
    was read from). ``checkpoint_as_stored`` names the format of a checkpoint a runtime loads as it is stored
    (``"GGUF Q4_K_M"``): ``checkpoint_bytes`` is then the weights' own bytes (the inventory's ``checkpoint_as_stored``),
    and ``stored_placement`` (a GGUF model's) its bytes by where llama.cpp places them (the ``stored_*`` inventory fields)."""
    warns = list(warnings)
    origins: dict[str, FactOrigin] = {}
    facts = resolve_facts(family, root, text, warns, origins)
    n_layers = facts.get(family.layer_count)
    least = next((r.min for r in family.facts if r.name == family.layer_count and r.min is not None), 1)
    if not isinstance(n_layers, int) or isinstance(n_layers, bool) or n_layers < least:
        raise ConfigError(f"{family.layer_count} must be a positive integer, got {n_layers!r}")

    env = dict(facts)
    classes, model_mods = build_modules(family, env, layer_classes(family, env, n_layers))
    skip_lists: dict = {}  # a skip list is read once for the inventory and the checkpoint's format
    inventory, by_group = take_inventory(family, facts, classes, model_mods, n_layers, checkpoint_bytes, skip_lists)
    quantized = checkpoint_storage(root.get("quantization_config") or text.get("quantization_config"),
                                   classes, model_mods, family.path_roots, warns, skip_lists)
    if quantized is not None:
        inventory = replace(inventory, checkpoint_quantized_params=quantized.quantized_params,
                            checkpoint_quantized_bytes=quantized.quantized_bytes,
                            checkpoint_quantized_head_params=quantized.head_params,
                            checkpoint_quantized_head_bytes=quantized.head_bytes)
    for rule in family.warning_rules:
        if rule.when.evaluate(facts):
            warns.append(render(rule.message, facts))
    if checkpoint_bytes is not None and not 0 <= checkpoint_bytes <= 2**60:
        raise ConfigError(f"the checkpoint's size {short_repr(checkpoint_bytes)} bytes is not plausible (from {checkpoint_origin})")
    total = inventory.params_total
    if checkpoint_as_stored is not None:
        if checkpoint_bytes is None:
            raise ConfigError(f"a {checkpoint_as_stored} checkpoint without its size (from {checkpoint_origin})")
        inventory = replace(inventory, checkpoint_as_stored=True)
        if stored_placement is not None:
            inventory = replace(inventory, **stored_inventory(stored_placement, n_layers))
        warns.append(
            f"the weights are the {checkpoint_origin}: {checkpoint_bytes / 2**30:.2f} GiB as stored, exact to the "
            "byte; the rest of the estimate is the profile's own (the llama.cpp profile: llama.cpp's KV cache and "
            "buffers)"
        )
    elif checkpoint_bytes is not None and checkpoint_bytes > 2 * total:
        extra = checkpoint_bytes - 2 * total
        warns.append(
            f"the checkpoint holds {extra / 2**30:.2f} GiB more than the text tower's 16-bit weights "
            f"(vision/audio towers or modules the family does not model), from {checkpoint_origin}; "
            "they are added to the weights"
        )
    return ModelSpec(
        family=family.name, family_file=family.file, model_type=model_type, facts=MappingProxyType(facts),
        num_layers=n_layers, layer_classes=classes, model_modules=model_mods,
        warnings=tuple(warns), origin=origin,
        peft_target_parameters=family.peft_target_parameters.get(model_type, MappingProxyType({})),
        compiled_family=family, fact_origins=MappingProxyType(origins), inventory=inventory,
        params_by_group=MappingProxyType(dict(sorted(by_group.items()))),
        checkpoint_format=quantized.format if quantized is not None else checkpoint_as_stored,
    )
