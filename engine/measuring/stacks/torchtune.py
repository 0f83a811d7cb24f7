"""The torchtune stack for ``vramwise measure --stack torchtune``: torchtune's own model, loss and
optimizer step, as its single-device recipes (recipes/full_finetune_single_device.py,
recipes/lora_finetune_single_device.py, torchtune 0.6) set them up.

The model is built by torchtune's component builders (llama3 / llama3_1 / llama3_2, mistral, qwen2,
gemma, gemma2, phi3 for the families of the torchtune profile: the family fact ``torchtune_builder``
names them, ``torchtune_ties_head`` and ``torchtune_arg_<argument>`` say what they take beyond the
dimensions) from the Hugging Face config's dimensions,
randomly initialised under ``training.set_default_dtype(bfloat16)`` (the recipes' ``dtype: bf16``):
parameters and LoRA adapters in bf16, the LoRA base weights of QLoRA as torchao NF4 tensors
(``quantize_base=True``). The loss is ``CEWithChunkedOutputLoss`` (``loss="chunked"``, with
``model.set_num_output_chunks``) or ``torch.nn.CrossEntropyLoss`` on the model's float32 logits,
the step runs as ``_loss_step`` does (loss times the token count, ``scale_grads`` before the step),
activation checkpointing is ``training.set_activation_checkpointing`` on every
``TransformerSelfAttentionLayer`` and ``optimizer_in_bwd`` registers one optimizer per parameter,
stepped in a post-accumulate-grad hook (``training.register_optim_in_bwd_hooks``).
``compile`` does what the recipes do with ``compile: True``: ``training.compile_model`` (each
``TransformerSelfAttentionLayer`` compiled on its own, before activation checkpointing wraps it) and
``training.compile_loss`` (``CEWithChunkedOutputLoss``'s per-chunk upcast and cross-entropy compiled
in place; any other loss compiled whole, which the full fine-tuning recipe then drops: it calls
``training.compile_loss(self._loss_fn)`` without keeping the result, recipes/full_finetune_single_device.py:293-294,
so its standard loss runs eager, while the LoRA recipe keeps it, recipes/lora_finetune_single_device.py:297-298).

What does not run on a CPU: torchtune's ``OffloadActivations`` needs CUDA streams and pinned memory,
so activation offloading is emulated by a port of its pack/unpack policy (``_CpuOffloadActivations``:
saved tensors of at least 1 KiB leave the device, the five newest stay in the forward stash, each is
brought back for its autograd node); bitsandbytes' paged optimizers need CUDA. Fake tensors (``fake``)
run every method: torchao's NF4 quantizes fake weights too (the peaks equal real storage's,
tests/measured/test_validation_matrix_torchtune.py::test_qlora_fake_equals_real).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from vramwise.errors import SettingsError, StackUnsupportedError
from vramwise.estimation.registry import Registry
from vramwise.measuring.build import OPTIMIZERS, build_optimizer, require, served_family
from vramwise.measuring.stacks.protocol import Prepared

__all__ = ["PROFILE", "DEVICES", "check", "prepare", "lora_arguments"]

#: The profile that models this stack; its ``families`` are the configs built here.
PROFILE = "torchtune"
DEVICES = ("cpu",)


@dataclass(frozen=True)
class _Builders:
    """One torchtune model's component builders (the family fact torchtune_builder names the model):
    the module holding them, the full and LoRA builder's names, the arguments they take beyond the
    dimensions every builder takes (family facts torchtune_arg_<argument>), whether the LoRA builder
    can adapt the output head, and whether the builders take head_dim (otherwise they derive it as
    hidden_size // num_attention_heads)."""

    module: Any
    full: str
    lora: str
    extra: dict = field(default_factory=dict)
    head_adapter: bool = True
    head_dim: bool = False


def _module(name: str):
    """``torchtune.models.<name>._component_builders``."""
    import importlib

    if not name.isidentifier():
        raise StackUnsupportedError(f"torchtune_builder {name!r} is not a torchtune model name")
    _training()  # the package first, with its torchao stand-ins
    try:
        return importlib.import_module(f"torchtune.models.{name}._component_builders")
    except ImportError as exc:
        raise StackUnsupportedError(f"torchtune has no models/{name}/_component_builders.py: {exc}") from exc


def _parameters(fn) -> dict:
    import inspect

    return dict(inspect.signature(fn).parameters)


def _chosen(cfg: dict, facts) -> _Builders:
    """The builders the family facts name for ``cfg``, their arguments beyond the dimensions, and the
    checks of what they can build: the tied or untied head, every argument they read from a fact."""
    name = facts.get("torchtune_builder")
    module = _module(name)
    full, lora = getattr(module, name, None), getattr(module, f"lora_{name}", None)
    if full is None or lora is None:
        raise StackUnsupportedError(f"torchtune's models/{name}/_component_builders.py has no {name} and lora_{name}")
    full_args, lora_args = _parameters(full), _parameters(lora)
    tied = bool(facts.get("tie_word_embeddings"))
    extra: dict = {}
    if "tie_word_embeddings" in full_args:
        extra["tie_word_embeddings"] = tied
    elif tied != bool(facts.get("torchtune_ties_head")):
        if tied:
            raise SettingsError(f"torchtune's {name} builder has no tied output head; the config ties it")
        raise SettingsError(f"torchtune's {name} builders tie the output head to the embedding; the config unties it")
    required = facts.get("torchtune_required_args") or ()
    for arg in full_args:
        fact = f"torchtune_arg_{arg}"
        if fact not in facts:
            continue
        value = facts[fact]
        if value is None and arg in required:
            raise SettingsError(f"torchtune's {name} builders always take {arg} ({fact}); the config leaves it null")
        extra[arg] = value
    if cfg.get("partial_rotary_factor", 1.0) != 1.0:
        raise SettingsError(f"torchtune's {name} builder rotates every head dimension; the config's "
                            f"partial_rotary_factor {cfg.get('partial_rotary_factor')!r} cannot be built")
    return _Builders(module, name, f"lora_{name}", extra, head_adapter="apply_lora_to_output" in lora_args and not tied,
                     head_dim="head_dim" in full_args)


#: The names vramwise (PEFT) gives the projections -> torchtune's names in its LoRA builders.
_ATTN = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "o_proj": "output_proj", "output_proj": "output_proj"}
_MLP = ("gate_proj", "up_proj", "down_proj")
_HEAD = ("lm_head", "output")
IGNORE_INDEX = -100  # CEWithChunkedOutputLoss / CrossEntropyLoss ignore_index


