"""Validation matrices of the multi-GPU strategies on the training stacks other than transformers.

- ``TORCHTUNE_STRATEGIES``: torchtune's own model, loss and optimizer (``vramwise measure --stack
  torchtune``) sharded as its distributed recipes shard it (FSDP2 ``fully_shard`` on each
  TransformerSelfAttentionLayer, then on the model, before the optimizer is built), in world_size
  CPU processes joined by gloo, each rank's storage tracked; the busiest rank's peak against the
  torchtune profile's per-rank tensor peak under the same strategy.
- ``ZERO``: DeepSpeed ZeRO stages 1 to 3 on its CPU accelerator (benchmarks/zero_matrix.py).
- ``QLORA_PREPARE``: QLoRA with and without prepare_model_for_kbit_training (the kbit_prepare
  setting; the FSDP-QLoRA recipe skips it), on one process and under DDP, against the hf profile.
- ``COMPILE``: the hf step under torch.compile (benchmarks/compile_matrix.py).

Cells are tuples like those of :mod:`validation_matrices`, whose first element names the config.
"""

from __future__ import annotations

from typing import Any

from validation_matrices import OPTIMIZER, Matrix
from compile_matrix import COMPILE
from zero_matrix import ZERO

__all__ = ["TorchtuneStrategiesMatrix", "TORCHTUNE_STRATEGIES", "QloraPrepareMatrix", "QLORA_PREPARE", "ZERO", "COMPILE"]


class TorchtuneStrategiesMatrix(Matrix):
    """torchtune's distributed recipes (FSDP2 full shard and shard_grad_op) against the torchtune profile.

    llama: 2 layers of width 128, grouped-query attention, an untied head over 2,048 tokens (the root
    unit outweighs a layer, as the embeddings of real models do against one layer); full and LoRA on
    2 and 4 ranks, with and without checkpointing, shard_grad_op, the chunked loss and
    optimizer_in_bwd. llama256: the same at width 256, where every projection holds whole NF4 blocks
    per shard (torchao's NF4 needs 64 x 256 weights per shard), for QLoRA and LoRA. Batch 2 x 64 per
    rank, real tensors, two steps. llama256x4: 4 layers of width 256 at batch 2 x 256 per rank, where
    the activations outweigh one unit's all-gather (under a twentieth of the peak) as in real runs, and
    a layer of the backward has a layer on either side (the prefetched unit and the reduce-scatter
    input of the one before): full fine-tuning with checkpointing and LoRA without. Head units
    (fsdp_head_units, torchtune's custom_sharded_layers ['tok_embeddings', 'output']): the embeddings and
    the output projection sharded as units of their own, full fine-tuning with and without checkpointing,
    on 2 and 4 ranks and with optimizer_in_bwd, LoRA, and llama256x4's full fine-tuning."""

    name = "strategies_torchtune"
    profile = "torchtune"
    stack = "torchtune"
    # measured at 7aa5ad8 (each cell the same in repeated runs): largest |error| 3.08 % (llama256 QLoRA
    # with checkpointing: the recomputed layer, the single-device recompute term), median 0.4 %
    cell_limit = 0.04
    median_limit = 0.0075
    configs = {
        "llama": {"model_type": "llama", "vocab_size": 2048, "hidden_size": 128, "intermediate_size": 384,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "tie_word_embeddings": False, "max_position_embeddings": 256},
        "llama256": {"model_type": "llama", "vocab_size": 2048, "hidden_size": 256, "intermediate_size": 512,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                     "tie_word_embeddings": False, "max_position_embeddings": 256},
    }
    configs["llama256x4"] = dict(configs["llama256"], num_hidden_layers=4)
    batch, seq, rank = 2, 64, 8
    #: the production-like cells' batch and sequence per rank
    long = (("batch_size", 2), ("seq_len", 256))
    seven = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    def cells(self):
        """(config, method, strategy, world size, gradient checkpointing, extra settings as a tuple)."""
        for method in ("full", "lora"):
            for gc in ("none", "true"):
                yield "llama", method, "fsdp", 2, gc, ()
            yield "llama", method, "fsdp", 4, "none", ()
            yield "llama", method, "fsdp_shard_grad_op", 2, "none", ()
        yield "llama", "lora", "fsdp", 2, "none", (("loss", "chunked"), ("loss_chunks", 8))
        yield "llama", "full", "fsdp", 2, "none", (("optimizer_in_bwd", True),)
        for gc in ("none", "true"):
            yield "llama256", "qlora", "fsdp", 2, gc, ()
        yield "llama256", "lora", "fsdp", 2, "none", ()
        yield "llama256x4", "full", "fsdp", 2, "true", self.long
        yield "llama256x4", "lora", "fsdp", 2, "none", self.long
        head = (("fsdp_head_units", True),)
        for gc in ("none", "true"):
            yield "llama", "full", "fsdp", 2, gc, head
        yield "llama", "full", "fsdp", 4, "none", head
        yield "llama", "full", "fsdp", 2, "none", (("optimizer_in_bwd", True),) + head
        yield "llama", "lora", "fsdp", 2, "none", head
        yield "llama256x4", "full", "fsdp", 2, "true", self.long + head

    def cell_id(self, cell):
        name, method, strategy, ws, gc, extra = cell
        return (f"{name}-{method}-{strategy}-x{ws}" + ("-checkpointing" if gc == "true" else "")
                + "".join(f"-{k}={v}" for k, v in extra))

    def settings(self, cell):
        _, method, strategy, ws, gc, extra = cell
        kw: dict[str, Any] = dict(method=method, batch_size=self.batch, seq_len=self.seq, gradient_checkpointing=gc,
                                  optimizer=OPTIMIZER, attention="sdpa", strategy=strategy, world_size=ws)
        if method != "full":
            kw.update(lora_rank=self.rank, target_modules=list(self.seven))
        kw.update(dict(extra))
        return kw

    def fake(self, cell):
        return False  # each rank's real storage is tracked


