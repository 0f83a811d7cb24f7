"""What llama.cpp itself allocates for small GGUF files, as JSON: the reference for
tests/unit/profiles/test_llama_cpp_reference.py.

What: for each case (a GGUF file of random weights and a set of context settings), the bytes of every buffer
llama.cpp allocates on the CPU when it loads the model and creates a context: the model's weights, the context's
memory (the KV cache, and the recurrent state of a model with recurrent layers: lfm2's short convolutions, mamba2)
and the compute buffer (exact, from llama_get_memory_breakdown), the output buffer (exact, the size of
llama_context::buf_output, checked against its log line "CPU  output buffer size = %8.2f MiB"), the log's
buffer lines as printed (0.01 MiB), and n_ctx, n_ctx_seq, n_batch and n_ubatch as the context reports them.

How: each architecture's file is written in F32 with the gguf package (the shapes and metadata below, weights
drawn from a seeded generator, a tokenizer of plain tokens), then quantized by llama.cpp's own quantizer
(llama_cpp.llama_model_quantize: F16, Q8_0, Q4_0, Q4_K_M; one file, whose biases need alignment padding, is kept
in F32). Each file is loaded on the CPU (n_gpu_layers 0, memory-mapped, and a few without the map;
use_extra_bufts off, so no weight is repacked into a second buffer) and a context is created under each setting
of the grid (n_ctx, n_seq_max, kv_unified, type_k / type_v, flash_attn, n_batch, n_ubatch; swa_full off as in
llama.cpp's tools, common/common.h). The per-buffer-type figures come from llama_get_memory_breakdown
(src/llama-ext.h), a C++ function: a small shim compiled here with g++ against the vendored headers returns them
through ctypes, and the output buffer's size (a private member of llama_context, src/llama-context.h, which the
API does not report) the same way. The fixture keeps each file's metadata and tensor table (names, ggml shapes,
types, bytes; a metadata array of one value a layer, such as lfm2's head_count_kv, whole) so that the tests write the
same header again without llama.cpp.

llama-cpp-python 0.3.36 (its sdist vendors ggml-org/llama.cpp at 0c1e57098, release b11312, CHANGELOG.md),
built for the CPU in a virtual environment of its own, with gguf 0.19.0 (the project's):

    python3 -m venv /work/llamacpp-venv
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF \\
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \\
        /work/llamacpp-venv/bin/pip install llama-cpp-python==0.3.36 gguf==0.19.0
    /work/llamacpp-venv/bin/python scripts/llama_cpp_reference.py --llama-src <sdist>/vendor/llama.cpp \\
        > tests/fixtures/llama_cpp_reference.json

The build takes about 6 minutes on two cores, the recording under a minute; its output is the same from run to
run. The random files are written to a temporary folder and removed.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np

import llama_cpp

# llama-cpp-python 0.3.36 CHANGELOG.md: "update llama.cpp to ggml-org/llama.cpp@0c1e57098" (release b11312)
LLAMA_CPP_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
VOCAB_SPECIAL = ["<unk>", "<s>", "</s>"]

# Each architecture: metadata (beside general.architecture and the tokenizer) and tensors, ggml order
# ([row length, rows, ...]). The vocabularies are large enough for the output buffer's log line (0.01 MiB), which
# the exact figure is checked against, to say something. Shapes are multiples of 256 where a K-quant needs it, and
# every tensor is a multiple of 32 bytes in every type used, so the model buffer has no alignment padding between
# tensors; ODD below has some that are not.
ARCHS = {
    "llama": dict(
        name="llama-gqa", vocab=32000, tied=False,
        meta={"block_count": 2, "context_length": 4096, "embedding_length": 256, "feed_forward_length": 512,
              "attention.head_count": 4, "attention.head_count_kv": 2, "attention.layer_norm_rms_epsilon": 1e-5,
              "rope.freq_base": 10000.0},
        layer={"attn_norm.weight": [256], "attn_q.weight": [256, 256], "attn_k.weight": [256, 128],
               "attn_v.weight": [256, 128], "attn_output.weight": [256, 256], "ffn_norm.weight": [256],
               "ffn_gate.weight": [256, 512], "ffn_up.weight": [256, 512], "ffn_down.weight": [512, 256]}),
    "qwen2": dict(
        name="qwen2-tied", vocab=16384, tied=True,
        meta={"block_count": 3, "context_length": 8192, "embedding_length": 256, "feed_forward_length": 768,
              "attention.head_count": 4, "attention.head_count_kv": 1, "attention.layer_norm_rms_epsilon": 1e-6,
              "rope.freq_base": 1000000.0},
        layer={"attn_norm.weight": [256], "attn_q.weight": [256, 256], "attn_q.bias": [256],
               "attn_k.weight": [256, 64], "attn_k.bias": [64], "attn_v.weight": [256, 64], "attn_v.bias": [64],
               "attn_output.weight": [256, 256], "ffn_norm.weight": [256], "ffn_gate.weight": [256, 768],
               "ffn_up.weight": [256, 768], "ffn_down.weight": [768, 256]}),
    "gemma2": dict(
        name="gemma2-swa", vocab=8192, tied=True,
        meta={"block_count": 4, "context_length": 8192, "embedding_length": 256, "feed_forward_length": 512,
              "attention.head_count": 4, "attention.head_count_kv": 2, "attention.key_length": 64,
              "attention.value_length": 64, "attention.layer_norm_rms_epsilon": 1e-6,
              "attention.sliding_window": 512, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
        layer={"attn_norm.weight": [256], "attn_q.weight": [256, 256], "attn_k.weight": [256, 128],
               "attn_v.weight": [256, 128], "attn_output.weight": [256, 256], "post_attention_norm.weight": [256],
               "ffn_norm.weight": [256], "ffn_gate.weight": [256, 512], "ffn_up.weight": [256, 512],
               "ffn_down.weight": [512, 256], "post_ffw_norm.weight": [256]}),
    "qwen3moe": dict(
        name="qwen3moe", vocab=12288, tied=False,
        meta={"block_count": 2, "context_length": 4096, "embedding_length": 256, "feed_forward_length": 768,
              "attention.head_count": 4, "attention.head_count_kv": 2, "attention.key_length": 64,
              "attention.value_length": 64, "attention.layer_norm_rms_epsilon": 1e-6, "expert_count": 4,
              "expert_used_count": 2, "expert_feed_forward_length": 256, "rope.freq_base": 1000000.0},
        layer={"attn_norm.weight": [256], "attn_q.weight": [256, 256], "attn_k.weight": [256, 128],
               "attn_v.weight": [256, 128], "attn_output.weight": [256, 256], "attn_q_norm.weight": [64],
               "attn_k_norm.weight": [64], "ffn_norm.weight": [256], "ffn_gate_inp.weight": [256, 4],
               "ffn_gate_exps.weight": [256, 256, 4], "ffn_up_exps.weight": [256, 256, 4],
               "ffn_down_exps.weight": [256, 256, 4]}),
    # DeepSeek-V3-style MLA (conversion/deepseek.py DeepseekV2Model.set_gguf_parameters: head_count_kv 1, key_length
    # kv_lora_rank + qk_rope_head_dim, value_length kv_lora_rank, key_length_mla qk_nope + qk_rope, value_length_mla
    # v_head_dim; k_b and v_b split from kv_b_proj in modify_tensors): kv_lora_rank 192, qk_rope 64, qk_nope 64, v_head
    # 64, q_lora_rank 256, 4 heads; the first layer dense, then 8 routed experts of 256 (2 used, sigmoid gating with
    # its bias) and one shared expert
    "deepseek2": dict(
        name="deepseek2-mla", vocab=8192, tied=False,
        meta={"block_count": 3, "context_length": 4096, "embedding_length": 256, "feed_forward_length": 512,
              "attention.head_count": 4, "attention.head_count_kv": 1, "rope.freq_base": 10000.0,
              "attention.layer_norm_rms_epsilon": 1e-6, "expert_count": 8, "expert_used_count": 2,
              "leading_dense_block_count": 1, "vocab_size": 8192, "attention.q_lora_rank": 256,
              "attention.kv_lora_rank": 192, "attention.key_length": 256, "attention.value_length": 192,
              "attention.key_length_mla": 128, "attention.value_length_mla": 64,
              "expert_feed_forward_length": 256, "expert_shared_count": 1, "expert_weights_scale": 2.5,
              "expert_weights_norm": True, "expert_gating_func": 2, "rope.dimension_count": 64},
        layers=[{**(attn := {"attn_norm.weight": [256], "attn_q_a_norm.weight": [256], "attn_kv_a_norm.weight": [192],
                             "attn_q_a.weight": [256, 256], "attn_q_b.weight": [256, 512],
                             "attn_kv_a_mqa.weight": [256, 256], "attn_k_b.weight": [64, 192, 4],
                             "attn_v_b.weight": [192, 64, 4], "attn_output.weight": [256, 256],
                             "ffn_norm.weight": [256]}),
                 "ffn_gate.weight": [256, 512], "ffn_down.weight": [512, 256], "ffn_up.weight": [256, 512]}]
               + [{**attn, "ffn_gate_inp.weight": [256, 8], "exp_probs_b.bias": [8],
                   "ffn_gate_exps.weight": [256, 256, 8], "ffn_up_exps.weight": [256, 256, 8],
                   "ffn_down_exps.weight": [256, 256, 8], "ffn_gate_shexp.weight": [256, 256],
                   "ffn_down_shexp.weight": [256, 256], "ffn_up_shexp.weight": [256, 256]}] * 2),
    # LFM2 (conversion/lfm2.py LFM2Model.set_gguf_parameters: head_count_kv one a layer, 0 for a short-convolution
    # layer; vocab_size, shortconv.l_cache, the adjusted feed_forward_length; the final norm is token_embd_norm, the
    # head tied): two convolution layers of kernel 3 and two attention layers, 4 heads, 2 KV heads of 64
    "lfm2": dict(
        name="lfm2-hybrid", vocab=8192, tied=True, output_norm="token_embd_norm.weight",
        meta={"block_count": 4, "context_length": 8192, "embedding_length": 256, "feed_forward_length": 512,
              "attention.head_count": 4, "attention.head_count_kv": [0, 2, 0, 2], "rope.freq_base": 1000000.0,
              "attention.layer_norm_rms_epsilon": 1e-5, "vocab_size": 8192, "shortconv.l_cache": 3},
        layers=[{**(ffn := {"ffn_norm.weight": [256], "ffn_gate.weight": [256, 512], "ffn_down.weight": [512, 256],
                            "ffn_up.weight": [256, 512], "attn_norm.weight": [256]}),
                 **({"shortconv.conv.weight": [3, 256], "shortconv.in_proj.weight": [256, 768],
                     "shortconv.out_proj.weight": [256, 256]} if kind == "conv" else
                    {"attn_q_norm.weight": [64], "attn_k_norm.weight": [64], "attn_q.weight": [256, 256],
                     "attn_k.weight": [256, 128], "attn_v.weight": [256, 128], "attn_output.weight": [256, 256]})}
                for kind in ["conv", "attn", "conv", "attn"]]),
    # Mamba-2, attention-free (conversion/mamba.py Mamba2Model.set_gguf_parameters: context_length 2**20,
    # feed_forward_length and head_count 0, ssm.conv_kernel, ssm.inner_size, ssm.state_size, ssm.time_step_rank the
    # heads, d_inner / head_dim, ssm.group_count; A and D unsqueezed to [1, heads], the norm reshaped to groups):
    # hidden 256, inner 512 (8 heads of 64), 2 groups of state 64, kernel 4; conv channels 512 + 2 x 2 x 64 = 768,
    # in_proj 512 + 768 + 8 = 1288
    "mamba2": dict(
        name="mamba2-ssm", vocab=8192, tied=False,
        meta={"block_count": 3, "context_length": 2 ** 20, "embedding_length": 256, "feed_forward_length": 0,
              "attention.head_count": 0, "ssm.conv_kernel": 4, "ssm.inner_size": 512, "ssm.state_size": 64,
              "ssm.time_step_rank": 8, "ssm.group_count": 2, "attention.layer_norm_rms_epsilon": 1e-5},
        layer={"attn_norm.weight": [256], "ssm_in.weight": [256, 1288], "ssm_conv1d.weight": [4, 768],
               "ssm_conv1d.bias": [768], "ssm_dt.bias": [8], "ssm_a": [1, 8], "ssm_d": [1, 8],
               "ssm_norm.weight": [256, 2], "ssm_out.weight": [512, 256]}),
}

# A Qwen2 of hidden size 200 kept in F32: biases of 50 and norms of 200 values (200 and 800 bytes) are not multiples
# of 32 bytes, so llama.cpp's model buffer holds padding after them (the GGUF's alignment in the map, the CPU buffer's
# when allocated).
ODD = ("qwen2", dict(
    name="qwen2-odd", vocab=1000, tied=True,
    meta={"block_count": 2, "context_length": 4096, "embedding_length": 200, "feed_forward_length": 300,
          "attention.head_count": 4, "attention.head_count_kv": 1, "attention.layer_norm_rms_epsilon": 1e-6,
          "rope.freq_base": 1000000.0},
    layer={"attn_norm.weight": [200], "attn_q.weight": [200, 200], "attn_q.bias": [200],
           "attn_k.weight": [200, 50], "attn_k.bias": [50], "attn_v.weight": [200, 50], "attn_v.bias": [50],
           "attn_output.weight": [200, 200], "ffn_norm.weight": [200], "ffn_gate.weight": [200, 300],
           "ffn_up.weight": [200, 300], "ffn_down.weight": [300, 200]}))

QUANTS = {"F16": llama_cpp.LLAMA_FTYPE_MOSTLY_F16, "Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
          "Q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0, "Q4_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M}
FILES = {"llama-gqa": ["F16", "Q8_0", "Q4_0", "Q4_K_M"], "qwen2-tied": ["F16", "Q4_K_M"], "gemma2-swa": ["F16", "Q8_0"],
         "qwen3moe": ["F16", "Q4_K_M"], "deepseek2-mla": ["F16", "Q4_K_M"], "lfm2-hybrid": ["F16", "Q8_0"],
         "mamba2-ssm": ["F16", "Q8_0"],
         "qwen2-odd": ["F32"]}  # F32: the file as written, not quantized

CACHE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}
FLASH = {"auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
         "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED}
DEFAULTS = dict(n_ctx=4096, n_parallel=1, kv_unified=False, cache_type_k="f16", cache_type_v="f16", flash_attn="auto",
                n_batch=2048, n_ubatch=512)
GRID = [
    {},
    {"n_ctx": 5000},                                              # padded to 5120
    {"n_ctx": 0},                                                 # the training context
    {"n_ctx": 4100, "n_parallel": 4},                             # a stream each, n_ctx_seq padded
    {"n_ctx": 4100, "n_parallel": 4, "kv_unified": True},
    {"n_ctx": 3000, "n_parallel": 3},
    {"cache_type_k": "q8_0", "cache_type_v": "q8_0", "flash_attn": "on"},
    {"cache_type_k": "q4_0", "cache_type_v": "q5_1", "flash_attn": "on"},
    {"cache_type_k": "q4_0", "cache_type_v": "f32", "flash_attn": "off"},
    {"cache_type_k": "bf16", "cache_type_v": "iq4_nl", "flash_attn": "on"},
    {"flash_attn": "off"},
    {"flash_attn": "on"},
    {"n_batch": 512, "n_ubatch": 128},
    {"n_batch": 1024, "n_ubatch": 1024},
    {"n_ctx": 1024, "n_batch": 2048, "n_ubatch": 512, "n_parallel": 2},
    {"n_ctx": 8192, "n_ubatch": 256, "n_parallel": 2, "kv_unified": True},
    {"cache_type_v": "q8_0", "flash_attn": "off"},                # refused: a quantized V cache needs flash attention
]
# the full grid on the F16 files; a few settings on the others
SHORT_GRID = [0, 3, 6, 12]
# more settings for one file: an MLA model takes its K and V caches of one type only (the grid's mixed pairs are
# refused), so its latent K cache is also recorded in q4_0, bf16 and f32
MORE = {"deepseek2-mla-F16": [{"cache_type_k": "q4_0", "cache_type_v": "q4_0", "flash_attn": "on"},
                              {"cache_type_k": "bf16", "cache_type_v": "bf16", "flash_attn": "on"},
                              {"cache_type_k": "f32", "cache_type_v": "f32", "flash_attn": "off"}]}

SHIM = r"""
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>
// the output buffer is a private member of llama_context: read its size through the class's own header
#define private public
#include "llama-context.h"
#undef private

