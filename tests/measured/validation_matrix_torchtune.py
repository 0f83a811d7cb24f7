"""The torchtune validation matrix: small configs with real vocabularies, torchtune's own model and
step measured by `vramwise measure --stack torchtune`, against the torchtune profile.

Same interface as tests/validation_matrix.py (CONFIGS, cells(), cell_id(), run_cell(), limits).
Each config is 256 wide with 2 layers and its model's real vocabulary; max_position_embeddings is
given, so the rotary cache the builders make has a known size.
"""

from __future__ import annotations

import itertools

# the shapes, optimizer, steps, limits and median of the hf matrix, shared by every stack
from validation_matrix import CELL_LIMIT, MEDIAN_LIMIT, METHODS, OPTIMIZER, SHAPES, STEPS, median_abs_error  # noqa: F401

CONFIGS = {
    "llama": {  # Llama-3 vocabulary, untied head, grouped-query attention (torchtune's llama3_2 builders)
        "model_type": "llama", "vocab_size": 128256, "hidden_size": 256, "intermediate_size": 768,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
        "max_position_embeddings": 2048,
    },
    "qwen2": {  # Qwen2.5 vocabulary, tied embeddings, q/k/v biases (torchtune's qwen2 builders)
        "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 256, "intermediate_size": 768,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True,
        "max_position_embeddings": 2048,
    },
    "mistral": {  # Mistral v0.3 vocabulary, untied (torchtune's mistral builders)
        "model_type": "mistral", "vocab_size": 32768, "hidden_size": 256, "intermediate_size": 768,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
        "max_position_embeddings": 2048,
    },
}
CHECKPOINTING = ("none", "true")
LOSSES = ("standard", "chunked")
FAKE = {}  # method -> measure with fake tensors (default: yes; torchao NF4 runs under FakeTensorMode)


def cells():
    """Every cell: (config, method, checkpointing, loss, extra, batch, sequence); extra is "" or
    "in_bwd" (optimizer_in_bwd, full fine-tuning) or "offload" (activation offloading, with checkpointing).

    llama and qwen2: every method x checkpointing x loss x shape (48 cells); mistral (a smaller
    vocabulary, where the layers weigh more): every method and shape, chunked loss (6); optimizer_in_bwd
    (full, chunked loss as torchtune's full recipes default) with checkpointing off and on at the shape where
    the backward is the peak (4); activation offloading for every method at the larger shape (6).
    """
    for name, method, gc, loss, (b, s) in itertools.product(("llama", "qwen2"), METHODS, CHECKPOINTING, LOSSES, SHAPES):
        yield name, method, gc, loss, "", b, s
    for method, (b, s) in itertools.product(METHODS, SHAPES):
        yield "mistral", method, "none", "chunked", "", b, s
    for name, gc in itertools.product(("llama", "qwen2"), CHECKPOINTING):
        yield name, "full", gc, "chunked", "in_bwd", *SHAPES[0]
    for name, method in itertools.product(("llama", "qwen2"), METHODS):
        yield name, method, "true", "chunked", "offload", *SHAPES[1]


def cell_id(cell) -> str:
    name, method, gc, loss, extra, b, s = cell
    return f"{name}-{method}-gc_{gc}-{loss}{'-' + extra if extra else ''}-b{b}s{s}"


def settings(cell) -> dict:
    _, method, gc, loss, extra, b, s = cell
    return dict(method=method, batch_size=b, seq_len=s, gradient_checkpointing=gc, loss=loss, optimizer=OPTIMIZER,
                optimizer_in_bwd=extra == "in_bwd", activation_offloading=extra == "offload")


def run_cell(cell) -> dict:
    """Measure the cell (fake tensors for full and LoRA, real torchao NF4 storage for QLoRA) and estimate it."""
    from vramwise import estimate
    from vramwise.measuring.steps import measure

    cfg = CONFIGS[cell[0]]
    kw = settings(cell)
    m = measure(cfg, stack="torchtune", steps=STEPS, fake=FAKE.get(kw["method"], True), **kw)
    e = estimate(cfg, profile="torchtune", **kw)
    est = e.figures["tensor_peak"]
    return {
        "cell": cell_id(cell), "measured": m.peak, "measured_phase": m.peak_phase, "estimate": est,
        "estimate_phase": e.peak_phase, "error": est / m.peak - 1,
        "measured_phases": {k: v.peak for k, v in m.phases.items()}, "estimated_phases": e.phases,
    }
