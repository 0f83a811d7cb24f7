"""A memory check inside a transformers training script: :class:`MemoryCheckCallback`.

::

    from vramwise.integrations.transformers import MemoryCheckCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[MemoryCheckCallback()])
    trainer.train()

When training begins the callback reads the Trainer's own objects: the model's config (the base
model's under PEFT), the ``TrainingArguments``, the PEFT adapter config, the quantization config and
the DeepSpeed / FSDP / process state. They become a :class:`~vramwise.estimation.recipe.Recipe` through
:func:`vramwise.recipes.read_recipe` (formats ``transformers``, ``peft``, ``bitsandbytes``,
``deepspeed``), with what only the live model knows as overrides: the config itself, the method (PEFT
adapters, 4-bit weights, or neither), the attention implementation, whether checkpointing is on, the
number of processes. When the reader cannot read the arguments, the same values are taken from the
live objects directly and a note says so.

The estimate is made at the recipe's sequence length, then again at the shape of the first batch
the model sees (a forward pre-hook reads ``input_ids``), before that batch's activations exist. When
the estimate exceeds the device's memory (CUDA: the device's total memory; CPU: only when ``gpu=``
names a GPU or a size) the callback warns (:class:`MemoryCheckWarning`), or raises
:class:`~vramwise.errors.SettingsError` with ``strict=True``.

After ``steps`` optimizer steps it reads the measured peak: on CUDA ``torch.cuda.max_memory_allocated``
and ``max_memory_reserved`` (their peaks are reset when training begins), on CPU the storage tracker
of ``vramwise measure`` (:class:`~vramwise.measuring.tracker.StorageTracker`, which counts tensor
storages rounded as the CUDA allocator rounds them; it runs from ``on_train_begin`` until the
measured steps end and slows them). The measured tensor peak is compared with the estimate's
``tensor_peak`` at the largest batch shape seen. Every run is recorded in the runs database
(:mod:`vramwise.records.runs`): the prediction when training begins, the measurement after the
steps; ``vramwise runs`` lists them.
"""

from __future__ import annotations

import enum
import warnings
from importlib import metadata
from typing import Any, Mapping

from vramwise.errors import MissingDependencyError, SettingsError, VramwiseError
from vramwise.estimation.estimate import estimate
from vramwise.profiles.settings import SETTINGS
from vramwise.version import VERSION

try:
    from transformers import TrainerCallback
except ImportError:  # pragma: no cover - the callback needs transformers
    raise MissingDependencyError(
        "vramwise.integrations.transformers needs transformers: pip install transformers", extra="measure"
    ) from None

__all__ = ["MemoryCheckCallback", "MemoryCheckWarning", "recipe_parts"]

_CHOICES = {s.name: s.choices for s in SETTINGS}
#: a measured peak above the prediction by more than this share is reported in a warning
UNDER_ESTIMATE_WARNING = 0.10
_VERSIONED = ("torch", "transformers", "peft", "accelerate", "deepspeed", "bitsandbytes", "trl")


class MemoryCheckWarning(UserWarning):
    """The run will not fit the device, the estimate could not be made, or the prediction was exceeded."""


# -- reading the Trainer's objects ------------------------------------------------------------------