TORCHTUNE_STRATEGIES = TorchtuneStrategiesMatrix()


class QloraPrepareMatrix(Matrix):
    """QLoRA with and without peft's prepare_model_for_kbit_training (stack hf, real bitsandbytes 4-bit
    storage), on one process and under DDP on 2 gloo processes: without it (the FSDP-QLoRA recipe's load)
    the embeddings, norms and head stay bf16, and with them the residual stream, the logits and the
    adapters' inputs. llama-shaped, width 256, 2 layers, vocabulary 4,000; batch 2 x 128 per rank, with
    and without checkpointing."""

    name = "qlora_prepare"
    cell_limit = 0.02
    median_limit = 0.01
    configs = {
        "llama": {"model_type": "llama", "vocab_size": 4000, "hidden_size": 256, "intermediate_size": 512,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "tie_word_embeddings": False},
    }

    def cells(self):
        """(config, kbit_prepare, gradient checkpointing, strategy, world size)."""
        for prepare in (True, False):
            for gc in ("none", "true"):
                yield "llama", prepare, gc, "none", 1
        for gc in ("none", "true"):
            yield "llama", True, gc, "ddp", 2

    def cell_id(self, cell):
        name, prepare, gc, strategy, ws = cell
        return (f"{name}-qlora-prepare={str(prepare).lower()}-checkpointing={gc}"
                + (f"-{strategy}-x{ws}" if strategy != "none" else ""))

    def settings(self, cell):
        _, prepare, gc, strategy, ws = cell
        kw = dict(method="qlora", batch_size=2, seq_len=128, kbit_prepare=prepare, gradient_checkpointing=gc,
                  optimizer=OPTIMIZER, attention="sdpa")
        if strategy != "none":
            kw.update(strategy=strategy, world_size=ws)
        return kw

    def fake(self, cell):
        return False  # bitsandbytes' 4-bit storage is real


QLORA_PREPARE = QloraPrepareMatrix()
