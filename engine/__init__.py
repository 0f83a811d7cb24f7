"""vramwise: how much GPU memory a fine-tuning run takes, from a model config.

Public surface::

    vramwise.estimate(model, *, method="qlora", ...) -> Estimate
    vramwise.load_model(model) -> ModelSpec          # resolve once, estimate many times
    vramwise.estimate_from_size(params=8e9) -> Estimate   # no config: the seed's size-only fallback
    vramwise.measure(model, *, method="lora", ..., fake=False) -> Measurement   # needs the [measure] extra
    vramwise.discover_gpus() / select_gpus(...) / child_env(...)
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
from ._estimate import COMPONENTS, Estimate, TraceEntry, estimate, estimate_from_size, load_model
from ._gpus import GpuDiscovery, GpuInfo, GpuSelection, PynvmlBackend, child_env, device_map, discover_gpus, select_gpus
from ._measure import Measurement, PhaseFigures, measure
from ._model import LayerClass, ModelSpec, Module
from ._registry import Registry
from ._settings import TrainingSettings

__version__ = "0.1.0"

__all__ = [
    "estimate",
    "estimate_from_size",
    "load_model",
    "measure",
    "Measurement",
    "PhaseFigures",
    "discover_gpus",
    "select_gpus",
    "device_map",
    "child_env",
    "GpuDiscovery",
    "GpuInfo",
    "GpuSelection",
    "PynvmlBackend",
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
