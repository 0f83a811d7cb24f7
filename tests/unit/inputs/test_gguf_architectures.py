"""More llama.cpp architectures read from GGUF (formulas/gguf.yaml): for each, a small file written as llama.cpp's
converter writes one (its metadata keys as convert_hf_to_gguf.py's writer for the architecture sets them, every
tensor llama.cpp's load_tensors creates, with its shape) resolves to the model its equivalent config.json gives,
its parameters are the elements of the tensors written, and the llama.cpp profile's weights are their bytes.

The tensors are F16 matrices and F32 vectors of zeros (numpy's own byte counts); shapes are written here in ggml
order, dimension 0 a row's length, as src/models/<arch>.cpp's create_tensor calls give them.
"""

from __future__ import annotations

import json

import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes "
                                          "the GGUF files these tests read")
np = pytest.importorskip("numpy")

import vramwise  # noqa: E402
from vramwise.errors import ConfigError  # noqa: E402
from vramwise.estimation.registry import Registry  # noqa: E402

from gguf_files import finish  # noqa: E402  (tests/gguf_files.py)

U32, F32, BOOL = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.BOOL


def t(*dims):
    """Zeros of a tensor of ggml dims (dimension 0 the row's length): F32 for a vector, F16 for a matrix."""
    return np.zeros(tuple(reversed(dims)), np.float32 if len(dims) == 1 else np.float16)


def attention(p, hidden, q, kv, *, bias=False):
    """create_tensor_qkv's separate q, k, v (and their biases when given) and attn_output of q x hidden."""
    out = {p + "attn_q.weight": t(hidden, q), p + "attn_k.weight": t(hidden, kv), p + "attn_v.weight": t(hidden, kv),
           p + "attn_output.weight": t(q, hidden)}
    if bias:
        out.update({p + "attn_q.bias": t(q), p + "attn_k.bias": t(kv), p + "attn_v.bias": t(kv)})
    return out


def mlp(p, hidden, ff):
    return {p + "ffn_gate.weight": t(hidden, ff), p + "ffn_up.weight": t(hidden, ff),
            p + "ffn_down.weight": t(ff, hidden)}


def llama_layers(n, hidden, q, kv, ff):
    """n llama-style layers: attention, attn_norm and ffn_norm, and the gated MLP (src/models/llama.cpp's tensors)."""
    out = {}
    for i in range(n):
        p = f"blk.{i}."
        out.update(attention(p, hidden, q, kv))
        out.update({p + "attn_norm.weight": t(hidden), p + "ffn_norm.weight": t(hidden)})
        out.update(mlp(p, hidden, ff))
    return out


def experts(p, hidden, ff, n):
    """The router and the experts stacked, n_ff x n_embd x n_expert (ffn_gate_inp, ffn_*_exps)."""
    return {p + "ffn_gate_inp.weight": t(hidden, n), p + "ffn_gate_exps.weight": t(hidden, ff, n),
            p + "ffn_up_exps.weight": t(hidden, ff, n), p + "ffn_down_exps.weight": t(ff, hidden, n)}


def head(hidden, vocab, *, tied, norm=True):
    out = {"token_embd.weight": t(hidden, vocab)}
    if norm:
        out["output_norm.weight"] = t(hidden)
    if not tied:
        out["output.weight"] = t(hidden, vocab)
    return out


def base_kv(layers, hidden, ff, heads, kv_heads=None, ctx=4096, **more):
    """TextModel.set_gguf_parameters' keys ({arch}-relative): block_count, context_length, embedding_length,
    feed_forward_length, head_count, head_count_kv (when the config has it), and ``more`` ((type, value) each)."""
    kv = {"{arch}.block_count": (U32, layers), "{arch}.context_length": (U32, ctx),
          "{arch}.embedding_length": (U32, hidden), "{arch}.feed_forward_length": (U32, ff),
          "{arch}.attention.head_count": (U32, heads)}
    if kv_heads is not None:
        kv["{arch}.attention.head_count_kv"] = (U32, kv_heads)
    kv.update({"{arch}." + k: v for k, v in more.items()})
    return kv


