"""The training stacks ``measure`` runs, by the name ``stack=`` (``--stack``) takes.

Each is a module with the attributes of :class:`~vramwise.measuring.stacks.protocol.Stack`. To add
a stack: write its module beside these, add it here, and add its name to ``STACKS`` in
:mod:`vramwise.profiles.settings`, the list of names every setting is checked against. Importing the
modules imports no training library: each imports its own when it prepares a step.
"""

from __future__ import annotations

from typing import Mapping

from vramwise.errors import SettingsError
from vramwise.profiles.settings import STACKS
from vramwise.measuring.stacks import hf, litgpt, torchtune
from vramwise.measuring.stacks.protocol import Stack

__all__ = ["STACK_MODULES", "stack_module"]

#: stack name -> the module that builds and steps its model.
STACK_MODULES: Mapping[str, Stack] = {"hf": hf, "torchtune": torchtune, "litgpt": litgpt}


def stack_module(name: str) -> Stack:
    """The module of the stack ``name`` (one of :data:`vramwise.profiles.settings.STACKS`)."""
    if name not in STACKS or name not in STACK_MODULES:
        raise SettingsError(f"unknown stack {name!r} (choose one of: {', '.join(STACKS)})")
    return STACK_MODULES[name]
