"""What a training recipe resolves to: the model, the settings, the profile and where each came from.

The types only; reading recipes (formats, detection, rules) is :mod:`vramwise.recipes`. They live
here so that :func:`vramwise.estimate` and the answers built on it accept a :class:`Recipe` wherever
they accept a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["Origin", "Recipe", "ORIGIN_KINDS", "unpack"]

#: Where a resolved value can come from, in the order they win.
ORIGIN_KINDS = ("override", "launch line", "recipe", "framework default", "vramwise default")


@dataclass(frozen=True)
class Origin:
    """Where one resolved value came from.

    ``kind`` is one of :data:`ORIGIN_KINDS`. A launch line's value has the words it came from as ``key``
    (``--nproc_per_node 8``) and the launcher's program as ``source``. A recipe key has its ``file``, ``line`` and ``key``
    (dotted path); a framework default its ``framework``, ``version`` and ``source`` (the framework's
    file that defines it); a rule that reads a key may carry a ``source`` too (how the framework
    reads it).
    """

    kind: str
    key: str | None = None
    file: str | None = None
    line: int | None = None
    framework: str | None = None
    version: str | None = None
    source: str | None = None
    rule: str | None = None
    written: str | None = None

    @property
    def location(self) -> str | None:
        """``file:line`` (or the file alone) of a recipe key, else None."""
        if self.file is None:
            return None
        return self.file if self.line is None else f"{self.file}:{self.line}"

    def describe(self) -> str:
        """One line: ``recipe.yaml:12 micro_batch_size``, ``axolotl 0.12.2 default (source)``..."""
        if self.kind == "override":
            return f"override {self.key}" if self.key else "override"
        if self.kind == "launch line":
            return f"launch line {self.key}" if self.key else "launch line"
        if self.kind == "recipe":
            where = self.location or "the recipe"
            where = f"{where} {self.key}" if self.key else where
            return f"{where}: {self.rule}" if self.rule else where
        if self.kind == "framework default":
            if self.rule:
                return f"{self.framework} {self.version}: {self.rule}"
            return f"{self.framework} {self.version} default" + (f" ({self.source})" if self.source else "")
        return "vramwise default"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "key": self.key, "file": self.file, "line": self.line,
                "framework": self.framework, "version": self.version, "source": self.source,
                "rule": self.rule, "written": self.written, "text": self.describe()}

    def shown(self, value: str) -> str:
        """A value's text as the settings table shows it: with the recipe's own word where a map renamed it."""
        return f"{value} (recipe: {self.written})" if self.written is not None else value


@dataclass(frozen=True)
class Recipe:
    """A training recipe read by :func:`vramwise.read_recipe`.

    ``settings`` holds every training setting of :data:`vramwise.SETTINGS` (the serving ones only where
    an override gives them; validated one by one; the rules that
    join settings apply when it is estimated), ``origins`` where each came from, ``extras`` the values
    that are not settings (``gradient_accumulation_steps``...), ``warnings`` the keys it did not use and
    the ones that change memory without being modelled. Pass it to :func:`vramwise.estimate`,
    :func:`vramwise.fit`, :func:`vramwise.compare` or :func:`vramwise.measure` as the model.
    """

    model: Any  # a hub id, catalog name, path or config mapping; None when the recipe names none
    settings: Mapping[str, Any]
    profile: str
    origins: Mapping[str, Origin]
    extras: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple = ()
    format: str | None = None  # the main part's format
    framework: str | None = None  # the main part's framework and the version its defaults come from
    framework_version: str | None = None
    path: str | None = None  # the main part's file (None for a mapping)
    release_basis: tuple = ()  # the recipe's keys that chose framework_version, in words (empty: named or newest)
    parts: tuple = ()  # ((format, file or None), ...) of every part read, the main one first
    writer: Any = field(default=None, repr=False, compare=False)  # writes changes in the recipe's keys

    def write(self, changes: Mapping[str, Any]) -> dict:
        """The changes (settings or extras -> new values) in the recipe's own keys, e.g.
        ``{"batch_size": 1, "gradient_accumulation_steps": 8}`` -> ``{"micro_batch_size": 1,
        "gradient_accumulation_steps": 8}``. A change the recipe's formats cannot write is left out:
        :meth:`unwritten` names those."""
        if self.writer is None:
            return {}
        return self.writer(self, changes)[0]

    def unwritten(self, changes: Mapping[str, Any]) -> tuple:
        """The names among ``changes`` that :meth:`write` cannot write in the recipe's keys (set them another
        way: the launcher's process count, or vramwise's own settings)."""
        if self.writer is None:
            return tuple(changes)
        return self.writer(self, changes)[1]

    def shown(self, name: str, lora_targets: tuple | None = None) -> str:
        """A setting's or extra's value as the settings table shows it: the recipe's own word beside vramwise's
        where a format's map renamed it (``adamw_8bit (recipe: adamw_bnb_8bit)``), and, given ``lora_targets``
        (the modules an estimate of this recipe adapts), the targets a keyword such as ``all-linear`` expands
        to on the model beside it (``all-linear (adapts: down_proj,...)``)."""
        value = self.settings[name] if name in self.settings else self.extras[name]
        text = ",".join(value) if isinstance(value, (tuple, list)) else str(value)
        origin = self.origins.get(name)
        if origin is not None:
            text = origin.shown(text)
        if name == "target_modules" and lora_targets and value is not None:
            given = set(value) if isinstance(value, (tuple, list)) else {value}
            if given != set(lora_targets):
                text += f" (adapts: {','.join(lora_targets)})"
        return text

    def to_dict(self, lora_targets: tuple | None = None) -> dict:
        """Plain data, suitable for JSON; ``shown`` holds each value as the settings table shows it (see
        :meth:`shown`; ``lora_targets``: the modules an estimate of the recipe adapts)."""
        settings = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.settings.items()}
        return {
            "model": self.model if isinstance(self.model, (str, type(None))) else "<config mapping>",
            "profile": self.profile, "format": self.format, "framework": self.framework,
            "framework_version": self.framework_version, "release_basis": list(self.release_basis),
            "path": self.path,
            "parts": [{"format": f, "file": p} for f, p in self.parts],
            "settings": settings, "extras": dict(self.extras),
            "origins": {k: o.to_dict() for k, o in self.origins.items()},
            "shown": {k: self.shown(k, lora_targets) for k in (*self.settings, *self.extras)},
            "warnings": list(self.warnings),
        }


def unpack(model: Any, profile: str | None, settings: Mapping[str, Any]) -> tuple[Any, str | None, dict]:
    """(model, profile, settings) of a call that may pass a :class:`Recipe` as its model: the recipe's
    model, profile and settings, under the ones the caller gave explicitly."""
    if not isinstance(model, Recipe):
        return model, profile, dict(settings)
    if model.model is None:
        from vramwise.errors import SettingsError

        where = model.path or "the recipe"
        raise SettingsError(f"{where} names no model: give one (--set model=ORG/NAME, or overrides={{'model': ...}})")
    return model.model, profile if profile is not None else model.profile, {**model.settings, **settings}
