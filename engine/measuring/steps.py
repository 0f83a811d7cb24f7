"""Ground truth: run real optimizer steps of a randomly initialised model and measure memory.

``measure`` builds the model from its config (never downloading weights), applies the
method (full; LoRA; QLoRA), runs N steps on synthetic tokens and reports the peak of each
phase. On CPU a dispatch-mode tracker counts the live tensor storages (each rounded up to 512
bytes, as the CUDA caching allocator rounds); on CUDA the allocator's own counters and NVML's
per-process figure are read.

This module is the entry point; the work is done beside it:

- :mod:`~vramwise.measuring.results`: what a run reports (:class:`Measurement`, ...);
- :mod:`~vramwise.measuring.tracker`: the storage tracker;
- :mod:`~vramwise.measuring.runner`: the phases of a step, run and recorded;
- :mod:`~vramwise.measuring.stacks`: the training stacks (transformers + PEFT, torchtune, LitGPT),
  each behind the protocol of :mod:`~vramwise.measuring.stacks.protocol`, found through
  :mod:`~vramwise.measuring.stacks.registry`;
- :mod:`~vramwise.measuring.distributed`: the data-parallel strategies in gloo processes;
- :mod:`~vramwise.measuring.build`: what every stack shares (optional imports, optimizers).

torch, transformers, peft and bitsandbytes are needed only here: ``pip install 'vramwise[measure]'``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from vramwise.errors import MeasurementError, SettingsError, StackUnsupportedError, VramwiseError
from vramwise.profiles.settings import normalise_settings
from vramwise.inputs.config import read_config
from vramwise.measuring.build import require
from vramwise.measuring.results import Measurement
from vramwise.measuring.runner import run_prepared
from vramwise.measuring.stacks.registry import stack_module

__all__ = ["measure"]


def measure(
    model: Any,
    *,
    method: str = "lora",
    batch_size: int = 1,
    seq_len: int = 128,
    lora_rank: int = 16,
    target_modules: Sequence[str] | str | None = None,
    gradient_checkpointing: Any = "none",
    attention: str = "sdpa",
    optimizer: str = "adamw_torch",
    steps: int = 2,
    device: str = "cpu",
    fake: bool = False,
    lora_dropout: float = 0.0,
    stack: str = "hf",
    loss: str = "standard",
    loss_chunks: int = 8,
    activation_offloading: bool = False,
    optimizer_in_bwd: bool = False,
    kbit_prepare: bool | None = None,
    strategy: str | None = None,
    world_size: int | None = None,
    offload: str = "none",
    compile: bool = False,
    fsdp_head_units: bool = False,
) -> Measurement:
    """Run ``steps`` optimizer steps of ``model`` (a config source) and report the memory they used.

    ``fake=True`` runs the same step under torch's FakeTensorMode on CPU: shapes, dtypes and
    storage lifetimes are real, nothing is allocated or computed, so models far larger than this
    machine's memory can be measured (full fine-tuning and LoRA; QLoRA needs real
    bitsandbytes storage).

    ``stack`` chooses whose model, loss and optimizer step run: ``hf`` (transformers + PEFT +
    bitsandbytes) or another training stack of :data:`vramwise.profiles.settings.STACKS`, each in its own
    module of :mod:`vramwise.measuring.stacks` (with the extra ``vramwise[<name>]`` installed);
    ``loss``, ``loss_chunks``, ``activation_offloading`` and ``optimizer_in_bwd`` are settings those
    stacks expose.

    ``compile=True`` runs the model and its loss through ``torch.compile`` (inductor); on the CPU the
    figures then come from the allocator's own reports (:class:`~vramwise.measuring.tracker.AllocationTracker`),
    since inductor's buffers bypass the dispatch-mode tracker. The hf stack compiles the model and loss as one
    module, torchtune's as its recipes do (``compile_model`` and ``compile_loss``); not with fake tensors or a
    strategy, nor a torchtune QLoRA step.

    ``strategy`` (``ddp``, ``fsdp`` or ``fsdp_shard_grad_op``, on the CPU) runs the step in ``world_size`` processes (2 to 8,
    default 2) joined by torch.distributed's gloo backend, each on its own batch; ``per_rank`` of the
    result holds each process's figures (see :mod:`vramwise.measuring.distributed`). ``zero1``, ``zero2`` and
    ``zero3`` run DeepSpeed's ZeRO engine there (:mod:`vramwise.measuring.zero`), with ``offload``
    (``optimizer``, or ``parameters`` under zero3) as estimate's setting of that name: what DeepSpeed keeps
    in host memory is not counted. ``fsdp_head_units`` (stack torchtune under ``fsdp``) shards the token
    embeddings and the output projection as units of their own, as torchtune's custom_sharded_layers
    ['tok_embeddings', 'output'] does.
    """
    require("torch")
    import torch

    settings = normalise_settings(
        method=method, batch_size=batch_size, seq_len=seq_len, lora_rank=lora_rank, target_modules=target_modules,
        gradient_checkpointing=gradient_checkpointing, optimizer=optimizer, attention=attention, load_in_4bit=None,
        lora_dropout=lora_dropout, loss=loss, loss_chunks=loss_chunks, activation_offloading=activation_offloading,
        optimizer_in_bwd=optimizer_in_bwd, kbit_prepare=kbit_prepare, compile=compile,
    )
    runs = stack_module(stack)
    if strategy is not None or world_size is not None:
        from vramwise.measuring.distributed import check_distributed, check_offload

        world_size = check_distributed(strategy, world_size, device=device, fake=fake, stack=stack,
                                       method=settings.method, optimizer=settings.optimizer)
        settings = dataclasses.replace(settings, strategy=strategy, world_size=world_size,  # what ran, as estimate's
                                       offload=check_offload(offload, strategy))  # settings
    elif offload != "none":
        raise SettingsError(f"offload {offload} needs a strategy that offloads (--strategy zero1, zero2 or zero3)")
    if fsdp_head_units is not False:
        if fsdp_head_units is not True:
            raise SettingsError(f"fsdp_head_units must be true or false, got {fsdp_head_units!r}")
        if stack != "torchtune" or strategy != "fsdp":
            raise SettingsError("fsdp_head_units is measured for --stack torchtune under --strategy fsdp only")
        settings = dataclasses.replace(settings, fsdp_head_units=True)
    if settings.method == "inference":
        raise SettingsError("measure runs training steps: choose qlora, lora or full")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise SettingsError(f"steps must be a positive integer, got {steps!r}")
    if device not in ("cpu", "cuda"):
        raise SettingsError(f"device must be cpu or cuda, got {device!r}")
    if device not in runs.DEVICES:
        raise SettingsError(f"--stack {stack} is measured on the {' or '.join(d.upper() for d in runs.DEVICES)}")
    if settings.compile and strategy is not None:
        raise SettingsError("measure compiles the step on one process: drop --compile or --strategy")
    runs.check(settings, device=device, fake=fake)
    if fake and device != "cpu":
        raise SettingsError("fake tensors are simulated on CPU: use --device cpu with --fake")
    if device == "cuda" and not torch.cuda.is_available():
        raise MeasurementError("--device cuda: torch sees no CUDA device here")
    cfg, _ = read_config(model)
    if isinstance(cfg.get("text_config"), dict) and "model_type" in cfg["text_config"]:
        cfg = dict(cfg["text_config"])
    check_config = getattr(runs, "check_config", None)  # what the stack refuses in this config, before it builds
    if check_config is not None:
        check_config(cfg, settings, device=device)
    if strategy is not None:
        from vramwise.measuring.distributed import measure_distributed

        return measure_distributed(cfg, settings, steps, strategy, world_size, stack=stack)
    from vramwise.measuring.refusals import step_failure

    if fake:
        from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, FakeTensorMode
    try:
        prepared = runs.prepare(cfg, settings, dtype=torch.bfloat16, device=device, fake=fake)
        if not fake:
            return run_prepared(prepared, settings, steps, device)
        try:
            return run_prepared(prepared, settings, steps, device)
        except (DataDependentOutputException, DynamicOutputShapeException) as e:  # the step reads tensor values
            raise StackUnsupportedError(
                f"--fake: this model's step runs {getattr(e, 'func', 'an operator')}, whose output depends on the "
                "values of tensors, which fake tensors do not have (mixture-of-experts routing, for one): drop "
                "--fake and measure real tensors") from None
    except VramwiseError:
        raise
    except Exception as e:  # noqa: BLE001 - the stack's failure on this config is the user's to fix; ours re-raised
        told = step_failure(e, fake=fake)
        if told is None:
            raise
        raise told from e
    finally:
        if fake:  # torch's fake-tensor dispatch cache is one dict for the whole process, kept by every FakeTensorMode
            # (thousands of entries a model, never evicted): a measure leaves none of its entries to the next
            FakeTensorMode.cache_clear()
