"""Training settings: one table of names, defaults, choices and help, and their validation.

:data:`SETTINGS` is the only place a setting is defined. The API (``vramwise.estimate``'s
keyword arguments and their defaults), :func:`normalise_settings`, the formula names the
profiles may read (:data:`SETTING_NAMES`), :class:`TrainingSettings` and the command-line
options all come from it. The vocabularies it reads (the methods and the groups each setting applies
to, the closed settings' values and spellings, the sweepable settings, the integer limits) are the
``vocabularies`` of formulas/settings.yaml, read once when this module is imported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, make_dataclass
from functools import lru_cache
from typing import Any, Callable

from vramwise.errors import SettingsError
from vramwise.models.stack_manifest import STACK_NAMES, LazyNames

__all__ = [
    "DEFAULT_PROFILE", "Setting", "strategy_manifest_names", "SETTINGS", "SETTING_NAMES", "PER_CALL", "TrainingSettings", "METHODS", "COMPARED_METHODS", "CHECKPOINTING_MODES",
    "CHECKPOINTING_SAVINGS", "LOSS_MODES", "LOSS_SAVINGS", "ATTENTION_KINDS", "ATTENTION_KERNELS", "EXPERTS_LAYOUTS", "METHOD_GROUPS", "ADAPTER_METHODS",
    "TRAINING_METHODS", "SERVING_METHODS", "settings_file", "check_vocabularies", "compile_settings_file", "STACKS", "STRATEGIES", "OFFLOAD_MODES", "DATA_PARALLEL_STRATEGIES", "SHARDS_IN_ORDER", "strategy_manifest_advice", "LIMITS", "normalise_settings", "normalise_static", "positive_int", "DEFAULTS", "SWEEPABLE", "DERIVED_FROM", "DERIVED_NAMES", "RELEASE_SETTINGS", "release_key", "profile_vocabularies", "LLAMA_CACHE_TYPES", "FLASH_ATTN_MODES",
]

#: The profile an estimate uses when none is named.
DEFAULT_PROFILE = "unsloth"
#: Where the settings' vocabularies and the rules of derived settings are (a file of the formulas folder).
SETTINGS_RULES_PATH = "formulas/settings.yaml"


@lru_cache(maxsize=1)
def settings_file():
    """formulas/settings.yaml (its vocabularies and its derive rules), read once through the data-file
    reader; bundled, so not validated here (the test suite and ``vramwise check`` validate it)."""
    from vramwise.rules.datafiles import load_data_file, package_files, read_data_text

    item = package_files("vramwise.formulas").joinpath("settings.yaml")
    return load_data_file(read_data_text(item, SETTINGS_RULES_PATH), SETTINGS_RULES_PATH, "settings-1.schema.json",
                          validate=False)


_VOCABULARIES = settings_file().data["vocabularies"]
#: The methods (formulas/settings.yaml vocabularies.methods); the first is the default.
METHODS = tuple(_VOCABULARIES["methods"]["names"])
#: The methods compare puts side by side when it is given none, in the order of their columns
#: (vocabularies.methods.compared).
COMPARED_METHODS = tuple(_VOCABULARIES["methods"]["compared"]["names"])
#: The methods each kind of setting applies to (vocabularies.method_groups): adapters, training, serving.
METHOD_GROUPS = {group: tuple(methods) for group, methods in _VOCABULARIES["method_groups"]["groups"].items()}
#: The methods that train LoRA adapters (the LoRA settings apply to them).
ADAPTER_METHODS = METHOD_GROUPS["adapters"]
#: The methods that run a training step.
TRAINING_METHODS = METHOD_GROUPS["training"]
#: The methods that serve.
SERVING_METHODS = METHOD_GROUPS["serving"]
#: Settings a sweep may vary (one value each, or a list of values): vramwise.sweep and `vramwise sweep`.
SWEEPABLE = tuple(_VOCABULARIES["sweepable"]["names"])
#: Gradient checkpointing modes (vocabularies.gradient_checkpointing).
CHECKPOINTING_MODES = tuple(_VOCABULARIES["gradient_checkpointing"]["names"])
#: The checkpointing modes that save memory, mildest first (vocabularies.gradient_checkpointing.saves_memory_in_order):
#: fit's advice tries those after the current mode, in this order.
CHECKPOINTING_SAVINGS = tuple(_VOCABULARIES["gradient_checkpointing"]["saves_memory_in_order"]["names"])
#: How the loss is computed: from the full logits tensor, or chunked / fused so that it never exists whole.
LOSS_MODES = tuple(_VOCABULARIES["loss"]["names"])
#: The losses that save memory, mildest first (vocabularies.loss.saves_memory_in_order): fit's advice tries
#: those after the current loss, in this order.
LOSS_SAVINGS = tuple(_VOCABULARIES["loss"]["saves_memory_in_order"]["names"])
#: Attention implementations (transformers' attn_implementation names); others are rejected, since
#: each profile must know whether a kernel keeps the score matrix.
ATTENTION_KINDS = tuple(_VOCABULARIES["attention"]["names"])
#: What measure needs to know to run each kernel (vocabularies.attention.kernels), in the order its
#: messages list them: kernel -> {class_flag, not_on_cpu, cuda_check, package}, each where it applies.
ATTENTION_KERNELS = {kernel: dict(facts) for kernel, facts in _VOCABULARIES["attention"]["kernels"].items()}
#: Training stacks ``vramwise measure`` runs (transformers + PEFT; the others through optional extras): the
#: names of the stacks manifest (formulas/stacks.yaml), read when first used.
STACKS = STACK_NAMES
#: How a mixture-of-experts layer holds its experts: fused 3-D parameters (transformers >= 5), which
#: bitsandbytes leaves unquantized, or one nn.Linear per expert (transformers 4.x), which it quantizes.
EXPERTS_LAYOUTS = tuple(_VOCABULARIES["experts_layout"]["names"])
#: The device a training step runs on: gpu (the GPU an estimate is for), cpu or cpu_onednn (the step measure runs,
#: on a CPU whose bf16 matrix products are torch's own kernels or oneDNN's).
STEP_DEVICES = tuple(_VOCABULARIES["step_device"]["names"])
#: How transformers' standard loss aligns each position with the next token: labels (4.49 on: the labels are padded),
#: logits (4.46 to 4.48: a contiguous float32 copy of the shifted logits) or float_logits (4.36 to 4.45: the same copy,
#: of logits the model returns in float32).
LOSS_SHIFTS = tuple(_VOCABULARIES["loss_shift"]["names"])
NF4_QUANTIZE = tuple(_VOCABULARIES["nf4_quantize"]["names"])


def _bundled_strategies() -> dict:
    """The bundled strategies manifest (formulas/strategies/strategies.yaml), through the data-file reader;
    not validated here (the test suite and ``vramwise check`` validate it and cross-check its names)."""
    from vramwise.rules.datafiles import load_data_file, package_files, read_data_text

    shown = "formulas/strategies/strategies.yaml"
    item = package_files("vramwise.formulas").joinpath("strategies", "strategies.yaml")
    return load_data_file(read_data_text(item, shown), shown, "strategies-1.schema.json", validate=False).data


@lru_cache(maxsize=1)
def strategy_manifest_names() -> tuple[tuple, tuple]:
    """(the strategies, the offload modes) of the bundled strategies manifest
    (formulas/strategies/strategies.yaml), each with "none" first; read once, through the data-file
    reader (``strategy_manifest_names.cache_clear()`` forgets them)."""
    data = _bundled_strategies()
    offload = ["none"]
    for entry in data["strategies"].values():
        offload += [mode for mode in entry.get("offload", ()) if mode not in offload]
    return ("none",) + tuple(data["strategies"]), tuple(offload)


@lru_cache(maxsize=1)
def strategy_manifest_advice() -> tuple[tuple, tuple]:
    """(the strategies whose GPUs each run a micro-batch, in the manifest's order: those marked
    ``data_parallel``; the (strategy, offload) changes fit's advice proposes to shard the model states,
    mildest first: ``advice.shards_in_order``) of the bundled strategies manifest; read once
    (``strategy_manifest_advice.cache_clear()`` forgets them)."""
    data = _bundled_strategies()
    parallel = tuple(name for name, entry in data["strategies"].items() if entry["data_parallel"])
    shards = tuple((e["strategy"], e["offload"]) for e in (data.get("advice") or {}).get("shards_in_order", ()))
    return parallel, shards


class _ManifestNames(LazyNames):
    """A tuple of names from the strategies manifest (item ``index`` of what ``read`` returns), read when
    first used (importing the settings reads no file, and an estimate without a strategy never needs them)."""

    __slots__ = ("_read", "_index")

    def __init__(self, index: int, read: Callable[[], tuple] = strategy_manifest_names):
        self._read, self._index = read, index

    def _names(self) -> tuple:
        return self._read()[self._index]


#: Multi-GPU strategies (their formulas: formulas/strategies, read from its strategies.yaml); "none" is one GPU.
STRATEGIES = _ManifestNames(0)
#: What a strategy moves to host memory (every offload setting of strategies.yaml): nothing, the optimizer
#: states (and their step), or the parameters too.
OFFLOAD_MODES = _ManifestNames(1)
#: The strategies whose GPUs each run a micro-batch, so that they multiply the batch (strategies.yaml
#: ``data_parallel``); the others (device_map) and one GPU ("none") run one replica, a micro-batch at a time.
DATA_PARALLEL_STRATEGIES = _ManifestNames(0, strategy_manifest_advice)
#: The (strategy, offload) changes fit's advice proposes to shard the model states, mildest first
#: (strategies.yaml ``advice.shards_in_order``).
SHARDS_IN_ORDER = _ManifestNames(1, strategy_manifest_advice)
#: Every accepted spelling of a gradient checkpointing mode -> the mode (the modes themselves and their aliases).
_GC_ALIASES = {**{mode: mode for mode in CHECKPOINTING_MODES}, **_VOCABULARIES["gradient_checkpointing"].get("aliases", {})}


#: Largest accepted value of each integer setting (a documented plausible range: vocabularies.limits).
LIMITS = dict(_VOCABULARIES["limits"]["limits"])


@lru_cache(maxsize=None)
def profile_vocabularies(profile: str) -> dict:
    """The vocabularies bundled profile ``profile`` declares for the settings it reads (the ``settings``
    of formulas/<profile>/profile.yaml): setting -> its choices, or its (first, last) releases; read
    once, through the data-file reader (the registry validates the manifest when it loads the profile)."""
    from vramwise.rules.datafiles import load_data_file, package_files, read_data_text

    shown = f"formulas/{profile}/profile.yaml"
    item = package_files("vramwise.formulas").joinpath(profile, "profile.yaml")
    data = load_data_file(read_data_text(item, shown), shown, "profile-1.schema.json", validate=False).data
    out = {}
    for name, entry in (data.get("settings") or {}).items():
        if "releases" in entry:
            out[name] = (entry["releases"]["first"], entry["releases"]["last"])
        else:
            out[name] = tuple(entry["choices"])
    return out


#: vLLM's KV-cache dtypes that the serving profile models (formulas/vllm/profile.yaml settings).
KV_CACHE_DTYPES = profile_vocabularies("vllm")["kv_cache_dtype"]
#: vLLM's block sizes (formulas/vllm/profile.yaml settings).
BLOCK_SIZES = profile_vocabularies("vllm")["block_size"]
#: The vLLM releases the serving profile has rules for (first, last), and the default: the newest
#: (formulas/vllm/profile.yaml settings).
VLLM_VERSIONS = profile_vocabularies("vllm")["vllm_version"]

#: llama.cpp's KV-cache types (formulas/llama.cpp/profile.yaml settings; f16 first, the default).
LLAMA_CACHE_TYPES = profile_vocabularies("llama.cpp")["cache_type_k"]
#: llama.cpp's flash attention modes (formulas/llama.cpp/profile.yaml settings; auto first, the default).
FLASH_ATTN_MODES = profile_vocabularies("llama.cpp")["flash_attn"]
#: llama.cpp's split modes over several GPUs (formulas/llama.cpp/profile.yaml settings; layer first, the default).
SPLIT_MODES = profile_vocabularies("llama.cpp")["split_mode"]


def positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise SettingsError(f"{name} must be a positive integer, got {_short(value)}")
    limit = LIMITS.get(name)
    if value < 1 or (limit is not None and value > limit):
        raise SettingsError(f"{name} must be a positive integer" + (f" of at most {limit:,}" if limit else "")
                            + f", got {_short(value)}")
    return value


def _short(value: Any, limit: int = 60) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit] + "..."


def _choice(choices: Sequence, default: str | None = None) -> Callable:
    def parse(name: str, value: Any) -> str:
        if value is None or value == default:
            if default is not None:
                return default
        if not isinstance(value, str) or value.strip().lower() not in choices:
            raise SettingsError(f"unknown {name.replace('_', ' ')} {_short(value)} (choose one of: {', '.join(choices)})")
        return value.strip().lower()

    return parse


def _checkpointing(name: str, value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "true" if value else "none"
    if isinstance(value, str) and value.strip().lower() in _GC_ALIASES:
        return _GC_ALIASES[value.strip().lower()]
    raise SettingsError(
        f"unknown gradient checkpointing mode {value!r} (choose one of: {', '.join(CHECKPOINTING_MODES)})"
    )


def _optional_int(name: str, value: Any) -> int | None:
    return None if value is None else positive_int(name, value)


def _utilization(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise SettingsError(f"{name} must be a share of the GPU's memory in (0, 1], got {_short(value)}")
    return float(value)


def _block_size(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value not in BLOCK_SIZES:
        raise SettingsError(f"block_size must be one of {', '.join(map(str, BLOCK_SIZES))} (vLLM's block sizes), "
                            f"got {_short(value)}")
    return value


#: Settings that name a release: formula files date values by them (``dated:``).
RELEASE_SETTINGS = ("vllm_version",)


@lru_cache(maxsize=256)
def release_key(text: Any) -> tuple | None:
    """A release written MAJOR.MINOR.PATCH as a comparable tuple (0.12.0 -> (0, 12, 0)); None when it is not one."""
    import re

    if not isinstance(text, str) or re.fullmatch(r"\d{1,4}\.\d{1,4}\.\d{1,4}", text) is None:
        return None
    return tuple(int(p) for p in text.split("."))


def _vllm_version(name: str, value: Any) -> str:
    import re

    if value is None or (isinstance(value, str) and value.strip().lower() in ("latest", "")):
        return VLLM_VERSIONS[1]
    m = re.fullmatch(r"v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,3}))?(?:[.+-]?(?:post|rc|dev)\S*)?",
                     value.strip().lower()) if isinstance(value, str) and len(value) < 40 else None
    if m is None:
        raise SettingsError(f"vllm_version must be a vLLM release such as 0.11.0, got {_short(value)}")
    text = f"{int(m[1])}.{int(m[2])}.{int(m[3] or 0)}"
    first, last = VLLM_VERSIONS
    if not (release_key(first) <= release_key(text) and release_key(text)[:2] <= release_key(last)[:2]):
        raise SettingsError(f"vllm_version {text}: the serving profile has vLLM's rules from {first} to the "
                            f"{last.rsplit('.', 1)[0]} releases (versions before 0.8 run the older V0 engine)")
    return text


def _n_ctx(name: str, value: Any) -> int:
    if type(value) is int and value == 0:
        return 0  # llama.cpp: the model's training context
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= LIMITS[name]:
        raise SettingsError(f"n_ctx must be a number of tokens up to {LIMITS[name]:,}, or 0 for the model's training "
                            f"context, got {_short(value)}")
    return value


def _n_gpu_layers(name: str, value: Any) -> int | None:
    if isinstance(value, str) and value.strip().lower() in ("all", "-1"):
        value = None
    if value is None or (type(value) is int and value < 0):
        return None  # every layer and the output layer, as llama.cpp's default (-1) places them
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if type(value) is not int or value > LIMITS[name]:
        raise SettingsError(f"{name} must be a number of layers (0 to {LIMITS[name]:,}) or all, got {_short(value)}")
    return value


def _optional_text(value: Any, most: int, wanted: str) -> str | None:
    """None, or a non-empty text of at most ``most`` characters (stripped); else the one line ``wanted`` says."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > most:
        raise SettingsError(f"{wanted}, got {_short(value)}")
    return value.strip()