def write(path, arch, kv, tensors):
    w = gguf.GGUFWriter(path, arch)
    for key, (kind, value) in kv.items():
        w.add_key_value(key.replace("{arch}", arch), value, kind)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    finish(w, tensors)


def _seed_oss():
    # Seed-OSS: 2 layers, hidden 256, 4 heads of head_dim 96 (q 384, wider than hidden), 2 KV heads (kv 192), MLP 512,
    # q/k/v biases, no o bias, the post-attention norm post_attention_norm, untied 400 tokens (src/models/seed-oss.cpp)
    tensors = head(256, 400, tied=False)
    for i in range(2):
        p = f"blk.{i}."
        tensors.update(attention(p, 256, 384, 192, bias=True))
        tensors.update({p + "attn_norm.weight": t(256), p + "post_attention_norm.weight": t(256)})
        tensors.update(mlp(p, 256, 512))
    kv = base_kv(2, 256, 512, 4, 2, ctx=524288, **{"attention.key_length": (U32, 96),
                                                   "attention.value_length": (U32, 96),
                                                   "attention.layer_norm_rms_epsilon": (F32, 1e-6)})
    config = {"model_type": "seed_oss", "vocab_size": 400, "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 96,
              "attention_bias": True, "attention_out_bias": False, "max_position_embeddings": 524288,
              "rms_norm_eps": 1e-6, "tie_word_embeddings": False}
    return "seed_oss", kv, tensors, config


def _smollm3():
    # SmolLM3: 2 layers, hidden 256, 4 heads of 64, 1 KV head, MLP 512, the head tied (no output.weight), 300 tokens
    tensors = head(256, 300, tied=True)
    tensors.update(llama_layers(2, 256, 256, 64, 512))
    kv = base_kv(2, 256, 512, 4, 1, ctx=65536, **{"rope.freq_base": (F32, 5000000.0),
                                                  "attention.layer_norm_rms_epsilon": (F32, 1e-6)})
    config = {"model_type": "smollm3", "vocab_size": 300, "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
              "max_position_embeddings": 65536, "rope_theta": 5000000.0, "rms_norm_eps": 1e-6,
              "tie_word_embeddings": True}
    return "smollm3", kv, tensors, config


def _olmo():
    # OLMo (1): 2 layers, hidden 256, 4 heads (MHA), MLP 640, no norm tensors at all (OLMo's LayerNorms have no
    # parameters; src/models/olmo.cpp creates no attn_norm, ffn_norm or output_norm), untied 352 tokens
    tensors = head(256, 352, tied=False, norm=False)
    for i in range(2):
        p = f"blk.{i}."
        tensors.update(attention(p, 256, 256, 256))
        tensors.update(mlp(p, 256, 640))
    kv = base_kv(2, 256, 640, 4, 4, ctx=2048, **{"attention.layer_norm_epsilon": (F32, 1e-5),
                                                 "attention.clamp_kqv": (F32, 8.0)})
    config = {"model_type": "olmo", "vocab_size": 352, "hidden_size": 256, "intermediate_size": 640,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "clip_qkv": 8.0,
              "max_position_embeddings": 2048, "tie_word_embeddings": False}
    return "olmo", kv, tensors, config


def _olmoe():
    # OLMoE: 2 layers, hidden 256, 4 heads (MHA), q/k norms over the whole width, 8 experts of 128, 2 used, untied
    # 320 tokens (src/models/olmoe.cpp: output.weight required)
    tensors = head(256, 320, tied=False)
    for i in range(2):
        p = f"blk.{i}."
        tensors.update(attention(p, 256, 256, 256))
        tensors.update({p + "attn_norm.weight": t(256), p + "ffn_norm.weight": t(256),
                        p + "attn_q_norm.weight": t(256), p + "attn_k_norm.weight": t(256)})
        tensors.update(experts(p, 256, 128, 8))
    kv = base_kv(2, 256, 128, 4, 4, **{"attention.layer_norm_rms_epsilon": (F32, 1e-5), "expert_count": (U32, 8),
                                       "expert_used_count": (U32, 2)})
    config = {"model_type": "olmoe", "vocab_size": 320, "hidden_size": 256, "intermediate_size": 128,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "num_experts": 8,
              "num_experts_per_tok": 2, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
              "tie_word_embeddings": False}
    return "olmoe", kv, tensors, config


