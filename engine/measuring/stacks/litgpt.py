"""The LitGPT stack for ``vramwise measure --stack litgpt``: LitGPT's own model, LoRA, loss and
optimizer, set up as its single-device fine-tuning scripts do (litgpt 0.5.9 ``finetune/full.py`` and
``finetune/lora.py`` under lightning Fabric).

The model is ``litgpt.model.GPT`` (full) or ``litgpt.lora.GPT`` (LoRA, QLoRA) built from a
``litgpt.Config`` mapped from the Hugging Face config (for the families formulas/litgpt/profile.yaml
names: Llama's layout, and each field where a family's differs set by its ``litgpt_<field>`` facts in
families/stacks/litgpt/), randomly initialised, never downloaded. Precision is Fabric's
``bf16-true`` (``HalfPrecision``): every parameter, the LoRA adapters included, is created in bf16 under its
``module_init_context``, the forward runs under its ``forward_context`` and, as ``_FabricModule.forward``
does, the model's output goes through ``convert_output``, which casts the logits to the default
dtype (float32) outside the forward context. QLoRA is ``--quantize bnb.nf4``: lightning's
``BitsandbytesPrecision("nf4", bfloat16)`` swaps every ``torch.nn.Linear`` (the output head and the
linear inside each LoRA layer included) for its ``_NF4Linear`` at construction. Lightning quantizes
those weights only on a CUDA device; here each one is quantized on the CPU exactly as its
``_Linear4bit.quantize`` does (the weight cast to float16, ``bitsandbytes.functional.quantize_4bit``
with the layer's block size 64, NF4, no double quantization), which bitsandbytes 0.50.2 supports on
the CPU; forward and backward then run bitsandbytes' own ``MatMul4Bit``. As ``finetune/lora.py``
does under bitsandbytes precision, the optimizer is ``bitsandbytes.optim.PagedAdamW`` (32-bit states)
built before the token embedding is swapped for ``bitsandbytes.nn.StableEmbedding``; that new
embedding trains (``requires_grad``) but is in no optimizer, so its gradient is never freed.

The loss is LitGPT's ``chunked_cross_entropy``: ``loss="chunked"`` runs the training loops' own calls
(full: ``model(ids)`` then ``chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:])`` with
chunk_size 128; LoRA/QLoRA: ``model(ids, lm_head_chunk_size=128)``, the last chunk trimmed, then
``chunked_cross_entropy(logits, targets[..., 1:])``); ``loss="standard"`` the same function with
chunk_size 0 on the whole logits (plain cross-entropy, as the scripts' ``validate`` does). As in the
scripts' ``fit`` loops, the logits stay referenced until the next step's forward has produced new ones.

What LitGPT does not offer on one device is refused: gradient checkpointing (only its FSDP strategy
checkpoints ``Block``s, on several devices), activation offloading, an optimizer step in the backward
pass. Fake tensors (``fake``) run every method: bitsandbytes registers fake kernels for gemm_4bit and
dequantize_4bit, and a fake 4-bit weight is a plain Parameter of packed uint8 carrying its QuantState
(a Params4bit cannot wrap a fake tensor); the fake and the real QLoRA step agree to the byte. The
QuantState's block scales and code book are registered as buffers so that the tracker counts them.
On a CPU bitsandbytes' paged optimizers fall back to plain tensors (``get_state_buffer``), so the
states PagedAdamW would put in CUDA managed memory are counted as ordinary tensors here.
"""

from __future__ import annotations

from typing import Any

from vramwise.errors import SettingsError, StackUnsupportedError
from vramwise.estimation.registry import Registry
from vramwise.models.stack_manifest import stack_manifest
from vramwise.profiles.settings import ADAPTER_METHODS
from vramwise.measuring.build import OPTIMIZERS, require, served_family
from vramwise.measuring.stacks.protocol import Prepared

__all__ = ["PROFILE", "DEVICES", "check", "prepare", "litgpt_config_fields", "lora_switches"]

