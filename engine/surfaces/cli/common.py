"""What the commands share: the model and settings their arguments give, the estimate they make,
the note that names the other profile, and the optional plot."""

from __future__ import annotations

import os
from typing import Any

from vramwise.errors import SettingsError, VramwiseError
from vramwise.estimation.estimate import Estimate, estimate
from vramwise.profiles.settings import DEFAULT_PROFILE
from vramwise.estimation.size_only import size_only_model
from vramwise.estimation.registry import Registry
from vramwise.profiles.settings import SETTINGS
from vramwise.inputs.config import checkpoint_size, local_kind
from vramwise.surfaces.cli.format import count, count_bytes, gib

#: the profile compared with in the one-line note of estimate/explain, and the ratio that triggers it
OTHER_PROFILE = {"unsloth": "hf", "hf": "unsloth"}
NOTE_RATIO = 1.5


def recipe_of(args):
    """The :class:`~vramwise.Recipe` of ``--recipe`` (read once per command), or None without one. The flags
    given on the command line, MODEL and ``--set`` override what the recipe says."""
    paths = getattr(args, "recipe", None)
    if not paths:
        if getattr(args, "set_values", None) or getattr(args, "framework", None):
            raise SettingsError("--set and --framework apply to a recipe: give --recipe FILE")
        return None
    cached = getattr(args, "_recipe", None)
    if cached is not None:
        return cached
    if getattr(args, "params", None) is not None or getattr(args, "weight_bytes", None) is not None:
        raise SettingsError("give either --recipe or --params / --weight-bytes, not both")
    from vramwise.recipes.reader import read_recipe

    given = getattr(args, "given_flags", set())
    # a sweep's comma-separated list is the sweep's, applied over the recipe (settings_of)
    names = {s.name for s in SETTINGS}
    overrides = {name: getattr(args, name) for name in given if name in names
                 and not (isinstance(getattr(args, name), str) and "," in getattr(args, name))}
    if "profile" in given:
        overrides["profile"] = args.profile
    if args.model is not None:
        overrides["model"] = args.model
    for key, value in getattr(args, "set_values", None) or ():
        if key in given or (key == "model" and args.model is not None):
            raise SettingsError(f"--set {key}=... and the flag for {key} both given: keep one")
        if key in overrides:
            raise SettingsError(f"--set {key} given twice")
        overrides[key] = value
    recipe = read_recipe(paths if len(paths) > 1 else paths[0], framework=args.framework, overrides=overrides)
    args._recipe = recipe
    return recipe


def settings_of(args, skip: tuple = ()) -> dict:
    """The training settings of the parsed arguments, by name (a recipe's, under the flags given)."""
    recipe = recipe_of(args)
    if recipe is not None:
        given = getattr(args, "given_flags", set())
        return {name: getattr(args, name) if name in given else value
                for name, value in recipe.settings.items() if name not in skip}
    return {s.name: getattr(args, s.name) for s in SETTINGS if s.name not in skip}


def model_of(args) -> tuple[Any, str, str, bool]:
    """(model source or ModelSpec, profile, label for the output, size_only) from MODEL / --params / --weight-bytes
    or --recipe."""
    recipe = recipe_of(args)
    if recipe is not None:
        if recipe.model is None:
            raise SettingsError(f"{recipe.path or 'the recipe'} names no model: give MODEL or --set model=ORG/NAME")
        label = recipe.model if isinstance(recipe.model, str) else "the recipe's model"
        return recipe.model, recipe.profile, label, False
    model, params, weight_bytes = args.model, args.params, args.weight_bytes
    size_only = params is not None or weight_bytes is not None
    if model is None and not size_only:
        raise SettingsError("give a MODEL (config.json, folder or hub id), or --params / --weight-bytes")
    if model is not None and size_only:
        raise SettingsError("give either a MODEL or --params / --weight-bytes, not both")
    label = model
    if model is not None and local_kind(model) == "dir" and local_kind(os.path.join(model, "config.json")) is None:
        size, _ = checkpoint_size(model)
        if size is not None:  # weight files without a config: the size-only fallback
            label = f"{model} ({count_bytes(size)} of weights, no config)"
            model, weight_bytes, size_only = None, size, True
    if getattr(args, "hub", False) and model is not None and not size_only:
        from vramwise.inputs.catalog import HUB_PREFIX

        if local_kind(model) is not None:
            raise SettingsError(f"--hub reads a hub id, but {model} is a local path")
        model = model if model.startswith(HUB_PREFIX) else HUB_PREFIX + model
    if size_only:
        if args.profile not in ("size_only", DEFAULT_PROFILE):
            raise SettingsError(f"--params and --weight-bytes estimate shares of the model size (profile size_only); "
                                f"profile {args.profile} needs the model's config: give MODEL")
        if model is None and label is None:
            label = (f"a model of {count(int(params))} parameters (no config)" if params is not None
                     else f"a model of {count_bytes(int(weight_bytes))} of weights (no config)")
        spec = size_only_model(params=params, weight_bytes=int(weight_bytes) if weight_bytes is not None else None)
        return spec, "size_only", label, True
    return model, args.profile, label, False


