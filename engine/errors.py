"""The exception tree of vramwise, documented in one place.

    VramwiseError                 root: catch this to catch everything vramwise raises
    ├── FileFormatError           a family/formula file is not valid YAML or fails its schema
    │   └── ExpressionError       an expression in a file is rejected (unknown name, forbidden syntax)
    ├── EvaluationError           an expression failed while it was evaluated (division by zero, bad index)
    ├── ConfigError               a model config cannot be read or lacks a field a family needs
    │   └── UnknownFamilyError    no family serves the config's model type, or a family name is unknown
    ├── SettingsError             a training setting is invalid (method, sizes, checkpointing mode)
    ├── UsageError                a path or argument names nothing vramwise can read (no such file, nothing to check)
    ├── RecipeError               a training recipe cannot be read: unknown format, a key of the wrong type, a missing referenced file
    ├── MissingDependencyError    an optional dependency is not installed; ``extra`` names the extra to install
    ├── MeasurementError          a measured step could not be run or did not finish (`vramwise measure`)
    │   └── StackUnsupportedError a training stack cannot build this model or these settings
    ├── GpuSelectionError         GPUs cannot be selected as asked
    └── InternalError             a result broke an invariant (negative, non-finite): a bug, never a result

Every error vramwise raises on purpose is an instance of one of the leaf classes above; the
root is never raised bare, so a caller can catch by kind.

Messages about a file start with ``path:line:col:`` and name the JSON path of the
offending node; messages about a config name the field and the aliases tried.
"""

from __future__ import annotations

__all__ = [
    "VramwiseError",
    "FileFormatError",
    "ExpressionError",
    "EvaluationError",
    "ConfigError",
    "SettingsError",
    "UnknownFamilyError",
    "UsageError",
    "RecipeError",
    "MissingDependencyError",
    "MeasurementError",
    "StackUnsupportedError",
    "GpuSelectionError",
    "InternalError",
]


class VramwiseError(Exception):
    """Root of every error vramwise raises on purpose."""


class FileFormatError(VramwiseError):
    """A data file (family, formula) is not valid YAML or fails its schema.

    ``problems`` holds one ``path:line:col: $.json.path: message`` line per problem.
    """

    def __init__(self, problems: list[str] | str):
        if isinstance(problems, str):
            problems = [problems]
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class ExpressionError(FileFormatError):
    """An expression in a data file is rejected when the file is loaded."""


class EvaluationError(VramwiseError):
    """An expression raised while it was evaluated; the message names file:line and the inputs."""


class ConfigError(VramwiseError):
    """A model config cannot be read, or lacks a field that its family needs."""


class SettingsError(VramwiseError):
    """A training setting is out of range or unknown."""


class UnknownFamilyError(ConfigError):
    """No family serves the config's model type (and none is marked fallback), or a family name
    given by the caller is not in the registry."""


class UsageError(VramwiseError):
    """A path or argument names nothing vramwise can use: a missing file or folder, a folder of the
    wrong kind, nothing to check."""


class RecipeError(VramwiseError):
    """A training recipe cannot be read: its format is not recognised, a key holds a value of the wrong
    type, or a file it names does not exist. The message starts with ``file:line:`` and names the key."""


class MissingDependencyError(VramwiseError):
    """An optional dependency is not installed. ``extra`` is the vramwise extra that brings it
    (``pip install 'vramwise[extra]'``); the message names it."""

    def __init__(self, message: str, *, extra: str | None = None):
        self.extra = extra
        super().__init__(message)


class MeasurementError(VramwiseError):
    """A measured training step could not be run or did not finish: no CUDA device, a child process
    that failed or ran past its deadline."""


class StackUnsupportedError(MeasurementError):
    """A training stack (transformers, torchtune, LitGPT) cannot build this model or run these
    settings (an attention kernel the model class does not run, a pad_token_id outside the
    vocabulary, a model type it has no class for); the message names the input and what to change."""


class GpuSelectionError(VramwiseError):
    """The requested GPUs cannot be used."""


class InternalError(VramwiseError):
    """A computed figure broke an invariant (every figure a finite int >= 0, the total > 0).

    It is never returned as a result: it is a bug, in vramwise or in the data files it loaded.
    """
