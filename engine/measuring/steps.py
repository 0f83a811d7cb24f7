"""Ground truth: run real optimizer steps of a randomly initialised model and measure memory.

``measure`` builds the model from its config (never downloading weights), applies the
method (full; LoRA through PEFT; QLoRA through bitsandbytes 4-bit + PEFT), runs N steps on
synthetic tokens and reports the peak of each phase. On CPU a dispatch-mode tracker counts
the live tensor storages (each rounded up to 512 bytes, as the CUDA caching allocator
rounds); on CUDA the allocator's own counters and NVML's per-process figure are read.

torch, transformers, peft and bitsandbytes are needed only here: ``pip install 'vramwise[measure]'``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from vramwise.core.errors import SettingsError, VramwiseError
from vramwise.core.settings import STACKS

__all__ = ["Measurement", "PhaseFigures", "RankFigures", "Prepared", "measure", "StorageTracker", "MEASURE_OPTIMIZERS",
           "STACKS"]

#: Optimizers measure can build.
MEASURE_OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adamw_8bit", "sgd")
_ROUND = 512


def _need(module: str):
    try:
        return __import__(module)
    except ImportError:
        raise VramwiseError(
            f"measuring needs {module}, which is not installed: pip install 'vramwise[measure]'"
        ) from None


class _StorageRef(weakref.ref):
    """A weak reference to a storage's Python object that remembers the storage's key and size."""

    __slots__ = ("key", "size")


#: The profile that models what measure runs (plain transformers + PEFT); its LoRA defaults apply here.
MEASURED_PROFILE = "hf"


class StorageTracker:
    """Live bytes of tensor storages and their peak, fed by a TorchDispatchMode.

    Storages that exist before tracking starts are added with :meth:`add`; every tensor an
    operator returns is added as it is created; a storage leaves the count when its last
    reference dies. Sizes are rounded up to ``granularity`` bytes.

    Deaths are reported, not searched for. Once a storage has a Python object, torch keeps that
    object alive exactly as long as the storage (PyObject preservation), so a weak reference to
    it calls back when the storage dies, whether an operator, the autograd engine or a Python
    ``del`` between operators dropped the last reference. The callback only banks the freed
    bytes; :meth:`sweep` (run before each operator's outputs are counted) takes them off
    ``current``. ``current`` thus changes at the same moments and by the same amounts as if
    every live storage were checked for death at each sweep, while an operator costs time in
    proportion to the storages it returns and frees, not to all live ones.
    """

    def __init__(self, granularity: int = _ROUND):
        import torch
        from torch.utils._python_dispatch import is_traceable_wrapper_subclass
        from torch.utils._pytree import tree_leaves

        self._tensor_type, self._tree_leaves = torch.Tensor, tree_leaves
        self._is_wrapper = is_traceable_wrapper_subclass
        self.granularity = granularity
        self._live: dict[int, _StorageRef] = {}  # storage pointer -> weak reference to its Python object
        self._freed = 0  # bytes of the storages that died since the last sweep
        self.current = 0
        self.peak = 0

    def _died(self, ref: _StorageRef) -> None:
        # Python calls this while the dying storage still holds its address, so no new storage
        # can have taken the key yet; the identity check is only a guard.
        if self._live.get(ref.key) is ref:
            del self._live[ref.key]
            self._freed += ref.size

    def sweep(self) -> None:
        """Take the storages that died since the last sweep off the live total."""
        self.current -= self._freed
        self._freed = 0

    def add(self, tensor) -> None:
        if not isinstance(tensor, self._tensor_type) or tensor.device.type == "meta":
            return
        if self._is_wrapper(tensor):  # a tensor subclass over inner tensors (torchao's NF4Tensor): count those
            for name in tensor.__tensor_flatten__()[0]:
                self.add(getattr(tensor, name))
            return
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # tensor subclasses without a plain storage
            return
        key = storage._cdata
        if key in self._live:
            return
        size = -(-storage.nbytes() // self.granularity) * self.granularity
        ref = _StorageRef(storage, self._died)
        ref.key, ref.size = key, size
        self._live[key] = ref
        self.current += size

    def after_op(self, outputs) -> None:
        self.sweep()
        for t in self._tree_leaves(outputs):
            self.add(t)
        if self.current > self.peak:
            self.peak = self.current

    def reset_peak(self) -> None:
        self.sweep()
        self.peak = self.current

    def mode(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                tracker.after_op(out)
                return out

        return _Mode()


@dataclass(frozen=True)
class PhaseFigures:
    """Memory of one phase of the training step, in bytes."""

    peak: int  # highest tensor bytes during the phase (max_memory_allocated on CUDA)
    end: int  # tensor bytes alive at its end
    reserved_peak: int | None = None  # CUDA caching allocator's reserve (max_memory_reserved)
    categories: Mapping[str, int] = field(default_factory=dict)  # at the end of the phase


@dataclass(frozen=True)
class RankFigures:
    """What one process of a distributed run used (bytes)."""

    rank: int
    peak: int
    peak_phase: str
    phases: Mapping[str, PhaseFigures]

    def to_dict(self) -> dict:
        return {"rank": self.rank, "peak": self.peak, "peak_phase": self.peak_phase,
                "phases": {k: _phase_dict(v) for k, v in self.phases.items()}}


def _phase_dict(v: PhaseFigures) -> dict:
    return {"peak": v.peak, "end": v.end, "reserved_peak": v.reserved_peak, "categories": dict(v.categories)}


@dataclass(frozen=True)
class Measurement:
    """What a measured run used."""

    device: str
    method: str
    settings: Mapping[str, Any]
    params_total: int
    params_trainable: int
    peak: int  # highest tensor bytes over the measured steps
    peak_phase: str
    phases: Mapping[str, PhaseFigures]  # load, forward, backward, optimizer (of the last step)
    reserved_peak: int | None = None
    process_bytes: int | None = None  # NVML: the process's device memory, CUDA context included
    notes: tuple = ()
    strategy: str | None = None  # ddp, fsdp or fsdp_shard_grad_op when world_size processes ran the step
    world_size: int | None = None
    per_rank: tuple | None = None  # RankFigures of each process (peak and phases are then the highest rank's)

    def to_dict(self) -> dict:
        return {
            "device": self.device, "method": self.method, "settings": dict(self.settings),
            "params_total": self.params_total, "params_trainable": self.params_trainable,
            "peak": self.peak, "peak_phase": self.peak_phase, "reserved_peak": self.reserved_peak,
            "process_bytes": self.process_bytes,
            "phases": {k: _phase_dict(v) for k, v in self.phases.items()},
            "notes": list(self.notes),
            "strategy": self.strategy, "world_size": self.world_size,
            "per_rank": None if self.per_rank is None else [r.to_dict() for r in self.per_rank],
        }


def _meta_model(cfg_dict: dict, attention: str, dtype):
    """The causal LM transformers builds from ``cfg_dict``, on the meta device (nothing allocated)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    d = dict(cfg_dict)
    mt = d.pop("model_type", None)
    if not mt:
        raise VramwiseError("the config has no model_type, so transformers cannot build it")
    d.pop("quantization_config", None)  # random weights are built unquantized; the method decides
    try:
        cfg = AutoConfig.for_model(mt, **d)
    except Exception as e:  # noqa: BLE001
        raise VramwiseError(f"transformers cannot build a {mt!r} config: {type(e).__name__}: {e}") from None
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=attention)


