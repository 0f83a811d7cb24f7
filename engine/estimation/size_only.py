"""The fallback when no config can be read: a model known only by its parameter count or its weights' size,
estimated by the ``size_only`` profile (each component a share of the model size)."""

from __future__ import annotations

import math
from typing import Any

from vramwise.errors import SettingsError
from vramwise.estimation.estimate import Estimate, estimate
from vramwise.models.model import ModelSpec
from vramwise.estimation.registry import Registry

__all__ = ["size_only_model", "estimate_from_size"]


def size_only_model(*, params: float | None = None, weight_bytes: int | None = None,
                    registry: Registry | None = None) -> ModelSpec:
    """The model :func:`estimate_from_size` estimates: known only by its parameter count or the
    weights' size (family ``size_only``; estimate it with profile ``size_only``)."""
    if params is None and weight_bytes is None:
        raise SettingsError("give a parameter count (params) or the weights' size in bytes (weight_bytes)")
    for name, value, least, most in (("params", params, 1, 10**15), ("weight_bytes", weight_bytes, 2, 2 * 10**15)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not ((isinstance(value, int) or math.isfinite(value)) and least <= value <= most)):
            raise SettingsError(f"{name} must be a positive finite number from {least} to {most:,}, got {str(value)[:60]}")
    reg = registry or Registry.default()
    if params is not None:
        config, origin = {"params": int(params)}, f"{float(params):g} parameters"
    else:
        config, origin = {"weight_bytes": int(weight_bytes)}, f"{int(weight_bytes)} bytes of weights"
    return reg.resolve(
        config, family="size_only", origin=origin,
        warnings=[f"no model config: a fallback estimate from {origin} alone, each component a share of the model size"],
        checkpoint_bytes=int(weight_bytes) if weight_bytes is not None else None,
    )


def estimate_from_size(*, params: float | None = None, weight_bytes: int | None = None,
                       registry: Registry | None = None, **settings: Any) -> Estimate:
    """The fallback when no config can be read: only a parameter count or the weights' size.

    Every component is a share of the 16-bit model size (profile ``size_only``, family
    ``size_only``); the estimate says so. See docs/unsloth-profile.md#size-only.
    """
    settings.pop("target_modules", None)
    if "profile" in settings:
        raise SettingsError("estimate_from_size always uses the size_only profile: leave profile out")
    reg = registry or Registry.default()
    spec = size_only_model(params=params, weight_bytes=weight_bytes, registry=reg)
    return estimate(spec, profile="size_only", registry=reg, **settings)
