"""The other profile's figure: whether the profile that models the other training stack for the same
runs (profile data, ``other_profile`` in formulas/<profile>/profile.yaml: unsloth's against
transformers + PEFT's, and back) gives a figure far from this estimate's at the same settings.

``estimate`` and ``explain`` print it as one note; it is an answer of its own so that every surface
gets the same one, and it is the only second estimate a surface asks for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramwise.errors import VramwiseError
from vramwise.estimation.estimate import estimate
from vramwise.estimation.registry import Registry

__all__ = ["OtherProfile", "other_profile"]


@dataclass(frozen=True)
class OtherProfile:
    """The other profile's total at the same settings, and its ratio to this estimate's total."""

    profile: str
    summary: str
    total: int
    ratio: float  # the other total / this total

    def to_dict(self) -> dict:
        return {"profile": self.profile, "summary": self.summary, "total": self.total, "ratio": self.ratio}


def other_profile(est: Any, registry: Registry | None = None) -> OtherProfile | None:
    """The other profile's figure when it differs from ``est``'s total by more than the profile's ratio
    either way; None when it does not, when ``est``'s profile names no other, or where the other profile
    does not model the method or cannot estimate the model."""
    if est.profile_data.other_profile is None:
        return None
    other, limit = est.profile_data.other_profile
    reg = registry or Registry.default()
    try:
        prof = reg.profile(other)
    except VramwiseError:
        return None
    if est.settings.method not in prof.methods:
        return None
    try:
        alt = estimate(est.model, profile=other, registry=reg, **est.settings.to_dict())
    except VramwiseError:
        return None
    ratio = alt.total / est.total if est.total else 0.0
    if not ratio or (1 / limit) <= ratio <= limit:
        return None
    return OtherProfile(other, prof.summary, alt.total, ratio)