extern "C" int vw_memory_breakdown(const llama_context * ctx, char * names, int name_len,
                                   unsigned long long * out, int max) {
    llama_memory_breakdown mb = llama_get_memory_breakdown(ctx);
    int i = 0;
    for (const auto & [buft, d] : mb) {
        if (i >= max) break;
        std::strncpy(names + i*name_len, ggml_backend_buft_name(buft), name_len - 1);
        out[3*i + 0] = d.model;
        out[3*i + 1] = d.context;
        out[3*i + 2] = d.compute;
        i++;
    }
    return i;
}

extern "C" unsigned long long vw_output_buffer(const llama_context * ctx) {
    return ctx->buf_output ? ggml_backend_buffer_get_size(ctx->buf_output.get()) : 0;
}
"""

LOG: list[str] = []


@llama_cpp.llama_log_callback
def _log(level, text, user_data):
    LOG.append(text.decode("utf-8", "replace"))


def build_shim(llama_src: Path, work: Path, source: str = SHIM, name: str = "shim") -> ctypes.CDLL:
    """Compile ``source`` (the shim, or the shim with more beside it) against llama-cpp-python's libraries."""
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    src = work / f"{name}.cpp"
    src.write_text(source)
    out = work / f"libvw{name}.so"
    subprocess.run(["g++", "-std=c++17", "-O1", "-DNDEBUG", "-shared", "-fPIC", str(src), "-o", str(out),
                    f"-I{llama_src / 'include'}", f"-I{llama_src / 'ggml' / 'include'}", f"-I{llama_src / 'src'}",
                    f"-L{lib_dir}", "-lllama", "-lggml-base", f"-Wl,-rpath,{lib_dir}"], check=True)
    lib = ctypes.CDLL(str(out))
    lib.vw_memory_breakdown.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                        ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_int]
    lib.vw_memory_breakdown.restype = ctypes.c_int
    lib.vw_output_buffer.argtypes = [ctypes.c_void_p]
    lib.vw_output_buffer.restype = ctypes.c_ulonglong
    return lib


