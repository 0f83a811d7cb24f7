"""vramwise: how much GPU memory a fine-tuning run takes, from a model config.

Public surface::

    vramwise.estimate(model, *, method="qlora", ...) -> Estimate
    vramwise.load_model(model) -> ModelSpec          # resolve once, estimate many times
    vramwise.Registry                                # families and profiles (bundled or from folders)

Errors all derive from :class:`VramwiseError` (see ``vramwise._errors`` for the tree).
"""

from ._errors import (
    ConfigError,
    EvaluationError,
    ExpressionError,
    FileFormatError,
    GpuSelectionError,
    SettingsError,
    VramwiseError,
)
from ._estimate import COMPONENTS, Estimate, TraceEntry, estimate, load_model
from ._model import LayerClass, ModelSpec, Module
from ._registry import Registry
from ._settings import TrainingSettings

__version__ = "0.1.0"

__all__ = [
    "estimate",
    "load_model",
    "Estimate",
    "TraceEntry",
    "ModelSpec",
    "LayerClass",
    "Module",
    "Registry",
    "TrainingSettings",
    "COMPONENTS",
    "VramwiseError",
    "FileFormatError",
    "ExpressionError",
    "EvaluationError",
    "ConfigError",
    "SettingsError",
    "GpuSelectionError",
    "__version__",
]