#: The profile that models this stack; its ``families`` are the configs built here.
PROFILE = "litgpt"
DEVICES = ("cpu",)
#: The prefix of the family facts that set a ``litgpt.Config`` field: ``litgpt_<field>`` (for example
#: qwen2's ``litgpt_attn_bias``, qwen3's ``litgpt_norm_qk``, gemma's ``litgpt_mlp_class_name``); the
#: fields no fact sets are Llama's layout (LLaMAMLP, RMSNorm, full rotary, sequential residual). The
#: prefix is the litgpt stack's in formulas/stacks.yaml, whose overlays families/stacks/litgpt/ hold them.
FACT_PREFIX = next(s.facts_prefix for s in stack_manifest().stacks.values() if s.module == __name__.rsplit(".", 1)[-1])
#: LitGPT's LoRA switches (finetune/lora.py setup: lora_query, lora_key, ...) and the target names
#: (vramwise's / PEFT's) each one adapts.
_SWITCHES = {
    "lora_query": ("q_proj",),
    "lora_key": ("k_proj",),
    "lora_value": ("v_proj",),
    "lora_projection": ("o_proj",),
    "lora_mlp": ("gate_proj", "up_proj", "down_proj"),
    "lora_head": ("lm_head",),
}
#: lm_head_chunk_size and chunk_size of finetune/lora.py's fit (and chunked_cross_entropy's default).
CHUNK = 128


def litgpt_config_fields(cfg: dict, seq_len: int) -> dict:
    """The ``litgpt.Config`` keyword arguments for the Hugging Face config ``cfg`` (facts resolved by
    vramwise's own family files, so defaults such as Qwen3's head_dim 128 agree with the estimate; the
    family's ``litgpt_<field>`` facts set the fields where its layout differs from Llama's)."""
    import dataclasses

    from litgpt.config import Config
    from vramwise.estimation.estimate import load_model

    mt = cfg.get("model_type")
    family, families = served_family(cfg, PROFILE)
    if family is None:
        raise StackUnsupportedError(
            f"--stack litgpt builds LitGPT's own model for model types {', '.join(families)} (the families the "
            f"litgpt profile models); model_type {mt!r} is not one of them"
        )
    spec = load_model(cfg)
    f = spec.facts
    if any(lc.attributes.get("moe") for lc in spec.layer_classes):
        raise StackUnsupportedError(f"--stack litgpt builds dense layers only; this {mt} config routes to experts")
    max_pos = f.get("max_position_embeddings")
    windows = {lc.attributes.get("kv_window") for lc in spec.layer_classes} - {None}
    if any(not max_pos or w < max_pos for w in windows):
        raise StackUnsupportedError(
            f"this {mt} config sets a sliding window; LitGPT applies it with an explicit T x T mask per layer, "
            "which the litgpt profile does not model: set sliding_window to null"
        )
    rope = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    partial = cfg.get("partial_rotary_factor", rope.get("partial_rotary_factor", 1.0))
    if partial not in (None, 1, 1.0) and f.get(f"{FACT_PREFIX}rotary_percentage") != partial:  # the family ignores it
        raise StackUnsupportedError(f"this {mt} config rotates part of each head (partial_rotary_factor {partial}), "
                                    "which the litgpt profile does not model")
    attn_bias, mlp_bias = bool(f.get("attention_bias")), bool(f.get("mlp_bias"))
    if attn_bias != mlp_bias:
        raise StackUnsupportedError("LitGPT's `bias` switch covers the attention projections and the MLP together; "
                                    f"attention_bias={attn_bias} with mlp_bias={mlp_bias} cannot be built")
    fields = {fl.name for fl in dataclasses.fields(Config)}
    own = {name[len(FACT_PREFIX):]: value for name, value in f.items()
           if name.startswith(FACT_PREFIX) and name[len(FACT_PREFIX):] in fields}
    vocab = int(f["vocab_size"])
    out = dict(
        name=f"vramwise-{mt}",
        block_size=max(seq_len, int(max_pos) if max_pos else seq_len),
        vocab_size=vocab, padded_vocab_size=vocab,  # the checkpoint's embedding rows, as litgpt's configs set them
        n_layer=int(f["num_hidden_layers"]), n_head=int(f["num_attention_heads"]), n_embd=int(f["hidden_size"]),
        n_query_groups=int(f["num_key_value_heads"]), head_size=int(f["head_dim"]),
        intermediate_size=int(f["intermediate_size"]),
        rotary_percentage=1.0, parallel_residual=False,
        norm_class_name="RMSNorm", mlp_class_name="LLaMAMLP", bias=attn_bias,
    )
    out.update(own)
    return out


