"""The litgpt profile's weights against the model LitGPT 0.5.9 itself builds.

For each family the litgpt profile serves, the model `vramwise measure --stack litgpt` builds (LitGPT's
``GPT`` or its LoRA ``GPT`` from the ``litgpt.Config`` the stack maps from the Hugging Face config, on the
meta device, then faked under Fabric's bf16-true or bnb.nf4 precision: shapes and dtypes are real) is the
independent source: its parameter count and trainable count must equal the estimate's, the bytes of its
parameters and of every buffer it holds must equal the estimate's weights and LoRA adapters, and its
buffers (the rotary cos and sin tables; LitGPT builds no mask cache for training) the estimate's
rope_cache_bytes, byte for byte, for full fine-tuning, LoRA and QLoRA with several adapter sets.

The one difference allowed is counted from the model, not from the estimate: beside each 4-bit weight
bitsandbytes keeps the 16-entry float32 NF4 code book (64 bytes), which the profile leaves out
(formulas/litgpt/weights.yaml nf4_bytes_per_weight); the measurement registers it as the buffer
``_vramwise_code`` so that it is counted there.
"""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("torch")
for _name in ("litgpt", "lightning"):  # imported by the tests that use them: lightning takes seconds to import
    if importlib.util.find_spec(_name) is None:
        pytest.skip(f"could not import {_name!r}: it is not installed", allow_module_level=True)
pytest.importorskip("bitsandbytes")

import torch  # noqa: E402

from vramwise import StackUnsupportedError, VramwiseError, estimate  # noqa: E402
from vramwise.profiles.settings import normalise_settings  # noqa: E402
from vramwise.measuring.stacks import litgpt as stack  # noqa: E402

from helpers import traced  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Paged optimizers are not supported on CPU")