def _int(cfg: dict, name: str, default=None) -> int:
    v = cfg.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise StackUnsupportedError(f"the config's {name} must be a positive integer for torchtune's builders, "
                                    f"got {v!r}")
    return v


def _facts(cfg: dict):
    """The facts of ``cfg``'s family, one the torchtune profile serves and torchtune has builders for."""
    from vramwise.estimation.estimate import load_model

    family, families = served_family(cfg, PROFILE)
    facts = load_model(cfg).facts if family is not None else {}
    if not facts.get("torchtune_builder"):
        raise SettingsError(
            f"--stack torchtune builds {', '.join(families)} configs with torchtune 0.6.1's own component "
            f"builders; model_type {cfg.get('model_type')!r} has no builder there"
        )
    return facts


def _dims(cfg: dict, facts, takes_head_dim: bool) -> dict:
    """The builder arguments the config's dimensions give (torchtune's names), every builder's, and
    head_dim where the builders take it (Gemma's configs default it to 256)."""
    mt = cfg.get("model_type")
    heads = _int(cfg, "num_attention_heads")
    hidden = _int(cfg, "hidden_size")
    head_dim = cfg.get("head_dim")
    if not takes_head_dim and head_dim is not None and head_dim != hidden // heads:
        raise SettingsError(
            f"torchtune's {mt} builder derives head_dim as hidden_size // num_attention_heads "
            f"({hidden // heads}); the config's head_dim {head_dim} cannot be built"
        )
    if cfg.get("mlp_bias") or cfg.get("attention_bias"):
        raise SettingsError(f"torchtune's {mt} builder has no attention_bias / mlp_bias option")
    max_seq = cfg.get("max_position_embeddings") or 2048
    d = dict(
        vocab_size=_int(cfg, "vocab_size"), num_layers=_int(cfg, "num_hidden_layers"), num_heads=heads,
        num_kv_heads=_int(cfg, "num_key_value_heads", heads), embed_dim=hidden,
        intermediate_dim=_int(cfg, "intermediate_size"), max_seq_len=int(max_seq),
    )
    if "rms_norm_eps" in cfg:  # otherwise the builder's default (1e-5; Gemma's 1e-6)
        d["norm_eps"] = float(cfg["rms_norm_eps"])
    if "rope_theta" in cfg:
        d["rope_base"] = float(cfg["rope_theta"])
    if takes_head_dim:
        d["head_dim"] = int(facts["head_dim"])
    return d


