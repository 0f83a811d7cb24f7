"""LoRA under torch.compile is estimated as its eager run (formulas/hf/compile.yaml compile_modelled), and the
estimate's warning says that this figure was an upper bound where measured. This checks that claim on the two
cells where it was tightest: a step whose layers make the peak with adapters on every projection (the MLP
wider than the hidden size: the compiled backward holds the most MLP-wide buffers there), and one with adapters
on the MLP only. Each step runs compiled on one CPU process, its peak read from the allocator's reports."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from compile_matrix import COMPILE  # noqa: E402
from vramwise import estimate, measure  # noqa: E402

pytestmark = pytest.mark.measured

SEVEN = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.mark.parametrize("config, targets", [
    ("llama_layers_wide_mlp", SEVEN),
    ("llama_layers", ["gate_proj", "up_proj", "down_proj"]),
])
def test_compiled_lora_peaks_below_the_eager_estimate(config, targets):
    cfg = COMPILE.configs[config]
    kw = dict(method="lora", batch_size=2, seq_len=512, lora_rank=8, target_modules=targets,
              gradient_checkpointing="none", optimizer="adamw_torch", attention="sdpa")
    m = measure(cfg, compile=True, steps=2, **kw)
    e = estimate(cfg, profile="hf", compile=True, **kw)
    assert any(w.startswith("compile: torch.compile with LoRA") for w in e.warnings)
    assert e.figures == estimate(cfg, profile="hf", compile=False, **kw).figures  # the eager run's figure
    # the warning's claim: the compiled peak is below the eager estimate, by at least 15 % (measured: 17 % and 19 %)
    assert m.peak <= e.figures["tensor_peak"] * 0.85, (m.peak, e.figures["tensor_peak"])