def run_estimate(args) -> Estimate:
    """The estimate the arguments describe (a recipe's run with --recipe)."""
    model, profile, _, size_only = model_of(args)
    settings = settings_of(args)
    if size_only:
        settings.pop("target_modules")
    return estimate(model, profile=profile, trust_remote_code=args.trust_remote_code, **settings)


def recipe_lines(recipe, everything: bool = False) -> list[str]:
    """What a recipe gave: its parts, each setting it set (with file:line and key; ``everything``: the
    defaults too, with theirs) and its warnings."""
    if recipe is None:
        return []
    from vramwise.estimation.recipe import Origin

    parts = ", ".join(f"{fmt} {path}" if path else fmt for fmt, path in recipe.parts)
    lines = [f"recipe: {parts} ({recipe.framework} {recipe.framework_version}; profile {recipe.profile}, "
             f"{recipe.origins.get('profile', Origin('vramwise default')).describe()})"]
    shown = [(n, recipe.settings[n]) for n in recipe.settings
             if everything or recipe.origins[n].kind != "vramwise default"]
    shown += [(n, v) for n, v in recipe.extras.items()]
    if "model" in recipe.origins:
        shown.insert(0, ("model", recipe.model if isinstance(recipe.model, str) else "(a config mapping)"))
    width = max((len(n) for n, _ in shown), default=0)
    for name, value in shown:
        text = ",".join(value) if isinstance(value, tuple) else str(value)
        lines.append(f"  {name:<{width}}  {text:<24} {recipe.origins[name].describe()}")
    lines += [f"  warning: {w}" for w in recipe.warnings]
    return lines


def show_recipe(args, out, everything: bool = False) -> None:
    """Write the recipe's lines (nothing without --recipe)."""
    for line in recipe_lines(recipe_of(args), everything):
        out.write(line + "\n")


def with_recipe(args, data: dict) -> dict:
    """A command's JSON with the recipe it read under "recipe" (unchanged without --recipe)."""
    recipe = recipe_of(args)
    return data if recipe is None else {**data, "recipe": recipe.to_dict()}


def label_of(args) -> str:
    """What the output calls the model: its path or hub id, or the size it was given as (never None)."""
    recipe = recipe_of(args)
    if recipe is not None and isinstance(recipe.model, str):
        return recipe.model
    if args.model is not None:
        return args.model
    if args.params is not None:
        return f"a model of {count(int(args.params))} parameters (no config)"
    return f"a model of {count_bytes(int(args.weight_bytes))} of weights (no config)"


def other_profile_note(est: Estimate, model: Any, trust_remote_code: bool) -> str | None:
    """One line when the other profile, at the same settings, differs by more than 1.5x (only where it models the method)."""
    other = OTHER_PROFILE.get(est.profile)
    if other is None or model is None:
        return None
    reg = Registry.default()
    try:
        prof = reg.profile(other)
    except VramwiseError:
        return None
    if est.settings.method not in prof.methods:
        return None
    try:
        alt = estimate(est.model, profile=other, **est.settings.to_dict())
    except VramwiseError:
        return None
    ratio = alt.total / est.total if est.total else 0.0
    if not ratio or (1 / NOTE_RATIO) <= ratio <= NOTE_RATIO:
        return None
    bigger = f"{ratio:.1f}x" if ratio > 1 else f"1/{1 / ratio:.1f} of"
    return (f"note: profile {other} ({prof.summary}) gives {gib(alt.total)} GiB at the same settings, {bigger} this "
            f"figure; the two profiles model different training stacks (--profile {other})")


def plot(kind: str, obj, path: str | None, err) -> None:
    """Draw ``obj`` (an estimate, fit, comparison or sweep, as ``kind`` says) to ``path`` when --plot gave
    one; matplotlib is imported only then."""
    if not path:
        return
    from vramwise.answers import plots

    draw = {"estimate": plots.plot_estimate, "fit": plots.plot_fit, "compare": plots.plot_compare,
            "sweep": plots.plot_sweep}[kind]
    draw(obj, path)
    err.write(f"wrote {path}\n")