def _builders(cfg: dict) -> tuple[_Builders, dict]:
    """The builders torchtune has for ``cfg`` and their arguments (the dimensions and the family's own)."""
    facts = _facts(cfg)
    builders = _chosen(cfg, facts)
    return builders, dict(_dims(cfg, facts, builders.head_dim), **builders.extra)


def lora_arguments(targets) -> dict:
    """torchtune's LoRA switches for vramwise target names: lora_attn_modules, apply_lora_to_mlp
    (all three MLP projections or none), apply_lora_to_output."""
    names = [t.lower() for t in targets]
    if any(t in ("all-linear", "all_linear") for t in names):
        names = [t for t in names if t not in ("all-linear", "all_linear")] + ["q_proj", "k_proj", "v_proj", "o_proj", *_MLP]
    unknown = sorted(set(names) - set(_ATTN) - set(_MLP) - set(_HEAD))
    if unknown:
        raise SettingsError(f"torchtune's LoRA builders adapt q/k/v/o_proj, the MLP and the output head; "
                            f"not {', '.join(unknown)}")
    mlp = [t for t in _MLP if t in names]
    if mlp and len(mlp) != 3:
        raise SettingsError("torchtune's apply_lora_to_mlp adapts gate_proj, up_proj and down_proj together: "
                            "name all three or none")
    attn = sorted({_ATTN[t] for t in names if t in _ATTN})
    if not attn:
        raise SettingsError("torchtune's LoRA builders need at least one attention projection (q/k/v/o_proj)")
    return dict(lora_attn_modules=attn, apply_lora_to_mlp=bool(mlp), apply_lora_to_output=any(t in _HEAD for t in names))


#: names torchtune 0.6.1's ``training/quantization.py`` imports from ``torchao.quantization`` at import time
#: (for its post-training and QAT quantizers, which no single-device LoRA or full recipe runs) and which
#: torchao 0.16 removed; PEFT 0.21 refuses any torchao older than 0.16, so the two cannot share an
#: environment without this: each missing name is given a stand-in that refuses to run.
_TORCHAO_REMOVED = ("int4_weight_only", "int8_dynamic_activation_int4_weight")


def _training():
    """``torchtune.training``, importable beside a torchao newer than torchtune 0.6.1 knows."""
    import torchao.quantization as tq

    for name in _TORCHAO_REMOVED:
        if not hasattr(tq, name):
            setattr(tq, name, _removed(name))
    from torchtune import training

    return training


def _removed(name: str):
    def stand_in(*args, **kwargs):
        raise StackUnsupportedError(f"torchao.quantization.{name} no longer exists in the installed torchao; "
                                    "torchtune's quantizers are not part of what --stack torchtune runs")

    stand_in.__name__ = name
    return stand_in


def _default_targets() -> tuple:
    return tuple(Registry.default().profile(PROFILE).default_targets)


