"""vramwise: how much GPU memory a fine-tuning run takes, from a model config.

Public surface::

    vramwise.estimate(model, *, method="qlora", ...) -> Estimate
    Estimate.error_band -> ErrorBands                # .tensors (CPU-measured steps), .device (published GPU runs)
    vramwise.load_model(model) -> ModelSpec          # resolve once, estimate many times
    vramwise.estimate_from_size(params=8e9) -> Estimate   # no config: the size-only fallback
    vramwise.measure(model, *, method="lora", ..., fake=False) -> Measurement   # needs the [measure] extra
    vramwise.discover_gpus() / select_gpus(...) / child_env(...)
    vramwise.Registry                                # families and profiles (bundled or from folders)
    vramwise.check(paths) -> list[str]               # validate family/formula files: file:line:col: message
    vramwise.fit(model, gpu="RTX 4090", ...) -> Fit  # what fits: methods, largest batch/seq/rank, fewest GPUs, frontier
    vramwise.compare(model, methods=..., profiles=...) / vramwise.sweep(model, batch_size=[...], ...)
    vramwise.read_recipe("axolotl.yaml") -> Recipe  # a training recipe; estimate/fit/compare/measure take it as the model

Errors all derive from :class:`VramwiseError` (see ``vramwise.errors`` for the tree).
"""

from vramwise.rules.classcode import compiled_methods as _compiled_methods

# the data classes' generated methods from the disk cache (vramwise.rules.classcode): most of an import's time
with _compiled_methods():
    from vramwise.profiles.bands import DeviceBand, ErrorBand, ErrorBands
    from vramwise.errors import (
        ConfigError,
        EvaluationError,
        ExpressionError,
        FileFormatError,
        GpuSelectionError,
        InternalError,
        MeasurementError,
        MissingDependencyError,
        RecipeError,
        SettingsError,
        StackUnsupportedError,
        UnknownFamilyError,
        UsageError,
        VramwiseError,
    )
    from vramwise.estimation.estimate import COMPONENTS, Estimate, RankEstimate, TraceEntry, estimate, load_model
    from vramwise.estimation.size_only import estimate_from_size
    from vramwise.models.model import LayerClass, ModelSpec, Module
    from vramwise.estimation.recipe import Origin, Recipe
    from vramwise.estimation.registry import Registry
    from vramwise.profiles.settings import SETTINGS, Setting, TrainingSettings

# GPU discovery and measurement are imported when first used: an estimate needs neither.
_LAZY = {
    "GpuDiscovery": "gpus.discovery", "GpuInfo": "gpus.discovery", "PynvmlBackend": "gpus.discovery", "discover_gpus": "gpus.discovery",
    "GpuSelection": "answers.selection", "child_env": "answers.selection", "device_map": "answers.selection",
    "select_gpus": "answers.selection",
    "Measurement": "measuring.results", "PhaseFigures": "measuring.results", "RankFigures": "measuring.results", "measure": "measuring.steps",
    "check": "tooling.check",
    "read_recipe": "recipes.reader",
    "GpuSpec": "inputs.gpu_catalog", "gpu_spec": "inputs.gpu_catalog", "list_gpus": "inputs.gpu_catalog",
    "fit": "answers.fit", "compare": "answers.fit", "sweep": "answers.fit", "Fit": "answers.fit", "MethodFit": "answers.fit", "Comparison": "answers.fit",
    "Sweep": "answers.fit", "GpuTarget": "answers.fit", "Advice": "answers.advice",
    "plot_estimate": "answers.plots", "plot_compare": "answers.plots", "plot_fit": "answers.plots", "plot_sweep": "answers.plots",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vramwise' has no attribute {name!r}")
    import importlib

    with _compiled_methods():
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

from vramwise.version import VERSION as __version__  # noqa: E402

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
    "Advice",
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
    "ErrorBand",
    "ErrorBands",
    "DeviceBand",
    "TraceEntry",
    "ModelSpec",
    "LayerClass",
    "Module",
    "Registry",
    "read_recipe",
    "Recipe",
    "Origin",
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
    "UnknownFamilyError",
    "UsageError",
    "RecipeError",
    "MissingDependencyError",
    "MeasurementError",
    "StackUnsupportedError",
    "__version__",
]