def write_f32(arch: str, spec: dict, path: Path, seed: int) -> None:
    """The architecture's model in F32 with random weights (normal, sd 0.02; norms 1)."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(spec["name"])
    for key, value in spec["meta"].items():
        full = f"{arch}.{key}"
        if isinstance(value, bool):
            w.add_bool(full, value)
        elif isinstance(value, float):
            w.add_float32(full, value)
        elif isinstance(value, list):  # one a layer, as the converter writes it (add_array: INT32 items)
            w.add_array(full, value)
        else:
            w.add_uint32(full, value)
    w.add_tokenizer_model("llama")
    tokens = VOCAB_SPECIAL + [f"t{i}" for i in range(spec["vocab"] - len(VOCAB_SPECIAL))]
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([2, 3, 3] + [1] * (len(tokens) - 3))  # unknown, control x2, normal
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    hidden = spec["meta"]["embedding_length"]

    def tensor(name, shape):
        if len(shape) == 1 and "norm" in name:
            data = np.ones(shape, np.float32)
        else:
            data = (rng.standard_normal(tuple(reversed(shape))) * 0.02).astype(np.float32)
        w.add_tensor(name, data)

    tensor("token_embd.weight", [hidden, spec["vocab"]])
    tensor(spec.get("output_norm", "output_norm.weight"), [hidden])
    if not spec["tied"]:
        tensor("output.weight", [hidden, spec["vocab"]])
    layers = spec.get("layers") or [spec["layer"]] * spec["meta"]["block_count"]
    for i, layer in enumerate(layers):
        for name, shape in layer.items():
            tensor(f"blk.{i}.{name}", shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize(src: Path, dst: Path, ftype: int) -> None:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src.name}, {ftype}) returned {rc}")


def load_on_cpu(arch: str, spec: dict, name: str, quant: str, work: Path) -> tuple[Path, object]:
    """One of the files above written in F32 (seed 0) into ``work`` as ``NAME-F32.gguf``, quantized by llama.cpp to
    ``quant`` unless it is F32, and loaded with every layer on the CPU: (the file, the llama_model). The tools beside
    this script (llama_cpp_placements.py, llama_cpp_graphs.py) inspect one file loaded this way."""
    path = work / f"{name}-F32.gguf"
    write_f32(arch, spec, path, 0)
    if quant != "F32":
        quantized = work / f"{name}-{quant}.gguf"
        quantize(path, quantized, QUANTS[quant])
        path = quantized
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 0
    return path, llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)


def describe(path: Path, arch: str, quant: str, spec: dict) -> dict:
    """The file's header as the tests need it: metadata (the tokenizer's arrays as their lengths), tensor table."""
    r = gguf.GGUFReader(str(path))
    meta, arrays, array_values = [], {}, {}
    for field in r.fields.values():
        if field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            arrays[field.name] = len(field.data)
            if not field.name.startswith("tokenizer."):  # a value a layer: kept whole
                array_values[field.name] = [field.types[1].name, [int(v) for v in field.contents()]]
            continue
        value = field.contents()
        meta.append([field.name, vtype.name, value])
    tensors = []
    for t in r.tensors:
        tensors.append([t.name, [int(x) for x in t.shape], t.tensor_type.name, int(t.n_bytes)])
    starts = [int(t.data_offset) for t in r.tensors]
    ends = [int(t.data_offset) + int(t.n_bytes) for t in r.tensors]
    return {"architecture": arch, "quantization": quant, "model": spec["name"], "metadata": meta,
            "arrays": arrays, "array_values": array_values, "tensors": tensors, "tensor_bytes": sum(t[3] for t in tensors),
            "tensor_data_span": max(ends) - min(starts)}


def mib_line(pattern: str, text: str) -> list[float]:
    return [float(m) for m in re.findall(pattern, text)]


LOAD_MODES = {"mmap": llama_cpp.LLAMA_LOAD_MODE_MMAP, "none": llama_cpp.LLAMA_LOAD_MODE_NONE}
# files also loaded without a memory map (the weights read into an allocated CPU buffer), under the first setting
UNMAPPED = ["llama-gqa-F16", "qwen3moe-Q4_K_M", "gemma2-swa-Q8_0", "qwen2-odd-F32"]


def record(shim, model_path: Path, grid: list[dict], load_mode: str = "mmap") -> tuple[list[dict], dict]:
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 0
    mparams.load_mode = LOAD_MODES[load_mode]
    mparams.use_extra_bufts = False
    LOG.clear()
    model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {model_path.name}:\n{''.join(LOG)}")
    load_log = "".join(LOG)
    model_log = {"model_buffer_mib": {m[0]: float(m[1]) for m in
                                      re.findall(r"(\S+) model buffer size = +([\d.]+) MiB", load_log)}}
    results = []
    for overrides in grid:
        s = {**DEFAULTS, **overrides}
        c = llama_cpp.llama_context_default_params()
        c.n_ctx, c.n_batch, c.n_ubatch, c.n_seq_max = s["n_ctx"], s["n_batch"], s["n_ubatch"], s["n_parallel"]
        c.kv_unified, c.swa_full = s["kv_unified"], False
        c.type_k, c.type_v = CACHE_TYPES[s["cache_type_k"]], CACHE_TYPES[s["cache_type_v"]]
        c.flash_attn_type = FLASH[s["flash_attn"]]
        c.n_threads = c.n_threads_batch = 2
        LOG.clear()
        ctx = llama_cpp.llama_init_from_model(model, c)
        text = "".join(LOG)
        if not ctx:
            results.append({"settings": s, "load_mode": load_mode, "refused": text.strip().splitlines()[-1]})
            continue
        names = ctypes.create_string_buffer(64 * 16)
        out = (ctypes.c_ulonglong * (3 * 16))()
        n = shim.vw_memory_breakdown(ctx, names, 64, out, 16)
        buffers = {}
        for i in range(n):
            name = names.raw[i * 64:(i + 1) * 64].split(b"\0", 1)[0].decode()
            buffers[name] = {"model": out[3 * i], "context": out[3 * i + 1], "compute": out[3 * i + 2]}
        output = shim.vw_output_buffer(ctx)
        logged = mib_line(r"output buffer size = +([\d.]+) MiB", text)
        if logged != [float(f"{output / 1024 / 1024:.2f}")]:  # the private member read must agree with the log
            raise RuntimeError(f"output buffer {output} bytes, logged {logged} MiB")
        fa = re.search(r"Flash Attention (enabled|not supported)", text)
        results.append({
            "settings": s,
            "load_mode": load_mode,
            "n_ctx": llama_cpp.llama_n_ctx(ctx), "n_ctx_seq": llama_cpp.llama_n_ctx_seq(ctx),
            "n_batch": llama_cpp.llama_n_batch(ctx), "n_ubatch": llama_cpp.llama_n_ubatch(ctx),
            "flash_attn_resolved": ({"enabled": "on", "not supported": "off"}[fa.group(1)] if fa else s["flash_attn"]),
            "buffers": buffers,
            "output_buffer": output,
            "log": {
                "kv_buffer_mib": mib_line(r"KV buffer size = +([\d.]+) MiB", text),
                "kv_cache_cells": [int(x) for x in re.findall(r"llama_kv_cache: size = .*?\( *(\d+) cells", text)],
                "rs_buffer_mib": mib_line(r"RS buffer size = +([\d.]+) MiB", text),
                "rs_cells": [int(x) for x in re.findall(r"llama_memory_recurrent: size = .*?\( *(\d+) cells", text)],
                "output_buffer_mib": mib_line(r"output buffer size = +([\d.]+) MiB", text),
                "compute_buffer_mib": mib_line(r"compute buffer size = +([\d.]+) MiB", text),
            },
        })
        llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    return results, model_log


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-src", type=Path, required=True, help="the sdist's vendor/llama.cpp (headers for the shim)")
    args = ap.parse_args()
    llama_cpp.llama_log_set(_log, None)
    llama_cpp.llama_backend_init()
    files, cases = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shim = build_shim(args.llama_src, work)
        for seed, (arch, spec) in enumerate([*ARCHS.items(), ODD]):
            master = work / f"{spec['name']}-F32.gguf"
            write_f32(arch, spec, master, seed)
            for quant in FILES[spec["name"]]:
                path = work / f"{spec['name']}-{quant}.gguf"
                if quant != "F32":
                    quantize(master, path, QUANTS[quant])
                key = path.stem
                files[key] = describe(path, arch, quant, spec)
                grid = (GRID if quant == "F16" else [GRID[i] for i in SHORT_GRID]) + MORE.get(key, [])
                results, model_log = record(shim, path, grid)
                files[key]["llama_cpp_load"] = {"mmap": model_log}
                if key in UNMAPPED:
                    more, model_log = record(shim, path, [GRID[0]], load_mode="none")
                    results += more
                    files[key]["llama_cpp_load"]["none"] = model_log
                for r in results:
                    cases.append({"file": key, **r})
                print(f"{key}: {len(results)} contexts", file=sys.stderr)
    doc = {
        "llama_cpp_commit": LLAMA_CPP_COMMIT,
        "llama_cpp_python_version": llama_cpp.__version__,
        "gguf_version": "0.19.0",
        "source": "scripts/llama_cpp_reference.py: llama.cpp (CPU build) loads each file and creates each context; "
                  "buffers from llama_get_memory_breakdown (exact bytes per buffer type: model, context = KV cache and "
                  "recurrent state, compute), the output buffer's size from llama_context::buf_output (agreeing with its log line)",
        "command": "/work/llamacpp-venv/bin/python scripts/llama_cpp_reference.py --llama-src <sdist>/vendor/llama.cpp "
                   "> tests/fixtures/llama_cpp_reference.json",
        "model_params": {"n_gpu_layers": 0, "load_mode": "mmap (and none for a few cases: load_mode)",
                         "use_extra_bufts": False},
        "context_params": {"swa_full": False, "n_threads": 2},
        "files": files,
        "cases": cases,
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
