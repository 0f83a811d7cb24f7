"""The validation matrix: small configs with real vocabularies, measured against the hf profile.

Shared by tests/test_validation_matrix.py (which runs it in CI) and benchmarks/accuracy.py (which
writes docs/accuracy.md). Each config is 256 wide with 2 layers and its model's real vocabulary,
so the logits and embeddings have their true size while a step stays cheap on a CPU.
"""

from __future__ import annotations

import itertools
import statistics

CONFIGS = {
    "llama": {  # Llama-3 vocabulary, untied head, grouped-query attention
        "model_type": "llama", "vocab_size": 128256, "hidden_size": 256, "intermediate_size": 768,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
    },
    "qwen3": {  # Qwen3 vocabulary, tied embeddings, q/k norms
        "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 256, "intermediate_size": 768,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "tie_word_embeddings": True,
    },
    "gemma3_text": {  # Gemma-3 vocabulary, tied, a sliding and a full layer, four norms per layer
        "model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
        "sliding_window": 64, "layer_types": ["sliding_attention", "full_attention"],
    },
    "qwen3_moe": {  # mixture of experts: 8 routed experts, top-2, PEFT adapters on the fused experts
        "model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 256, "intermediate_size": 768,
        "moe_intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "tie_word_embeddings": False,
    },
    "deepseek_v3": {  # multi-head latent attention, a dense layer then an MoE layer with a shared expert
        "model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 256, "intermediate_size": 512,
        "moe_intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
        "first_k_dense_replace": 1, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
        "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
        "n_group": 1, "topk_group": 1, "tie_word_embeddings": False,
    },
}
METHODS = ("full", "lora", "qlora")
CHECKPOINTING = ("none", "true")
ATTENTION = ("sdpa", "eager")
SHAPES = ((1, 128), (2, 256))  # (batch, sequence)
OPTIMIZER = "adamw_torch"
STEPS = 2
CELL_LIMIT = 0.10  # |estimate / measured - 1| in every cell
MEDIAN_LIMIT = 0.05  # ... and in the median over the cells


def cells():
    """Every cell: (config name, method, checkpointing, attention, batch, sequence)."""
    for name, method, gc, att, (b, s) in itertools.product(CONFIGS, METHODS, CHECKPOINTING, ATTENTION, SHAPES):
        yield name, method, gc, att, b, s


def cell_id(cell) -> str:
    name, method, gc, att, b, s = cell
    return f"{name}-{method}-gc_{gc}-{att}-b{b}s{s}"


def settings(cell) -> dict:
    _, method, gc, att, b, s = cell
    return dict(method=method, batch_size=b, seq_len=s, gradient_checkpointing=gc, attention=att, optimizer=OPTIMIZER)


def run_cell(cell) -> dict:
    """Measure the cell (fake tensors for full and LoRA, real bitsandbytes storage for QLoRA) and estimate it."""
    from vramwise import estimate
    from vramwise.measuring.steps import measure

    cfg = CONFIGS[cell[0]]
    kw = settings(cell)
    m = measure(cfg, steps=STEPS, fake=kw["method"] != "qlora", **kw)
    e = estimate(cfg, profile="hf", **kw)
    est = e.figures["tensor_peak"]
    return {
        "cell": cell_id(cell), "measured": m.peak, "measured_phase": m.peak_phase, "estimate": est,
        "estimate_phase": e.peak_phase, "error": est / m.peak - 1,
    }


def small_vocab(name: str, layers: int) -> dict:
    """The config with vocabulary 1000 and ``layers`` layers: isolates the per-layer terms."""
    cfg = dict(CONFIGS[name], vocab_size=1000, num_hidden_layers=layers)
    if "layer_types" in cfg:
        cfg["layer_types"] = (["sliding_attention", "full_attention"] * layers)[:layers]
    return cfg


def median_abs_error(rows) -> float:
    return statistics.median(abs(r["error"]) for r in rows)