def lora_switches(settings) -> dict:
    """LitGPT's lora_* switches for the settings' targets (the litgpt profile's defaults and keywords)."""
    targets, _ = Registry.default().profile(PROFILE).expand_targets(settings.target_modules)
    switches = {k: False for k in _SWITCHES}
    known = set()
    for switch, names in _SWITCHES.items():
        hit = [n for n in names if n in targets]
        known.update(hit)
        if hit and len(hit) != len(names):
            raise SettingsError(f"LitGPT has one switch ({switch}) for {', '.join(names)}: target all of them or none")
        switches[switch] = bool(hit)
    unknown = sorted(set(targets) - known)
    if unknown:
        raise SettingsError(f"LitGPT's LoRA cannot target {', '.join(unknown)} (its switches: query, key, value, "
                            "projection, mlp, head)")
    return switches


def check(settings, *, device: str, fake: bool) -> None:
    """Refuse what LitGPT's single-device fine-tuning does not offer (before litgpt is imported)."""
    if settings.attention != "sdpa":
        raise SettingsError(f"--attention {settings.attention}: --stack litgpt runs LitGPT's own attention "
                            "(CausalSelfAttention: torch's scaled_dot_product_attention), not transformers' "
                            "kernels: leave --attention at sdpa")
    if settings.compile:
        raise SettingsError("measure compiles the hf stack's step only (LitGPT's finetune scripts do not "
                            "compile): drop --compile")
    if settings.gradient_checkpointing != "none":
        raise SettingsError("LitGPT's single-device fine-tuning has no gradient checkpointing (only its FSDP "
                            "strategy checkpoints each Block, on several devices): use gradient_checkpointing none")
    if settings.loss == "fused":  # normalised: the others are standard and chunked
        raise SettingsError(f"LitGPT's loss is chunked_cross_entropy: loss standard (chunk_size 0) or chunked "
                            f"(chunk size {CHUNK}); got {settings.loss!r}")
    if settings.activation_offloading or settings.optimizer_in_bwd:
        raise SettingsError("activation_offloading and optimizer_in_bwd are torchtune's; LitGPT has neither")
    if settings.optimizer not in OPTIMIZERS:
        raise SettingsError(f"--stack litgpt builds {', '.join(OPTIMIZERS)}; got {settings.optimizer!r}")
    if settings.method == "qlora" and settings.optimizer == "sgd":
        raise SettingsError("LitGPT's bitsandbytes precision only supports AdamW (utils.instantiate_bnb_optimizer)")


def _optimizer(params, settings, notes: list):
    import torch

    if settings.method == "qlora":  # finetune/lora.py: instantiate_bnb_optimizer, whatever AdamW was named
        bnb = require("bitsandbytes")
        notes.append("QLoRA: bitsandbytes PagedAdamW (32-bit states), as LitGPT's bnb precision builds it")
        return bnb.optim.PagedAdamW(params)
    if settings.optimizer == "adamw_8bit":
        bnb = require("bitsandbytes")
        return bnb.optim.AdamW8bit(params)
    if settings.optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-3)
    if settings.optimizer == "adamw_torch_fused":
        return torch.optim.AdamW(params, fused=True)
    notes.append("AdamW runs its foreach implementation, torch's default on GPUs")
    return torch.optim.AdamW(params, foreach=True)


def _quantize_nf4(model) -> None:
    """Quantize every bitsandbytes 4-bit layer on the CPU the way lightning's ``_Linear4bit.quantize``
    does on a GPU (float16 copy of the weight, quantize_4bit with the parameter's own settings)."""
    import bitsandbytes as bnb
    import torch
    from lightning.fabric.plugins.precision.bitsandbytes import _replace_param

    for m in model.modules():
        if isinstance(m, bnb.nn.Linear4bit) and m.weight.data.dtype != torch.uint8:
            p = m.weight
            w = p.data.contiguous().half()
            w4, state = bnb.functional.quantize_4bit(w, blocksize=p.blocksize, compress_statistics=p.compress_statistics,
                                                     quant_type=p.quant_type, quant_storage=p.quant_storage)
            m.weight = _replace_param(p, w4, state)
            m.weight.bnb_quantized = True
            _count_quant_state(m, state)


