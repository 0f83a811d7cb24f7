#!/usr/bin/env python3
"""Write frameworks/torchtune_configs/<version>/ from the installed torchtune: the recipe configs its release
ships (recipes/configs/**/*.yaml, copied byte for byte), torchtune's BSD-3 LICENSE with a NOTICE saying what was
copied from where, and index.json: each config name ``tune run --config`` takes (torchtune/_recipe_registry.py)
with its file and the recipes it is listed under.

    python scripts/build_torchtune_configs.py [--check]

``--check`` compares with the folder on disk instead of writing it (exit 1 when it differs);
tests/unit/recipes/test_shipped_configs.py runs it where torchtune is installed (the test extra).
Only the YAML configs are copied, never torchtune's Python.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "frameworks" / "torchtune_configs"
INDEX = "index.json"

NOTICE = """\
The files of this folder under its sub-folders are the recipe configs of torchtune {version}
(recipes/configs/ of the torchtune wheel, https://github.com/pytorch/torchtune), copied unchanged by
scripts/build_torchtune_configs.py; index.json lists the config names of torchtune/_recipe_registry.py.
torchtune is distributed under the BSD 3-Clause License; its LICENSE is copied beside this file.
vramwise reads these configs as the recipes a `tune run ... --config NAME` line names.
"""


def _torchtune():
    """(version, configs folder, LICENSE text, registry) of the installed torchtune, found without importing it
    (it imports torch); SystemExit without it."""
    import importlib.util
    from importlib import metadata

    try:
        dist = metadata.distribution("torchtune")
    except metadata.PackageNotFoundError:
        raise SystemExit("torchtune is not installed: pip install torchtune==0.6.1") from None
    license_text = next((dist.locate_file(f).read_text(encoding="utf-8") for f in dist.files or ()
                         if f.name == "LICENSE" and f.parts[0].startswith("torchtune-")), None)
    package = importlib.util.find_spec("torchtune")
    configs = importlib.util.find_spec("recipes")
    if license_text is None or package is None or configs is None:
        raise SystemExit("the installed torchtune has no LICENSE, torchtune package or recipes/configs folder")
    registry_file = Path(package.origin).parent / "_recipe_registry.py"
    spec = importlib.util.spec_from_file_location("_torchtune_recipe_registry", registry_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    folder = Path(next(iter(configs.submodule_search_locations))) / "configs"
    return dist.version, folder, license_text, module.get_all_recipes()


def expected() -> dict[str, bytes]:
    """The folder's files (path relative to frameworks/torchtune_configs -> content)."""
    version, folder, license_text, registry = _torchtune()
    out: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*.yaml")):
        out[f"{version}/{path.relative_to(folder).as_posix()}"] = path.read_bytes()
    configs: dict = {}
    for recipe in registry:
        for config in recipe.configs:
            entry = configs.setdefault(config.name, {"file": config.file_path, "recipes": []})
            if entry["file"] != config.file_path:
                raise SystemExit(f"{config.name} names two files: {entry['file']}, {config.file_path}")
            entry["recipes"].append(recipe.name)
    missing = sorted(name for name, entry in configs.items() if f"{version}/{entry['file']}" not in out)
    for name in missing:  # listed by the registry, but its file is not in the wheel: tune run cannot run it either
        del configs[name]
    for entry in configs.values():
        entry["recipes"] = sorted(set(entry["recipes"]))
    index = {"framework": "torchtune", "version": version,
             "source": f"torchtune {version}: recipes/configs/ and torchtune/_recipe_registry.py",
             "configs": dict(sorted(configs.items())), "registered_not_shipped": missing}
    out[f"{version}/{INDEX}"] = (json.dumps(index, indent=1, sort_keys=False) + "\n").encode()
    out[f"{version}/LICENSE"] = license_text.encode()
    out[f"{version}/NOTICE"] = NOTICE.format(version=version).encode()
    return out


def on_disk() -> dict[str, bytes]:
    if not BASE.is_dir():
        return {}
    return {p.relative_to(BASE).as_posix(): p.read_bytes() for p in sorted(BASE.rglob("*")) if p.is_file()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the folder instead of writing it")
    args = ap.parse_args(argv)
    want = expected()
    have = on_disk()
    if args.check:
        wrong = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
        if wrong:
            print(f"frameworks/torchtune_configs is out of date ({len(wrong)} files: {', '.join(wrong[:5])}"
                  f"{' ...' if len(wrong) > 5 else ''}): run python scripts/build_torchtune_configs.py",
                  file=sys.stderr)
            return 1
        return 0
    for rel in sorted(set(have) - set(want)):
        (BASE / rel).unlink()
    for rel, data in want.items():
        target = BASE / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if have.get(rel) != data:
            target.write_bytes(data)
    print(f"wrote {len(want)} files to {BASE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
