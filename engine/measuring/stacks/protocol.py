"""What a training stack provides to ``measure``, and what it hands back.

A stack is a module of :mod:`vramwise.measuring.stacks` with the attributes of :class:`Stack`;
:mod:`vramwise.measuring.stacks.registry` maps each name of ``stack=`` to its module. ``measure``
checks the settings every stack shares (a training method, a positive step count, a device the
stack runs on), asks the stack's ``check`` about the rest before anything is imported or built,
reads the config, calls ``prepare`` and runs the :class:`Prepared` step under the tracker.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

__all__ = ["Prepared", "Stack"]


@dataclass
class Prepared:
    """What a stack hands the tracker: the model, its optimizer (``step``, ``zero_grad`` and
    ``state``; a no-op stepper when the stack steps inside the backward), the token ids, a
    callable computing the loss (None: the transformers model's own loss from labels), the
    counts, notes, and a context the step runs in (fake tensors)."""

    net: Any
    opt: Any
    ids: Any
    loss_fn: Callable[[], Any] | None
    params_total: int
    params_trainable: int
    notes: list = field(default_factory=list)
    context: Callable[[], Any] = contextlib.nullcontext


class Stack(Protocol):
    """A training stack ``measure`` can run."""

    #: The profile that models this stack (its LoRA defaults and the families it serves apply).
    PROFILE: str
    #: The devices it is measured on.
    DEVICES: tuple

    def check(self, settings, *, device: str, fake: bool) -> None:
        """Raise SettingsError for settings this stack does not run (nothing is imported or built)."""

    # optional: ``check_config(cfg, settings, *, device)`` refuses, before anything is built, what the stack
    # would refuse for this config (the hf stack: an attention kernel its class lacks, a pad_token_id outside
    # the vocabulary), with StackUnsupportedError or SettingsError naming the input and the fix

    def prepare(self, cfg: dict, settings, *, dtype: Any, device: str, fake: bool, wrap: Any = None) -> Prepared:
        """The model of ``cfg`` (a config dict) at ``settings``, its optimizer, a batch and the loss;
        ``wrap(model)``, when given, shards or wraps the model for a distributed strategy before the
        optimizer is built (a stack that cannot take it raises StackUnsupportedError)."""