def _count_quant_state(module, state) -> None:
    """Register the quantization state's tensors (block scales, code book) as non-persistent buffers, so
    the tracker, which counts parameters and buffers at the start, sees them; nothing reads these names."""
    module.register_buffer("_vramwise_absmax", state.absmax, persistent=False)
    module.register_buffer("_vramwise_code", state.code, persistent=False)


def _fake_nf4(module, mode) -> None:
    """A fake 4-bit weight for a meta-device bitsandbytes layer: packed uint8 storage and the QuantState
    (float32 absmax per block of 64, the NF4 code book) that ``quantize_4bit`` returns for float16
    input; a plain Parameter carries it, since a Params4bit cannot wrap a fake tensor."""
    import torch
    from bitsandbytes.functional import QuantState

    n, k = module.out_features, module.in_features
    p = module.weight
    with mode:
        data = torch.empty(((n * k + 1) // 2, 1), dtype=torch.uint8)
        absmax = torch.empty(-(-n * k // p.blocksize), dtype=torch.float32)
        code = torch.empty(16, dtype=torch.float32)
        state = QuantState(absmax=absmax, shape=torch.Size([n, k]), code=code, blocksize=p.blocksize,
                           quant_type=p.quant_type, dtype=torch.float16)
        weight = torch.nn.Parameter(data, requires_grad=False)
        weight.quant_state = state
        module._parameters["weight"] = weight
    _count_quant_state(module, state)


def _fake_parameters(model, mode) -> None:
    """Every parameter and buffer of the meta-device ``model`` replaced by a fake tensor of its shape and dtype."""
    import torch

    try:
        import bitsandbytes as bnb
    except ImportError:
        bnb = None
    for module in model.modules():
        if bnb is not None and isinstance(module, bnb.nn.Linear4bit):
            _fake_nf4(module, mode)
    with mode:
        made: dict = {}
        for module in model.modules():
            for name, p in list(module._parameters.items()):
                if p is not None and p.device.type == "meta":  # the 4-bit weights are fake already
                    if id(p) not in made:
                        made[id(p)] = torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype), requires_grad=p.requires_grad)
                    module._parameters[name] = made[id(p)]
            for name, b in list(module._buffers.items()):
                if b is not None and b.device.type == "meta":
                    module._buffers[name] = torch.zeros(b.shape, dtype=b.dtype)


def prepare(cfg: dict, settings, *, dtype, device: str, fake: bool) -> Prepared:
    """LitGPT's model, optimizer and training-step loss for ``cfg`` at ``settings`` (see the module docstring)."""
    require("litgpt", extra="litgpt")
    require("lightning", extra="litgpt")
    import contextlib

    import torch

    if dtype != torch.bfloat16:
        raise SettingsError("LitGPT is measured in bf16-true")
    qlora, adapters = settings.method == "qlora", settings.method in ADAPTER_METHODS
    import litgpt.lora as litlora
    import litgpt.model as litmodel
    from litgpt.utils import chunked_cross_entropy

    fields = litgpt_config_fields(cfg, settings.seq_len)
    notes = ["LitGPT 0.5.9 finetune scripts: bf16-true, Fabric casts the logits to float32 (convert_output)"]
    if adapters:
        r = settings.lora_rank
        switches = lora_switches(settings)
        qkv = [switches[k] for k in ("lora_query", "lora_key", "lora_value")]
        if any(qkv) and not all(qkv) and fields["n_head"] * fields["head_size"] != fields["n_embd"]:
            raise StackUnsupportedError(
                "LitGPT 0.5.9's LoRAQKVLinear.lora_ind takes the query width to be n_embd, so adapting some of "
                f"q, k and v fails when heads x head_size ({fields['n_head']} x {fields['head_size']}) differs "
                f"from n_embd ({fields['n_embd']}): adapt all three or none")
        config = litlora.Config(**fields, lora_r=r, lora_alpha=2 * r, lora_dropout=settings.lora_dropout,
                                **switches)
        model_cls = litlora.GPT
    else:
        config = litmodel.Config(**fields)
        model_cls = litmodel.GPT
    if qlora:
        require("bitsandbytes")
        from lightning.fabric.plugins import BitsandbytesPrecision

        precision = BitsandbytesPrecision("nf4", torch.bfloat16)
    else:
        from lightning.fabric.plugins.precision.half import HalfPrecision

        precision = HalfPrecision("bf16-true")

    mode = None
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with torch.device("meta"), precision.module_init_context():
            model = model_cls(config)
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        _fake_parameters(model, mode)
    else:
        torch.manual_seed(0)
        with precision.module_init_context():
            model = model_cls(config)
        if qlora:
            _quantize_nf4(model)
    if adapters:
        litlora.mark_only_lora_as_trainable(model)
    if fake and qlora:  # the StableEmbedding finetune/lora.py swaps in, on the meta device, cast as it casts it
        from bitsandbytes.nn import StableEmbedding

        meta_wte = StableEmbedding(config.padded_vocab_size, config.n_embd, device="meta").to(dtype=torch.bfloat16)
        for p in meta_wte.parameters():  # new Parameters train (on the meta device the weight comes out frozen)
            p.requires_grad_(True)
    with (mode if mode is not None else contextlib.nullcontext()):
        if fake and not qlora:  # HalfPrecision.convert_module is module.to(bfloat16): parameters are bf16 already,
            for module in model.modules():  # the float buffers (rope cache) follow; fake tensors cannot be swapped
                for name, b in list(module._buffers.items()):
                    if b is not None and b.is_floating_point():
                        module._buffers[name] = b.to(torch.bfloat16)
        else:
            model = precision.convert_module(model)  # fabric.setup_module
        model.max_seq_length = settings.seq_len  # fit(): the rope cache rebuilt for the longest sequence (float32)
        opt = _optimizer(model.parameters(), settings, notes)
        if qlora:  # finetune/lora.py main(): after the optimizer is built
            from bitsandbytes.nn import StableEmbedding

            old = model.transformer.wte
            if fake:  # built on the meta device, cast as LitGPT casts it, then given fake storage
                wte = meta_wte
                _fake_parameters(wte, mode)
                model.transformer.wte = wte
            else:
                model.transformer.wte = StableEmbedding(old.num_embeddings, old.embedding_dim)
                with torch.no_grad():
                    model.transformer.wte.weight.copy_(old.weight)
                model.transformer.wte = model.transformer.wte.to(device=old.weight.device, dtype=old.weight.dtype)
            del old
            notes.append("QLoRA: the StableEmbedding LitGPT swaps in trains but is in no optimizer (its gradient stays)")
        gen = torch.Generator().manual_seed(1)
        ids = torch.randint(0, config.padded_vocab_size, (settings.batch_size, settings.seq_len), generator=gen)
    model.train()

    chunked = settings.loss == "chunked"
    head_chunks = chunked and adapters  # finetune/lora.py: model(input_ids, lm_head_chunk_size=128)
    state: dict[str, Any] = {}

    def loss_fn():
        # _FabricModule.forward: convert_input (token ids stay int64), forward_context, convert_output
        with precision.forward_context():
            out = model(ids, lm_head_chunk_size=CHUNK) if head_chunks else model(ids)
        out = precision.convert_output(out)
        state["logits"] = logits = out  # fit(): `logits` is rebound only once the new logits exist
        targets = ids[..., 1:]
        if head_chunks:
            logits[-1] = logits[-1][..., :-1, :]
            return chunked_cross_entropy(logits, targets)
        return chunked_cross_entropy(logits[..., :-1, :], targets, chunk_size=CHUNK if chunked else 0)

    def count(p) -> int:
        shape = getattr(getattr(p, "quant_state", None), "shape", None)
        return int(torch.Size(shape).numel()) if p.dtype == torch.uint8 and shape is not None else p.numel()

    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    if fake:
        notes.append("fake tensors: shapes and lifetimes are real, nothing was allocated")
    return Prepared(
        net=model, opt=opt, ids=ids, loss_fn=loss_fn,
        params_total=sum(count(p) for p in params), params_trainable=sum(count(p) for p in trainable),
        notes=notes, context=(lambda: mode) if mode is not None else contextlib.nullcontext,
    )
