"""Inputs transformers refuses, told as the user's mistake before the model is built.

transformers refuses to build a model for an attention kernel its class does not support (the class's
``_supports_sdpa``, ``_supports_flash_attn`` and ``_supports_flex_attn``, read as
``PreTrainedModel.get_correct_attn_implementation`` reads them), and torch's ``nn.Embedding`` asserts
that a ``padding_idx`` (the config's ``pad_token_id``) lies within its table. ``measure`` checks both
here, from the class's own attributes and the config, and raises :class:`StackUnsupportedError` naming
the input and the fix; the hf profile's warnings say the same from the family facts
``transformers_attention``, ``embedding_padding_idx`` and ``embedding_padding_rows``
(tests/conformance/test_transformers_refusals.py keeps those facts equal to what this module reads).
A refusal that can only be seen when the build fails is caught around that one call
(:func:`padding_refusal`); anything else stays an error of vramwise's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramwise.errors import SettingsError, StackUnsupportedError
from vramwise.models.stack_manifest import stack_manifest
from vramwise.profiles.settings import ATTENTION_KERNELS

__all__ = ["KERNEL_ORDER", "class_kernels", "causal_lm_class", "check_attention", "check_device", "padding_refusal",
           "check_padding", "STACK_PACKAGES", "step_failure"]

#: The attention kernels in the order messages list them (formulas/settings.yaml vocabularies.attention.kernels).
KERNEL_ORDER = tuple(ATTENTION_KERNELS)


def class_kernels(cls) -> tuple:
    """The kernels transformers' model class ``cls`` runs: each whose class attribute (``class_flag`` in
    formulas/settings.yaml: ``_supports_sdpa``, ``_supports_flash_attn``, ...) is set, and any without one (eager)."""
    return tuple(k for k, facts in ATTENTION_KERNELS.items()
                 if "class_flag" not in facts or bool(getattr(cls, facts["class_flag"], False)))


def causal_lm_class(config) -> Any:
    """The class ``AutoModelForCausalLM`` builds for the transformers config ``config``; a model type it
    has no causal LM for is refused naming it."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    mt = getattr(config, "model_type", None)
    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(mt)
    cls = getattr(transformers, name, None) if name is not None else None
    if cls is None:
        raise StackUnsupportedError(
            f"transformers {transformers.__version__} has no causal language model for model_type {mt!r}, so "
            "--stack hf cannot build this config")
    return cls


def check_attention(cls, attention: str) -> None:
    """Refuse ``attention`` when transformers' ``cls`` does not run it, naming the kernels it runs."""
    runs = class_kernels(cls)
    if attention not in runs:
        raise StackUnsupportedError(
            f"--attention {attention}: transformers' {cls.__name__} does not support it and refuses to build "
            f"the model (it runs {', '.join(runs)}); use --attention eager")


def check_device(attention: str, device: str) -> None:
    """Refuse a kernel that cannot run on ``device`` here (nothing is imported for the CPU's answer): on the
    CPU one with a ``not_on_cpu`` reason, on CUDA one whose package transformers' ``cuda_check`` does not find
    (formulas/settings.yaml vocabularies.attention.kernels)."""
    facts = ATTENTION_KERNELS.get(attention, {})
    if device == "cpu" and "not_on_cpu" in facts:
        raise SettingsError(f"--attention {attention} is not runnable here: {facts['not_on_cpu']}; on the CPU "
                            "use --attention sdpa or eager (or measure on a GPU with --device cuda)")
    if device == "cuda" and "cuda_check" in facts:
        import transformers.utils as tu

        if not getattr(tu, facts["cuda_check"])():
            raise SettingsError(f"--attention {attention} is not runnable here: transformers finds no "
                                f"{facts['package']} package; install it, or use --attention sdpa")


def padding_refusal(pad: Any, rows: Any, *, named: bool, config_class: str, model_class: str) -> str | None:
    """The message refusing ``pad`` (the pad_token_id the embedding takes as padding_idx) when it lies
    outside a table of ``rows`` rows, else None. ``named``: the config itself sets pad_token_id (else the
    config class's default was taken)."""
    if isinstance(pad, bool) or not isinstance(pad, int) or isinstance(rows, bool) or not isinstance(rows, int):
        return None
    if -rows <= pad < rows:
        return None
    whose = "the config's" if named else f"{config_class}'s default: the config sets none"
    return (f"pad_token_id {pad} ({whose}) lies outside the {rows} rows of the embedding transformers' {model_class} "
            f"builds with it as padding_idx, which refuses it; set pad_token_id to null or an id below {rows} "
            "in the config")


def check_padding(cfg_dict: dict, config, cls) -> None:
    """Refuse the config's pad_token_id before the model is built where its family says transformers'
    embeddings take it (the facts embedding_padding_idx and embedding_padding_rows, resolved from
    ``cfg_dict`` as an estimate resolves them); a config vramwise cannot resolve is left to the build."""
    from vramwise.errors import VramwiseError
    from vramwise.estimation.estimate import load_model

    try:
        facts = load_model(cfg_dict).facts
    except VramwiseError:
        return
    message = padding_refusal(facts.get("embedding_padding_idx"), facts.get("embedding_padding_rows"),
                              named="pad_token_id" in cfg_dict, config_class=type(config).__name__,
                              model_class=cls.__name__)
    if message is not None:
        raise StackUnsupportedError(message)


#: The training stacks' own packages (formulas/stacks.yaml): an exception raised in their code runs a
#: config they cannot run.
STACK_PACKAGES = stack_manifest().packages


def _package(filename: str) -> str | None:
    """The installed package a traceback frame's file belongs to (None: the standard library, or vramwise)."""
    parts = filename.replace("\\", "/").split("/site-packages/", 1)
    return parts[1].split("/", 1)[0] if len(parts) == 2 else None


def step_failure(exc: BaseException, *, fake: bool) -> StackUnsupportedError | None:
    """The user-facing error of an exception raised while a stack builds the model or runs its step; None
    when it is vramwise's own (re-raised as an internal error).

    Under ``fake``, torch's fake-tensor machinery failing (a tensor on another device, a storage of real
    memory) is the simulation's limit: drop ``--fake``. Otherwise the innermost frame outside torch says
    whose code failed: a stack's package (transformers' model code running config values it cannot run
    together, say a rotary dimension wider than the head) is the config's problem for that stack; vramwise's
    own frame, or any other, is vramwise's bug."""
    import traceback

    if isinstance(exc, (MemoryError, RecursionError)):
        return None
    what = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    if fake and (type(exc).__module__.startswith("torch._subclasses") or 'device "meta"' in str(exc)):
        return StackUnsupportedError(f"--fake: this model's step does not run on fake tensors ({what}); drop --fake "
                                     "and measure real tensors")
    ours = str(Path(__file__).resolve().parents[1])  # the vramwise package, wherever it is installed
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        package = _package(frame.filename)
        if frame.name in ("__torch_dispatch__", "__torch_function__"):
            continue  # a dispatch mode (vramwise's allocation tracker among them) passing an operator on
        if package in ("torch", "torchao", "triton", None) and not str(Path(frame.filename).resolve()).startswith(ours):
            continue  # torch's own operators, or the standard library: look further out
        if package in STACK_PACKAGES:
            return StackUnsupportedError(
                f"{package} cannot run a training step of this config ({what}; at "
                f"{frame.filename.split('/site-packages/', 1)[-1]}:{frame.lineno}): the config holds values its "
                "model code does not run together; check them (vramwise estimate does not run the model)")
        return None
    return None

