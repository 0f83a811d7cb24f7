"""Building blocks every measured stack shares: the optional dependencies, the optimizers, and
the families a stack's profile says it builds.

torch, transformers, peft and bitsandbytes come with ``pip install 'vramwise[measure]'``; the
torchtune and LitGPT stacks with the extras of their names. :func:`require` imports one of
them or names the extra that brings it.
"""

from __future__ import annotations

from vramwise.errors import MissingDependencyError
from vramwise.estimation.registry import Registry

__all__ = ["OPTIMIZERS", "require", "build_optimizer", "served_family"]

#: Optimizers measure builds, on every stack.
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adamw_8bit", "sgd")


def require(module: str, extra: str = "measure"):
    """The top-level package ``module``, imported; MissingDependencyError naming ``extra`` if it is absent."""
    try:
        return __import__(module)
    except ImportError:
        raise MissingDependencyError(
            f"measuring needs {module}, which is not installed: pip install 'vramwise[{extra}]'", extra=extra
        ) from None


def build_optimizer(trainable, settings, notes: list):
    """The optimizer of ``settings.optimizer`` over ``trainable`` (lr 1e-5: its value changes no memory)."""
    import torch

    if settings.optimizer == "adamw_8bit":
        bnb = require("bitsandbytes")
        return bnb.optim.AdamW8bit(trainable, lr=1e-5)
    if settings.optimizer == "sgd":
        return torch.optim.SGD(trainable, lr=1e-5)
    if settings.optimizer == "adamw_torch_fused":
        return torch.optim.AdamW(trainable, lr=1e-5, fused=True)
    # torch's default on GPUs (and the transformers Trainer's adamw_torch): the foreach implementation
    notes.append("AdamW runs its foreach implementation, torch's default on GPUs")
    return torch.optim.AdamW(trainable, lr=1e-5, foreach=True)


def served_family(cfg: dict, profile: str) -> tuple[str | None, tuple]:
    """(the name of the family of ``cfg`` when the profile ``profile`` serves it, else None; the
    families that profile names): the profile.yaml of a stack's profile lists the families it builds."""
    reg = Registry.default()
    prof = reg.profile(profile)
    family, note = reg.family_for([cfg.get("model_type")])
    served = note is None and prof.families is not None and prof.serves(family)
    return (family.name if served else None), tuple(prof.families or ())
