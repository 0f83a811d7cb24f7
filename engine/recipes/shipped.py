"""The configs a framework's release ships, read as recipes by the name a launch line gives.

``tune run --nproc_per_node 8 lora_finetune_distributed --config llama3_1/70B_lora`` names a config that torchtune
ships rather than a file: a format with ``shipped_configs`` (``frameworks/torchtune.yaml``) has a copy of each
release's configs in a folder of ``frameworks/`` (one sub-folder per release with its ``index.json``, written by
``scripts/build_torchtune_configs.py``), and :func:`shipped_config` gives the one named as the text of a recipe
part whose name says where it came from. They are vramwise's own data, not a user's files: the server reads them
too (:func:`launch_shipped`: the configs a launch line names; the surfaces read them beside the files
:func:`~vramwise.recipes.launch.launch_parts` gives).
Nothing here knows a framework by name.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from types import MappingProxyType

from vramwise.errors import RecipeError
from vramwise.rules.datafiles import package_files, read_data_text

__all__ = ["shipped_config", "shipped_names", "shipped_versions", "launch_shipped", "launch_format", "named_not_file",
           "INDEX_FILE"]

INDEX_FILE = "index.json"
_VERSION = re.compile(r"^\d+(\.\d+)*$")


def _folder(fmt):
    return package_files("vramwise.frameworks").joinpath(fmt.shipped_configs[0])


def shipped_versions(fmt) -> tuple:
    """The releases of ``fmt``'s framework whose configs are shipped with vramwise (none: the format ships none)."""
    if fmt.shipped_configs is None:
        return ()
    return _versions(fmt.shipped_configs[0])


@lru_cache(maxsize=None)
def _versions(folder: str) -> tuple:
    root = package_files("vramwise.frameworks").joinpath(folder)
    return tuple(sorted((p.name for p in root.iterdir() if _VERSION.match(p.name) and p.joinpath(INDEX_FILE).is_file()),
                        key=lambda v: tuple(map(int, v.split(".")))))


@lru_cache(maxsize=None)
def _index(folder: str, version: str) -> MappingProxyType:
    item = package_files("vramwise.frameworks").joinpath(folder, version, INDEX_FILE)
    data = json.loads(read_data_text(item, f"frameworks/{folder}/{version}/{INDEX_FILE}"))
    return MappingProxyType(data["configs"])


def shipped_names(fmt, version: str | None = None) -> tuple:
    """The config names of ``fmt``'s release ``version`` (default: the release the format is pinned to)."""
    return tuple(_index(fmt.shipped_configs[0], _release(fmt, version)))


def _release(fmt, version: str | None) -> str:
    version = version or fmt.version
    shipped = shipped_versions(fmt)
    if version not in shipped:
        raise RecipeError(f"the configs of {fmt.framework} {version} are not shipped with vramwise (shipped: "
                          f"{', '.join(shipped) or 'none'}): give the config as a file (--recipe FILE)")
    return version


def shipped_config(fmt, name: str, version: str | None = None):
    """The config ``name`` that ``fmt``'s framework ships in release ``version`` (default: the format's pinned
    release), as a :class:`~vramwise.recipes.reader.RecipeText` named ``<framework> <version>'s shipped config
    NAME``. An unknown name is a :class:`RecipeError` in one line with the nearest names."""
    from vramwise.recipes.reader import RecipeText

    release = _release(fmt, version)
    folder = fmt.shipped_configs[0]
    index = _index(folder, release)
    key = name[:-5] if name.endswith(".yaml") and name[:-5] in index else name
    entry = index.get(key)
    if entry is None:
        import difflib

        near = difflib.get_close_matches(name, list(index), n=5, cutoff=0.5)
        hint = f"nearest: {', '.join(near)}" if near else f"{len(index)} configs, such as {', '.join(list(index)[:3])}"
        raise RecipeError(f"{name[:80]!r} is not a config {fmt.framework} {release} ships ({hint})")
    shown = f"{fmt.framework} {release}'s shipped config {key}"
    return RecipeText(_text(folder, release, entry["file"], shown), shown)


@lru_cache(maxsize=32)
def _text(folder: str, release: str, file: str, shown: str) -> str:
    """A shipped config's text, read once (package data: the server's request reads it for the launch line's
    notes and again as the recipe)."""
    return read_data_text(package_files("vramwise.frameworks").joinpath(folder, release, *file.split("/")), shown)


def launch_shipped(launch, framework: str | None = None) -> list:
    """The shipped configs ``launch`` (a :class:`~vramwise.recipes.launch.LaunchLine`) names by name
    (``--config llama3_1/70B_lora``), as recipe parts, where the format of the stack its launcher runs ships
    its configs; the release is the format's pinned one unless ``framework`` (``torchtune@0.6.1``) names that
    format with a version. Empty where the launcher's format ships none."""
    fmt = launch_format(launch)
    if fmt is None or fmt.shipped_configs is None or not launch.config_names:
        return []
    version = None
    if isinstance(framework, str) and "@" in framework:
        name, _, given = framework.strip().lower().partition("@")
        if name in (fmt.name, *fmt.aliases):
            version = given
    return [shipped_config(fmt, name, version) for name in launch.config_names]


def launch_format(launch):
    """The recipe format of the stack ``launch``'s launcher runs (tune run: torchtune; ``LaunchLine.format``), or
    None."""
    from vramwise.recipes.bundled import bundled_formats

    return bundled_formats().get(launch.format) if launch.format is not None else None


def named_not_file(path: str) -> str | None:
    """Where ``path`` (a recipe given as a file that does not exist) is the name of a shipped config rather than
    a file (``--recipe llama3_1/70B_lora``): one line saying how to name it (on a launch line); else None."""
    from vramwise.recipes.bundled import bundled_formats

    for fmt in bundled_formats():
        if fmt.shipped_configs is None:
            continue
        index = _index(fmt.shipped_configs[0], fmt.version)
        name = path[:-5] if path.endswith(".yaml") and path[:-5] in index else path
        if name in index:
            recipe = index[name]["recipes"][0] if index[name]["recipes"] else "RECIPE"
            return (f"{path}: no such file; {name} is a config {fmt.framework} {fmt.version} ships: name it on its "
                    f"launch line (--launch \"tune run {recipe} --config {name}\"), which reads it; --recipe takes "
                    "files")
    return None
