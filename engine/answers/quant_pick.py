"""Which quantization fits: the local answers (:mod:`vramwise.answers.offload`) of each GGUF model of a folder or
of a hub repository (each a quantization of one model), side by side, and the pick.

Each quantization is answered by :func:`vramwise.answers.local.local_fit` on its own file (the shards of a split
one as one model), so its figures are the single file's. The pick is the largest quantization (the most bytes of
weights: the highest precision) that fits the GPU with every layer on it at the settings' context; where none does,
the one whose ``n_gpu_layers`` keeps the most layers on the GPU (of those, the largest); where not even the output
layer of any fits, none.

A hub repository (``hub:ORG/NAME``) is read header by header by range requests (:mod:`vramwise.inputs.gguf_hub`):
nothing but the headers is downloaded. Models of different tensor tables (another architecture, another size) are
refused: a folder or repository here holds the quantizations of one model.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

from vramwise.answers.local import local_fit
from vramwise.answers.offload import LocalFit
from vramwise.errors import ConfigError, SettingsError
from vramwise.estimation.registry import Registry
from vramwise.inputs.catalog import HUB_PREFIX

__all__ = ["QuantOption", "QuantPick", "quant_pick", "quant_models"]


@dataclass(frozen=True)
class QuantOption:
    """One quantization: its name as its file names it (``Q4_K_M``, ``UD-Q4_K_XL``), llama.cpp's name of its
    ``general.file_type``, its files (a repository's paths for a hub model), its weights' bytes and its local
    answers at the settings (``fit``)."""

    name: str
    file_type: str | None
    files: tuple
    weight_bytes: int
    fit: LocalFit

    @property
    def gpu_bytes(self) -> int:
        return self.fit.estimate.figures["gpu_total"]

    @property
    def host_bytes(self) -> int:
        return self.fit.estimate.figures["host_total"]

    def to_dict(self) -> dict:
        f = self.fit
        return {"name": self.name, "file_type": self.file_type, "files": list(self.files),
                "weight_bytes": self.weight_bytes, "gpu_bytes": self.gpu_bytes, "host_bytes": self.host_bytes,
                "verdict": f.verdict.label, "fits": f.fits, "max_n_ctx": f.max_n_ctx,
                "max_n_gpu_layers": f.max_n_gpu_layers, "all_layers": f.all_layers, "layers": f.layers}


@dataclass(frozen=True)
class QuantPick:
    """The quantizations of ``source`` (a folder, or ``hub:ORG/NAME`` at ``revision``) on one GPU at the settings,
    largest first, and the pick (None: no quantization puts a layer on the GPU), with why."""

    source: str
    revision: str | None
    options: tuple  # of QuantOption, the most bytes of weights first
    pick: QuantOption | None
    reason: str
    settings: Any  # the settings as the estimates took them (the first option's)

    @property
    def gpu(self):
        return self.options[0].fit.gpu

    def option(self, name: str) -> QuantOption:
        return next(o for o in self.options if o.name == name)

    def to_dict(self) -> dict:
        return {"source": self.source, "revision": self.revision, "gpu": self.gpu.to_dict(),
                "settings": dict(self.settings), "options": [o.to_dict() for o in self.options],
                "pick": self.pick.name if self.pick is not None else None, "reason": self.reason}


def quant_models(source: Any) -> int:
    """How many GGUF models a local folder holds (0 for anything else: a file, a hub id, a folder with a
    config.json); cheap, no header is read."""
    if not isinstance(source, (str, os.PathLike)) or not os.path.isdir(os.fspath(source)):
        return 0
    from vramwise.inputs.gguf_sets import folder_gguf

    return len(folder_gguf(source))


def _choose(options: list, quant: str | None, where: str) -> list:
    if quant is None:
        return options
    q = quant.strip().lower()
    for key in (lambda o: o.name.lower(), lambda o: (o.file_type or "").lower(),
                lambda o: o.name.lower().rsplit("/", 1)[-1]):
        got = [o for o in options if key(o) == q]
        if len(got) == 1:
            return got
        if len(got) > 1:
            raise SettingsError(f"--quant {quant} names {len(got)} of {where}'s models "
                                f"({', '.join(o.name for o in got)}): give one of these names")
    present = ", ".join(f"{o.name} ({o.file_type})" if o.file_type and o.file_type != o.name else o.name
                        for o in options)
    raise SettingsError(f"no quantization {quant} in {where}; present: {present}")


def _same_model(sets_models: list, where: str) -> None:
    """Refuse models of different tensor tables (names and shapes): not the quantizations of one model."""
    first_set, first = sets_models[0]
    shape = {(t.name, t.shape) for t in first.tensors}
    for s, m in sets_models[1:]:
        if m.architecture != first.architecture:
            raise ConfigError(f"{where} holds GGUF models of different architectures ({first_set.stem}: "
                              f"{first.architecture}, {s.stem}: {m.architecture}): give one file, or a folder of "
                              "one model's quantizations")
        if {(t.name, t.shape) for t in m.tensors} != shape:
            raise ConfigError(f"{where} holds different models ({first_set.stem} and {s.stem}: their tensors differ): "
                              "give one file, or a folder of one model's quantizations")


def _answer(source: str, revision: str | None, found: list, quant: str | None, *, gpu, headroom, profile, reg,
            settings) -> QuantPick:
    """found: [(GGUFSet named by its source, GGUFModel, the local path read)]"""
    _same_model([(s, m) for s, m, _ in found], source)
    options = []
    for s, m, path in found:
        f = local_fit(path, gpu=gpu, headroom=headroom, profile=profile, registry=reg, **settings)
        options.append(QuantOption(s.name, m.file_type, s.files, m.weight_bytes, f))
    options.sort(key=lambda o: (-o.weight_bytes, o.name))
    options = _choose(options, quant, source)
    first = options[0].fit
    ctx = first.estimate.figures["n_ctx"]
    whole = [o for o in options if o.fit.all_layers]
    if whole:
        pick = whole[0]
        reason = (f"{pick.name} is the largest quantization that fits with all {pick.fit.layers} layers and the "
                  f"output layer on the GPU at n_ctx {ctx:,}")
    else:
        most = max(o.fit.max_n_gpu_layers for o in options)
        pick = next((o for o in options if o.fit.max_n_gpu_layers == most), None) if most > 0 else None
        if pick is None:
            reason = f"no quantization puts even the output layer on the GPU at n_ctx {ctx:,}"
        else:
            reason = (f"none fits with every layer on the GPU at n_ctx {ctx:,}; {pick.name} keeps the most on it: "
                      f"n_gpu_layers {most} of {pick.fit.layers + 1}, the rest on the host")
    return QuantPick(source, revision, tuple(options), pick, reason, first.settings)


def quant_pick(source: Any, *, gpu: Any, quant: str | None = None, headroom: float | None = None,
               profile: str | None = None, registry: Registry | None = None, endpoint: str | None = None,
               revision: str | None = None, **settings: Any) -> QuantPick:
    """Each quantization of ``source`` on one ``gpu`` and the host at ``settings`` (the llama.cpp profile's:
    ``n_ctx``, ``n_gpu_layers``, ``cache_type_k``, ...), and the pick (:class:`QuantPick`).

    ``source``: a folder of GGUF files (its subfolders too; split shards as one model, vision projectors left
    out) or ``hub:ORG/NAME`` (its headers read by range requests from ``endpoint``, None: the hub's, at
    ``revision``, None: the default branch). ``quant`` keeps only the quantization it names (the file name's, as
    ``Q4_K_M`` or ``UD-Q4_K_XL``, or llama.cpp's name of the file type), else a SettingsError names those present."""
    from vramwise.inputs.gguf import read_gguf

    reg = registry or Registry.default()
    text = os.fspath(source) if isinstance(source, (str, os.PathLike)) else None
    if text is None:
        raise ConfigError(f"a quantization is picked from a folder of GGUF files or hub:ORG/NAME, not a "
                          f"{type(source).__name__}")
    kw = dict(gpu=gpu, headroom=headroom, profile=profile or "llama.cpp", reg=reg, settings=settings)
    if isinstance(source, str) and text.startswith(HUB_PREFIX):
        from vramwise.inputs.gguf_hub import fetch_header, hub_gguf

        repo = text[len(HUB_PREFIX):]
        hub = hub_gguf(repo, endpoint=endpoint, revision=revision)
        sets = hub.models
        if quant is not None:  # only the named one's headers are fetched
            names = [_Named(s.name, None, s) for s in sets]
            try:
                sets = tuple(n.set for n in _choose(names, quant, text))
            except SettingsError:
                sets = hub.models  # it may be a file type's name: read them all, then choose
        with tempfile.TemporaryDirectory(prefix="vramwise-hub-") as tmp:
            found = []
            for i, s in enumerate(sets):
                m, path = fetch_header(hub, s, os.path.join(tmp, str(i)))
                found.append((s, m, path))
            return _answer(text, hub.revision, found, quant, **kw)
    from vramwise.inputs.gguf_sets import folder_gguf

    if not os.path.isdir(text):
        raise ConfigError(f"{text}: a quantization is picked from a folder of GGUF files or hub:ORG/NAME")
    sets = folder_gguf(text)
    if not sets:
        has_config = os.path.exists(os.path.join(text, "config.json"))
        raise ConfigError(f"folder {text} holds no GGUF model" + (" (it has a config.json)" if has_config else ""))
    found = [(s, read_gguf(s.files[0]), s.files[0]) for s in sets]
    return _answer(text, None, found, quant, **kw)


@dataclass(frozen=True)
class _Named:
    """A model known by its file name only (a hub model before its header is read)."""

    name: str
    file_type: Any  # None: not read yet
    set: Any
