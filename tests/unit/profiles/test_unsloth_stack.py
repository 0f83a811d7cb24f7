"""The unsloth profile models Unsloth's training stack from its source (docs/unsloth-profile.md#stack).

Two kinds of checks. Unsloth's published context-length tables (benchmarks/gpu_runs/unsloth.yaml: Llama 3.1 8B
and Llama 3.3 70B Instruct, 4-bit QLoRA on the seven projections at rank 32, batch 1, from
https://docs.unsloth.ai/basics/unsloth-benchmarks and the README's table) are reproduced within 10 % at every GPU
size they list, the GPU size read as the corpus scorer reads "80 GB" (10**9 bytes, benchmarks/gpu_runs.py); the
expected values are the published ones. And the mechanisms, each against figures derived by hand in the comments
from Unsloth's source and Llama 3.1 8B's config (hidden 4096, 32 layers, 32 heads of 128, 8 KV heads, MLP 14336,
vocabulary 128256, untied head).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import vramwise

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "benchmarks" / "gpu_runs" / "unsloth.yaml"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"  # the catalog's copy of the hub config
#: Llama 3.3 70B Instruct's config.json has Llama 3.1 70B Instruct's shapes (hidden 8192, 80 layers, 64 heads of 128,
#: 8 KV heads, MLP 28672, vocabulary 128256, untied head); the catalog holds the latter
SAME_SHAPES = {"meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Llama-3.1-70B-Instruct"}


def _context_runs() -> list:
    """Unsloth's current context-length table (Unsloth with Apple's CCE; not the "Unsloth (Old)" column)."""
    runs = yaml.safe_load(CORPUS.read_text(encoding="utf-8"))["runs"]
    out = []
    for run in runs:
        if not run["id"].startswith("unsloth-context-"):
            continue
        size = re.findall(r"(\d+) ?GB", run["gpu"]["name"])[-1]  # "A100 80GB (48 GB VRAM column)": the column
        marks = ()
        if run["id"] == "unsloth-context-llama-3.3-70b-instruct-qlora-r32-48gb":
            # the first layer's backward holds the float32 gradients of 414,187,520 adapter parameters (1.66 GB)
            # beside 39.5 GB of NF4 weights: memory alone allows about 5,400 tokens where Unsloth publishes 12,106
            marks = (pytest.mark.xfail(strict=True, reason="Unsloth's 70B table at 48 GB leaves no room for the "
                                                           "float32 LoRA gradients its source keeps"),)
        out.append(pytest.param(run, f"{size}GB", id=run["id"], marks=marks))
    return out


def test_the_corpus_holds_both_tables():
    ids = [p.id for p in _context_runs()]
    assert len([i for i in ids if "llama-3.1-8b" in i]) == 7  # 8, 12, 16, 24, 40, 48 and 80 GB
    assert len([i for i in ids if "llama-3.3-70b" in i]) == 2  # 48 and 80 GB


@pytest.mark.parametrize("run, gpu", _context_runs())
def test_published_context_length_within_10_percent(run, gpu):
    # headroom 0: the boundary of the memory model, as the corpus scorer takes it
    fit = vramwise.fit(SAME_SHAPES.get(run["model"], run["model"]), gpu=gpu, headroom=0, **run["settings"]["stated"])  # the default profile: unsloth
    assert fit.to_dict()["profile"] == "unsloth"
    assert abs(fit.max_seq_len_memory / run["value"] - 1) <= 0.10, (fit.max_seq_len_memory, run["value"])


def _est(**settings):
    base = {"method": "qlora", "lora_rank": 32, "batch_size": 1}
    return vramwise.estimate(LLAMA_8B, **{**base, **settings})


def test_nf4_double_quant_float32_adapters_and_8bit_adamw():
    est = _est(seq_len=2048)
    # 32 layers x (2 x 4096 x 4096 + 2 x 1024 x 4096 + 3 x 14336 x 4096) = 6,979,321,856 linear weights in NF4 with
    # double quantization (Unsloth's load): 0.5 + 1/64 + 4/(64 x 256) bytes each; embedding, head (2 x 128256 x
    # 4096) and norms (65 x 4096) stay bf16
    assert est.weights == round(6979321856 * (0.5 + 1 / 64 + 4 / (64 * 256)) + (2 * 128256 * 4096 + 65 * 4096) * 2)
    # rank 32 x (q 8192 + k 5120 + v 5120 + o 8192 + gate, up, down 3 x 18432) x 32 layers = 83,886,080, float32
    assert est.lora == 83886080 * 4
    # bitsandbytes' 8-bit AdamW: two uint8 states and a float32 scale per 256 elements each
    assert est.optimizer == 83886080 * 2.03125


def test_offloaded_checkpointing_keeps_two_layer_inputs_where_transformers_keeps_every_one():
    # at 8192 tokens a layer input is 8192 x 4096 x 2 = 67,108,864 bytes. transformers' checkpointing: the last
    # layer's backward holds all 32 inputs (its peak, above the first layer's one input and 335,544,320 bytes of
    # float32 gradients). Unsloth's: the GPU buffer and the last layer's input at the last layer, so the first
    # layer's backward (one input and the gradients) is its peak. The rest of the two steps is the same.
    true = _est(seq_len=8192, gradient_checkpointing="true").figures["tensor_peak"]
    unsloth = _est(seq_len=8192, gradient_checkpointing="unsloth").figures["tensor_peak"]
    assert true - unsloth == 31 * 67108864 - 83886080 * 4


def test_an_input_of_two_mib_is_not_offloaded():
    # 256 tokens x 4096 x 2 bytes = 2 MiB, not over Unsloth's MINIMUM_SIZE: both modes keep every input
    assert (_est(seq_len=256, gradient_checkpointing="true").figures["tensor_peak"]
            == _est(seq_len=256, gradient_checkpointing="unsloth").figures["tensor_peak"])


def test_bytes_per_token_at_long_context():
    # from 65,536 tokens on, the last layer's backward is the peak (an input, 536,870,912 bytes, outweighs the
    # gradients). Per token there: the GPU buffer, the last layer's input, the incoming gradient and the recomputed
    # output, 4 x 2 x 4096; the second norm's input 2 x 4096 and two float32 reciprocal norms 8; the norms'
    # outputs 2 x 2 x 4096; queries, keys and values expanded to 32 heads by xformers, and the output,
    # 2 x (4096 + 2 x 4096 + 4096), and a float32 log-sum-exp per head 4 x 32; e and g 2 x 2 x 14336; DW 2 x 14336:
    # 32,768 + 8,200 + 16,384 + 32,896 + 57,344 + 28,672 = 176,264 bytes
    a = _est(seq_len=65536).figures["tensor_peak"]
    b = _est(seq_len=131072).figures["tensor_peak"]
    assert b - a == 65536 * 176264


def test_flash_attention_3_keeps_keys_and_values_unexpanded():
    # a kernel named explicitly takes the 8 KV heads as they are: 2 x (2 x 4096 - 2 x 1024) = 12,288 bytes a token less
    a = _est(seq_len=131072).figures["tensor_peak"]
    b = _est(seq_len=131072, attention="flash_attention_3").figures["tensor_peak"]
    assert a - b == 131072 * 12288


@pytest.mark.parametrize("loss", ["standard", "chunked", "fused"])
def test_the_loss_is_always_fused(loss):
    # Unsloth computes the cross-entropy with its fused loss whatever is asked: the logits never exist whole
    assert _est(seq_len=4096, loss=loss).total == _est(seq_len=4096, loss="fused").total


def test_device_figure_reserve_on_the_training_tensors_and_the_context():
    est = _est(seq_len=4096)
    f = est.figures
    # weights as loaded, 15 % over the other tensors, and 0.5 GiB of CUDA context
    assert f["device"] == round(est.weights + (f["tensor_peak"] - est.weights) * 1.15 + 2**29)
    assert est.total == f["device"]
