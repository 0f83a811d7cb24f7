"""The torchtune profile's compile=true against torchtune's own compiled step: `vramwise measure --stack torchtune
--compile true` runs training.compile_model (each TransformerSelfAttentionLayer compiled on its own) and
training.compile_loss as the single-device recipes do (the full recipe keeps its standard loss eager), on one CPU
process, the peak read from the allocator's own reports (real tensors: inductor's buffers are real allocations).

Cells: a llama of vocabulary 1,000 with 4 layers of width 256 at batch 2 x 512, where the layers' saved tensors
make the peak (full fine-tuning and LoRA on every projection; full fine-tuning with checkpointing, with an MLP 768
and 1,536 wide, and with the chunked loss and activation offloading); gemma (multi-query, GELU, tied), phi3 (multi-head, fused projections split) and qwen2 (q/k/v
biases, bf16 rotary tables) built the same way, full and LoRA; and a llama of vocabulary 16,000 with 2 layers at
batch 2 x 256, where the logits make it (full and LoRA x standard and chunked loss, 8 chunks; full with the
chunked loss, checkpointing and offloading; LoRA with the chunked loss at batch 2 x 512). Activation offloading runs the CPU port of OffloadActivations with
the host keeping shapes only (its copies would be CPU allocations, which the allocator's reports count). The estimate's tensor peak must be within 4 % of the measured
peak in every cell (the largest measured: -2.9 %, LoRA with the chunked loss, whose forward rises 1.8 MB above
what is modelled), 1 % in the median. The cells are estimated with the host's step_device
(benchmarks/validation_matrices.py host_step_device): on a CPU whose bf16 products are oneDNN's, LoRA's chunked
projections copy the frozen head's weight expanded to the batch, which torch's own CPU kernel and a GPU do not.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.long, pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")]

pytest.importorskip("torch")
pytest.importorskip("torchtune")
pytest.importorskip("torchao")

from helpers import matrix_checks  # noqa: E402

from validation_matrices import OPTIMIZER, TORCHTUNE, Matrix  # noqa: E402

SEVEN = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class TorchtuneCompileMatrix(Matrix):
    name = "torchtune_compile"
    profile = stack = "torchtune"
    cell_limit = 0.04
    median_limit = 0.01
    layers = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
              "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
              "tie_word_embeddings": False, "max_position_embeddings": 2048}
    configs = {
        "layers": layers,
        "layers_wide_mlp": dict(layers, intermediate_size=1536),
        "logits": dict(layers, vocab_size=16000, num_hidden_layers=2),
        "logits_long": dict(layers, vocab_size=16000, num_hidden_layers=2),  # the same at batch 2 x 512
        # the eager matrix's family configs (benchmarks/validation_matrices.py TORCHTUNE) at vocabulary 1,000, 4 layers
        **{name: dict(TORCHTUNE.configs[name], vocab_size=1000, num_hidden_layers=4) for name in ("gemma", "phi3", "qwen2")},
    }

    def cells(self):
        """(config name, method, loss, checkpointing: none, true or offload, checkpointing with activation offloading)."""
        yield "layers", "full", "standard", "none"
        yield "layers", "lora", "standard", "none"
        yield "layers", "full", "standard", "true"
        yield "layers_wide_mlp", "full", "standard", "true"
        yield "layers", "full", "chunked", "offload"
        yield "logits", "full", "chunked", "offload"
        for name in ("gemma", "phi3", "qwen2"):
            for method in ("full", "lora"):
                yield name, method, "standard", "none"
        for method in ("full", "lora"):
            for loss in ("standard", "chunked"):
                yield "logits", method, loss, "none"
        # a frozen head's copy of its weight expanded to the batch follows the batch, not the sequence
        yield "logits_long", "lora", "chunked", "none"

    def cell_id(self, cell):
        name, method, loss, ck = cell
        return f"{name}-{method}-{loss}" + {"none": "", "true": "-checkpointing", "offload": "-offloading"}[ck] + "-compile"

    def settings(self, cell):
        name, method, loss, ck = cell
        kw = dict(method=method, batch_size=2, seq_len=256 if name in ("logits",) else 512,
                  gradient_checkpointing="none" if ck == "none" else "true", activation_offloading=ck == "offload",
                  optimizer=OPTIMIZER, loss=loss, compile=True)
        if loss == "chunked":
            kw["loss_chunks"] = 8
        if method == "lora":
            kw.update(lora_rank=8, target_modules=list(SEVEN))
        return kw

    def fake(self, cell):
        return False  # inductor's buffers are real allocations, read from the allocator


MATRIX = TorchtuneCompileMatrix()

test_cell_within_limit, test_median_within_limit = matrix_checks(MATRIX)


def test_every_cell_is_modelled_as_compiled():
    """No cell falls back to the eager estimate (which would warn)."""
    from vramwise import estimate

    for cell in MATRIX.cells():
        e = estimate(MATRIX.configs[cell[0]], profile="torchtune", **MATRIX.settings(cell))
        assert not [w for w in e.warnings if w.startswith("compile:")], cell


def test_what_a_compiled_step_cannot_measure_is_refused():
    """Inductor's buffers are real allocations: fake tensors are refused; QLoRA's NF4 weights are not counted by
    the allocator-report tracker: refused. Both before anything is built."""
    from vramwise import SettingsError, measure

    base = dict(stack="torchtune", batch_size=1, seq_len=16, optimizer=OPTIMIZER, gradient_checkpointing="none",
                compile=True)
    with pytest.raises(SettingsError, match="real tensors"):
        measure(MATRIX.configs["layers"], fake=True, method="full", **base)
    with pytest.raises(SettingsError, match="QLoRA"):
        measure(MATRIX.configs["layers"], method="qlora", lora_rank=8, **base)


def test_lora_with_checkpointing_keeps_eager_layers_and_a_compiled_loss():
    """LoRA with checkpointing: the compiled layers are not modelled (a warning; the layers are estimated
    eager), the compiled chunked loss is. Where the logits make the peak (vocabulary 16,000) the estimate is
    within 4 % of the compiled step (measured -3.3 %: LoRA's chunked forward rises 1.8 MB above the model)."""
    cell = ("logits", "lora", "chunked", "true")
    r = MATRIX.run_cell(cell)
    assert abs(r["error"]) <= 0.04, r
    from vramwise import estimate

    e = estimate(MATRIX.configs["logits"], profile="torchtune", **MATRIX.settings(cell))
    assert [w for w in e.warnings if w.startswith("compile:") and "layers are estimated as eager" in w]
