"""The hf profile against `vramwise measure`, per layer: the growth of the measured peak from 2 to 4 layers
(vocabulary 1000, batch 2 x 512) against the estimate's, per family, method and attention kernel of the hf
validation matrix (tests/measured/test_validation_matrix.py, whose real vocabularies let the logits dominate);
LoRA dropout's masks; the recomputed layer with and without adapters on the MLP. Each growth must be within
the matrix's cell limit (10 %) of the estimate's.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("bitsandbytes")

from vramwise import estimate, measure  # noqa: E402
from validation_matrices import CELL_LIMIT, HF as vm, METHODS, OPTIMIZER  # noqa: E402


@pytest.mark.parametrize("attention", vm.attention)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", sorted(vm.families))
def test_two_more_layers_cost_what_the_estimate_says(name, method, attention):
    kw = dict(method=method, batch_size=2, seq_len=512, gradient_checkpointing="none", attention=attention,
              optimizer=OPTIMIZER)
    runs = dict(kw, attention=vm.measured_attention(name, attention))  # what transformers runs for the model
    measured = {n: measure(vm.small_vocab(name, n), fake=method != "qlora", **runs).peak for n in (2, 4)}
    estimated = {n: estimate(vm.small_vocab(name, n), profile="hf", **kw).figures["tensor_peak"] for n in (2, 4)}
    growth_measured = measured[4] - measured[2]
    growth_estimated = estimated[4] - estimated[2]
    assert abs(growth_estimated / growth_measured - 1) <= CELL_LIMIT, (growth_measured, growth_estimated)


@pytest.mark.parametrize("method", ("lora", "qlora"))
@pytest.mark.parametrize("name", ("llama", "qwen3"))
def test_lora_dropout_masks(name, method):
    """LoRA dropout 0.1: each adapter keeps its float32 dropout output and the dropout's mask.

    The profile charges a GPU's one-byte bool mask; torch's CPU dropout keeps a float32 noise
    tensor instead, so the CPU measurement is compared with the estimate plus 3 bytes per adapter
    input element: both configs put 2,304 input elements per layer under the seven adapters
    (q, k, v, o, gate, up: 256 each; down: 768), over 2 layers (4 in the grown model).
    """
    inputs_per_layer = 6 * 256 + 768
    kw = dict(method=method, gradient_checkpointing="none", attention="sdpa", optimizer=OPTIMIZER, lora_dropout=0.1)
    fake = method != "qlora"
    real_vocab = dict(kw, batch_size=2, seq_len=256)
    m = measure(vm.configs[name], fake=fake, **real_vocab).peak
    e = estimate(vm.configs[name], profile="hf", **real_vocab).figures["tensor_peak"]
    e_cpu = e + 3 * inputs_per_layer * 2 * 256 * 2
    assert abs(e_cpu / m - 1) <= CELL_LIMIT, (m, e_cpu)
    growth = dict(kw, batch_size=2, seq_len=512)
    measured = {n: measure(vm.small_vocab(name, n), fake=fake, **growth).peak for n in (2, 4)}
    estimated = {n: estimate(vm.small_vocab(name, n), profile="hf", **growth).figures["tensor_peak"]
                 + 3 * inputs_per_layer * 2 * 512 * n for n in (2, 4)}
    ratio = (estimated[4] - estimated[2]) / (measured[4] - measured[2])
    assert abs(ratio - 1) <= CELL_LIMIT, (measured, estimated)


@pytest.mark.parametrize("targets", ("q_proj,k_proj,v_proj,o_proj", None))
def test_recomputed_layer_with_and_without_adapted_mlp(targets):
    """Checkpointing at vocabulary 1000, 4 layers, batch 2 x 512 (llama): the backward's peak is the
    recomputed layer's. With adapters on the attention only, the frozen MLP's backward still makes three
    MLP-wide gradients (down's input, the activation's and up's outputs) for the adapters below; with the
    default targets PEFT's float32 path through the adapted up projection rises higher while the layer is
    recomputed. Either is within the hf matrix's cell limit of the measured peak."""
    cfg = vm.configs["llama_recompute"]
    kw = dict(method="lora", batch_size=2, seq_len=512, gradient_checkpointing="true", attention="sdpa",
              optimizer=OPTIMIZER, **({"target_modules": targets} if targets else {}))
    measured = measure(cfg, fake=True, **kw)
    e = estimate(cfg, profile="hf", **kw)
    assert measured.peak_phase == e.peak_phase == "backward"
    assert abs(e.figures["tensor_peak"] / measured.peak - 1) <= vm.cell_limit, (measured.peak, e.figures["tensor_peak"])
