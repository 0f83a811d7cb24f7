"""DeepSpeed ZeRO (stages 1, 2 and 3, with and without offload) measured against the hf profile's zero1/zero2/zero3
strategies: a validation matrix of its own (benchmarks/validation_matrices.py is the others').

Each cell runs ``vramwise measure --strategy zeroN`` (DeepSpeed 0.19 on its CPU accelerator, world_size processes
joined by gloo, :mod:`vramwise.measuring.zero`) and compares the busiest rank's peak with the per-rank tensor peak
of ``vramwise estimate --profile hf --strategy zeroN``. DeepSpeed runs with its default configuration, so its
gradient reduction bucket (reduce_bucket_size = 5e8 16-bit elements, 1 GB) is allocated whatever the model's
size: on these small models it is most of every cell's peak, the rest (the rank's states, the activations, the
gathered parameters) a few MB beside it.
"""

from __future__ import annotations

import itertools
from typing import Any

from validation_matrices import OPTIMIZER, Matrix

__all__ = ["ZeroMatrix", "ZERO"]


class ZeroMatrix(Matrix):
    """llama (untied head, grouped-query attention, 2 layers, vocabulary 2048) at batch 2 x 64 per rank, no
    checkpointing: full / LoRA x ZeRO-1, -2, -3 on 2 ranks; full x ZeRO-1, -2, -3 on 4 ranks; and offload on 2
    ranks (optimizer under ZeRO-2 and ZeRO-3, parameters under ZeRO-3, full fine-tuning): 12 cells, real tensors."""

    name = "zero"
    configs = {
        "llama": {"model_type": "llama", "vocab_size": 2048, "hidden_size": 128, "intermediate_size": 384,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "tie_word_embeddings": False},
    }
    stages = ("zero1", "zero2", "zero3")
    batch, seq, rank = 2, 64, 8
    seven = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    #: the largest |error| of a cell, and of the median, the matrix holds (measured: see docs/accuracy.md)
    cell_limit = 0.01
    median_limit = 0.005

    def cells(self):
        """(config name, method, strategy, world size, offload)."""
        for method, strategy in itertools.product(("full", "lora"), self.stages):
            yield "llama", method, strategy, 2, "none"
        for strategy in self.stages:
            yield "llama", "full", strategy, 4, "none"
        for strategy, offload in (("zero2", "optimizer"), ("zero3", "optimizer"), ("zero3", "parameters")):
            yield "llama", "full", strategy, 2, offload

    def cell_id(self, cell):
        name, method, strategy, ws, offload = cell
        return f"{name}-{method}-{strategy}-x{ws}" + (f"-offload-{offload}" if offload != "none" else "")

    def settings(self, cell):
        _, method, strategy, ws, offload = cell
        kw: dict[str, Any] = dict(method=method, batch_size=self.batch, seq_len=self.seq, gradient_checkpointing="none",
                                  optimizer=OPTIMIZER, strategy=strategy, world_size=ws, offload=offload)
        if method == "lora":
            kw.update(lora_rank=self.rank, target_modules=list(self.seven))
        return kw

    def fake(self, cell):
        return False  # each rank's real storage is tracked


ZERO = ZeroMatrix()
