"""The training stacks ``measure`` runs, by the name ``stack=`` (``--stack``) takes.

Each is a module with the attributes of :class:`~vramwise.measuring.stacks.protocol.Stack`. The
stacks manifest (formulas/stacks.yaml, read by :mod:`vramwise.models.stack_manifest`) names them and
their modules: to add a stack, write its module beside these and add its entry to the manifest.
Importing the modules imports no training library: each imports its own when it prepares a step.
"""

from __future__ import annotations

from importlib import import_module
from typing import Mapping

from vramwise.errors import SettingsError
from vramwise.models.stack_manifest import stack_manifest
from vramwise.measuring.stacks.protocol import Stack

__all__ = ["STACK_MODULES", "stack_module"]

#: stack name -> the module that builds and steps its model (the manifest's order).
STACK_MODULES: Mapping[str, Stack] = {
    name: import_module(f"{__package__}.{entry.module}") for name, entry in stack_manifest().stacks.items()
}


def stack_module(name: str) -> Stack:
    """The module of the stack ``name`` (one of :data:`vramwise.profiles.settings.STACKS`)."""
    if name not in STACK_MODULES:
        raise SettingsError(f"unknown stack {name!r} (choose one of: {', '.join(STACK_MODULES)})")
    return STACK_MODULES[name]
