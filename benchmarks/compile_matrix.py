"""torch.compile (inductor) measured against the hf profile's compile=true: a validation matrix of its own
(benchmarks/validation_matrices.py holds the eager ones).

Each cell runs ``vramwise measure --compile true`` (the model and its loss as one compiled module on one CPU
process, the figures read from the allocator's own reports, :class:`vramwise.measuring.tracker.AllocationTracker`)
and compares its peak with ``vramwise estimate --profile hf --compile true``. Beside each compiled cell the
same step runs eager, so the cells also show how far compiling moves the peak.
"""

from __future__ import annotations

from validation_matrices import OPTIMIZER, Matrix

__all__ = ["CompileMatrix", "COMPILE"]


class CompileMatrix(Matrix):
    """sdpa, no checkpointing: llama (grouped-query attention, untied head, vocabulary 8,000, 2 layers of
    width 256) and qwen3 (query/key norms, tied head, vocabulary 6,000, 3 layers) at batch 2 x 256, where the
    logits make the peak; and llama at vocabulary 1,000 with 4 layers at batch 2 x 512, of width 256 and of
    width 128 with a wider MLP (1,024), where the layers' saved tensors make it. Full fine-tuning on each;
    LoRA (rank 8) with adapters on every projection on each, and on the 4-layer llama also on q and v
    (PEFT's default for llama), on the attention only and on the MLP only (the first layer's attention and
    residual then keep nothing): real tensors, two steps, 11 cells."""

    name = "compile"
    layers = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 688,
              "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 1024, "tie_word_embeddings": False}
    configs = {
        "llama": {"model_type": "llama", "vocab_size": 8000, "hidden_size": 256, "intermediate_size": 688,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "max_position_embeddings": 512, "tie_word_embeddings": False},
        "qwen3": {"model_type": "qwen3", "vocab_size": 6000, "hidden_size": 256, "intermediate_size": 512,
                  "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                  "max_position_embeddings": 512, "tie_word_embeddings": True},
        "llama_layers": layers,
        "llama_layers_wide_mlp": dict(layers, hidden_size=128, intermediate_size=1024, num_attention_heads=2,
                                      num_key_value_heads=1),
    }
    batch = 2
    #: the largest |error| of a cell, and of the median, the matrix holds (measured: see docs/error-bands.md)
    cell_limit = 0.01
    median_limit = 0.005

    seven = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    #: LoRA's target sets on the 4-layer llama beside all seven projections
    lora_targets = {"qv": ("q_proj", "v_proj"), "attention": ("q_proj", "k_proj", "v_proj", "o_proj"),
                    "mlp": ("gate_proj", "up_proj", "down_proj")}

    def cells(self):
        """(config name, method, LoRA target set or None)."""
        for name in self.configs:
            yield name, "full", None
            yield name, "lora", "seven"
        for targets in self.lora_targets:
            yield "llama_layers", "lora", targets

    def cell_id(self, cell):
        name, method, targets = cell
        return f"{name}-{method}" + (f"-{targets}" if targets else "") + "-compile"

    def settings(self, cell):
        name, method, targets = cell
        seq = 512 if name.startswith("llama_layers") else 256
        kw = dict(method=method, batch_size=self.batch, seq_len=seq, gradient_checkpointing="none",
                  optimizer=OPTIMIZER, attention="sdpa", compile=True)
        if method == "lora":
            kw.update(lora_rank=8, target_modules=list(self.lora_targets.get(targets, self.seven)))
        return kw

    def fake(self, cell):
        return False  # inductor's buffers are real allocations, read from the allocator


COMPILE = CompileMatrix()