def _build(cfg_dict: dict, attention: str, dtype):
    """The model with random weights on CPU."""
    import torch

    model = _meta_model(cfg_dict, attention, dtype).to_empty(device="cpu")
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        for p in model.parameters():
            p.normal_(0.0, 0.02, generator=gen)
        for name, b in model.named_buffers():
            if b.is_floating_point() and not torch.isfinite(b).all():
                b.zero_()
    model.tie_weights()
    return model


def _quantized(model, cfg_dict: dict, attention: str, dtype):
    """Reload ``model`` through transformers' bitsandbytes 4-bit path (what QLoRA users run)."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    _need("bitsandbytes")
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)
        return AutoModelForCausalLM.from_pretrained(
            tmp, quantization_config=q, dtype=dtype, attn_implementation=attention, device_map="cpu"
        )


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
    strategy: str | None = None,
    world_size: int | None = None,
) -> Measurement:
    """Run ``steps`` optimizer steps of ``model`` (a config source) and report the memory they used.

    ``fake=True`` runs the same step under torch's FakeTensorMode on CPU: shapes, dtypes and
    storage lifetimes are real, nothing is allocated or computed, so models far larger than this
    machine's memory can be measured (full fine-tuning and LoRA; QLoRA needs real
    bitsandbytes storage).

    ``stack`` chooses whose model, loss and optimizer step run: ``hf`` (transformers + PEFT +
    bitsandbytes) or another training stack of :data:`STACKS`, each in its own module
    (``vramwise._stack_<name>``, with the extra ``vramwise[<name>]`` installed); ``loss``,
    ``loss_chunks``, ``activation_offloading`` and ``optimizer_in_bwd`` are settings those stacks
    expose.

    ``strategy`` (``ddp``, ``fsdp`` or ``fsdp_shard_grad_op``, on the CPU) runs the step in ``world_size`` processes (2 to 8,
    default 2) joined by torch.distributed's gloo backend, each on its own batch; ``per_rank`` of the
    result holds each process's figures (see :mod:`vramwise.measuring.distributed`).
    """
    from vramwise.core.settings import normalise_settings
    from vramwise.inputs.config import read_config

    _need("torch")
    _need("transformers")
    import torch

    settings = normalise_settings(
        method=method, batch_size=batch_size, seq_len=seq_len, lora_rank=lora_rank, target_modules=target_modules,
        gradient_checkpointing=gradient_checkpointing, optimizer=optimizer, attention=attention, load_in_4bit=None,
        lora_dropout=lora_dropout, loss=loss, loss_chunks=loss_chunks, activation_offloading=activation_offloading,
        optimizer_in_bwd=optimizer_in_bwd,
    )
    if stack not in STACKS:
        raise SettingsError(f"unknown stack {stack!r} (choose one of: {', '.join(STACKS)})")
    if strategy is not None or world_size is not None:
        from vramwise.measuring.distributed import check_distributed

        world_size = check_distributed(strategy, world_size, device=device, fake=fake, stack=stack,
                                       method=settings.method, optimizer=settings.optimizer)
        settings = dataclasses.replace(settings, strategy=strategy, world_size=world_size)  # what ran, as estimate's settings
    if stack != "hf":
        return _measure_stack(model, stack, settings, steps, device, fake)
    exposed = [n for n in ("loss", "activation_offloading", "optimizer_in_bwd")
               if getattr(settings, n) != {"loss": "standard"}.get(n, False)]
    if exposed:
        raise SettingsError(f"{', '.join(exposed)}: the hf stack runs transformers' own loss and a plain optimizer step; "
                            "these settings belong to --stack torchtune or litgpt")
    if settings.method == "inference":
        raise SettingsError("measure runs training steps: choose qlora, lora or full")
    if settings.gradient_checkpointing == "unsloth":
        raise SettingsError("measure runs plain transformers: gradient checkpointing is none or true")
    if settings.optimizer not in MEASURE_OPTIMIZERS:
        raise SettingsError(f"measure builds {', '.join(MEASURE_OPTIMIZERS)}; got {settings.optimizer!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise SettingsError(f"steps must be a positive integer, got {steps!r}")
    if device not in ("cpu", "cuda"):
        raise SettingsError(f"device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise VramwiseError("--device cuda: torch sees no CUDA device here")
    if fake and device != "cpu":
        raise SettingsError("fake tensors are simulated on CPU: use --device cpu with --fake")
    if fake and settings.method == "qlora":
        raise SettingsError("QLoRA cannot be measured with fake tensors (bitsandbytes needs real 4-bit storage): drop --fake")
    cfg, _ = read_config(model)
    if isinstance(cfg.get("text_config"), dict) and "model_type" in cfg["text_config"]:
        cfg = dict(cfg["text_config"])
    dtype = torch.bfloat16
    if fake:
        return _measure_fake(cfg, settings, steps, dtype)
    if strategy is not None:
        from vramwise.measuring.distributed import measure_distributed

        return measure_distributed(cfg, settings, steps, strategy, world_size)
    net = _build(cfg, settings.attention, dtype)
    notes = []
    if settings.method == "qlora":
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            net = _quantized(net, cfg, settings.attention, dtype)
        finally:
            if bars:
                hf_logging.enable_progress_bar()
    net = _apply_lora(net, settings)
    _apply_checkpointing(net, settings)
    if device == "cuda":
        net = net.to("cuda")
    net.train()
    trainable = [p for p in net.parameters() if p.requires_grad]
    opt = _optimizer(trainable, settings, notes)
    vocab = int(net.get_output_embeddings().weight.shape[0]) if net.get_output_embeddings() is not None else 1000
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (settings.batch_size, settings.seq_len), generator=gen).to(device)
    params_total = sum(p.numel() for p in net.parameters())
    params_trainable = sum(p.numel() for p in trainable)

    if device == "cpu":
        return _track_cpu(net, opt, ids, steps, settings, params_total, params_trainable, notes)
    return _measure_cuda(net, opt, ids, steps, settings, params_total, params_trainable,
                         lambda: _categories(net, opt), notes)


def _apply_lora(net, settings):
    """PEFT's LoRA on ``net`` (after prepare_model_for_kbit_training for QLoRA); ``net`` for full fine-tuning."""
    if settings.method not in ("lora", "qlora"):
        return net
    _need("peft")
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if settings.method == "qlora":
        net = prepare_model_for_kbit_training(
            net, use_gradient_checkpointing=settings.gradient_checkpointing == "true",
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    if settings.target_modules:
        targets = list(settings.target_modules)
    else:  # the default of the profile that models this stack (formulas/hf/profile.yaml)
        from vramwise.core.registry import Registry

        targets = list(Registry.default().profile(MEASURED_PROFILE).default_targets)
    if len(targets) == 1 and targets[0].lower() in ("all-linear", "all_linear"):
        targets = "all-linear"
    return get_peft_model(net, LoraConfig(r=settings.lora_rank, lora_alpha=2 * settings.lora_rank,
                                          target_modules=targets, lora_dropout=settings.lora_dropout))


def _apply_checkpointing(net, settings) -> None:
    if settings.gradient_checkpointing == "true":
        net.config.use_cache = False  # a KV cache cannot be kept with checkpointing (transformers turns it off)
        net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if settings.method != "full":
            net.enable_input_require_grads()


def _optimizer(trainable, settings, notes: list):
    import torch

    if settings.optimizer == "adamw_8bit":
        bnb = _need("bitsandbytes")
        return bnb.optim.AdamW8bit(trainable, lr=1e-5)
    if settings.optimizer == "sgd":
        return torch.optim.SGD(trainable, lr=1e-5)
    if settings.optimizer == "adamw_torch_fused":
        return torch.optim.AdamW(trainable, lr=1e-5, fused=True)
    # torch's default on GPUs (and the transformers Trainer's adamw_torch): the foreach implementation
    notes.append("AdamW runs its foreach implementation, torch's default on GPUs")
    return torch.optim.AdamW(trainable, lr=1e-5, foreach=True)


def _measure_fake(cfg: dict, settings, steps: int, dtype) -> Measurement:
    """The CPU measurement with every tensor fake: built on the meta device, adapters added there,
    then each parameter and buffer replaced by a fake tensor of its shape and dtype (ties kept)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    net = _apply_lora(_meta_model(cfg, settings.attention, dtype), settings)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        made: dict[int, Any] = {}
        for module in net.modules():
            for name, p in list(module._parameters.items()):
                if p is not None:
                    if id(p) not in made:
                        made[id(p)] = torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype), requires_grad=p.requires_grad)
                    module._parameters[name] = made[id(p)]
            for name, b in list(module._buffers.items()):
                if b is not None:
                    module._buffers[name] = torch.zeros(b.shape, dtype=b.dtype)
        _apply_checkpointing(net, settings)
        net.train()
        trainable = [p for p in net.parameters() if p.requires_grad]
        notes = ["fake tensors: shapes and lifetimes are real, nothing was allocated"]
        opt = _optimizer(trainable, settings, notes)
        vocab = int(net.get_output_embeddings().weight.shape[0])
        ids = torch.randint(0, vocab, (settings.batch_size, settings.seq_len))
        params_total = sum(p.numel() for p in net.parameters())
        params_trainable = sum(p.numel() for p in trainable)
        with _packed_sequence_check_off():
            return _track_cpu(net, opt, ids, steps, settings, params_total, params_trainable, notes)


class _packed_sequence_check_off:
    """transformers treats fake tensors as tracing and then builds a dense mask for packed
    sequences; synthetic batches are never packed, so give its eager answer (no packing)."""

    def __enter__(self):
        import transformers.masking_utils as mu

        self._mu, self._orig = mu, mu.find_packed_sequence_indices
        mu.find_packed_sequence_indices = lambda *a, **k: None
        return self

    def __exit__(self, *exc):
        self._mu.find_packed_sequence_indices = self._orig
        return False


def _measure_stack(model, stack: str, settings, steps: int, device: str, fake: bool) -> Measurement:
    """Measure a training step of another stack: its module builds the model, loss and optimizer
    (``prepare(cfg, settings, dtype, device, fake) -> Prepared``) and the common tracker runs it."""
    import importlib

    import torch

    from vramwise.inputs.config import read_config

    if settings.method == "inference":
        raise SettingsError("measure runs training steps: choose qlora, lora or full")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise SettingsError(f"steps must be a positive integer, got {steps!r}")
    if device != "cpu":
        raise SettingsError(f"--stack {stack} is measured on the CPU")
    cfg, _ = read_config(model)
    if isinstance(cfg.get("text_config"), dict) and "model_type" in cfg["text_config"]:
        cfg = dict(cfg["text_config"])
    mod = importlib.import_module(f"vramwise.measuring.stacks.{stack}")
    prepared = mod.prepare(cfg, settings, torch.bfloat16, fake)
    with prepared.context():
        return _track_cpu(prepared.net, prepared.opt, prepared.ids, steps, settings, prepared.params_total,
                          prepared.params_trainable, list(prepared.notes), loss_fn=prepared.loss_fn)


@dataclass
class Prepared:
    """What a stack module hands the tracker: the model, its optimizer (``step``, ``zero_grad`` and
    ``state``; a no-op stepper when the stack steps inside the backward), the token ids, a
    callable computing the loss, the counts, notes, and a context the step runs in (fake tensors)."""

    net: Any
    opt: Any
    ids: Any
    loss_fn: Callable[[], Any]
    params_total: int
    params_trainable: int
    notes: list = field(default_factory=list)
    context: Callable[[], Any] = contextlib.nullcontext


def _categories(net, opt) -> dict:
    """Bytes of the parameters, gradients and optimizer state (each storage once, 512-byte rounded)."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    seen: set = set()

    def total(tensors) -> int:
        out = 0
        for t in tensors:
            if t is None or not isinstance(t, torch.Tensor):
                continue
            if is_traceable_wrapper_subclass(t):  # count the inner tensors (torchao's NF4Tensor)
                out += total(getattr(t, name) for name in t.__tensor_flatten__()[0])
                continue
            st = t.untyped_storage()
            key = StorageWeakRef(st).cdata
            if key in seen:
                continue
            seen.add(key)
            out += -(-st.nbytes() // _ROUND) * _ROUND
        return out

    return {
        "parameters": total(net.parameters()),
        "gradients": total(p.grad for p in net.parameters()),
        "optimizer_state": total(v for s in opt.state.values() for v in s.values()),
    }


def _with_rest(cats: dict, end: int) -> dict:
    """Add what the named categories do not explain: activations, loss buffers and temporaries."""
    return {**cats, "activations_and_temporaries": end - sum(cats.values())}


def _track_cpu(net, opt, ids, steps, settings, params_total, params_trainable, notes, loss_fn=None,
               tracker=None) -> Measurement:
    """``tracker``: one already counting (what was allocated while the model was wrapped), else a new one."""
    tracker = tracker if tracker is not None else StorageTracker()
    for t in list(net.parameters()) + list(net.buffers()) + [ids]:
        tracker.add(t)
    tracker.reset_peak()
    phases = {"load": PhaseFigures(tracker.current, tracker.current, None, _with_rest(_categories(net, opt), tracker.current))}
    overall, overall_phase = tracker.current, "load"
    with tracker.mode():
        for last, name in _run_phases(net, opt, ids, steps, before=tracker.reset_peak, loss_fn=loss_fn):
            tracker.sweep()
            if tracker.peak > overall:
                overall, overall_phase = tracker.peak, name
            if last:
                phases[name] = PhaseFigures(tracker.peak, tracker.current, None,
                                            _with_rest(_categories(net, opt), tracker.current))
    return Measurement("cpu", settings.method, settings.to_dict(), params_total, params_trainable,
                       overall, overall_phase, phases, None, None, tuple(notes))


def _run_phases(net, opt, ids, steps: int, before, loss_fn=None):
    """Run ``steps`` training steps; call ``before()`` ahead of each phase and yield
    (whether this is the last step, phase name) after it. ``loss_fn()`` computes the loss
    (default: the transformers model's own, from labels)."""
    for step in range(steps):
        before()
        loss = loss_fn() if loss_fn is not None else net(input_ids=ids, labels=ids).loss
        yield step == steps - 1, "forward"
        before()
        loss.backward()
        del loss
        yield step == steps - 1, "backward"
        before()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield step == steps - 1, "optimizer"


def _measure_cuda(net, opt, ids, steps, settings, params_total, params_trainable, categories, notes,
                  loss_fn=None) -> Measurement:
    import torch

    torch.cuda.synchronize()
    load = torch.cuda.memory_allocated()
    phases = {"load": PhaseFigures(load, load, torch.cuda.memory_reserved(), _with_rest(categories(), load))}
    overall, overall_phase, reserved_overall = load, "load", torch.cuda.memory_reserved()
    for last, name in _run_phases(net, opt, ids, steps, before=torch.cuda.reset_peak_memory_stats, loss_fn=loss_fn):
        torch.cuda.synchronize()
        peak, end = torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()
        reserved = torch.cuda.max_memory_reserved()
        reserved_overall = max(reserved_overall, reserved)
        if peak > overall:
            overall, overall_phase = peak, name
        if last:
            phases[name] = PhaseFigures(peak, end, reserved, _with_rest(categories(), end))
    return Measurement("cuda", settings.method, settings.to_dict(), params_total, params_trainable,
                       overall, overall_phase, phases, reserved_overall, _nvml_process_bytes(), tuple(notes))


def _nvml_process_bytes() -> int | None:
    """This process's device memory as NVML sees it (CUDA context included), when NVML answers."""
    import os

    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            total = 0
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                    if proc.pid == os.getpid() and proc.usedGpuMemory:
                        total += int(proc.usedGpuMemory)
            return total or None
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVML is optional here
        return None

