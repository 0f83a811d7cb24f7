"""The transformers stack (``stack="hf"``, the default): transformers' model and loss, PEFT's LoRA,
bitsandbytes' 4-bit weights for QLoRA and a plain torch optimizer step.

The model is built from its config on the meta device and given random weights (never
downloaded); QLoRA reloads it through transformers' bitsandbytes 4-bit path, as QLoRA users
load a checkpoint; LoRA is PEFT's (after ``prepare_model_for_kbit_training`` for QLoRA). With
``fake`` every parameter and buffer becomes a fake tensor of its shape and dtype (torch's
FakeTensorMode): shapes, dtypes and storage lifetimes are real, nothing is allocated, so models far
larger than this machine's memory can be measured (full fine-tuning and LoRA; QLoRA needs real
bitsandbytes storage). The step also runs on CUDA. The data-parallel strategies
(:mod:`vramwise.measuring.distributed`) build their model with the functions of this module.
"""

from __future__ import annotations

import tempfile
from typing import Any

from vramwise.errors import SettingsError, StackUnsupportedError
from vramwise.estimation.registry import Registry
from vramwise.measuring.build import OPTIMIZERS, build_optimizer, require
from vramwise.measuring.refusals import causal_lm_class, check_attention, check_device, check_padding, padding_refusal
from vramwise.measuring.stacks.protocol import Prepared
from vramwise.profiles.settings import ADAPTER_METHODS

__all__ = ["PROFILE", "DEVICES", "check", "check_config", "prepare", "meta_model", "random_model", "apply_lora", "apply_checkpointing"]

#: The profile that models what this stack runs (plain transformers + PEFT); its LoRA defaults apply here.
PROFILE = "hf"
DEVICES = ("cpu", "cuda")


def check(settings, *, device: str, fake: bool) -> None:
    if settings.compile and fake:
        raise SettingsError("a compiled step is measured with real tensors (inductor's buffers are real "
                            "allocations): drop --fake")
    exposed = [n for n in ("loss", "activation_offloading", "optimizer_in_bwd")
               if getattr(settings, n) != {"loss": "standard"}.get(n, False)]
    if exposed:
        raise SettingsError(f"{', '.join(exposed)}: the hf stack runs transformers' own loss and a plain optimizer step; "
                            "these settings belong to --stack torchtune or litgpt")
    if settings.gradient_checkpointing == "unsloth":
        raise SettingsError("measure runs plain transformers: gradient checkpointing is none or true")
    if settings.optimizer not in OPTIMIZERS:
        raise SettingsError(f"measure builds {', '.join(OPTIMIZERS)}; got {settings.optimizer!r}")
    if fake and settings.method == "qlora":
        raise SettingsError("QLoRA cannot be measured with fake tensors (bitsandbytes needs real 4-bit storage): drop --fake")


def check_config(cfg: dict, settings, *, device: str) -> None:
    """Refuse, before anything is built, what transformers would refuse for ``cfg`` (a config dict) at
    ``settings`` on ``device``: a model type it has no causal LM for, an attention kernel the class does not
    run, then one that cannot run on ``device`` here, a pad_token_id outside the embedding it is built into."""
    require("transformers")
    config, cls = _transformers_config(cfg)
    check_attention(cls, settings.attention)
    check_device(settings.attention, device)
    check_padding(cfg, config, cls)


def _transformers_config(cfg_dict: dict):
    """(transformers' config of ``cfg_dict``, its quantization left out; the causal LM class it builds)."""
    from transformers import AutoConfig

    d = dict(cfg_dict)
    mt = d.pop("model_type", None)
    if not mt:
        raise StackUnsupportedError("the config has no model_type, so transformers cannot build it")
    d.pop("quantization_config", None)  # random weights are built unquantized; the method decides
    try:
        cfg = AutoConfig.for_model(mt, **d)
    except Exception as e:  # noqa: BLE001
        why = " ".join(str(e).split())  # transformers lists every model type it knows: the start says why
        raise StackUnsupportedError(f"transformers cannot build a {str(mt)[:100]!r} config: {type(e).__name__}: "
                                    f"{why[:300]}{' ...' if len(why) > 300 else ''}") from None
    return cfg, causal_lm_class(cfg)