SEQ = 64
#: Small models of each family, shaped as the real ones (vocabulary apart).
CONFIGS = {
    "llama": {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
              "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
              "tie_word_embeddings": False, "max_position_embeddings": 4096},
    "llama_tied_bias": {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
                        "num_hidden_layers": 2, "num_attention_heads": 4, "tie_word_embeddings": True,
                        "attention_bias": True, "mlp_bias": True},
    "mistral": {"model_type": "mistral", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
                "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "sliding_window": None},
    "qwen2": {"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
              "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
              "tie_word_embeddings": True},
    "qwen3": {"model_type": "qwen3", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
              "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128,
              "tie_word_embeddings": True},
    # Phi-3.5 / Phi-4 layout: fused qkv_proj and gate_up_proj in the checkpoint (LitGPT fuses q, k and v
    # itself and keeps fc_1 and fc_2 apart); no sliding window
    "phi3": {"model_type": "phi3", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
             "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
             "tie_word_embeddings": False, "sliding_window": None},
    # Phi-4-mini layout: a quarter of each head's dimensions not rotated (rope_n_elem 96 of 128), tied
    "phi4_mini": {"model_type": "phi3", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
                  "tie_word_embeddings": True, "partial_rotary_factor": 0.75, "sliding_window": 262144,
                  "max_position_embeddings": 131072},
    # OLMo-2 layout: norms after attention and after the MLP (none before), q and k normalised over their
    # whole projections, multi-head attention
    "olmo2": {"model_type": "olmo2", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
              "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
              "max_position_embeddings": 4096},
    # Gemma-2b layout: one key/value head, heads x head_dim = hidden (8 x 256 = 2048), tied in the checkpoint
    "gemma": {"model_type": "gemma", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
              "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 128},
    # Gemma-7b layout: multi-head, heads x head_dim above hidden (16 x 256 over 3072; here 4 x 96 over 256)
    "gemma_mha": {"model_type": "gemma", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 96},
}
#: Configs whose heads x head_dim differs from hidden: LitGPT 0.5.9 cannot adapt some of q, k and v there.
WIDE_HEADS = ("gemma_mha", "qwen3")  # Qwen3-0.6B: 16 x 128 over 1024
RUNS = [("full", None), ("lora", None), ("lora", "all-linear"), ("qlora", None), ("qlora", "all-linear")]
#: LitGPT's lora_head on the head it keeps apart: counted for checkpoints with an untied head only (a tied
#: checkpoint's head adapter is not in the profile's inventory).
UNTIED_HEAD = [("lora", "q_proj,k_proj,v_proj,lm_head"), ("qlora", "all-linear,lm_head")]


def _cases():
    for name in sorted(CONFIGS):
        for method, targets in RUNS + (UNTIED_HEAD if CONFIGS[name].get("tie_word_embeddings") is False else []):
            if name in WIDE_HEADS and method != "full" and targets is None:
                continue  # the default adapts q and v alone (test_partial_qkv_adapters_on_wide_heads_are_refused)
            yield pytest.param(name, method, targets, id=f"{name}-{method}-{targets or 'default'}")


def built(cfg: dict, method: str, targets: str | None):
    """The model the litgpt stack builds for ``cfg``: (its parameter and buffer bytes, its buffer names and
    bytes, 4-bit weights, parameters, trainable parameters), each tensor counted once."""
    settings = normalise_settings(method=method, lora_rank=8, target_modules=targets, gradient_checkpointing="none",
                                  optimizer="adamw_torch", batch_size=1, seq_len=SEQ)
    prepared = stack.prepare(cfg, settings, dtype=torch.bfloat16, device="cpu", fake=True)
    model = prepared.net
    param_bytes = sum(p.nbytes for p in model.parameters())
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_buffers()}
    buffers = {name: sum(b.nbytes for n, b in model.named_buffers() if n.rsplit(".", 1)[-1] == name) for name in names}
    four_bit = sum(1 for p in model.parameters() if p.dtype == torch.uint8)
    return param_bytes + sum(buffers.values()), buffers, four_bit, prepared.params_total, prepared.params_trainable


@pytest.mark.parametrize("name, method, targets", list(_cases()))
def test_weights_and_buffers_equal_litgpts_model(name, method, targets):
    cfg = CONFIGS[name]
    total, buffers, four_bit, params, trainable = built(cfg, method, targets)
    e = estimate(cfg, profile="litgpt", method=method, lora_rank=8, target_modules=targets, batch_size=1,
                 seq_len=SEQ, gradient_checkpointing="none")
    # every parameter of LitGPT's model: the base (with its own head, and under QLoRA the StableEmbedding's
    # norm) and the adapters; trainable: the adapters (and under QLoRA the StableEmbedding)
    assert (traced(e, "litgpt_params") + traced(e, "lora_params"), e.params_trainable) == (params, trainable)
    # the buffers: the rotary tables alone (and, under QLoRA, the quantization state the stack registers)
    rope = {k: v for k, v in buffers.items() if not k.startswith("_vramwise_")}
    assert set(rope) == {"cos", "sin"}
    assert traced(e, "rope_cache_bytes") == sum(rope.values())
    assert (four_bit > 0) == (method == "qlora")
    assert e.weights + e.lora == total - 64 * four_bit


def test_rope_tables_by_hand():
    """Sequence 64. llama (head_dim 256 / 4 = 64, 4096 positions): the tables are rebuilt in float32 for
    the sequence, cos and sin [64, 64] x 4 bytes = 16,384 each. qwen3 and gemma (head_dim 128) name no
    context: the block size is the sequence, the setter keeps the tables Fabric cast to bf16,
    [64, 128] x 2 bytes = 16,384 each; with 4096 positions they are rebuilt in float32, 32,768 each."""
    assert built(CONFIGS["llama"], "full", None)[1] == {"cos": 16384, "sin": 16384}
    assert built(CONFIGS["qwen3"], "full", None)[1] == {"cos": 16384, "sin": 16384}
    assert built(CONFIGS["gemma"], "lora", None)[1] == {"cos": 16384, "sin": 16384}
    assert built(dict(CONFIGS["gemma"], max_position_embeddings=4096), "lora", None)[1] == {"cos": 32768, "sin": 32768}
    # phi4_mini: int(0.75 x 128) = 96 rotated dimensions, 131,072 positions: [64, 96] float32 = 24,576 each
    assert built(CONFIGS["phi4_mini"], "full", None)[1] == {"cos": 24576, "sin": 24576}


def test_gemma_maps_to_litgpts_gemma_layout():
    """Read from the built model, not from the mapping: GemmaMLP with tanh gelu, embeddings scaled,
    RMSNorm with the unit offset, and LitGPT's own untied head beside the tied checkpoint's embedding
    (3 layers x (qkv (2 x 128 + 2 x 128) x 256 + proj 256 x 256 + MLP 3 x 768 x 256 + 2 norms of 256)
    + final norm 256 + embedding and head 2 x 1000 x 256 = 3 x 786,944 + 256 + 512,000 = 2,873,088)."""
    from litgpt.model import GemmaMLP

    settings = normalise_settings(method="full", gradient_checkpointing="none", optimizer="adamw_torch", batch_size=1,
                                  seq_len=SEQ)
    prepared = stack.prepare(CONFIGS["gemma"], settings, dtype=torch.bfloat16, device="cpu", fake=True)
    model = prepared.net
    block = model.transformer.h[0]
    assert isinstance(block.mlp, GemmaMLP) and model.config.gelu_approximate == "tanh"
    assert model.config.scale_embeddings and block.norm_1.add_unit_offset
    assert prepared.params_total == 2873088


def test_olmo2_maps_to_litgpts_olmo2_layout():
    """Read from the built model: post-attention and post-MLP norms, none before, and q / k norms over the
    whole projections (3 layers x (qkv 3 x 256 x 256 + proj 256 x 256 + MLP 3 x 768 x 256 + post norms
    2 x 256 + q and k norms 2 x 256) + final norm 256 + embedding and head 2 x 1000 x 256
    = 3 x 852,992 + 256 + 512,000 = 3,071,232, as many as transformers' Olmo2ForCausalLM holds)."""
    settings = normalise_settings(method="full", gradient_checkpointing="none", optimizer="adamw_torch", batch_size=1,
                                  seq_len=SEQ)
    prepared = stack.prepare(CONFIGS["olmo2"], settings, dtype=torch.bfloat16, device="cpu", fake=True)
    block = prepared.net.transformer.h[0]
    assert isinstance(block.norm_1, torch.nn.Identity) and isinstance(block.norm_2, torch.nn.Identity)
    assert block.post_attention_norm.weight.shape == (256,) and block.post_mlp_norm.weight.shape == (256,)
    assert block.attn.norm_q.weight.shape == (256,) and block.attn.norm_k.weight.shape == (256,)
    assert prepared.params_total == 3071232


@pytest.mark.parametrize("cfg, match", [
    ({"model_type": "mixtral", "num_local_experts": 4}, "llama, mistral, qwen2, qwen3, phi3, gemma"),
    ({"model_type": "gemma2"}, "llama, mistral, qwen2, qwen3, phi3, gemma"),
    ({"model_type": "mistral", "sliding_window": 128, "max_position_embeddings": 4096}, "sliding window"),
    ({"model_type": "phi3", "sliding_window": 2047, "max_position_embeddings": 4096}, "sliding window"),
    ({"model_type": "llama", "partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ({"model_type": "qwen3", "attention_bias": True}, "bias"),
])
def test_what_the_profile_does_not_model_is_refused(cfg, match):
    base = {"vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 32}
    with pytest.raises((StackUnsupportedError, VramwiseError), match=match):
        stack.litgpt_config_fields(dict(base, **cfg), SEQ)


def test_a_window_no_sequence_reaches_is_no_window():
    """Phi-3.5-mini's config sets sliding_window 262144 over 131072 positions; LitGPT's own Phi-3.5
    config has no window (litgpt config.py), and a mask wider than every sequence masks nothing."""
    cfg = dict(CONFIGS["phi3"], sliding_window=262144, max_position_embeddings=131072)
    fields = stack.litgpt_config_fields(cfg, SEQ)
    assert "sliding_window_size" not in fields and fields["block_size"] == 131072


def test_partial_qkv_adapters_on_wide_heads_are_refused():
    """LitGPT 0.5.9's LoRAQKVLinear.lora_ind places the key and value parts after n_embd query columns, so
    adapting q and v alone fails in index_copy_ when heads x head_size is not n_embd (Gemma-7b's 16 x 256
    over 3072): the stack says so before building."""
    settings = normalise_settings(method="lora", gradient_checkpointing="none", optimizer="adamw_torch", batch_size=1,
                                  seq_len=SEQ)
    with pytest.raises(StackUnsupportedError, match="lora_ind"):
        stack.prepare(CONFIGS["gemma_mha"], settings, dtype=torch.bfloat16, device="cpu", fake=True)
    kw = dict(profile="litgpt", method="lora", batch_size=1, seq_len=SEQ, gradient_checkpointing="none")
    assert any("lora_ind" in w for w in estimate(CONFIGS["gemma_mha"], **kw).warnings)
    assert not any("lora_ind" in w for w in estimate(CONFIGS["gemma_mha"], target_modules="all-linear", **kw).warnings)
    assert not any("lora_ind" in w for w in estimate(CONFIGS["gemma"], **kw).warnings)


def test_an_unmodelled_window_is_a_warning_of_the_estimate():
    """The estimate does not count LitGPT's sliding-window mask: it says so for a window shorter than the
    context (Mistral-7B-v0.1's 4096 of 32768), not for one no sequence reaches or for none."""
    base = dict(CONFIGS["mistral"], max_position_embeddings=32768)
    kw = dict(profile="litgpt", method="lora", batch_size=1, seq_len=SEQ, gradient_checkpointing="none")
    assert any("sliding window" in w for w in estimate(dict(base, sliding_window=4096), **kw).warnings)
    assert not any("sliding window" in w for w in estimate(dict(base, sliding_window=32768), **kw).warnings)
    assert not any("sliding window" in w for w in estimate(base, **kw).warnings)
