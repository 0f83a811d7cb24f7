"""vramwise: how much GPU memory a fine-tuning run takes, from a model config.

Public surface::

    vramwise.estimate(model, *, method="qlora", ...) -> Estimate
    vramwise.load_model(model) -> ModelSpec          # resolve once, estimate many times
    vramwise.estimate_from_size(params=8e9) -> Estimate   # no config: the size-only fallback
    vramwise.measure(model, *, method="lora", ..., fake=False) -> Measurement   # needs the [measure] extra
    vramwise.discover_gpus() / select_gpus(...) / child_env(...)
    vramwise.Registry                                # families and profiles (bundled or from folders)
    vramwise.check(paths) -> list[str]               # validate family/formula files: file:line:col: message
    vramwise.fit(model, gpu="RTX 4090", ...) -> Fit  # what fits: methods, largest batch/seq/rank, fewest GPUs, frontier
    vramwise.compare(model, methods=..., profiles=...) / vramwise.sweep(model, batch_size=[...], ...)

Errors all derive from :class:`VramwiseError` (see ``vramwise._errors`` for the tree).
"""

from ._errors import (
    ConfigError,
    EvaluationError,
    ExpressionError,
    FileFormatError,
    GpuSelectionError,
    InternalError,
    SettingsError,
    VramwiseError,
)
from ._estimate import COMPONENTS, Estimate, RankEstimate, TraceEntry, estimate, estimate_from_size, load_model
from ._model import LayerClass, ModelSpec, Module
from ._registry import Registry
from ._settings import SETTINGS, Setting, TrainingSettings

# GPU discovery and measurement are imported when first used: an estimate needs neither.
_LAZY = {
    "GpuDiscovery": "_gpus", "GpuInfo": "_gpus", "GpuSelection": "_gpus", "PynvmlBackend": "_gpus",
    "child_env": "_gpus", "device_map": "_gpus", "discover_gpus": "_gpus", "select_gpus": "_gpus",
    "Measurement": "_measure", "PhaseFigures": "_measure", "RankFigures": "_measure", "measure": "_measure",
    "check": "_check",
    "GpuSpec": "_hardware", "gpu_spec": "_hardware", "list_gpus": "_hardware",
    "fit": "_fit", "compare": "_fit", "sweep": "_fit", "Fit": "_fit", "MethodFit": "_fit", "Comparison": "_fit",
    "Sweep": "_fit", "GpuTarget": "_fit",
    "plot_estimate": "_plot", "plot_compare": "_plot", "plot_fit": "_plot", "plot_sweep": "_plot",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vramwise' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__version__ = "0.1.0"

__all__ = [
    "estimate",
    "estimate_from_size",
    "load_model",
    "measure",
    "check",
    "gpu_spec",
    "list_gpus",
    "fit",
    "compare",
    "sweep",
    "Fit",
    "MethodFit",
    "Comparison",
    "Sweep",
    "GpuTarget",
    "plot_estimate",
    "plot_compare",
    "plot_fit",
    "plot_sweep",
    "GpuSpec",
    "Measurement",
    "RankFigures",
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
    "RankEstimate",
    "TraceEntry",
    "ModelSpec",
    "LayerClass",
    "Module",
    "Registry",
    "TrainingSettings",
    "SETTINGS",
    "Setting",
    "COMPONENTS",
    "VramwiseError",
    "FileFormatError",
    "ExpressionError",
    "EvaluationError",
    "ConfigError",
    "SettingsError",
    "GpuSelectionError",
    "InternalError",
    "__version__",
]
