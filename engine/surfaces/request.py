"""One reader of what a request asks, for the command line and the server alike.

A request names a model (a config, folder or hub id on the command line; a catalog name or an uploaded
config over the API; or the model a training recipe names), a profile, the training settings (a
recipe's, under the ones given), and for some answers a GPU. :func:`read_flags` reads the command
line's parsed arguments and :func:`read_body` a JSON body into the same frozen :class:`Request`; the
refusals both surfaces share (a recipe with a size, ``--set``/``framework`` without a recipe, a recipe
that names no model, ``gpus`` under a strategy or a serving profile) are made here, once. The surfaces
then only run the answer and print it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from vramwise.errors import ConfigError, RecipeError, SettingsError
from vramwise.profiles.settings import DEFAULT_PROFILE, SETTINGS
from vramwise.surfaces.views import count, count_bytes, strategy_gpus_problem

__all__ = ["Request", "read_flags", "read_flags_recipe", "read_flags_launch", "read_body", "read_body_recipe",
           "read_body_launch", "refuse_serving_gpus",
           "MAX_RECIPE_PARTS", "MAX_LIST", "CLI_NAMES", "API_NAMES"]

#: Parts of an uploaded recipe a request may hold.
MAX_RECIPE_PARTS = 8
#: the longest list a JSON field may hold (target_modules, gpus, seq_lens)
MAX_LIST = 64
#: the largest uploaded config.json text (the server's body limit: 1 MiB)
MAX_CONFIG_BYTES = 2**20
#: how each surface's users write the fields a shared refusal names
CLI_NAMES = {"strategy": "--strategy", "gpus": "--gpus", "world_size": "--world-size", "example": "--gpus 8",
             "serving_gpus": "--tensor-parallel-size x --pipeline-parallel-size", "serving_gpus_field": "--gpus"}
API_NAMES = {"strategy": "strategy", "gpus": "gpus", "world_size": "world_size", "example": "gpus: 8",
             "serving_gpus": "tensor_parallel_size x pipeline_parallel_size", "serving_gpus_field": "gpus"}


@dataclass(frozen=True)
class Request:
    """What a request asks: the model (a source the library reads, or a size-only ``ModelSpec``), the
    profile, the label the output calls the model, the settings by name (a recipe's under the ones
    given), the recipe read (None without one) and the launch line read (None without one)."""

    model: Any
    profile: str
    label: str
    settings: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    size_only: bool = False
    recipe: Any = None
    trust_remote_code: bool = False
    launch: Any = None

    def settings_dict(self, skip: Sequence[str] = ()) -> dict:
        """The settings as a new dict, less the names in ``skip``."""
        return {k: v for k, v in self.settings.items() if k not in skip}

    def with_settings(self, **changes: Any) -> "Request":
        return replace(self, settings=MappingProxyType({**self.settings, **changes}))

    def estimate(self):
        """The estimate this request asks for (a size-only model leaves target_modules to the profile)."""
        from vramwise.estimation.estimate import estimate

        settings = self.settings_dict(("target_modules",) if self.size_only else ())
        return estimate(self.model, profile=self.profile, trust_remote_code=self.trust_remote_code, **settings)

    def with_launch_gpus(self, gpus: int | None, world_size_given: bool) -> tuple[int | None, "Request"]:
        """(gpus, request) of an answer about a number of GPUs (fit): as a recipe's processes are, a launch line's
        world size under a strategy is the GPUs asked about when none are given, and GPUs given replace it.
        ``world_size_given``: a world size was given explicitly (it is the answer's to refuse or take)."""
        strategy = self.settings.get("strategy")
        if self.recipe is not None or self.launch is None or self.launch.world_size is None or world_size_given \
                or strategy in (None, "none"):
            return gpus, self
        if gpus is None:
            return self.settings.get("world_size"), self
        return gpus, self.with_settings(world_size=gpus)

    def with_strategy_gpus(self, gpus: Sequence[int], world_size: Any, names: Mapping[str, str]) -> "Request":
        """Under a strategy one GPU count is the number of GPUs it runs on (its world size); several
        counts, or a world size that differs, are refused naming both fields. ``world_size``: the one
        given beside ``gpus`` (None: none)."""
        strategy = self.settings.get("strategy")
        if strategy in (None, "none"):
            return self
        problem = strategy_gpus_problem(strategy, gpus, world_size,
                                        names=(names["strategy"], names["gpus"], names["world_size"]),
                                        example=names["example"])
        if problem is not None:
            raise SettingsError(problem)
        return self.with_settings(world_size=gpus[0])


def refuse_serving_gpus(est: Any, names: Mapping[str, str]) -> None:
    """A serving estimate runs on tensor x pipeline parallel GPUs: a GPU count beside it is refused."""
    if est.serving is not None:
        raise SettingsError(f"a vLLM server runs on {names['serving_gpus']} GPUs: give those instead of "
                            f"{names['serving_gpus_field']}")


def _no_model(recipe, where: str) -> SettingsError:
    return SettingsError(f"{recipe.path or 'the recipe'} names no model: {where}")


# -- the command line ---------------------------------------------------------------------------

def _launch_settings(launch, given, strategy: Any = None) -> dict:
    """The settings a launch line states, less those ``given`` explicitly (a flag, a body field; ``strategy``: the
    one given). Its world size is the ranks of a strategy: without one stated or given it is left out (the line's
    notes say so)."""
    if launch is None:
        return {}
    stated = {name: value for name, (value, _, _) in launch.settings().items() if name not in given}
    if ("strategy" in given and strategy in (None, "none")) or ("strategy" not in given and launch.strategy is None):
        stated.pop("world_size", None)
    return stated


def read_flags_launch(args):
    """The launch line of ``--launch`` (read once per command and kept on ``args``, with notes on the files it
    names), or None without one. The recipe files it names are read unless ``--recipe`` gives the recipe."""
    text = getattr(args, "launch", None)
    if text is None:
        return None
    cached = getattr(args, "_launch", None)
    if cached is not None:
        return cached
    from vramwise.recipes.launch import launch_parts, read_launch, with_notes
    from vramwise.recipes.shipped import launch_shipped

    launch = read_launch(text)
    given = bool(getattr(args, "recipe", None))
    shipped = [] if given else launch_shipped(launch, getattr(args, "framework", None))  # --config NAME
    paths, notes = launch_parts(launch, read_files=True, recipe_given=given, shipped_read=bool(shipped))
    args._launch, args._launch_paths = with_notes(launch, notes), shipped + paths
    return args._launch


def read_flags_recipe(args):
    """The recipe of ``--recipe`` (read once per command and kept on ``args``), else the recipe files the launch
    line names (``--launch``), or None without either. The flags given on the command line, MODEL and ``--set``
    override what the recipe says; the launch line's figures come under them and over the recipe's keys."""
    launch = read_flags_launch(args)
    paths = getattr(args, "recipe", None) or (getattr(args, "_launch_paths", None) if launch is not None else None)
    if not paths:
        if getattr(args, "set_values", None) or getattr(args, "framework", None):
            raise SettingsError("--set and --framework apply to a recipe: give --recipe FILE" +
                                (" (the launch line names no recipe file that exists here)" if launch is not None else ""))
        return None
    cached = getattr(args, "_recipe", None)
    if cached is not None:
        return cached
    if getattr(args, "params", None) is not None or getattr(args, "weight_bytes", None) is not None:
        raise SettingsError("give either --recipe or --params / --weight-bytes, not both")
    from vramwise.recipes.reader import read_recipe

    if getattr(args, "recipe", None):
        from vramwise.recipes.shipped import named_not_file

        for path in args.recipe:
            said = named_not_file(path) if isinstance(path, str) and not os.path.exists(path) else None
            if said is not None:
                raise RecipeError(said)
    given = getattr(args, "given_flags", set())
    # a sweep's comma-separated list is the sweep's, applied over the recipe
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
    recipe = read_recipe(paths if len(paths) > 1 else paths[0], framework=args.framework, overrides=overrides,
                         launch=launch)
    args._recipe = recipe
    return recipe


def _flags_settings(args, recipe) -> dict:
    if recipe is not None:
        given = getattr(args, "given_flags", set())
        return {name: getattr(args, name) if name in given else value for name, value in recipe.settings.items()}
    settings = {s.name: getattr(args, s.name) for s in SETTINGS if hasattr(args, s.name)}  # compare has no --method
    stated = _launch_settings(read_flags_launch(args), getattr(args, "given_flags", set()),
                              getattr(args, "strategy", None))
    return {**settings, **{k: v for k, v in stated.items() if k in settings}}


def _only_method(profile: str, default: str) -> str:
    """The one method of a profile that models one and serves no GPU budget (llama.cpp: inference), else ``default``
    (--method not given); an unknown profile keeps ``default`` (the estimate names the profiles)."""
    from vramwise.estimation.registry import Registry

    reg = Registry.default()
    if profile not in reg.profile_names():
        return default
    prof = reg.profile(profile)
    return prof.methods[0] if len(prof.methods) == 1 and prof.serving is None else default


def read_flags(args) -> Request:
    """The request of the command line's parsed arguments: MODEL / ``--params`` / ``--weight-bytes`` or
    ``--recipe``, ``--profile``, the settings' flags, ``--hub`` and ``--trust-remote-code``."""
    trust = bool(getattr(args, "trust_remote_code", False))
    recipe = read_flags_recipe(args)
    if recipe is not None:
        if recipe.model is None:
            raise _no_model(recipe, "give MODEL or --set model=ORG/NAME")
        label = recipe.model if isinstance(recipe.model, str) else "the recipe's model"
        return Request(recipe.model, recipe.profile, label, MappingProxyType(_flags_settings(args, recipe)),
                       recipe=recipe, trust_remote_code=trust, launch=read_flags_launch(args))
    model, params, weight_bytes = args.model, args.params, args.weight_bytes
    size_only = params is not None or weight_bytes is not None
    if model is None and not size_only:
        raise SettingsError("give a MODEL (config.json, folder or hub id), or --params / --weight-bytes")
    if model is not None and size_only:
        raise SettingsError("give either a MODEL or --params / --weight-bytes, not both")
    from vramwise.inputs.config import checkpoint_source, local_kind

    label = model
    if model is not None and local_kind(model) == "dir" and local_kind(os.path.join(model, "config.json")) is None:
        size, _, stored = checkpoint_source(model)
        if size is not None and stored is None:  # weight files without a config: the size-only fallback (a GGUF
            # folder has its config in its files' metadata)
            label = f"{model} ({count_bytes(size)} of weights, no config)"
            model, weight_bytes, size_only = None, size, True
    if getattr(args, "hub", False) and model is not None and not size_only:
        from vramwise.inputs.catalog import HUB_PREFIX

        if local_kind(model) is not None:
            raise SettingsError(f"--hub reads a hub id, but {model} is a local path")
        model = model if model.startswith(HUB_PREFIX) else HUB_PREFIX + model
    settings = MappingProxyType(_flags_settings(args, None))
    launch = read_flags_launch(args)
    profile = args.profile
    if launch is not None and launch.profile is not None and "profile" not in getattr(args, "given_flags", set()):
        profile = launch.profile  # the stack the launcher runs (tune run: torchtune's), unless --profile is given
    if not size_only:
        if "method" in settings and "method" not in getattr(args, "given_flags", {"method"}):
            settings = MappingProxyType({**settings, "method": _only_method(profile, settings["method"])})
        return Request(model, profile, label, settings, trust_remote_code=trust, launch=launch)
    if args.profile not in ("size_only", DEFAULT_PROFILE):
        raise SettingsError(f"--params and --weight-bytes estimate shares of the model size (profile size_only); "
                            f"profile {args.profile} needs the model's config: give MODEL")
    if label is None:
        label = (f"a model of {count(int(params))} parameters (no config)" if params is not None
                 else f"a model of {count_bytes(int(weight_bytes))} of weights (no config)")
    from vramwise.estimation.size_only import size_only_model

    spec = size_only_model(params=params, weight_bytes=int(weight_bytes) if weight_bytes is not None else None)
    return Request(spec, "size_only", label, settings, size_only=True, trust_remote_code=trust, launch=launch)


# -- the JSON API -------------------------------------------------------------------------------

def read_body_launch(body: Mapping[str, Any]):
    """The launch line a request gives (``launch``: the command's text), or None. No file it names is read: the
    notes name them (unless an uploaded recipe part has the file's name) and the config names it gives."""
    text = body.get("launch")
    if text is None:
        return None
    if not isinstance(text, str):
        raise SettingsError("launch must be the text of the command a run is launched with")
    from vramwise.recipes.launch import launch_parts, read_launch, with_notes
    from vramwise.recipes.shipped import launch_shipped

    launch = read_launch(text)
    framework = body.get("framework") if isinstance(body.get("framework"), str) else None
    shipped = launch_shipped(launch, framework) if body.get("recipe") is None else []  # vramwise's data, not a file
    parts = body.get("recipe")
    parts = [parts] if isinstance(parts, dict) else parts if isinstance(parts, list) else []
    names = frozenset(p["name"] for p in parts if isinstance(p, dict) and isinstance(p.get("name"), str))
    _, notes = launch_parts(launch, read_files=False, given_names=names, recipe_flag="an uploaded recipe (recipe)",
                            model_field="model", shipped_read=bool(shipped))
    return with_notes(launch, notes)


def read_body_recipe(body: Mapping[str, Any], launch=None):
    """The training recipe a request uploads (``recipe``: a list of {name, text}, the main part first;
    ``framework``: its format when its content does not tell), read without reading any file; or None.
    ``launch``: the request's launch line, whose figures come over the recipe's keys."""
    parts = body.get("recipe")
    if parts is None and launch is not None:  # a config the launch line names that its framework ships
        from vramwise.recipes.shipped import launch_shipped

        framework = body.get("framework")
        shipped = launch_shipped(launch, framework if isinstance(framework, str) else None)
        if shipped:
            from vramwise.recipes.reader import read_recipe

            return read_recipe(shipped, framework=framework, read_files=False, launch=launch)
    if parts is None:
        if body.get("framework") is not None:
            raise SettingsError("framework names the format of a recipe: give recipe too")
        return None
    if isinstance(parts, dict):
        parts = [parts]
    if not isinstance(parts, list) or not 1 <= len(parts) <= MAX_RECIPE_PARTS:
        raise SettingsError(f"recipe must be a list of 1 to {MAX_RECIPE_PARTS} parts, each {{name, text}}")
    from vramwise.recipes.reader import RecipeText, read_recipe

    texts = []
    for i, part in enumerate(parts):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str) or set(part) - {"name", "text"}:
            raise SettingsError(f"recipe part {i + 1} must be an object {{name, text}} with the file's text")
        name = part.get("name") or f"recipe part {i + 1}"
        if not isinstance(name, str) or len(name) > 200:
            raise SettingsError(f"recipe part {i + 1}: name must be a file name of at most 200 characters")
        texts.append(RecipeText(part["text"], name))
    framework = body.get("framework")
    if framework is not None and not isinstance(framework, str):
        raise SettingsError("framework must be a format name such as axolotl or torchtune@0.6.1")
    return read_recipe(texts, framework=framework, read_files=False, launch=launch)