def _gguf_path(name: str, value: Any) -> str | None:
    return _optional_text(value, 4096, f"{name} must be the path of a .gguf file")


def _nonnegative_int(name: str, value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if type(value) is not int or not 0 <= value <= LIMITS[name]:
        raise SettingsError(f"{name} must be a whole number from 0 to {LIMITS[name]:,}, got {_short(value)}")
    return value


def _tensor_split(name: str, value: Any) -> tuple | None:
    """llama.cpp's --tensor-split: proportions, one per GPU (``3,1`` or ``3/1`` as its flag reads them, or a
    sequence of numbers); None (or every proportion 0) splits by each GPU's free memory."""
    if value is None:
        return None
    if isinstance(value, str):
        import re

        parts = [p for p in re.split(r"[,/]+", value.strip()) if p.strip()]  # common/arg.cpp: split by , and /
        try:
            value = [float(p) for p in parts]
        except ValueError:
            raise SettingsError(f"tensor_split must be proportions, one per GPU, such as 3,1, got {_short(value)}") from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    if (not isinstance(value, (list, tuple)) or not value or len(value) > LIMITS["gpu_count"]
            or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 for v in value)):
        raise SettingsError(f"tensor_split must be proportions (numbers of 0 or more), one per GPU and at most "
                            f"{LIMITS['gpu_count']}, such as 3,1, got {_short(value)}")
    if not any(value):
        return None  # all zero: llama.cpp splits by free memory (src/llama-model.cpp:1557)
    return tuple(float(v) for v in value)