def _stablelm(parallel: bool):
    # StableLM 2: 2 layers, hidden 256, 4 heads of 64, 2 KV heads, MLP 512, LayerNorms with biases, q/k/v biases,
    # untied 288 tokens; parallel (StableLM 2 12B): per-head q/k LayerNorms [64, heads] and no ffn_norm
    tensors = head(256, 288, tied=False)
    tensors["output_norm.bias"] = t(256)
    for i in range(2):
        p = f"blk.{i}."
        tensors.update(attention(p, 256, 256, 128, bias=True))
        tensors.update({p + "attn_norm.weight": t(256), p + "attn_norm.bias": t(256)})
        if parallel:
            tensors.update({p + "attn_q_norm.weight": t(64, 4), p + "attn_k_norm.weight": t(64, 2)})
        else:
            tensors.update({p + "ffn_norm.weight": t(256), p + "ffn_norm.bias": t(256)})
        tensors.update(mlp(p, 256, 512))
    kv = base_kv(2, 256, 512, 4, 2, **{"rope.dimension_count": (U32, 16), "use_parallel_residual": (BOOL, parallel),
                                       "attention.layer_norm_epsilon": (F32, 1e-5)})
    config = {"model_type": "stablelm", "vocab_size": 288, "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "use_qkv_bias": True,
              "qk_layernorm": parallel, "use_parallel_residual": parallel, "partial_rotary_factor": 0.25,
              "layer_norm_eps": 1e-5, "max_position_embeddings": 4096, "tie_word_embeddings": False}
    return "stablelm", kv, tensors, config


def _granitemoe(shared: bool):
    # GraniteMoE: 2 layers, hidden 256, 4 heads of 64, 2 KV heads, 8 experts of 96 (gate and up split from
    # input_linear), 2 used, the head tied; shared (GraniteMoeShared): a shared MLP of 192 as ffn_*_shexp
    tensors = head(256, 336, tied=True)
    for i in range(2):
        p = f"blk.{i}."
        tensors.update(attention(p, 256, 256, 128))
        tensors.update({p + "attn_norm.weight": t(256), p + "ffn_norm.weight": t(256)})
        tensors.update(experts(p, 256, 96, 8))
        if shared:
            tensors.update({p + "ffn_gate_shexp.weight": t(256, 192), p + "ffn_up_shexp.weight": t(256, 192),
                            p + "ffn_down_shexp.weight": t(192, 256)})
    more = {"expert_count": (U32, 8), "expert_used_count": (U32, 2), "attention.layer_norm_rms_epsilon": (F32, 1e-6),
            "logit_scale": (F32, 6.0), "residual_scale": (F32, 0.22), "embedding_scale": (F32, 12.0),
            "attention.scale": (F32, 0.015625)}
    if shared:
        more["expert_shared_feed_forward_length"] = (U32, 192)
    kv = base_kv(2, 256, 96, 4, 2, **more)
    config = {"model_type": "granitemoeshared" if shared else "granitemoe", "vocab_size": 336, "hidden_size": 256,
              "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_local_experts": 8, "num_experts_per_tok": 2, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
              "tie_word_embeddings": True}
    if shared:
        config["shared_intermediate_size"] = 192
    return "granitemoe", kv, tensors, config


def _ernie4_5():
    # ERNIE 4.5 (0.3B-style): 2 layers, hidden 256, 4 heads of head_dim 128 (q 512), 2 KV heads, MLP 512, no biases,
    # the head tied, 300 tokens (src/models/ernie4-5.cpp)
    tensors = head(256, 300, tied=True)
    tensors.update(llama_layers(2, 256, 512, 256, 512))
    kv = base_kv(2, 256, 512, 4, 2, ctx=131072, **{"attention.key_length": (U32, 128),
                                                   "attention.value_length": (U32, 128),
                                                   "attention.layer_norm_rms_epsilon": (F32, 1e-5)})
    config = {"model_type": "ernie4_5", "vocab_size": 300, "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128,
              "use_bias": False, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
              "tie_word_embeddings": True}
    return "ernie4_5", kv, tensors, config