def _body_model(body: Mapping[str, Any], recipe=None) -> tuple[Any, str]:
    """(model, label): a catalog entry (never a path or a hub id), an uploaded config, or the catalog
    entry an uploaded recipe names."""
    from vramwise.inputs.config import parse_json_bytes

    given = [k for k in ("model", "config", "config_text") if body.get(k) is not None]
    if not given and recipe is not None:
        from vramwise.inputs.catalog import CATALOG_PREFIX, find_model

        name = recipe.model if isinstance(recipe.model, str) else None
        found = find_model(name) if name else None
        if found is None:
            raise SettingsError(f"the recipe's model {name!r} is not in the model catalog: choose one, or upload its "
                                "config.json (config_text)" if name else
                                "the recipe names no model: choose one, or upload its config.json (config_text)")
        return CATALOG_PREFIX + found.id, name
    if len(given) != 1:
        raise SettingsError("give one of: model (a name in the model catalog), config (a config.json object) "
                            "or config_text (a config.json file's text)")
    key = given[0]
    value = body[key]
    if key == "model":
        if not isinstance(value, str) or not value.strip():
            raise SettingsError("model must be a name in the model catalog (GET /api/catalog lists them)")
        from vramwise.inputs.catalog import CATALOG_PREFIX, catalog_model

        return CATALOG_PREFIX + catalog_model(value.strip()).id, value.strip()  # ConfigError when it is not there
    if key == "config":
        if not isinstance(value, dict):
            raise ConfigError(f"config must be a JSON object (the content of config.json), got {type(value).__name__}")
        return value, "the uploaded config"
    if not isinstance(value, str):
        raise ConfigError(f"config_text must be the text of a config.json file, got {type(value).__name__}")
    return (parse_json_bytes(value.encode("utf-8", "surrogatepass"), "uploaded config.json", limit=MAX_CONFIG_BYTES),
            "the uploaded config")