def _gpu_memory(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        from vramwise.inputs.sizes import parse_size

        size = parse_size(value)
        if size is None:
            raise SettingsError(f"gpu_memory must be bytes or a size with its unit (80GB, 79.2GiB), got {_short(value)}")
        value = size.bytes
    value = positive_int(name, value)
    if value < 2**30:
        raise SettingsError(f"gpu_memory is the total bytes of one GPU, got {value:,} (under 1 GiB)")
    return value


def _gpu(name: str, value: Any) -> str | None:
    return _optional_text(value, 100, "gpu must be a GPU name or alias (H100, a100-40gb) or a size (80GB)")


def _optimizer(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 100:
        raise SettingsError(f"optimizer must be a name, got {_short(value)}")
    return value.strip().lower().replace("-", "_")


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _GC_ALIASES and value.strip().lower() != "unsloth":
        return _GC_ALIASES[value.strip().lower()] == "true"
    raise SettingsError(f"{name} must be true or false, got {_short(value)}")


def installed_experts_layout() -> str:
    """The experts layout of the installed transformers (fused from version 5 on, and when it is absent);
    read from the package metadata, so transformers is not imported (nor importlib.metadata, where the metadata
    file can be read directly)."""
    from vramwise.inputs import installed

    version = installed.distribution_version("transformers")
    if version is None:
        return "fused"
    major = version.split(".", 1)[0]
    return "per_expert" if major.isdigit() and int(major) < 5 else "fused"


def _experts_layout(name: str, value: Any) -> str:
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return installed_experts_layout()
    return _choice(EXPERTS_LAYOUTS)(name, value)


def _load_in_4bit(name: str, value: Any) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise SettingsError(f"{name} must be true, false or unset, got {value!r}")
    return value


def _dropout(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise SettingsError(f"lora_dropout must be a probability in [0, 1), got {_short(value)}")
    return float(value)


def _targets(name: str, value: Any) -> tuple | None:
    if value is None:
        return None
    if isinstance(value, str):
        targets = tuple(t.strip() for t in value.split(",") if t.strip())
    else:
        if not isinstance(value, (list, tuple, set, frozenset)):
            raise SettingsError(f"target_modules must be a list of names or a string, got {_short(value)}")
        targets = tuple(value)
        if not all(isinstance(t, str) and t.strip() for t in targets):
            raise SettingsError(f"target_modules must hold module names, got {_short(list(targets))}")
        targets = tuple(t.strip() for t in targets)
    if len(targets) > 1000 or any(len(t) > 200 for t in targets):
        raise SettingsError("target_modules: at most 1,000 names of at most 200 characters each")
    if not targets:
        raise SettingsError("target_modules is empty: name at least one module, or leave it unset for the default")
    return targets


_ADAPTERS, _SERVING, _TRAINING = ADAPTER_METHODS, SERVING_METHODS, TRAINING_METHODS


@dataclass(frozen=True)
class Setting:
    """One training setting: its name (keyword argument, formula name, ``--flag-name``), default and rules."""

    name: str
    default: Any
    help: str
    parse: Callable[[str, Any], Any]  # (name, raw value) -> normalised value, or SettingsError
    choices: tuple = ()  # the accepted values, when the vocabulary is closed
    cli_type: str = "str"  # how the command line reads it: str, int, float, bool
    per_call: bool = False  # varies between the estimates of one model (validated on every call)
    applies_to: tuple = METHODS  # the methods it matters for (set for another, it is ignored with a warning)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


SETTINGS: tuple = (
    Setting("method", "qlora", "fine-tuning method, or inference", _choice(METHODS), choices=METHODS),
    Setting("batch_size", 4, "per-device batch size", positive_int, cli_type="int", per_call=True),
    Setting("seq_len", 2048, "maximum sequence length", positive_int, cli_type="int", per_call=True),
    Setting("lora_rank", 16, "LoRA rank r", positive_int, cli_type="int", applies_to=_ADAPTERS),
    Setting("target_modules", None,
            "comma-separated LoRA targets, or all-linear (default: the seven attention and MLP projections)", _targets,
            applies_to=_ADAPTERS),
    Setting("gradient_checkpointing", "unsloth", "gradient checkpointing mode: none, true (transformers') or unsloth",
            _checkpointing, choices=CHECKPOINTING_MODES, applies_to=_TRAINING),
    Setting("optimizer", "adamw_8bit", "optimizer name, e.g. adamw_8bit, adamw_torch, adamw_torch_fused, sgd", _optimizer,
            applies_to=_TRAINING),
    Setting("attention", "flash_attention_2", "attention implementation (transformers' attn_implementation)",
            _choice(ATTENTION_KINDS, default="flash_attention_2"), choices=ATTENTION_KINDS),
    Setting("load_in_4bit", None, "4-bit base weights (default: true for qlora only)", _load_in_4bit, cli_type="bool"),
    Setting("kbit_prepare", None,
            "QLoRA: PEFT's prepare_model_for_kbit_training upcasts every weight left out of 4 bit to float32 "
            "(default: true, false under FSDP, whose QLoRA recipe loads with bnb_4bit_quant_storage and skips it)",
            _load_in_4bit, cli_type="bool", applies_to=("qlora",)),
    Setting("double_quant", None,
            "QLoRA: bitsandbytes' nested quantization of the 4-bit weights' block scales (BitsAndBytesConfig's "
            "bnb_4bit_use_double_quant; default: the checkpoint's quantization_config, else the stack's own)",
            _load_in_4bit, cli_type="bool", applies_to=("qlora",)),
    Setting("loss", "standard",
            "cross-entropy: standard (full logits), chunked or fused (Liger-style; the logits never exist whole)",
            _choice(LOSS_MODES), choices=LOSS_MODES, applies_to=_TRAINING),
    Setting("lora_dropout", 0.0, "LoRA dropout probability; the hf profile charges its masks", _dropout, cli_type="float",
            applies_to=_ADAPTERS),
    Setting("loss_chunks", 8, "chunks of a chunked cross-entropy (loss=chunked; torchtune's num_output_chunks)",
            positive_int, cli_type="int", applies_to=_TRAINING),
    Setting("activation_offloading", False,
            "keep the activations saved for the backward pass in host memory (torchtune's enable_activation_offloading)",
            _flag, cli_type="bool", applies_to=_TRAINING),
    Setting("optimizer_in_bwd", False,
            "step the optimizer per parameter during the backward pass, so the gradients never exist all at once "
            "(torchtune's optimizer_in_bwd)", _flag, cli_type="bool", applies_to=_TRAINING),
    Setting("lora_layers", 16,
            "layers that train, counted from the last (mlx-lm's num_layers, default 16; read by the mlx profile)",
            positive_int, cli_type="int", applies_to=_TRAINING),
    Setting("compile", False, "torch.compile the model and loss (each profile states what it changes)", _flag,
            cli_type="bool", applies_to=_TRAINING),
    Setting("experts_layout", None,
            "mixture-of-experts storage: fused (transformers >= 5: 3-D tensors bitsandbytes leaves unquantized) or "
            "per_expert (transformers 4.x: one nn.Linear per expert, quantized); default: the installed transformers'",
            _experts_layout, choices=EXPERTS_LAYOUTS),
    Setting("step_device", "gpu",
            "the device the training step runs on: gpu (the GPU the estimate is for), or cpu / cpu_onednn (the step "
            "vramwise measure runs, on a CPU whose bf16 matrix products are torch's own / oneDNN's; counts the copies "
            "only such a kernel makes)", _choice(STEP_DEVICES, default="gpu"),
            choices=STEP_DEVICES, applies_to=_TRAINING),
    Setting("loss_shift", "labels",
            "hf, standard loss: how transformers lines each position up with the next token: labels (4.49 on: the "
            "labels are padded, no copy), logits (4.46 to 4.48: the shifted float32 logits are copied contiguous, "
            "one more float32 logits tensor in the forward) or float_logits (4.36 to 4.45, Llama-style models: the "
            "same copy, of logits the model returns in float32)", _choice(LOSS_SHIFTS, default="labels"),
            choices=LOSS_SHIFTS, applies_to=_TRAINING),
    Setting("nf4_quantize", "chunked",
            "torchtune, QLoRA: how torchao quantizes each base weight while the model is built on the GPU: chunked "
            "(torchao 0.2 on, torchtune 0.2 on) or whole (torchao 0.1, torchtune 0.1.x: each weight broadcast "
            "against the 16 NF4 codes at once, leaving the allocator several GB of cached blocks after the setup)",
            _choice(NF4_QUANTIZE, default="chunked"), choices=NF4_QUANTIZE, applies_to=("qlora",)),
    Setting("outputs_held", False,
            "hf: the training loop keeps the model's output, and so its logits, alive through the backward and "
            "the optimizer step until the next forward returns (a hand-written loop: outputs = model(**batch); "
            "outputs.loss.backward()); the Trainer returns the loss alone", _flag, cli_type="bool",
            applies_to=_TRAINING),
    Setting("strategy", "none",
            "multi-GPU strategy: ddp, fsdp (full shard), fsdp_shard_grad_op, fsdp_hybrid, zero1, zero2, zero3 or "
            "device_map on the hf profile, the fsdp ones on torchtune, fsdp on litgpt; none is one GPU", _choice(STRATEGIES, default="none"), choices=STRATEGIES,
            applies_to=_TRAINING),
    Setting("fsdp_head_units", False,
            "torchtune under FSDP full shard: the token embeddings and the output projection are FSDP units of "
            "their own (custom_sharded_layers: ['tok_embeddings', 'output']), gathered only around their own "
            "forward and backward, instead of staying in the root unit", _flag, cli_type="bool",
            applies_to=_TRAINING),
    Setting("world_size", 1, "GPUs the strategy runs on (data-parallel ranks, or the GPUs device_map spreads layers over)",
            positive_int, cli_type="int", applies_to=_TRAINING),
    Setting("offload", "none",
            "what the strategy keeps in host memory: none, optimizer (states and step) or parameters "
            "(parameters, gradients and optimizer)", _choice(OFFLOAD_MODES, default="none"), choices=OFFLOAD_MODES,
            applies_to=_TRAINING),
    Setting("gpus_per_node", 8, "GPUs per machine: fsdp_hybrid shards within one, host memory is per machine",
            positive_int, cli_type="int", applies_to=_TRAINING),
    # serving (profile vllm): vLLM's own names, defaults and rules (formulas/vllm)
    Setting("gpu", None, "serving: the GPU by name or alias (H100, a100-40gb) or size (80GB); sets gpu_memory",
            _gpu, applies_to=_SERVING),
    Setting("gpu_memory", None, "serving: total memory of one GPU in bytes as torch reports it (or a size: 79.2GiB)",
            _gpu_memory, applies_to=_SERVING),
    Setting("vllm_version", VLLM_VERSIONS[1], f"serving: the vLLM release whose rules apply ({VLLM_VERSIONS[0]} "
            f"to {VLLM_VERSIONS[1]})", _vllm_version, applies_to=_SERVING),
    Setting("gpu_memory_utilization", None, "serving: share of the GPU's memory vLLM may use (default: vLLM's for "
            "the version: 0.9, 0.92 from 0.20, all of it from 0.34)", _utilization, cli_type="float", applies_to=_SERVING),
    Setting("max_model_len", None, "serving: context length per request (default: the model's, from its config)",
            _optional_int, cli_type="int", applies_to=_SERVING),
    Setting("max_num_seqs", None, "serving: requests in one batch (default: vLLM's for the version and GPU)",
            _optional_int, cli_type="int", applies_to=_SERVING),
    Setting("max_num_batched_tokens", None, "serving: tokens in one batch (default: vLLM's for the version and GPU)",
            _optional_int, cli_type="int", applies_to=_SERVING),
    Setting("tensor_parallel_size", 1, "serving: GPUs each layer is split over", positive_int, cli_type="int",
            applies_to=_SERVING),
    Setting("pipeline_parallel_size", 1, "serving: stages the layers are split into, one GPU group each",
            positive_int, cli_type="int", applies_to=_SERVING),
    Setting("kv_cache_dtype", "auto", "serving: KV-cache element type (auto: the model's dtype; fp8: one byte)",
            _choice(KV_CACHE_DTYPES, default="auto"), choices=KV_CACHE_DTYPES, applies_to=_SERVING),
    Setting("block_size", None, "serving: tokens per KV-cache block (default: vLLM's, 16 for most models)",
            _block_size, cli_type="int", applies_to=_SERVING),
    Setting("enforce_eager", False, "serving: no CUDA graphs", _flag, cli_type="bool", applies_to=_SERVING),
    # local inference (profile llama.cpp): llama.cpp's own names and defaults (formulas/llama.cpp, common/common.h)
    Setting("n_ctx", 0, "llama.cpp: context size in tokens (0, the default: the model's training context)", _n_ctx,
            cli_type="int", applies_to=_SERVING),
    Setting("n_parallel", 1, "llama.cpp: sequences decoded in parallel (n_seq_max; the server's slots)", positive_int,
            cli_type="int", applies_to=_SERVING),
    Setting("kv_unified", False, "llama.cpp: one KV buffer shared by all sequences rather than a stream each",
            _flag, cli_type="bool", applies_to=_SERVING),
    Setting("cache_type_k", "f16", "llama.cpp: KV-cache type of K", _choice(LLAMA_CACHE_TYPES, default="f16"),
            choices=LLAMA_CACHE_TYPES, applies_to=_SERVING),
    Setting("cache_type_v", "f16", "llama.cpp: KV-cache type of V (a quantized type needs flash attention)",
            _choice(LLAMA_CACHE_TYPES, default="f16"), choices=LLAMA_CACHE_TYPES, applies_to=_SERVING),
    Setting("flash_attn", "auto", "llama.cpp: flash attention on, off or auto", _choice(FLASH_ATTN_MODES, default="auto"),
            choices=FLASH_ATTN_MODES, applies_to=_SERVING),
    Setting("n_gpu_layers", None, "llama.cpp: layers to store in VRAM, counted from the last with the output layer "
            "(default: all)", _n_gpu_layers, cli_type="int", applies_to=_SERVING),
    Setting("gpu_count", 1, "llama.cpp: GPUs of the --gpu kind the model is split over (at most 8)", positive_int,
            cli_type="int", applies_to=_SERVING),
    Setting("split_mode", "layer", "llama.cpp: how the model is split over the GPUs: layer, none (main_gpu only) or "
            "row", _choice(SPLIT_MODES, default="layer"), choices=SPLIT_MODES, applies_to=_SERVING),
    Setting("tensor_split", None, "llama.cpp: proportions of the layers per GPU, such as 3,1 (default: by free "
            "memory, equal on GPUs of one kind)", _tensor_split, applies_to=_SERVING),
    Setting("main_gpu", 0, "llama.cpp: the GPU that holds the model with split_mode none", _nonnegative_int,
            cli_type="int", applies_to=_SERVING),
    Setting("n_batch", 2048, "llama.cpp: logical batch size", positive_int, cli_type="int", applies_to=_SERVING),
    Setting("n_ubatch", 512, "llama.cpp: physical batch size", positive_int, cli_type="int", applies_to=_SERVING),
    # llama-server's companions of the model (formulas/llama.cpp/companions.yaml; common/arg.cpp, common/common.h)
    Setting("model_draft", None, "llama.cpp: a draft model's GGUF file for speculative decoding (llama-server "
            "--model-draft): its weights, KV cache and output buffer beside the model's", _gguf_path,
            applies_to=_SERVING),
    Setting("n_gpu_layers_draft", None, "llama.cpp: the draft model's layers in VRAM, counted as n_gpu_layers "
            "(default: all)", _n_gpu_layers, cli_type="int", applies_to=_SERVING),
    Setting("cache_type_k_draft", "f16", "llama.cpp: the draft model's KV-cache type of K",
            _choice(LLAMA_CACHE_TYPES, default="f16"), choices=LLAMA_CACHE_TYPES, applies_to=_SERVING),
    Setting("cache_type_v_draft", "f16", "llama.cpp: the draft model's KV-cache type of V",
            _choice(LLAMA_CACHE_TYPES, default="f16"), choices=LLAMA_CACHE_TYPES, applies_to=_SERVING),
    Setting("mmproj", None, "llama.cpp: a multimodal projector's GGUF file (llama-server --mmproj): its weights",
            _gguf_path, applies_to=_SERVING),
    Setting("mmproj_offload", True, "llama.cpp: the projector on the first GPU (false: llama-server "
            "--no-mmproj-offload, on the host)", _flag, cli_type="bool", applies_to=_SERVING),
)

#: Names derived from the settings for formula files (normalise_static sets them, 0 until the estimate reads the
#: files the settings name): what the llama.cpp profile's companions hold, the draft model (model_draft, evaluated
#: by the profile's own formulas: vramwise.estimation.companions) per device, and the projector's weights (mmproj).
#: A value that changes by release is dated by the release setting in its formula file (``dated:``).
DRAFT_NAMES: tuple = (tuple(f"draft_gpu{i}_bytes" for i in range(8))
                      + ("draft_host_bytes", "draft_gpu_weights_bytes", "draft_host_weights_bytes",
                         "draft_gpu_kv_bytes", "draft_host_kv_bytes", "draft_output_bytes"))
DERIVED_NAMES: tuple = DRAFT_NAMES + ("mmproj_weights_bytes",)
#: The setting each derived name comes from (a formula reading the name reads the setting).
DERIVED_FROM: dict = {**{n: "model_draft" for n in DRAFT_NAMES}, "mmproj_weights_bytes": "mmproj"}
#: Names that settings give to formula files.
SETTING_NAMES = frozenset(s.name for s in SETTINGS) | frozenset(DERIVED_NAMES)
#: The settings validated on every call; the others are normalised once per combination.
PER_CALL = tuple(s.name for s in SETTINGS if s.per_call)
#: Default of each setting.
DEFAULTS = {s.name: s.default for s in SETTINGS}


def _to_dict(self) -> dict:
    """Plain data, suitable for JSON."""
    out = self.as_names()
    out["target_modules"] = list(self.target_modules) if self.target_modules is not None else None
    return out


def _as_names(self) -> dict:
    """The settings as formula names."""
    return {s.name: getattr(self, s.name) for s in SETTINGS if s.name != "target_modules"}


TrainingSettings = make_dataclass(
    "TrainingSettings",
    [(s.name, Any) for s in SETTINGS],
    frozen=True,
    namespace={"to_dict": _to_dict, "as_names": _as_names,
               "__doc__": "The training settings an estimate is made for, normalised (fields: SETTINGS).",
               "__module__": __name__},
)


def compile_derive_rules(df) -> tuple:
    """((setting, compiled expression), ...) of a loaded settings-rules file, in file order; each rule
    reads the settings only (an :class:`~vramwise.errors.ExpressionError` or
    :class:`~vramwise.errors.FileFormatError` names the file, line and node)."""
    from vramwise.errors import FileFormatError
    from vramwise.rules.expr.language import compile_expression

    names = frozenset(s.name for s in SETTINGS if not s.per_call)
    out, problems = [], []
    for name, rule in df.data["derive"].items():
        if name not in names:
            problems.append(f"{df.key_where(('derive', name))}: $.derive.{name}: unknown setting {name!r} "
                            f"(settings normalised once per combination: {', '.join(sorted(names))})")
            continue
        out.append((name, compile_expression(rule["expr"], allowed=names, df=df, parts=("derive", name, "expr"))))
    if problems:
        raise FileFormatError(problems)
    return tuple(out)


def check_vocabularies(df) -> list[str]:
    """The problems of a loaded settings file's vocabularies that its schema cannot see, one
    ``path:line:col: $.json.path: message`` each: a group, an alias, compare's methods or an order of
    the modes that save memory naming a value its vocabulary lacks, an attention kernel without its entry in ``kernels`` (or one there that is not a kernel), a
    sweepable or limited name that is no setting, a ``setting`` that is none."""
    from vramwise.rules.datafiles import json_path

    vocab = df.data["vocabularies"]
    settings = {s.name for s in SETTINGS}
    problems = []

    def unknown(parts: tuple, name: str, known, what: str) -> None:
        if name not in known:
            problems.append(f"{df.key_where(parts)}: {json_path(parts)}: {name!r} is not {what} "
                            f"({', '.join(map(str, known))})")

    for entry, body in vocab.items():
        if "setting" in body and body["setting"] not in settings:
            problems.append(df.problem(("vocabularies", entry, "setting"), f"{body['setting']!r} is not a setting"))
    methods = vocab["methods"]["names"]
    for i, method in enumerate(vocab["methods"]["compared"]["names"]):
        if method not in methods:
            problems.append(df.problem(("vocabularies", "methods", "compared", "names", i),
                                       f"{method!r} is not a method ({', '.join(methods)})"))
    for entry in ("gradient_checkpointing", "loss"):
        names = vocab[entry]["names"]
        for i, name in enumerate(vocab[entry]["saves_memory_in_order"]["names"]):
            if name not in names:
                problems.append(df.problem(("vocabularies", entry, "saves_memory_in_order", "names", i),
                                           f"{name!r} is not one of {entry}'s names ({', '.join(names)})"))
    for group, members in vocab["method_groups"]["groups"].items():
        for i, method in enumerate(members):
            if method not in methods:
                problems.append(df.problem(("vocabularies", "method_groups", "groups", group, i),
                                           f"{method!r} is not a method ({', '.join(methods)})"))
    modes = vocab["gradient_checkpointing"]["names"]
    for spelling, mode in vocab["gradient_checkpointing"].get("aliases", {}).items():
        parts = ("vocabularies", "gradient_checkpointing", "aliases", spelling)
        if spelling in modes:
            problems.append(f"{df.key_where(parts)}: {json_path(parts)}: {spelling!r} is a mode, not an alias")
        elif mode not in modes:
            problems.append(df.problem(parts, f"{mode!r} is not a gradient checkpointing mode ({', '.join(modes)})"))
    kinds, kernels = vocab["attention"]["names"], vocab["attention"]["kernels"]
    for kernel in kernels:
        unknown(("vocabularies", "attention", "kernels", kernel), kernel, kinds, "an attention kernel of names")
    missing = [k for k in kinds if k not in kernels]
    if missing:
        problems.append(df.problem(("vocabularies", "attention", "kernels"), f"no entry for {', '.join(missing)} "
                                   "(every kernel of names has one, {} where nothing stops it)"))
    for i, name in enumerate(vocab["sweepable"]["names"]):
        if name not in settings:
            problems.append(df.problem(("vocabularies", "sweepable", "names", i), f"{name!r} is not a setting"))
    for name in vocab["limits"]["limits"]:
        unknown(("vocabularies", "limits", "limits", name), name, sorted(settings), "a setting")
    return problems


def compile_settings_file(df) -> tuple:
    """Check a loaded settings file's vocabularies and compile its derive rules (see
    :func:`compile_derive_rules`); every problem of the vocabularies is one :class:`FileFormatError`."""
    from vramwise.errors import FileFormatError

    problems = check_vocabularies(df)
    if problems:
        raise FileFormatError(problems)
    return compile_derive_rules(df)


@lru_cache(maxsize=1)
def derive_rules() -> tuple:
    """The bundled rules of derived settings (formulas/settings.yaml), compiled once
    (``derive_rules.cache_clear()`` forgets them)."""
    return compile_derive_rules(settings_file())


def normalise_static(values: dict) -> dict:
    """Normalise every setting except the per-call ones (``values`` maps names to raw values); an unset
    setting with a rule in formulas/settings.yaml takes its value (4-bit loading by method), and the
    refusals that join settings apply here."""
    out = {}
    for s in SETTINGS:
        if not s.per_call:
            out[s.name] = s.parse(s.name, values.get(s.name, s.default))
    method = out["method"]
    for name in DERIVED_NAMES:  # set from the files the settings name by the estimate (vramwise.estimation.companions)
        out[name] = 0
    for name, rule in derive_rules():  # formulas/settings.yaml: a setting left unset takes its rule's value
        if out[name] is None:
            out[name] = rule.evaluate(out)
    if out["load_in_4bit"] and method == "full":
        raise SettingsError("full fine-tuning cannot train a 4-bit model: use method 'qlora' or unset load_in_4bit")
    if not out["load_in_4bit"] and method == "qlora":
        raise SettingsError("qlora loads the base model in 4 bit: use method 'lora' for a 16-bit base model")
    if out["gpu"] is not None:
        from vramwise.inputs.gpu_catalog import gpu_spec, unified_budget

        spec = gpu_spec(out["gpu"])
        budget = unified_budget(spec)  # unified memory (Apple Silicon, an APU): what its GPU may use of the system's
        total = budget.gpu_bytes if budget else spec.cuda_total_bytes or spec.memory_bytes  # CUDA's, where known
        if out["gpu_memory"] is not None and out["gpu_memory"] != total:
            raise SettingsError(f"gpu {out['gpu']!r} has {total:,} bytes but gpu_memory is "
                                f"{out['gpu_memory']:,}: give one of them")
        out["gpu"], out["gpu_memory"] = spec.id, total
    if out["strategy"] == "none" and method != "inference":
        if out["world_size"] != 1:
            raise SettingsError(f"world_size {out['world_size']} needs a multi-GPU strategy "
                                f"(strategy: {', '.join(STRATEGIES[1:])})")
        if out["offload"] != "none":
            raise SettingsError(f"offload {out['offload']} needs a strategy that offloads (fsdp, zero1, zero2, zero3)")
    return out


def unused_settings(static: dict) -> list[str]:
    """Settings given another value than their default that do not matter for the method."""
    method = static["method"]
    return [s.name for s in SETTINGS
            if not s.per_call and method not in s.applies_to and static.get(s.name) != _NORMAL_DEFAULTS.get(s.name)]


def unmodelled_settings(static: dict, read: frozenset, unused: list) -> list[str]:
    """Settings given another value than their default that a profile's formulas never read
    (``unused`` ones, already reported as not applying to the method, apart)."""
    return [s.name for s in SETTINGS
            if not s.per_call and s.name not in read and s.name not in unused and s.default is not None
            and static.get(s.name) != _NORMAL_DEFAULTS.get(s.name)]


def normalise_settings(**values: Any) -> TrainingSettings:
    """Every setting validated and normalised; unset ones take their defaults (see :data:`SETTINGS`)."""
    unknown = sorted(set(values) - SETTING_NAMES)
    if unknown:
        raise SettingsError(f"unknown setting(s) {', '.join(unknown)} (settings: {', '.join(s.name for s in SETTINGS)})")
    static = normalise_static(values)
    for name in PER_CALL:
        static[name] = positive_int(name, values.get(name, DEFAULTS[name]))
    return TrainingSettings(**{s.name: static[s.name] for s in SETTINGS})


#: The defaults as normalise_static writes them (to tell a setting the caller changed).
_NORMAL_DEFAULTS = {s.name: s.parse(s.name, s.default) for s in SETTINGS if s.default is not None}
_NORMAL_DEFAULTS["target_modules"] = None