def check(settings, *, device: str, fake: bool) -> None:
    """Refuse what torchtune's single-device recipes do not run (before torchtune is imported)."""
    if settings.compile and fake:
        raise SettingsError("a compiled step is measured with real tensors (inductor's buffers are real "
                            "allocations): drop --fake")
    if settings.compile and settings.method == "qlora":
        raise SettingsError("a compiled QLoRA step cannot be measured: a compiled step is read from the allocator's "
                            "own reports, whose tracker counts plain tensors, not torchao's NF4 weights; "
                            "drop --compile or measure lora")
    if settings.attention != "sdpa":
        raise SettingsError(f"--attention {settings.attention}: --stack torchtune runs torchtune's own attention "
                            "(torch's scaled_dot_product_attention; its Gemma 2 computes the soft-capped scores "
                            "itself), not transformers' kernels: leave --attention at sdpa")
    if settings.gradient_checkpointing == "unsloth":
        raise SettingsError("torchtune's activation checkpointing is on or off: gradient checkpointing none or true")
    if settings.loss == "fused":
        raise SettingsError("torchtune 0.6 has no fused linear cross-entropy: loss standard or chunked")
    if settings.optimizer not in OPTIMIZERS:
        raise SettingsError(f"--stack torchtune builds {', '.join(OPTIMIZERS)}; got {settings.optimizer!r}")
    if settings.activation_offloading and settings.gradient_checkpointing != "true":
        raise SettingsError("torchtune's recipes allow activation offloading only with activation checkpointing "
                            "(enable_activation_checkpointing: True)")
    if settings.optimizer_in_bwd and settings.method != "full":
        raise SettingsError("optimizer_in_bwd belongs to torchtune's full fine-tuning recipes (the LoRA recipes lack it)")
    if fake and settings.optimizer == "adamw_8bit":
        raise SettingsError("bitsandbytes' 8-bit AdamW needs real tensors: drop --fake or choose adamw_torch")


class _Stepper:
    """The recipe's step: ``training.scale_grads(model, 1 / num_tokens)``, then ``optimizer.step()``."""

    def __init__(self, model, inner, scale):
        self.model, self.inner, self.scale = model, inner, scale

    @property
    def state(self):
        return self.inner.state

    def step(self):
        _training().scale_grads(self.model, self.scale)
        self.inner.step()

    def zero_grad(self, set_to_none: bool = True):
        self.inner.zero_grad(set_to_none=set_to_none)


class _InBackward:
    """optimizer_in_bwd: each parameter's optimizer steps inside the backward (post-accumulate-grad
    hook), so ``step`` and ``zero_grad`` have nothing left to do; ``state`` gathers the inner states."""

    def __init__(self, optim_dict):
        self.optim_dict = optim_dict

    @property
    def state(self):
        out = {}
        for opt in self.optim_dict.values():
            out.update(opt.state)
        return out

    def step(self):
        pass

    def zero_grad(self, set_to_none: bool = True):
        pass


def _cpu_offload_ctx(model, keep_values: bool = True):
    """``training.get_act_offloading_ctx_manager(model, True)`` with ``OffloadActivations`` ported to the
    CPU (its constructor asks for CUDA streams): the same pack/unpack policy and stashes, copies
    synchronous. A tensor "on the host" is a copy made outside the storage tracker's sight; one
    brought back is a tracked clone of it. Without ``keep_values`` (a compiled step, whose memory is
    read from the allocator's own reports, which would count a host copy on the CPU) the host keeps
    only the tensor's shape on the meta device and the tensor brought back is a new, uninitialised
    one: the same allocations on the device, the gradients' values meaningless."""
    import torch
    from torch.autograd.graph import saved_tensors_hooks
    from torch.utils._python_dispatch import _disable_current_modes
    from torchtune.modules import TiedLinear
    _training()  # the package first, with its torchao stand-ins
    from torchtune.training._activation_offloading import NoOpManager

    class _CpuOffloadActivations(saved_tensors_hooks):
        min_tensor_size_bytes = 1024  # OffloadActivations(min_offload_size=1024)
        max_fwd_stash_size = 5  # OffloadActivations(max_fwd_stash_size=5)

        def __init__(self):
            self.tracker: dict = {}
            self.tensor_id = 0
            self.fwd_stash: dict = {}
            self.bwd_tensor_stash: dict = {}
            self.curr_node = None

            def pack(activation):
                self.tensor_id += 1
                tid = self.tensor_id
                nbytes = activation.element_size() * activation.nelement()
                if nbytes >= self.min_tensor_size_bytes and not isinstance(activation, (torch.nn.Parameter, torch.nn.Buffer)):
                    for k in [k for k in self.fwd_stash if k <= tid - self.max_fwd_stash_size]:
                        del self.fwd_stash[k]
                    with _disable_current_modes():  # the host copy: not device memory
                        host = activation.detach().clone() if keep_values else torch.empty_like(activation, device="meta")
                    self.tracker[tid] = (host, True)
                    self.fwd_stash[tid] = activation
                else:
                    self.tracker[tid] = (activation, False)
                return tid

            def unpack(tid):
                value, modified = self.tracker.pop(tid)
                if not modified:
                    return value
                node = torch._C._current_autograd_node()
                prev = []
                if node is not self.curr_node:
                    self.curr_node = node
                    prev = list(self.bwd_tensor_stash)
                if tid in self.fwd_stash:
                    value = self.fwd_stash[tid]
                    brought_back = False
                else:
                    # host -> device: a new device tensor
                    value = value.clone() if keep_values else torch.empty_like(value, device="cpu")
                    self.bwd_tensor_stash[tid] = value
                    brought_back = True

                def hook(outputs, inputs):
                    if brought_back:
                        self.bwd_tensor_stash.pop(tid, None)
                    self.fwd_stash.clear()
                    for k in prev:
                        self.bwd_tensor_stash.pop(k, None)
                    return outputs

                if node is not None:
                    node.register_hook(hook)
                return value

            super().__init__(pack, unpack)

    ctx = _CpuOffloadActivations()
    noop = NoOpManager()
    head = model.output.linear if isinstance(model.output, TiedLinear) else model.output
    head.register_forward_pre_hook(lambda *a: noop.__enter__())
    head.register_forward_hook(lambda *a: noop.__exit__(), always_call=True)
    return ctx