def _body_settings(body: Mapping[str, Any], own: tuple, recipe=None, launch=None) -> tuple[dict, str]:
    """The settings and profile a body gives (over an uploaded recipe's, or a launch line's without one);
    ``own``: the answer's own fields."""
    names = {s.name: s for s in SETTINGS}
    known = set(names) | {"model", "config", "config_text", "profile", "recipe", "framework", "launch"} | set(own)
    unknown = sorted(k for k in body if k not in known)
    if unknown:
        raise SettingsError(f"unknown field(s) {', '.join(repr(k)[:60] for k in unknown[:5])}; fields: "
                            f"model or config or config_text, profile, {', '.join(names)}, {', '.join(own)}")
    settings = {k: v for k, v in body.items() if k in names}
    t = settings.get("target_modules")
    if isinstance(t, list):
        if len(t) > MAX_LIST or not all(isinstance(x, str) for x in t):
            raise SettingsError(f"target_modules must be at most {MAX_LIST} module names")
    elif t is not None and not isinstance(t, str):
        raise SettingsError(f"target_modules must be module names, got {type(t).__name__}")
    elif isinstance(t, str) and not t.strip():
        settings["target_modules"] = None
    for name, value in settings.items():
        if isinstance(value, (dict,)) or (isinstance(value, list) and name != "target_modules"):
            raise SettingsError(f"{name} must be a single value, got {type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise SettingsError(f"{name} must be finite")
    stack = launch.profile if launch is not None and launch.profile is not None else DEFAULT_PROFILE
    profile = body.get("profile", recipe.profile if recipe is not None else stack)
    if not isinstance(profile, str):
        raise SettingsError(f"profile must be a name, got {type(profile).__name__}")
    if recipe is not None:
        settings = {**recipe.settings, **settings}
    else:
        settings = {**_launch_settings(launch, settings, settings.get("strategy")), **settings}
    for name in own:  # the answer's own field (fit's gpu is the GPU it answers for)
        settings.pop(name, None)
    return settings, profile


def read_body(body: Mapping[str, Any], own: tuple = ()) -> Request:
    """The request of a JSON body: ``model`` (a catalog name) or ``config`` or ``config_text``, or an
    uploaded ``recipe`` (and ``framework``); ``launch`` (a launch line); ``profile``; the settings by name. ``own``: the answer's own
    fields (fit's ``gpu``, estimate's ``gpus``...), accepted and left out of the settings; any other
    field is refused naming the fields there are. Nothing is read from a file or fetched."""
    launch = read_body_launch(body)
    recipe = read_body_recipe(body, launch)
    settings, profile = _body_settings(body, own, recipe, launch)
    model, label = _body_model(body, recipe)
    return Request(model, profile, label, MappingProxyType(settings), recipe=recipe, launch=launch)
