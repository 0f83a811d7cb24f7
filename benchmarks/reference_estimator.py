"""The reference for speed: a plain, single-file estimator of the seed's arithmetic, in ordinary Python.

The seed (``../shared/seed/vram-estimator-seed.txt``) describes the estimator this project was made from: it reads
an architecture record from the config (``extract_arch_config``: the text config, field aliases, list-valued
fields reduced to one number), resolves the attention implementation on a deep copy of the config (line 1,
"uses copy.deepcopy so the resolver does not mutate nested text_config"), counts weights, adapters and
activations layer by layer in one pass ("Single-pass structured layer accounting"), with a tuple of dense-layer
indices for MoE models, and applies the formula reference's sections 1-7. This file does those steps as such a
program would, without compiled formulas or caches, so ``bench_estimate.py --configs`` can set the time of one
estimate from a config dict beside the time of the same estimate by vramwise.

It is a yardstick for time, not for figures: it covers the seven projections of a decoder layer (with latent
attention's low-rank projections, routed and shared experts), not every family's quirks, so its totals agree
with the ``studio`` profile's on plain dense configs and only approximately elsewhere.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

GIB = 1 << 30
OPT_BYTES = {"adamw_8bit": 4, "adamw_torch": 6, "paged_adamw_32bit": 8, "sgd": 4}  # seed, section 3
LINEAR_ATTENTION = ("flash_attention_2", "sdpa", "flex_attention")                  # seed, section 5
SEVEN = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class Arch:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    moe_intermediate: int
    vocab: int
    tied: bool
    experts: int
    experts_per_tok: int
    shared_experts: int
    shared_intermediate: int
    dense_layers: tuple
    q_lora_rank: int
    kv_lora_rank: int
    rope_head_dim: int
    v_head_dim: int


def _first(cfg: dict, *names, default=None):
    for n in names:
        v = cfg.get(n)
        if v is not None:
            return v
    return default


def _scalar(v, default=0):
    """A list-valued field (per layer, or ERNIE's [routed, shared]) read as its worst case."""
    if isinstance(v, (list, tuple)):
        return max((int(x) for x in v if x is not None), default=default)
    return default if v is None else int(v)


def _dense_layers(cfg: dict, layers: int, experts: int) -> tuple:
    if experts <= 1:
        return tuple(range(layers))
    kinds = cfg.get("mlp_layer_types")
    if kinds:
        return tuple(i for i, k in enumerate(kinds) if k != "sparse")
    moe_layers = cfg.get("moe_layers")
    if moe_layers is not None:
        moe = set(moe_layers)
        return tuple(i for i in range(layers) if i not in moe)
    k = cfg.get("first_k_dense_replace")
    if k is not None:
        return tuple(range(min(int(k), layers)))
    step = cfg.get("decoder_sparse_step") or 1
    only = set(cfg.get("mlp_only_layers") or ())
    return tuple(i for i in range(layers) if i in only or (i + 1) % step != 0)


def extract_arch_config(config: dict) -> Arch:
    cfg = config.get("text_config") or config
    hidden = int(cfg["hidden_size"])
    layers = int(cfg["num_hidden_layers"])
    heads = int(cfg["num_attention_heads"])
    kv_heads = int(_first(cfg, "num_key_value_heads", default=heads))
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    experts = _scalar(_first(cfg, "num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts"), 1)
    moe_inter = cfg.get("moe_intermediate_size")
    shared_inter = _scalar(cfg.get("shared_expert_intermediate_size"))
    shared = _scalar(_first(cfg, "n_shared_experts", "num_shared_experts", "moe_num_shared_experts"))
    if shared_inter and not shared:
        shared = 1
    intermediate = _scalar(cfg.get("intermediate_size"))
    return Arch(
        hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        intermediate=intermediate,
        moe_intermediate=_scalar(moe_inter, intermediate) if isinstance(moe_inter, list) else int(moe_inter or intermediate),
        vocab=int(cfg["vocab_size"]),
        tied=bool(_first(cfg, "tie_word_embeddings", default=config.get("tie_word_embeddings", False))),
        experts=max(experts, 1),
        experts_per_tok=_scalar(_first(cfg, "num_experts_per_tok", "top_k_experts", "moe_top_k", "moe_topk"), 1),
        shared_experts=shared, shared_intermediate=shared_inter,
        dense_layers=_dense_layers(cfg, layers, experts),
        q_lora_rank=int(cfg.get("q_lora_rank") or 0), kv_lora_rank=int(cfg.get("kv_lora_rank") or 0),
        rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0), v_head_dim=int(cfg.get("v_head_dim") or head_dim),
    )


def _determine_attention_impl(config: dict, requested: str) -> str:
    resolved = copy.deepcopy(config)  # the resolver may set _attn_implementation on the copy it is given
    resolved["_attn_implementation"] = requested
    return resolved["_attn_implementation"]