def _to_fake(model, mode) -> None:
    """Replace the parameters and buffers of ``model``, built on the meta device, by fake tensors of
    their shapes and dtypes (ties kept); the rotary caches, which torchtune cannot build on the meta
    device (Llama3ScaledRoPE skips them there), are built for real on the CPU first, then faked."""
    import torch

    for m in model.modules():
        if hasattr(m, "rope_init") and (getattr(m, "is_cache_built", True) is False
                                        or any(b is not None and b.is_meta for b in m.buffers(recurse=False))):
            with torch.device("cpu"):
                m.rope_init()
    from torchao.dtypes.nf4tensor import NF4Tensor, to_nf4

    made: dict = {}
    with mode:
        for m in model.modules():
            for name, p in list(m._parameters.items()):
                if p is not None:
                    if id(p) not in made:
                        if isinstance(p, NF4Tensor):  # torchao's NF4 runs under fake tensors: quantize a fake weight
                            new = to_nf4(torch.empty(p.shape, dtype=p.dtype), p.block_size, p.scaler_block_size)
                        else:
                            new = torch.empty(p.shape, dtype=p.dtype)
                        made[id(p)] = torch.nn.Parameter(new, requires_grad=p.requires_grad)
                    m._parameters[name] = made[id(p)]
            for name, b in list(m._buffers.items()):
                if b is not None:
                    m._buffers[name] = torch.zeros(b.shape, dtype=b.dtype) if b.is_meta else mode.from_tensor(b)


