"""The multi-GPU strategies against `vramwise measure --strategy` (world_size CPU processes joined by
gloo, each rank's storage tracked): the busiest rank's peak against the strategy's per-rank tensor peak
of the hf profile.

Shared by tests/test_validation_matrix_strategies.py and benchmarks/accuracy.py. Two small configs
(llama: untied head, grouped-query attention, 2 layers; qwen2: tied embeddings, q/k/v biases, 4 layers)
x full / LoRA x DDP / FSDP (FSDP2 fully_shard on each decoder layer and the root) x 2 and 4 ranks,
without checkpointing, plus llama's four 2-rank cells with transformers' gradient checkpointing, at
batch 2 x 64 per rank; six qwen2 cells of 8 tokens, where the model states and the gathered units
outweigh the activations; and FSDP's shard_grad_op on 2 ranks (both configs x full / LoRA): 30 cells,
torch's AdamW, 2 steps.
"""

from __future__ import annotations

import itertools

# the optimizer, steps, limits and median of the hf matrix, shared by every matrix
from validation_matrix import CELL_LIMIT, MEDIAN_LIMIT, OPTIMIZER, STEPS, median_abs_error  # noqa: F401

CONFIGS = {
    "llama": {"model_type": "llama", "vocab_size": 2048, "hidden_size": 128, "intermediate_size": 384,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False},
    "qwen2": {"model_type": "qwen2", "vocab_size": 1024, "hidden_size": 128, "intermediate_size": 352,
              "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True},
}
METHODS = ("full", "lora")
STRATEGIES = ("ddp", "fsdp")
WORLD_SIZES = (2, 4)
BATCH, SEQ, RANK = 2, 64, 8
SEVEN = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def cells():
    """Every cell: (config name, method, strategy, world size, gradient checkpointing, batch, sequence)."""
    for name, method, strategy, ws in itertools.product(CONFIGS, METHODS, STRATEGIES, WORLD_SIZES):
        yield name, method, strategy, ws, "none", BATCH, SEQ
    for method, strategy in itertools.product(METHODS, STRATEGIES):
        yield "llama", method, strategy, 2, "true", BATCH, SEQ
    # 8 tokens: the model states and what the strategy gathers outweigh the activations
    for method, ws in itertools.product(METHODS, WORLD_SIZES):
        yield "qwen2", method, "fsdp", ws, "none", 1, 8
    for method in METHODS:
        yield "qwen2", method, "ddp", 2, "none", 1, 8
    # FSDP's shard_grad_op (no resharding after the forward) on 2 ranks
    for name, method in itertools.product(CONFIGS, METHODS):
        yield name, method, "fsdp_shard_grad_op", 2, "none", BATCH, SEQ


def cell_id(cell) -> str:
    name, method, strategy, ws, gc, b, s = cell
    return (f"{name}-{method}-{strategy}-x{ws}" + ("-checkpointing" if gc == "true" else "")
            + (f"-b{b}s{s}" if (b, s) != (BATCH, SEQ) else ""))


def settings(cell) -> dict:
    _, method, strategy, ws, gc, b, s = cell
    kw = dict(method=method, batch_size=b, seq_len=s, gradient_checkpointing=gc, optimizer=OPTIMIZER,
              strategy=strategy, world_size=ws)
    if method == "lora":
        kw.update(lora_rank=RANK, target_modules=list(SEVEN))
    return kw


def run_cell(cell) -> dict:
    """Measure the cell in world_size processes and estimate it with the strategy on the hf profile."""
    from vramwise import estimate
    from vramwise.measuring.steps import measure

    cfg = CONFIGS[cell[0]]
    kw = settings(cell)
    m = measure(cfg, steps=STEPS, **kw)
    e = estimate(cfg, profile="hf", **kw)
    est = e.figures["tensor_peak"]
    return {
        "cell": cell_id(cell), "measured": m.peak, "measured_phase": m.peak_phase, "estimate": est,
        "estimate_phase": e.peak_phase, "error": est / m.peak - 1,
    }