def _glm4():
    # GLM-4-0414-style: 2 layers, hidden 256, 4 heads of 64, 2 KV heads, q/k/v biases, MLP 384 with gate and up fused
    # in ffn_up (2 x 384), four RMSNorms a layer (attn_norm, post_attention_norm, ffn_norm, post_ffw_norm), untied
    # 416 tokens (src/models/glm4.cpp)
    tensors = head(256, 416, tied=False)
    for i in range(2):
        p = f"blk.{i}."
        tensors.update(attention(p, 256, 256, 128, bias=True))
        tensors.update({p + "attn_norm.weight": t(256), p + "post_attention_norm.weight": t(256),
                        p + "ffn_norm.weight": t(256), p + "post_ffw_norm.weight": t(256),
                        p + "ffn_up.weight": t(256, 2 * 384), p + "ffn_down.weight": t(384, 256)})
    kv = base_kv(2, 256, 384, 4, 2, ctx=32768, **{"attention.key_length": (U32, 64),
                                                  "attention.value_length": (U32, 64),
                                                  "rope.dimension_count": (U32, 32),
                                                  "attention.layer_norm_rms_epsilon": (F32, 1e-5)})
    config = {"model_type": "glm4", "vocab_size": 416, "hidden_size": 256, "intermediate_size": 384,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "attention_bias": True, "partial_rotary_factor": 0.5, "max_position_embeddings": 32768,
              "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
    return "glm4", kv, tensors, config


def _nemotron():
    # Nemotron (Minitron-style): 2 layers, hidden 256, 4 heads of 64, 2 KV heads, LayerNorm1P with biases, squared-ReLU
    # MLP of 768 (ffn_up, ffn_down; no gate), no biases, untied 384 tokens (src/models/nemotron.cpp)
    tensors = head(256, 384, tied=False)
    tensors["output_norm.bias"] = t(256)
    for i in range(2):
        p = f"blk.{i}."
        tensors.update(attention(p, 256, 256, 128))
        tensors.update({p + "attn_norm.weight": t(256), p + "attn_norm.bias": t(256), p + "ffn_norm.weight": t(256),
                        p + "ffn_norm.bias": t(256), p + "ffn_up.weight": t(256, 768),
                        p + "ffn_down.weight": t(768, 256)})
    # norm_eps twice: TextModel writes it as layer_norm_rms_epsilon, NemotronModel as layer_norm_epsilon
    kv = base_kv(2, 256, 768, 4, 2, **{"attention.layer_norm_rms_epsilon": (F32, 1e-5), "vocab_size": (U32, 384),
                                       "attention.layer_norm_epsilon": (F32, 1e-5), "rope.dimension_count": (U32, 32),
                                       "rope.scaling.type": (gguf.GGUFValueType.STRING, "none")})
    config = {"model_type": "nemotron", "vocab_size": 384, "hidden_size": 256, "intermediate_size": 768,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "partial_rotary_factor": 0.5,
              "norm_eps": 1e-5, "max_position_embeddings": 4096, "tie_word_embeddings": False}
    return "nemotron", kv, tensors, config


def _gpt2():
    # GPT-2: 2 layers, hidden 256, 4 heads, MLP 4 x 256 = 1024, 512 learned positions, LayerNorms and linears with
    # biases, the fused attn_qkv of 3 x 256, the head tied (no output.weight), 320 tokens (src/models/gpt2.cpp)
    tensors = {"token_embd.weight": t(256, 320), "position_embd.weight": t(256, 512), "output_norm.weight": t(256),
               "output_norm.bias": t(256)}
    for i in range(2):
        p = f"blk.{i}."
        tensors.update({p + "attn_norm.weight": t(256), p + "attn_norm.bias": t(256),
                        p + "attn_qkv.weight": t(256, 768), p + "attn_qkv.bias": t(768),
                        p + "attn_output.weight": t(256, 256), p + "attn_output.bias": t(256),
                        p + "ffn_norm.weight": t(256), p + "ffn_norm.bias": t(256),
                        p + "ffn_up.weight": t(256, 1024), p + "ffn_up.bias": t(1024),
                        p + "ffn_down.weight": t(1024, 256), p + "ffn_down.bias": t(256)})
    kv = base_kv(2, 256, 1024, 4, ctx=512, **{"attention.layer_norm_epsilon": (F32, 1e-5)})
    config = {"model_type": "gpt2", "vocab_size": 320, "n_embd": 256, "n_layer": 2, "n_head": 4, "n_inner": None,
              "n_positions": 512, "n_ctx": 512, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    return "gpt2", kv, tensors, config


def _fused_qkv_layernorm_layer(p, hidden, ff, *, ffn_norm=True):
    """A layer of LayerNorms and linears with biases, the q, k, v fused in attn_qkv (GPT-NeoX, BLOOM)."""
    out = {p + "attn_norm.weight": t(hidden), p + "attn_norm.bias": t(hidden),
           p + "attn_qkv.weight": t(hidden, 3 * hidden), p + "attn_qkv.bias": t(3 * hidden),
           p + "attn_output.weight": t(hidden, hidden), p + "attn_output.bias": t(hidden),
           p + "ffn_up.weight": t(hidden, ff), p + "ffn_up.bias": t(ff),
           p + "ffn_down.weight": t(ff, hidden), p + "ffn_down.bias": t(hidden)}
    if ffn_norm:
        out.update({p + "ffn_norm.weight": t(hidden), p + "ffn_norm.bias": t(hidden)})
    return out


def _gptneox():
    # Pythia-style GPT-NeoX: 2 layers, hidden 256, 4 heads, MLP 1024, rotary_pct 0.25 (rope.dimension_count 16),
    # untied 352 tokens (src/models/gptneox.cpp: output.weight required)
    tensors = head(256, 352, tied=False)
    tensors["output_norm.bias"] = t(256)
    for i in range(2):
        tensors.update(_fused_qkv_layernorm_layer(f"blk.{i}.", 256, 1024))
    kv = base_kv(2, 256, 1024, 4, ctx=2048, **{"rope.dimension_count": (U32, 16),
                                               "use_parallel_residual": (BOOL, True),
                                               "attention.layer_norm_epsilon": (F32, 1e-5)})
    config = {"model_type": "gpt_neox", "vocab_size": 352, "hidden_size": 256, "intermediate_size": 1024,
              "num_hidden_layers": 2, "num_attention_heads": 4, "rotary_pct": 0.25, "use_parallel_residual": True,
              "layer_norm_eps": 1e-5, "max_position_embeddings": 2048, "tie_word_embeddings": False}
    return "gptneox", kv, tensors, config


def _bloom():
    # BLOOM: 2 layers, hidden 256, 4 heads, MLP 4 x 256, the embedding's LayerNorm token_embd_norm, the head tied,
    # 384 tokens (src/models/bloom.cpp)
    tensors = {"token_embd.weight": t(256, 384), "token_embd_norm.weight": t(256), "token_embd_norm.bias": t(256),
               "output_norm.weight": t(256), "output_norm.bias": t(256)}
    for i in range(2):
        tensors.update(_fused_qkv_layernorm_layer(f"blk.{i}.", 256, 1024))
    # context_length: BloomModel writes seq_length or, without one, n_embed (256 here)
    kv = base_kv(2, 256, 1024, 4, 4, ctx=256, **{"attention.layer_norm_epsilon": (F32, 1e-5)})
    config = {"model_type": "bloom", "vocab_size": 384, "n_embed": 256, "n_layer": 2, "n_head": 4,
              "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    return "bloom", kv, tensors, config


def _phi2():
    # Phi-2: 2 layers, hidden 256, 4 heads, MLP 4 x 256, one LayerNorm a layer (parallel attention and MLP), q, k, v,
    # dense, fc1, fc2 and the head with biases, untied 400 tokens (src/models/phi2.cpp)
    tensors = head(256, 400, tied=False)
    tensors.update({"output_norm.bias": t(256), "output.bias": t(400)})
    for i in range(2):
        p = f"blk.{i}."
        tensors.update(attention(p, 256, 256, 256, bias=True))
        tensors.update({p + "attn_norm.weight": t(256), p + "attn_norm.bias": t(256), p + "attn_output.bias": t(256),
                        p + "ffn_up.weight": t(256, 1024), p + "ffn_up.bias": t(1024),
                        p + "ffn_down.weight": t(1024, 256), p + "ffn_down.bias": t(256)})
    kv = base_kv(2, 256, 1024, 4, 4, ctx=2048, **{"attention.layer_norm_epsilon": (F32, 1e-5),
                                                  "rope.dimension_count": (U32, 32)})
    config = {"model_type": "phi", "vocab_size": 400, "hidden_size": 256, "intermediate_size": 1024,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "partial_rotary_factor": 0.5,
              "layer_norm_eps": 1e-5, "max_position_embeddings": 2048, "tie_word_embeddings": False}
    return "phi2", kv, tensors, config


def _falcon(kv_heads: int, norms: int, config: dict):
    """A two-layer Falcon of hidden 256, 8 heads of 32, MLP 4 x 256, ``kv_heads`` KV heads in the fused attn_qkv
    (256 + 2 x 32 x kv_heads), ``norms`` LayerNorms before the parallel block (attn_norm, attn_norm_2), no biases, the
    head tied, 320 tokens (src/models/falcon.cpp); ``config`` the config.json's own keys."""
    tensors = {"token_embd.weight": t(256, 320), "output_norm.weight": t(256), "output_norm.bias": t(256)}
    for i in range(2):
        p = f"blk.{i}."
        tensors.update({p + "attn_norm.weight": t(256), p + "attn_norm.bias": t(256),
                        p + "attn_qkv.weight": t(256, 256 + 2 * 32 * kv_heads), p + "attn_output.weight": t(256, 256),
                        p + "ffn_up.weight": t(256, 1024), p + "ffn_down.weight": t(1024, 256)})
        if norms == 2:
            tensors.update({p + "attn_norm_2.weight": t(256), p + "attn_norm_2.bias": t(256)})
    kv = base_kv(2, 256, 1024, 8, kv_heads, ctx=2048, **{"attention.layer_norm_epsilon": (F32, 1e-5)})
    return "falcon", kv, tensors, {"model_type": "falcon", "vocab_size": 320, "hidden_size": 256,
                                   "num_hidden_layers": 2, "num_attention_heads": 8, "layer_norm_epsilon": 1e-5,
                                   "parallel_attn": True, "bias": False, **config}


def _mamba(falcon: bool):
    """Mamba-1: 2 layers, hidden 256, inner 512 (expand 2), state 16, kernel 4, time-step rank 16 (ceil(256 / 16)),
    the head tied, 320 tokens (src/models/mamba.cpp: ssm_in of 2 x inner, ssm_x of rank + 2 x state, ssm_a and
    ssm_conv1d F32); ``falcon``: Falcon-Mamba, the same shapes with ssm.dt_b_c_rms true."""
    f32 = np.float32
    tensors = head(256, 320, tied=True)
    for i in range(2):
        p = f"blk.{i}."
        tensors.update({p + "attn_norm.weight": t(256), p + "ssm_in.weight": t(256, 1024),
                        p + "ssm_conv1d.weight": np.zeros((512, 4), f32), p + "ssm_conv1d.bias": t(512),
                        p + "ssm_x.weight": t(512, 16 + 2 * 16), p + "ssm_dt.weight": t(16, 512),
                        p + "ssm_dt.bias": t(512), p + "ssm_a": np.zeros((512, 16), f32), p + "ssm_d": t(512),
                        p + "ssm_out.weight": t(512, 256)})
    # MambaModel.set_gguf_parameters: context 2**20, feed_forward_length and head_count 0
    kv = base_kv(2, 256, 0, 0, ctx=2 ** 20, **{"ssm.conv_kernel": (U32, 4), "ssm.inner_size": (U32, 512),
                                               "ssm.state_size": (U32, 16), "ssm.time_step_rank": (U32, 16),
                                               "attention.layer_norm_rms_epsilon": (F32, 1e-5),
                                               "ssm.dt_b_c_rms": (BOOL, falcon)})
    config = {"model_type": "falcon_mamba" if falcon else "mamba", "vocab_size": 320, "hidden_size": 256,
              "num_hidden_layers": 2, "intermediate_size": 512, "expand": 2, "state_size": 16, "conv_kernel": 4,
              "time_step_rank": 16, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    return "mamba", kv, tensors, config


def _phimoe():
    # Phi-3.5-MoE: 2 layers, hidden 256, 4 heads of 64, 2 KV heads, LayerNorms with biases, q/k/v/o biases, 4 experts
    # of 192, 2 used, the head with a bias, untied 352 tokens, LongRoPE's factors rope_factors_long and
    # rope_factors_short of head / 2 (src/models/phimoe.cpp)
    tensors = head(256, 352, tied=False)
    tensors.update({"output_norm.bias": t(256), "output.bias": t(352), "rope_factors_long.weight": t(32),
                    "rope_factors_short.weight": t(32)})
    for i in range(2):
        p = f"blk.{i}."
        tensors.update(attention(p, 256, 256, 128, bias=True))
        tensors.update({p + "attn_output.bias": t(256), p + "attn_norm.weight": t(256), p + "attn_norm.bias": t(256),
                        p + "ffn_norm.weight": t(256), p + "ffn_norm.bias": t(256)})
        tensors.update(experts(p, 256, 192, 4))
    kv = base_kv(2, 256, 192, 4, 2, ctx=131072, **{"rope.scaling.original_context_length": (U32, 4096),
                                                   "attention.layer_norm_rms_epsilon": (F32, 1e-5),
                                                   "rope.dimension_count": (U32, 64), "rope.freq_base": (F32, 10000.0),
                                                   "attention.sliding_window": (U32, 131072),
                                                   "expert_used_count": (U32, 2), "expert_count": (U32, 4)})
    config = {"model_type": "phimoe", "vocab_size": 352, "hidden_size": 256, "intermediate_size": 192,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
              "num_experts_per_tok": 2, "attention_bias": True, "lm_head_bias": True, "rms_norm_eps": 1e-5,
              "rope_theta": 10000.0, "max_position_embeddings": 131072, "tie_word_embeddings": False}
    return "phimoe", kv, tensors, config


def _cohere2():
    # Command R7B: 8 layers (every fourth full, the others a window of 512: llama.cpp's pattern without a
    # sliding_window_pattern key), hidden 256, 4 heads of 64, 2 KV heads, MLP 512, LayerNorms without biases, the head
    # always the token embedding, 448 tokens (src/models/cohere2.cpp)
    tensors = head(256, 448, tied=True)
    for i in range(8):
        p = f"blk.{i}."
        tensors.update(attention(p, 256, 256, 128))
        tensors[p + "attn_norm.weight"] = t(256)
        tensors.update(mlp(p, 256, 512))
    kv = base_kv(8, 256, 512, 4, 2, ctx=8192, **{"logit_scale": (F32, 0.25), "attention.sliding_window": (U32, 512),
                                                  "vocab_size": (U32, 448), "rope.dimension_count": (U32, 64),
                                                  "attention.layer_norm_epsilon": (F32, 1e-5),
                                                  "rope.scaling.type": (gguf.GGUFValueType.STRING, "none")})
    config = {"model_type": "cohere2", "vocab_size": 448, "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2, "sliding_window": 512,
              "sliding_window_pattern": 4, "logit_scale": 0.25, "layer_norm_eps": 1e-5,
              "max_position_embeddings": 8192, "tie_word_embeddings": True}
    return "cohere2", kv, tensors, config


def _exaone():
    # EXAONE 3.5: 2 layers, hidden 256, 4 heads of 64, 2 KV heads, MLP 640, untied 512 tokens, llama3 RoPE scaling
    # as the rope_freqs tensor of head / 2 (conversion/exaone.py generate_extra_tensors; src/models/exaone.cpp)
    tensors = head(256, 512, tied=False)
    tensors["rope_freqs.weight"] = t(32)
    tensors.update(llama_layers(2, 256, 256, 128, 640))
    kv = base_kv(2, 256, 640, 4, 2, ctx=32768, **{"rope.freq_base": (F32, 1000000.0),
                                                  "attention.layer_norm_rms_epsilon": (F32, 1e-5),
                                                  "rope.dimension_count": (U32, 64)})
    config = {"model_type": "exaone", "vocab_size": 512, "hidden_size": 256, "intermediate_size": 640,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rope_theta": 1000000.0,
              "rms_norm_eps": 1e-5, "max_position_embeddings": 32768, "tie_word_embeddings": False}
    return "exaone", kv, tensors, config


CASES = {
    "seed_oss": _seed_oss, "smollm3": _smollm3, "olmo": _olmo, "olmoe": _olmoe,
    "stablelm": lambda: _stablelm(False), "stablelm-2-12b-parallel": lambda: _stablelm(True),
    "granitemoe": lambda: _granitemoe(False), "granitemoeshared": lambda: _granitemoe(True),
    "ernie4_5": _ernie4_5, "glm4": _glm4, "nemotron": _nemotron,
    "gpt2": _gpt2, "gptneox": _gptneox, "bloom": _bloom, "phi2": _phi2,
    # Falcon-7B: one KV head (multi_query), one LayerNorm
    "falcon-7b": lambda: _falcon(1, 1, {"multi_query": True, "new_decoder_architecture": False}),
    # Falcon-40B: the new decoder architecture, 2 KV heads, ln_attn and ln_mlp (num_ln_in_parallel_attn unset: 2)
    "falcon-40b": lambda: _falcon(2, 2, {"new_decoder_architecture": True, "num_kv_heads": 2}),
    # Falcon2-11B: the new decoder architecture with one LayerNorm
    "falcon2-11b": lambda: _falcon(2, 1, {"new_decoder_architecture": True, "num_kv_heads": 2,
                                          "num_ln_in_parallel_attn": 1}),
    "mamba": lambda: _mamba(False), "falcon-mamba": lambda: _mamba(True), "phimoe": _phimoe,
    "cohere2": _cohere2, "exaone": _exaone,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_converted_file_is_its_config_json(case, tmp_path):
    arch, kv, tensors, config = CASES[case]()
    path = tmp_path / f"{case}.gguf"
    write(path, arch, kv, tensors)
    (tmp_path / "config.json").write_text(json.dumps(config))
    reg = Registry()
    from_gguf, by_hand = reg.model(str(path)), reg.model(str(tmp_path / "config.json"))
    assert from_gguf.model_type == by_hand.model_type == config["model_type"]
    assert from_gguf.family == by_hand.family
    assert dict(from_gguf.facts) == dict(by_hand.facts)
    assert dict(from_gguf.params_by_group) == dict(by_hand.params_by_group)
    # the model's parameters are the elements of the tensors llama.cpp loads (a tied head: the embedding once), but
    # the RoPE factors (rope_freqs, rope_factors_*), which the converter computes from the config: no parameters
    params = sum(a.size for name, a in tensors.items() if not name.startswith("rope_"))
    assert from_gguf.params_total == by_hand.params_total == params
    # llama.cpp's weights are the tensors' bytes as stored: F16 matrices and F32 vectors, numpy's own count
    e = vramwise.estimate(str(path), profile="llama.cpp", n_gpu_layers=0)
    assert e.weights == sum(a.nbytes for a in tensors.values())


def test_a_cohere2_file_with_a_window_pattern_is_refused(tmp_path):
    """A sliding_window_pattern array (one flag a layer) is what llama.cpp's load_swa_pattern would read instead of
    its every-fourth-layer default; the table refuses it in one line rather than guess the layers."""
    arch, kv, tensors, _ = _cohere2()
    kv["{arch}.attention.sliding_window_pattern"] = (gguf.GGUFValueType.ARRAY, [True, True, True, False] * 2)
    w = gguf.GGUFWriter(tmp_path / "m.gguf", arch)
    for key, (kind, value) in kv.items():
        w.add_key_value(key.replace("{arch}", arch), value, kind,
                        sub_type=gguf.GGUFValueType.BOOL if kind == gguf.GGUFValueType.ARRAY else None)
    finish(w, tensors)
    with pytest.raises(ConfigError) as e:
        vramwise.load_model(str(tmp_path / "m.gguf"))
    msg = str(e.value)
    assert "has metadata cohere2.attention.sliding_window_pattern: the file gives each layer's window flag" in msg
    assert "\n" not in msg
