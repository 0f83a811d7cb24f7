"""The page's address read as the command line reads the same values (``GET /api/address``).

A shared link may hold what a user would type on the command line: a GPU alias (``gpu=H100``), a size
(``gpu=24GiB``), a model alias, a setting in any spelling the flag accepts (``method=QLoRA``,
``gradient_checkpointing=on``). Each field is read by the library's own functions (the GPU catalog, the
model catalog, the settings' parsers), so the page accepts exactly what the CLI accepts; the page puts
the canonical value in its form and writes it back into the address.
"""

from __future__ import annotations

from typing import Any

from vramwise.errors import SettingsError, VramwiseError

__all__ = ["read_address", "MAX_FIELDS"]

#: the fields of an address read at most
MAX_FIELDS = 64


def _canonical_gpu(text: str) -> dict:
    """A GPU as the command line reads it (a catalog name, id or alias, a size, or local): its canonical form."""
    from vramwise.inputs.gpu_catalog import gpu_spec
    from vramwise.inputs.sizes import parse_size

    if text.strip().lower() == "local":
        return {"value": "local", "name": "local: the visible GPUs"}
    spec = gpu_spec(text)
    if spec.matched_by == "size":
        size = parse_size(text)
        return {"value": f"{size.number}{size.unit}", "name": spec.name}
    out = {"value": spec.id, "name": spec.name}
    if spec.note:
        out["note"] = spec.note
    return out


def _canonical_setting(setting, text: str):
    """A setting's value from an address (text), read by its command-line flag's own reader, then normalised."""
    import argparse

    from vramwise.surfaces.cli.parser import CLI_TYPES

    t = text.strip()
    try:
        value: Any = CLI_TYPES[setting.cli_type](t)
    except (ValueError, argparse.ArgumentTypeError) as e:
        kind = {"int": "a whole number", "float": "a number"}.get(setting.cli_type)
        raise SettingsError(f"{setting.name} must be {kind}, got {t[:60]!r}" if kind else f"{setting.name}: {e}") from None
    value = setting.parse(setting.name, value)
    return list(value) if isinstance(value, tuple) else value


#: the fields that hold a text of several lines (an Ollama Modelfile, environment variables) and their longest
TEXT_FIELDS = {"modelfile": 8000, "ollama_env": 8000}


def read_address(query: dict) -> dict:
    """The page's address read as the command line reads the same values: for each field, its canonical
    value (``{"value": ...}``, a GPU also its ``name`` and ``note``) or why it cannot be read
    (``{"error": ...}``); ``unknown``: the fields that mean nothing here."""
    from vramwise.estimation.registry import Registry
    from vramwise.inputs.catalog import catalog_model

    from vramwise.profiles.settings import SETTINGS

    names = {x.name: x for x in SETTINGS}
    reg = Registry.default()
    profiles = reg.profile_names()

    def profile_name(text: str) -> str:
        p = text.strip().lower()
        if p not in profiles:
            raise SettingsError(f"unknown profile {text.strip()[:60]!r} (choose one of: {', '.join(profiles)})")
        return p

    def count(text: str, name: str, low: int, high: int) -> int:
        t = text.strip()
        if not t.isdigit() or not low <= int(t) <= high:
            raise SettingsError(f"{name} must be a whole number from {low:,} to {high:,}, got {t[:60]!r}")
        return int(t)

    def share(text: str) -> float:  # as --headroom reads it: 10% or 0.1
        import argparse

        from vramwise.surfaces.cli.parser import headroom_share

        try:
            return headroom_share(text)
        except argparse.ArgumentTypeError as e:
            raise SettingsError(f"headroom: {e}") from None

    def preset_name(text: str) -> str:  # as --preset reads it
        from vramwise.inputs.presets import PRESETS

        p = text.strip().lower()
        if p not in PRESETS:
            raise SettingsError(f"unknown preset {text.strip()[:60]!r} (choose one of: {', '.join(PRESETS)})")
        return p

    def modelfile(text: str) -> dict:  # as --modelfile reads a file: its PARAMETER lines, the text kept as given
        from vramwise.inputs.presets import read_modelfile

        read_modelfile("Modelfile", text=text)
        return {"value": text}

    def environment(text: str) -> dict:  # NAME=VALUE lines, as --ollama-env reads the process's environment
        from vramwise.inputs.presets import read_environment

        read_environment(text)
        return {"value": text}

    readers = {
        "model": lambda t: {"value": catalog_model(t.strip()).id},
        "modelfile": modelfile,
        "ollama_env": environment,
        "preset": lambda t: {"value": preset_name(t)},
        "gpu": _canonical_gpu,
        "gpus": lambda t: {"value": count(t, "gpus", 1, 1024)},
        "headroom": lambda t: {"value": share(t)},
        "profile": lambda t: {"value": profile_name(t)},
        "compare": lambda t: {"value": list(dict.fromkeys(profile_name(p) for p in t.split(",") if p.strip()))},
    }
    fields: dict = {}
    unknown = []
    for key, text in list(query.items())[:MAX_FIELDS]:
        most = TEXT_FIELDS.get(key, 300)
        if len(text) > most:
            fields[key[:60]] = {"error": f"{key[:60]}: at most {most:,} characters"}
            continue
        try:
            if key in readers:
                fields[key] = readers[key](text)
            elif key in names:
                fields[key] = {"value": _canonical_setting(names[key], text)}
            else:
                unknown.append(key[:60])
        except VramwiseError as e:
            problems = getattr(e, "problems", None)
            fields[key] = {"error": " ".join(str("; ".join(problems) if problems else e).split())[:500]}
    return {"fields": fields, "unknown": unknown}