def prepare(cfg: dict, settings, *, dtype: Any, device: str, fake: bool) -> Prepared:
    """transformers' model of ``cfg`` with the method's adapters, its optimizer and a batch of random tokens."""
    require("transformers")
    if fake:
        return _prepare_fake(cfg, settings, dtype)
    import torch

    net = random_model(cfg, settings.attention, dtype)
    notes: list = []
    if settings.method == "qlora":
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            net = quantized(net, settings.attention, dtype)
        finally:
            if bars:
                hf_logging.enable_progress_bar()
    net = apply_lora(net, settings)
    apply_checkpointing(net, settings)
    if device == "cuda":
        net = net.to("cuda")
    net.train()
    trainable = [p for p in net.parameters() if p.requires_grad]
    opt = build_optimizer(trainable, settings, notes)
    vocab = int(net.get_output_embeddings().weight.shape[0]) if net.get_output_embeddings() is not None else 1000
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (settings.batch_size, settings.seq_len), generator=gen).to(device)
    loss_fn = None
    if settings.compile:  # the model and its loss as one compiled module (Trainer's torch_compile=True),
        # without the key/value cache, as Trainer sets it (TrainingArguments.use_cache defaults to False): a
        # compiled forward that returned the cache would get a zero gradient for each of its tensors. The
        # compiled steps measured before in this process are forgotten first (torch._dynamo.reset: their graphs
        # and what those hold), so that each measurement counts its own model's memory only.
        import gc

        torch._dynamo.reset()
        gc.collect()
        compiled = torch.compile(net)
        loss_fn = lambda: compiled(input_ids=ids, labels=ids, use_cache=False).loss  # noqa: E731
    return Prepared(net=net, opt=opt, ids=ids, loss_fn=loss_fn, params_total=sum(p.numel() for p in net.parameters()),
                    params_trainable=sum(p.numel() for p in trainable), notes=notes)


def meta_model(cfg_dict: dict, attention: str, dtype):
    """The causal LM transformers builds from ``cfg_dict``, on the meta device (nothing allocated)."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg, cls = _transformers_config(cfg_dict)
    check_attention(cls, attention)  # what transformers refuses, told before the build (vramwise.measuring.refusals)
    check_padding(cfg_dict, cfg, cls)
    try:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=attention)
    except (AssertionError, IndexError):  # an embedding's padding_idx outside its table (nn.Embedding asserts;
        # XGLM's position table indexes it): the user's pad_token_id where the family does not say so
        message = padding_refusal(getattr(cfg, "pad_token_id", None), getattr(cfg, "vocab_size", None),
                                  named="pad_token_id" in cfg_dict, config_class=type(cfg).__name__,
                                  model_class=cls.__name__)
        if message is None:
            raise
        raise StackUnsupportedError(message) from None


def random_model(cfg_dict: dict, attention: str, dtype):
    """The model with random weights on CPU."""
    import torch

    model = meta_model(cfg_dict, attention, dtype).to_empty(device="cpu")
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        for p in model.parameters():
            p.normal_(0.0, 0.02, generator=gen)
        for name, b in model.named_buffers():
            if b.is_floating_point() and not torch.isfinite(b).all():
                b.zero_()
    model.tie_weights()
    return model


def quantized(model, attention: str, dtype):
    """Reload ``model`` through transformers' bitsandbytes 4-bit path (what QLoRA users run)."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    require("bitsandbytes")
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)
        return AutoModelForCausalLM.from_pretrained(
            tmp, quantization_config=q, dtype=dtype, attn_implementation=attention, device_map="cpu"
        )


def apply_lora(net, settings):
    """PEFT's LoRA on ``net`` (after prepare_model_for_kbit_training for QLoRA); ``net`` for full fine-tuning."""
    if settings.method not in ADAPTER_METHODS:
        return net
    require("peft")
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if settings.method == "qlora" and settings.kbit_prepare is not False:
        net = prepare_model_for_kbit_training(
            net, use_gradient_checkpointing=settings.gradient_checkpointing == "true",
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    if settings.target_modules:
        targets = list(settings.target_modules)
    else:  # the default of the profile that models this stack (formulas/hf/profile.yaml)
        targets = list(Registry.default().profile(PROFILE).default_targets)
    if len(targets) == 1 and targets[0].lower() in ("all-linear", "all_linear"):
        targets = "all-linear"
    return get_peft_model(net, LoraConfig(r=settings.lora_rank, lora_alpha=2 * settings.lora_rank,
                                          target_modules=targets, lora_dropout=settings.lora_dropout))


def apply_checkpointing(net, settings) -> None:
    if settings.gradient_checkpointing == "true":
        net.config.use_cache = False  # a KV cache cannot be kept with checkpointing (transformers turns it off)
        net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if settings.method != "full":
            net.enable_input_require_grads()


def _prepare_fake(cfg: dict, settings, dtype) -> Prepared:
    """The step with every tensor fake: built on the meta device, adapters added there, then each
    parameter and buffer replaced by a fake tensor of its shape and dtype (ties kept)."""
    import contextlib

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    net = apply_lora(meta_model(cfg, settings.attention, dtype), settings)
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
        apply_checkpointing(net, settings)
        net.train()
        trainable = [p for p in net.parameters() if p.requires_grad]
        notes = ["fake tensors: shapes and lifetimes are real, nothing was allocated"]
        opt = build_optimizer(trainable, settings, notes)
        vocab = int(net.get_output_embeddings().weight.shape[0])
        ids = torch.randint(0, vocab, (settings.batch_size, settings.seq_len))
        params_total = sum(p.numel() for p in net.parameters())
        params_trainable = sum(p.numel() for p in trainable)

    @contextlib.contextmanager
    def context():
        with mode, _PackedSequenceCheckOff():
            yield

    return Prepared(net=net, opt=opt, ids=ids, loss_fn=None, params_total=params_total,
                    params_trainable=params_trainable, notes=notes, context=context)


class _PackedSequenceCheckOff:
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