def prepare(cfg: dict, settings, *, dtype, device: str, fake: bool, wrap=None) -> Prepared:
    """torchtune's model, loss and optimizer for ``cfg`` (a Hugging Face config dict) and ``settings``;
    ``wrap(model)`` (a distributed strategy's sharding) runs after activation checkpointing and before
    the optimizer is built, as in torchtune's distributed recipes."""
    require("torchtune", extra="torchtune")
    require("torchao", extra="torchtune")
    import torch

    chosen, dims = _builders(cfg)
    training = _training()
    from torchtune import modules
    from torchtune.modules.loss import CEWithChunkedOutputLoss
    from torchtune.modules.peft import get_adapter_params, set_trainable_params

    builders = chosen.module
    notes: list = []
    method = settings.method
    if method == "full":
        builder, kwargs = getattr(builders, chosen.full), dims
    else:
        targets = settings.target_modules or _default_targets()
        lora = lora_arguments(targets)
        if not chosen.head_adapter:
            if lora.pop("apply_lora_to_output"):
                raise SettingsError(f"torchtune's {chosen.lora} has no LoRA on the output head (tied to the embedding)")
        kwargs = dict(dims, **lora, lora_rank=settings.lora_rank, lora_alpha=2 * settings.lora_rank,
                      lora_dropout=settings.lora_dropout, quantize_base=method == "qlora")
        builder = getattr(builders, chosen.lora)
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode

        mode = FakeTensorMode(allow_non_fake_inputs=True)
        notes.append("fake tensors: shapes and lifetimes are real, nothing was allocated")
    else:
        mode = contextlib.nullcontext()
    torch.manual_seed(0)
    with training.set_default_dtype(dtype), (torch.device("meta") if fake else contextlib.nullcontext()):
        model = builder(**kwargs)
    if method != "full":
        set_trainable_params(model, get_adapter_params(model))
    if fake:
        _to_fake(model, mode)
    if settings.compile:
        # recipes/*_single_device.py _setup_model: training.compile_model(model) before checkpointing. The
        # compiled steps measured before in this process are forgotten first (torch._dynamo.reset: their
        # graphs and what those hold), so that each measurement counts its own model's memory only.
        import gc

        torch._dynamo.reset()
        gc.collect()
        training.compile_model(model, verbose=False)
    with mode:
        if settings.gradient_checkpointing == "true":
            training.set_activation_checkpointing(model, auto_wrap_policy={modules.TransformerSelfAttentionLayer})
        if settings.activation_offloading:
            act_ctx = _cpu_offload_ctx(model, keep_values=not settings.compile)
            notes.append("activation offloading: torchtune's OffloadActivations needs CUDA streams and pinned memory; "
                         "emulated by a CPU port of its pack/unpack policy (1 KiB threshold, forward stash of 5, "
                         "tensors brought back per autograd node), copies synchronous"
                         + ("; compiled, the host keeps shapes only (the values brought back are uninitialised)"
                            if settings.compile else ""))
        else:
            act_ctx = contextlib.nullcontext()
        if settings.loss == "chunked":
            loss_mod = CEWithChunkedOutputLoss(num_output_chunks=settings.loss_chunks, ignore_index=IGNORE_INDEX)
            model.set_num_output_chunks(loss_mod.num_output_chunks)
        else:
            loss_mod = torch.nn.CrossEntropyLoss(ignore_index=IGNORE_INDEX)
        if settings.compile:
            # the full recipe drops what compile_loss returns (its standard loss stays eager; the chunked
            # loss is compiled in place), the LoRA recipe keeps it
            compiled_loss = training.compile_loss(loss_mod, verbose=False)
            if method != "full":
                loss_mod = compiled_loss
            notes.append("compile: torchtune's compile_model and compile_loss (inductor)"
                         + ("; the full recipe keeps its standard loss eager" if method == "full" and settings.loss != "chunked" else ""))
        model.train()
        if wrap is not None:
            model = wrap(model)
        trainable = [p for p in model.parameters() if p.requires_grad]
        if settings.optimizer_in_bwd:
            optim_dict = {p: build_optimizer([p], settings, []) for p in trainable}
            training.register_optim_in_bwd_hooks(model=model, optim_dict=optim_dict)
            opt = _InBackward(optim_dict)
        b, s = settings.batch_size, settings.seq_len
        ids = torch.randint(0, dims["vocab_size"], (b, s), generator=None if fake else torch.Generator().manual_seed(1))
        ignore_cache = torch.full((b, 1), IGNORE_INDEX)
        num_tokens = (ids != IGNORE_INDEX).sum()
        if not settings.optimizer_in_bwd:
            opt = _Stepper(model, build_optimizer(trainable, settings, []), 1 / num_tokens)
    if settings.optimizer == "adamw_torch":
        notes.append("AdamW runs its foreach implementation, torch's default on GPUs")

    def loss_fn():
        # recipes/*_single_device.py _loss_step, then `* current_num_tokens`
        with act_ctx:
            logits = model(ids)
        labels = torch.hstack((ids[..., 1:], ignore_cache[:b]))
        if not isinstance(logits, list):
            labels = labels.reshape(-1)
            logits = logits.reshape(-1, logits.size(-1))
        loss = loss_mod(logits, labels)
        del logits
        return loss * num_tokens

    params_total = sum(p.numel() for p in model.parameters())
    return Prepared(net=model, opt=opt, ids=ids, loss_fn=loss_fn, params_total=params_total,
                    params_trainable=sum(p.numel() for p in trainable), notes=notes,
                    context=(lambda: mode) if fake else contextlib.nullcontext)
