"""The litgpt validation matrix: small configs with real vocabularies, measured with LitGPT's own
stack (``vramwise measure --stack litgpt``) against the litgpt profile.

Shared by tests/test_validation_matrix_litgpt.py. Each config is 256 wide with 2 layers and its
model's real vocabulary, so the logits (which LitGPT keeps in float32) and the embeddings have their
true size while a step stays cheap on a CPU. Every cell runs under fake tensors: LitGPT's model,
LoRA and bitsandbytes' 4-bit matmul all run under FakeTensorMode (bitsandbytes registers fake
kernels for gemm_4bit and dequantize_4bit); tests/test_validation_matrix_litgpt.py checks one QLoRA
cell against real 4-bit storage to the byte. LitGPT's single-device scripts have no gradient
checkpointing, so the matrix has no checkpointing axis.
"""

from __future__ import annotations

import itertools

# the shapes, optimizer, steps, limits and median of the hf matrix, shared by every stack
from validation_matrix import CELL_LIMIT, MEDIAN_LIMIT, METHODS, OPTIMIZER, SHAPES, STEPS, median_abs_error  # noqa: F401

CONFIGS = {
    "llama": {  # Llama-3 vocabulary, untied head, grouped-query attention
        "model_type": "llama", "vocab_size": 128256, "hidden_size": 256, "intermediate_size": 768,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
    },
    "qwen3": {  # Qwen3 vocabulary, tied in the checkpoint (LitGPT keeps a separate head), q/k norms
        "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 256, "intermediate_size": 768,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "tie_word_embeddings": True,
    },
    "qwen2": {  # Qwen2.5 vocabulary, q/k/v biases, multi-head attention (no grouped queries)
        "model_type": "qwen2", "vocab_size": 152064, "hidden_size": 256, "intermediate_size": 768,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": False,
    },
}
LOSSES = ("standard", "chunked")


def cells():
    """Every cell: (config name, method, loss, batch, sequence)."""
    for name, method, loss, (b, s) in itertools.product(CONFIGS, METHODS, LOSSES, SHAPES):
        yield name, method, loss, b, s


def cell_id(cell) -> str:
    name, method, loss, b, s = cell
    return f"{name}-{method}-{loss}-b{b}s{s}"


def settings(cell) -> dict:
    _, method, loss, b, s = cell
    return dict(method=method, batch_size=b, seq_len=s, loss=loss, gradient_checkpointing="none", optimizer=OPTIMIZER)


def run_cell(cell, fake: bool = True) -> dict:
    """Measure the cell with LitGPT's stack and estimate it with the litgpt profile."""
    from vramwise import estimate
    from vramwise.measuring.steps import measure

    cfg = CONFIGS[cell[0]]
    kw = settings(cell)
    m = measure(cfg, stack="litgpt", steps=STEPS, fake=fake, **kw)
    e = estimate(cfg, profile="litgpt", **kw)
    est = e.figures["tensor_peak"]
    return {
        "cell": cell_id(cell), "measured": m.peak, "measured_phase": m.peak_phase, "estimate": est,
        "estimate_phase": e.peak_phase, "error": est / m.peak - 1,
    }


def small_vocab(name: str, layers: int) -> dict:
    """The config with vocabulary 1000 and ``layers`` layers: isolates the per-layer terms."""
    return dict(CONFIGS[name], vocab_size=1000, num_hidden_layers=layers)