def _attn_dims(a: Arch) -> dict:
    """(in, out) of each attention projection; latent attention's low-rank pairs when q_lora_rank is set."""
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    if a.q_lora_rank or a.kv_lora_rank:
        q_head = a.head_dim + a.rope_head_dim
        return {"q_a_proj": (a.hidden, a.q_lora_rank), "q_b_proj": (a.q_lora_rank, a.heads * q_head),
                "kv_a_proj_with_mqa": (a.hidden, a.kv_lora_rank + a.rope_head_dim),
                "kv_b_proj": (a.kv_lora_rank, a.heads * (a.head_dim + a.v_head_dim)),
                "o_proj": (a.heads * a.v_head_dim, a.hidden)}
    return {"q_proj": (a.hidden, q), "k_proj": (a.hidden, kv), "v_proj": (a.hidden, kv), "o_proj": (q, a.hidden)}


def _mlp_dims(hidden: int, width: int) -> dict:
    return {"gate_proj": (hidden, width), "up_proj": (hidden, width), "down_proj": (width, hidden)}


def _elements(dims: dict, targets: tuple, rank: int) -> tuple[int, int]:
    """(weights, LoRA parameters) of a group of projections."""
    return (sum(i * o for i, o in dims.values()),
            sum(rank * (i + o) for name, (i, o) in dims.items() if name in targets))


def _compute_layer_elements(a: Arch, targets: tuple, rank: int) -> tuple[int, int, list]:
    """One pass over the layers: quantizable weights, LoRA parameters, and each layer's (q, kv, mlp) widths.

    Each kind of layer (dense, or MoE with its routed and shared experts) is sized once; the pass adds them up
    by the tuple of dense-layer indices."""
    attn_w, attn_l = _elements(_attn_dims(a), targets, rank)
    dense_w, dense_l = _elements(_mlp_dims(a.hidden, a.intermediate), targets, rank)
    routed_w, routed_l = _elements(_mlp_dims(a.hidden, a.moe_intermediate), targets, rank)
    moe_w = routed_w * a.experts + a.experts * a.hidden  # + the router
    moe_l = routed_l * a.experts
    moe_width = a.moe_intermediate * a.experts_per_tok
    if a.shared_experts:
        width = (a.shared_intermediate or a.moe_intermediate) * a.shared_experts
        shared_w, shared_l = _elements(_mlp_dims(a.hidden, width), targets, rank)
        moe_w, moe_l, moe_width = moe_w + shared_w, moe_l + shared_l, moe_width + width
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    dense = set(a.dense_layers)
    quant = lora = 0
    shapes = []
    for layer in range(a.layers):
        if layer in dense:
            quant += attn_w + dense_w
            lora += attn_l + dense_l
            shapes.append((q, kv, a.intermediate))
        else:
            quant += attn_w + moe_w
            lora += attn_l + moe_l
            shapes.append((q, kv, moe_width))
    return quant, lora, shapes


def estimate_training_vram(config: dict, *, method: str = "qlora", batch_size: int = 4, seq_len: int = 2048,
                           lora_rank: int = 16, target_modules=None, gradient_checkpointing: str = "unsloth",
                           optimizer: str = "adamw_8bit", attention: str = "flash_attention_2") -> dict:
    a = extract_arch_config(config)
    impl = _determine_attention_impl(config, attention)
    if target_modules in (None, "all-linear", "all_linear") or "all-linear" in (target_modules or ()):
        targets = SEVEN + ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")
    else:
        targets = tuple(target_modules)
    quant, lora_params, shapes = _compute_layer_elements(a, targets, lora_rank)
    other = 2 * a.hidden * a.layers + a.vocab * a.hidden * (1 if a.tied else 2)  # section 1: norms, embeddings
    total_params = quant + other
    if method == "qlora":                                                              # section 1
        weights = quant * 2 / 3.2 + other * 2
    else:
        weights = total_params * 2
    adapters = 0 if method == "full" else lora_params
    lora_bytes = adapters * 2                                                          # section 2
    trainable = total_params if method == "full" else adapters
    optimizer_bytes = trainable * OPT_BYTES[optimizer]                                 # section 3
    B, S = batch_size, seq_len                                                         # section 5
    per_layer = max((S * B * (q + 2 * kv) + 2 * S * B + 2 * S * B * m) * 2 * 1.25 for q, kv, m in shapes)
    if gradient_checkpointing == "none":
        effective = a.layers
        with_gc = sum((S * B * (q + 2 * kv) + 2 * S * B + 2 * S * B * m) * 2 * 1.25 for q, kv, m in shapes)
    else:
        effective = (2.0 if gradient_checkpointing == "true" else 1.5) if method == "full" else 1.0
        with_gc = per_layer * effective
    quadratic = 0 if impl in LINEAR_ATTENTION else B * a.heads * S * S * 2 * 12.0 * effective
    activations = max(with_gc, quadratic)
    raw_gradients = trainable * 2                                                      # sections 4 and 6
    if method == "full":
        gradients = max(raw_gradients, weights * 0.15)
    else:
        gradients = max(raw_gradients, min(weights * 0.15, max(activations, optimizer_bytes)))
    overhead = 1.4 * GIB                                                               # section 7
    parts = dict(weights=weights, lora=lora_bytes, optimizer=optimizer_bytes, gradients=gradients,
                 activations=activations, overhead=overhead)
    return dict(parts, total=sum(parts.values()), params_total=total_params, params_trainable=trainable)