def _plain(value: Any) -> Any:
    """JSON-like data: enums by value, sets as sorted lists, other objects as text."""
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(_plain(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _base_model(model: Any) -> Any:
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def _lora_targets(model: Any) -> list[str] | None:
    """The last names of the modules that carry LoRA adapters (``q_proj``...), as PEFT wrapped them."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return None
    names = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, LoraLayer) and name}
    return sorted(names) or None


def _quantization(base: Any) -> dict | None:
    q = getattr(getattr(base, "config", None), "quantization_config", None)
    if q is None:
        quantizer = getattr(base, "hf_quantizer", None)
        q = getattr(quantizer, "quantization_config", None)
    if q is None:
        return None
    return _plain(q.to_dict() if hasattr(q, "to_dict") else dict(q))


def _checkpointing(base: Any, args: Any) -> bool:
    for attr in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(base), attr) or attr in getattr(base, "__dict__", {}):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                return bool(getattr(base, attr))
    return bool(getattr(args, "gradient_checkpointing", False))


def _world_size(args: Any) -> int:
    n = getattr(args, "world_size", None)
    if not n:
        try:
            from accelerate import PartialState

            n = PartialState().num_processes
        except Exception:  # noqa: BLE001 - no accelerate state: one process
            n = 1
    return max(int(n or 1), 1)


def recipe_parts(args: Any, model: Any) -> tuple[list[dict], dict, dict]:
    """(recipe parts, live overrides, fallback settings) of a Trainer's arguments and model.

    The parts: ``args.to_dict()`` (its ``deepspeed`` entry replaced by the resolved DeepSpeed config,
    given as a part of its own), the PEFT adapter config (``target_modules`` as the last names of the
    modules PEFT wrapped) and the quantization config. The overrides: what only the live model says
    (its config as the model, the method, the attention implementation, checkpointing, the number of
    processes). The fallback: the settings read from the same objects directly, used when the recipe
    reader cannot read the parts.
    """
    base = _base_model(model)
    train = _plain(args.to_dict()) if hasattr(args, "to_dict") else {}
    parts: list[dict] = [train]
    ds = getattr(args, "hf_deepspeed_config", None)
    ds_config = getattr(ds, "config", None)
    if isinstance(ds_config, Mapping):
        train["deepspeed"] = None
        parts.append(_plain(ds_config))
    peft_config = getattr(model, "peft_config", None)
    adapter = None
    if isinstance(peft_config, Mapping) and peft_config:
        name = getattr(model, "active_adapter", None)
        name = name if isinstance(name, str) and name in peft_config else next(iter(peft_config))
        cfg = peft_config[name]
        adapter = _plain(cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg))
        targets = _lora_targets(model)
        if targets:
            adapter["target_modules"] = targets
        parts.append(adapter)
    quant = _quantization(base)
    if quant:
        parts.append(quant)

    four_bit = bool(getattr(base, "is_loaded_in_4bit", False) or (quant or {}).get("load_in_4bit"))
    lora = adapter is not None and str(adapter.get("peft_type", "")).upper() == "LORA"
    method = ("qlora" if four_bit else "lora") if lora else "full"
    config = _plain(base.config.to_dict())
    overrides: dict[str, Any] = {"model": config, "method": method,
                                 "gradient_checkpointing": "true" if _checkpointing(base, args) else "none"}
    attention = getattr(base.config, "_attn_implementation", None)
    if attention in _CHOICES["attention"]:
        overrides["attention"] = attention
    world = _world_size(args)
    if world > 1:
        overrides["world_size"] = world
        if ds_config is None and not getattr(args, "fsdp", None):
            overrides["strategy"] = "ddp"

    fallback: dict[str, Any] = {"load_in_4bit": four_bit}
    batch = getattr(args, "per_device_train_batch_size", None)
    if isinstance(batch, int) and batch > 0:
        fallback["batch_size"] = batch
    optim = _plain(getattr(args, "optim", None))
    if optim in _CHOICES.get("optimizer", ()) or (optim and not _CHOICES.get("optimizer")):
        fallback["optimizer"] = optim
    for name in ("max_length", "max_seq_length"):
        value = getattr(args, name, None)
        if isinstance(value, int) and value > 0:
            fallback["seq_len"] = value
            break
    if lora:
        if isinstance(adapter.get("r"), int):
            fallback["lora_rank"] = adapter["r"]
        if adapter.get("target_modules"):
            fallback["target_modules"] = tuple(adapter["target_modules"])
        if isinstance(adapter.get("lora_dropout"), (int, float)):
            fallback["lora_dropout"] = float(adapter["lora_dropout"])
    return parts, overrides, fallback


def _versions() -> dict:
    out = {"vramwise": VERSION}
    for name in _VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _device(args: Any, gpu: Any) -> tuple[str, str, int | None, int | None]:
    """(device type, description, memory in bytes to fit in or None, CUDA index or None)."""
    dev = getattr(args, "device", None)
    kind = getattr(dev, "type", None) or "cpu"
    capacity, name, index = None, kind, None
    if kind == "cuda":
        import torch

        index = dev.index if dev.index is not None else torch.cuda.current_device()
        capacity = int(torch.cuda.mem_get_info(index)[1])
        name = f"cuda:{index} {torch.cuda.get_device_name(index)}"
    if gpu is not None:
        from vramwise.answers.fit import gpu_target

        target = gpu_target(gpu)
        capacity, name = target.memory_bytes, f"{name} (checked against {target.name})"
    return kind, name, capacity, index


def _gib(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB"


# -- the callback -----------------------------------------------------------------------------------

class MemoryCheckCallback(TrainerCallback):
    """Estimate the Trainer's run before its first step, warn when it will not fit, measure its first
    ``steps`` optimizer steps and record both in the runs database.

    ``strict``: raise :class:`~vramwise.errors.SettingsError` instead of warning when the run
    will not fit. ``db_path``: the runs database (default: ``$VRAMWISE_RUNS_DB`` or the cache
    folder's); ``record=False`` writes none. ``gpu``: check the fit against this GPU (a catalog name
    such as ``"RTX 4090"``, a size such as ``"24GiB"``) instead of the training device. ``profile``: the
    vramwise profile (default: the recipe's, ``hf`` for transformers). ``steps``: optimizer steps
    measured (default 2). After training, ``report`` holds the figures (bytes) and ``run_id`` the
    database row.
    """

    def __init__(self, strict: bool = False, db_path: Any = None, *, gpu: Any = None, profile: str | None = None,
                 steps: int = 2, record: bool = True):
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise SettingsError(f"steps must be a whole number from 1, got {steps!r}")
        self.strict, self.db_path, self.gpu, self.profile = bool(strict), db_path, gpu, profile
        self.steps, self.record = steps, bool(record)
        self._mode = self._hook = None
        self._reset()

    def close(self) -> None:
        """Stop measuring now: remove the forward hook and the CPU tracker. The callback does this itself
        after the measured steps and when training ends; call it when training raised before then."""
        self._measuring = False
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None

    def _reset(self) -> None:
        self.close()
        self.report: dict = {}
        self.run_id: int | None = None
        self.recipe = None
        self._model_cfg = self._settings = None
        self._profile = None
        self._estimate = None
        self._estimated_shape = None
        self._shape = None  # the largest (batch, seq) seen while measuring
        self._tracker = None
        self._start_step = 0
        self._kind, self._index, self._capacity, self._device = "cpu", None, None, "cpu"
        self._notes: list[str] = []
        self._db = None
        self._measuring = False

    # -- estimating -----------------------------------------------------------------------------
    def _read(self, args, model) -> None:
        parts, overrides, fallback = recipe_parts(args, model)
        self._model_cfg = overrides["model"]
        if self.profile is not None:
            overrides["profile"] = self.profile
        try:
            from vramwise.recipes import read_recipe

            recipe = read_recipe(parts, overrides=overrides)
        except (VramwiseError, ImportError) as e:
            self._notes.append(f"the recipe reader could not read the Trainer's arguments ({e}); their values "
                               "were read from the Trainer's objects directly")
            settings = {s.name: s.default for s in SETTINGS}
            settings.update(fallback)
            settings.update({k: v for k, v in overrides.items() if k not in ("model", "profile")})
            self._settings, self._profile = settings, self.profile or "hf"
            return
        self.recipe = recipe
        self._settings, self._profile = dict(recipe.settings), recipe.profile
        for w in recipe.warnings:
            self._notes.append(w)
            if "changes memory but is not modelled" in w:
                warnings.warn(f"vramwise: {w}", MemoryCheckWarning, stacklevel=2)

    def _estimate_at(self, batch: int | None, seq: int | None):
        settings = dict(self._settings)
        if batch:
            settings["batch_size"] = int(batch)
        if seq:
            settings["seq_len"] = int(seq)
        est = estimate(self._model_cfg, profile=self._profile, **settings)
        self._estimate, self._estimated_shape = est, (est.settings.batch_size, est.settings.seq_len)
        return est

    def _check_fit(self, est, when: str) -> None:
        if self._capacity is None or est.total <= self._capacity:
            return
        s = est.settings
        message = (f"vramwise: this run needs about {_gib(est.total)} per GPU ({when}: {s.method}, batch {s.batch_size} x "
                   f"sequence {s.seq_len}, profile {est.profile}) but {self._device} has {_gib(self._capacity)}; "
                   f"`vramwise fit` lists changes that make it fit")
        if self.strict:
            self.close()  # nothing of the callback stays installed after the run stops
            raise SettingsError(message)
        warnings.warn(message, MemoryCheckWarning, stacklevel=3)

    def _predicted(self, est) -> dict:
        return {"predicted_peak": est.figures.get("tensor_peak"), "predicted_reserved": est.figures.get("reserved"),
                "predicted_total": est.total, "predicted": est.to_dict(), "settings": est.settings.to_dict()}

    # -- recording ------------------------------------------------------------------------------
    def _write(self, **values) -> None:
        if not self.record:
            return
        try:
            if self._db is None:
                from vramwise.records.runs import RunsDB

                self._db = RunsDB(self.db_path)
            if self.run_id is None:
                self.run_id = self._db.add(**values)
            else:
                self._db.update(self.run_id, **values)
        except VramwiseError as e:  # the record never stops training
            self.record = False
            warnings.warn(f"vramwise: runs are not recorded: {e}", MemoryCheckWarning, stacklevel=3)

    # -- the Trainer's events -------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self._reset()
        if model is None:
            return
        self._start_step = int(getattr(state, "global_step", 0) or 0)
        self._kind, self._device, self._capacity, self._index = _device(args, self.gpu)
        try:
            self._read(args, model)
            est = self._estimate_at(None, None)
        except VramwiseError as e:
            if self.strict:
                raise
            warnings.warn(f"vramwise: no estimate for this run: {e}", MemoryCheckWarning, stacklevel=2)
            self._settings = None
            return
        dtype = getattr(getattr(_base_model(model).get_input_embeddings(), "weight", None), "dtype", None)
        if dtype is not None and str(dtype) not in ("torch.bfloat16", "torch.uint8"):
            self._notes.append(f"the model's weights are {str(dtype).replace('torch.', '')}; the estimate assumes "
                               "bfloat16 weights as the profiles do")
        self._check_fit(est, "at the recipe's sequence length")
        rank = getattr(args, "process_index", None)
        self._write(model=_model_name(model), profile=est.profile, method=est.settings.method, device=self._device,
                    device_bytes=self._capacity, rank=rank, world_size=_world_size(args),
                    versions=_versions(), notes=self._notes, **self._predicted(est))
        self._start_measuring(model, optimizer)

    def _start_measuring(self, model, optimizer) -> None:
        self._hook = model.register_forward_pre_hook(self._before_forward, with_kwargs=True)
        self._measuring = True
        if self._kind == "cuda":
            import torch

            torch.cuda.synchronize(self._index)
            torch.cuda.reset_peak_memory_stats(self._index)
        elif self._kind == "cpu":
            from vramwise.measuring.tracker import StorageTracker

            self._tracker = StorageTracker()
            state = getattr(optimizer, "state", None) or {}  # a resumed run's optimizer state exists already
            kept = [v for per_param in state.values() if isinstance(per_param, Mapping) for v in per_param.values()]
            for t in list(model.parameters()) + list(model.buffers()) + kept:
                self._tracker.add(t)
            self._tracker.reset_peak()
            self._mode = self._tracker.mode()
            self._mode.__enter__()
        else:
            self._notes.append(f"the {self._kind} device is not measured (CUDA and CPU are)")

    def _before_forward(self, module, args, kwargs):
        if not self._measuring:
            return None
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        shape = tuple(getattr(ids, "shape", ()))[:2]
        if len(shape) != 2:
            return None
        first = self._shape is None
        if first or shape[0] * shape[1] > self._shape[0] * self._shape[1]:
            self._shape = shape
        if first and shape != self._estimated_shape and self._settings is not None:
            try:
                est = self._estimate_at(*shape)
            except VramwiseError as e:
                self._notes.append(f"no estimate at the first batch's shape {shape[0]} x {shape[1]}: {e}")
                return None
            self._check_fit(est, "at the first batch's shape")
            self._write(notes=self._notes, **self._predicted(est))
        return None

    def on_step_end(self, args, state, control, **kwargs):
        if self._measuring and state.global_step - self._start_step >= self.steps:
            self._finish(state.global_step - self._start_step)

    def on_train_end(self, args, state, control, **kwargs):
        if self._measuring:
            self._finish(state.global_step - self._start_step)

    def _finish(self, steps: int) -> None:
        tracker = self._tracker
        self.close()
        measured: dict = {"steps": steps, "device": self._kind}
        if self._kind == "cuda":
            import torch

            torch.cuda.synchronize(self._index)
            measured["peak"] = int(torch.cuda.max_memory_allocated(self._index))
            measured["reserved"] = int(torch.cuda.max_memory_reserved(self._index))
        elif tracker is not None:
            measured["peak"] = int(tracker.peak)
            measured["tracker"] = "vramwise.measuring.tracker.StorageTracker (storages rounded to 512 bytes)"
            self._tracker = None
        if "peak" not in measured or self._settings is None:
            self._write(measured=measured, measured_steps=steps, notes=self._notes)
            return
        est = self._estimate
        if self._shape is not None and self._shape != self._estimated_shape:
            try:
                est = self._estimate_at(*self._shape)
            except VramwiseError as e:
                self._notes.append(f"no estimate at the largest batch shape: {e}")
        measured["batch_shape"] = list(self._shape) if self._shape else None
        predicted = est.figures.get("tensor_peak")
        error = (predicted - measured["peak"]) / measured["peak"] * 100 if predicted and measured["peak"] else None
        self.report = {"predicted_peak": predicted, "measured_peak": measured["peak"], "error_percent": error,
                       "predicted_reserved": est.figures.get("reserved"), "measured_reserved": measured.get("reserved"),
                       "predicted_total": est.total, "steps": steps, "batch_shape": self._shape,
                       "profile": est.profile, "method": est.settings.method, "device": self._device}
        if predicted and measured["peak"] > predicted * (1 + UNDER_ESTIMATE_WARNING):
            warnings.warn(f"vramwise: the first {steps} steps used {_gib(measured['peak'])} of tensors, "
                          f"{error:+.1f} % from the {_gib(predicted)} predicted", MemoryCheckWarning, stacklevel=3)
        self._write(measured_peak=measured["peak"], measured_reserved=measured.get("reserved"), measured_steps=steps,
                    measured=measured, notes=self._notes, **self._predicted(est))


def _model_name(model: Any) -> str | None:
    cfg = getattr(_base_model(model), "config", None)
    name = getattr(cfg, "name_or_path", None) or getattr(cfg, "_name_or_path", None)
    return str(name) if name else getattr(cfg, "model_type", None)

