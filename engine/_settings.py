"""Training settings: validation and normalisation, done once per estimate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from ._errors import SettingsError

__all__ = ["TrainingSettings", "METHODS", "CHECKPOINTING_MODES", "LOSS_MODES", "normalise_settings"]

METHODS = ("qlora", "lora", "full", "inference")
CHECKPOINTING_MODES = ("none", "true", "unsloth")
#: How the loss is computed: from the full logits tensor, or chunked / fused so that it never exists whole.
LOSS_MODES = ("standard", "chunked", "fused")
_GC_ALIASES = {"none": "none", "false": "none", "off": "none", "no": "none", "0": "none",
               "true": "true", "on": "true", "yes": "true", "1": "true", "unsloth": "unsloth"}


@dataclass(frozen=True)
class TrainingSettings:
    """The training settings an estimate is made for, normalised."""

    method: str
    batch_size: int
    seq_len: int
    lora_rank: int
    target_modules: tuple | None
    gradient_checkpointing: str
    optimizer: str
    attention: str
    load_in_4bit: bool
    loss: str = "standard"
    lora_dropout: float = 0.0

    def to_dict(self) -> dict:
        """Plain data, suitable for JSON."""
        out = self.as_names()
        out["target_modules"] = list(self.target_modules) if self.target_modules is not None else None
        return out

    def as_names(self) -> dict:
        """The settings as formula names."""
        return {
            "method": self.method,
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "lora_rank": self.lora_rank,
            "gradient_checkpointing": self.gradient_checkpointing,
            "optimizer": self.optimizer,
            "attention": self.attention,
            "load_in_4bit": self.load_in_4bit,
            "loss": self.loss,
            "lora_dropout": self.lora_dropout,
        }


#: Names that settings give to formula files.
SETTING_NAMES = frozenset(
    ("method", "batch_size", "seq_len", "lora_rank", "gradient_checkpointing", "optimizer", "attention", "load_in_4bit", "loss", "lora_dropout")
)
__all__ += ["SETTING_NAMES"]


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise SettingsError(f"{name} must be a positive integer, got {value!r}")
    if value < 1:
        raise SettingsError(f"{name} must be a positive integer, got {value}")
    return value


def normalise_settings(
    *,
    method: str,
    batch_size: Any,
    seq_len: Any,
    lora_rank: Any,
    target_modules: str | Iterable[str] | None,
    gradient_checkpointing: Any,
    optimizer: str,
    attention: str | None,
    load_in_4bit: bool | None,
    loss: str = "standard",
    lora_dropout: Any = 0.0,
) -> TrainingSettings:
    if not isinstance(method, str) or method.strip().lower() not in METHODS:
        raise SettingsError(f"unknown method {method!r} (choose one of: {', '.join(METHODS)})")
    method = method.strip().lower()
    if isinstance(gradient_checkpointing, bool) or gradient_checkpointing is None:
        gc = "true" if gradient_checkpointing else "none"
    elif isinstance(gradient_checkpointing, str) and gradient_checkpointing.strip().lower() in _GC_ALIASES:
        gc = _GC_ALIASES[gradient_checkpointing.strip().lower()]
    else:
        raise SettingsError(
            f"unknown gradient checkpointing mode {gradient_checkpointing!r} (choose one of: {', '.join(CHECKPOINTING_MODES)})"
        )
    if not isinstance(optimizer, str) or not optimizer.strip():
        raise SettingsError(f"optimizer must be a name, got {optimizer!r}")
    opt = optimizer.strip().lower().replace("-", "_")
    if attention is None:
        attention = "flash_attention_2"
    if not isinstance(attention, str) or not attention.strip():
        raise SettingsError(f"attention must be an implementation name, got {attention!r}")
    if not isinstance(loss, str) or loss.strip().lower() not in LOSS_MODES:
        raise SettingsError(f"unknown loss {loss!r} (choose one of: {', '.join(LOSS_MODES)})")
    if isinstance(lora_dropout, bool) or not isinstance(lora_dropout, (int, float)) or not 0 <= lora_dropout < 1:
        raise SettingsError(f"lora_dropout must be a probability in [0, 1), got {lora_dropout!r}")
    if load_in_4bit is None:
        load_in_4bit = method == "qlora"
    elif not isinstance(load_in_4bit, bool):
        raise SettingsError(f"load_in_4bit must be true, false or unset, got {load_in_4bit!r}")
    if load_in_4bit and method == "full":
        raise SettingsError("full fine-tuning cannot train a 4-bit model: use method 'qlora' or unset load_in_4bit")
    if not load_in_4bit and method == "qlora":
        raise SettingsError("qlora loads the base model in 4 bit: use method 'lora' for a 16-bit base model")
    if target_modules is not None:
        if isinstance(target_modules, str):
            targets = tuple(t.strip() for t in target_modules.split(",") if t.strip())
        else:
            try:
                targets = tuple(target_modules)
            except TypeError:
                raise SettingsError(f"target_modules must be a list of names or a string, got {target_modules!r}") from None
            if not all(isinstance(t, str) and t.strip() for t in targets):
                raise SettingsError(f"target_modules must hold module names, got {list(targets)!r}")
            targets = tuple(t.strip() for t in targets)
        if not targets:
            raise SettingsError("target_modules is empty: name at least one module, or leave it unset for the default")
        target_modules = targets
    return TrainingSettings(
        method=method,
        batch_size=_positive_int("batch_size", batch_size),
        seq_len=_positive_int("seq_len", seq_len),
        lora_rank=_positive_int("lora_rank", lora_rank),
        target_modules=target_modules,
        gradient_checkpointing=gc,
        optimizer=opt,
        attention=attention.strip(),
        load_in_4bit=load_in_4bit,
        loss=loss.strip().lower(),
        lora_dropout=float(lora_dropout),
    )
