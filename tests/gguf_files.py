"""GGUF files for the tests, written with gguf's own writer (``gguf.GGUFWriter``, llama.cpp's gguf-py): a small
Qwen2 in F32, F16, Q8_0 and Q4_K tensors, and its bytes derived by hand (tests/unit/inputs/test_gguf.py,
tests/unit/surfaces/test_cli_gguf.py). Import it after ``pytest.importorskip("gguf")``."""

from __future__ import annotations

import gguf
import numpy as np

T = gguf.GGMLQuantizationType


def quantized(rows: int, cols: int, kind) -> "np.ndarray":
    """Zero bytes of a quantized tensor of rows x cols values (the writer takes a quantized tensor as its bytes)."""
    block, size = gguf.GGML_QUANT_SIZES[kind]
    return np.zeros((rows, cols // block * size), np.uint8)


def finish(w: "gguf.GGUFWriter", tensors: dict | None = None) -> None:
    """Add ``tensors`` (name: array, in order) to the writer, then write the header, the key/values and the tensors,
    and close the file, as every writer here ends."""
    for name, array in (tensors or {}).items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _qwen2_header(path, architecture: str, split_max_tensors: int, layers: int, file_type) -> "gguf.GGUFWriter":
    """A writer holding the small Qwen2's metadata (hidden 256, 4 heads, 2 KV heads, MLP 512, 290 tokens)."""
    w = gguf.GGUFWriter(path, architecture, split_max_tensors=split_max_tensors)
    w.add_block_count(layers)
    w.add_embedding_length(256)
    w.add_feed_forward_length(512)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_context_length(32768)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(file_type)
    w.add_token_list([f"t{i}" for i in range(290)])  # shorter than the embedding's 300 rows
    return w


def write_qwen2(path, split_max_tensors: int = 0) -> None:
    """A two-layer Qwen2 (hidden 256, 4 heads of 64, 2 KV heads, MLP 512, vocabulary 300, untied head) in F32,
    F16, Q8_0 and Q4_K tensors, as llama.cpp's converter names them."""
    w = _qwen2_header(path, "qwen2", split_max_tensors, 2, gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_tensor("token_embd.weight", np.zeros((300, 256), np.float16))
    w.add_tensor("output_norm.weight", np.zeros(256, np.float32))
    w.add_tensor("output.weight", quantized(300, 256, T.Q8_0), raw_dtype=T.Q8_0)
    for i in range(2):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.zeros(256, np.float32))
        w.add_tensor(p + "attn_q.weight", quantized(256, 256, T.Q4_K), raw_dtype=T.Q4_K)
        w.add_tensor(p + "attn_q.bias", np.zeros(256, np.float32))
        w.add_tensor(p + "attn_k.weight", quantized(128, 256, T.Q4_K), raw_dtype=T.Q4_K)
        w.add_tensor(p + "attn_k.bias", np.zeros(128, np.float32))
        w.add_tensor(p + "attn_v.weight", quantized(128, 256, T.Q8_0), raw_dtype=T.Q8_0)
        w.add_tensor(p + "attn_v.bias", np.zeros(128, np.float32))
        w.add_tensor(p + "attn_output.weight", np.zeros((256, 256), np.float16))
        w.add_tensor(p + "ffn_norm.weight", np.zeros(256, np.float32))
        w.add_tensor(p + "ffn_gate.weight", quantized(512, 256, T.Q4_K), raw_dtype=T.Q4_K)
        w.add_tensor(p + "ffn_up.weight", quantized(512, 256, T.Q4_K), raw_dtype=T.Q4_K)
        w.add_tensor(p + "ffn_down.weight", quantized(256, 512, T.Q4_K), raw_dtype=T.Q4_K)
    finish(w)


# Each tensor's bytes by hand: F32 4 bytes a value, F16 2; Q8_0 blocks of 32 values in 34 bytes (32 int8 and an f16
# scale); Q4_K blocks of 256 values in 144 bytes (128 bytes of 4-bit values, 12 of 6-bit scales, two f16).
LAYER_BYTES = {
    "attn_norm.weight": 256 * 4,                    # 1,024
    "attn_q.weight": 256 * (256 // 256) * 144,      # 36,864: 256 rows of one Q4_K block
    "attn_q.bias": 256 * 4,                         # 1,024
    "attn_k.weight": 128 * 144,                     # 18,432
    "attn_k.bias": 128 * 4,                         # 512
    "attn_v.weight": 128 * (256 // 32) * 34,        # 34,816: 128 rows of eight Q8_0 blocks
    "attn_v.bias": 128 * 4,                         # 512
    "attn_output.weight": 256 * 256 * 2,            # 131,072
    "ffn_norm.weight": 256 * 4,                     # 1,024
    "ffn_gate.weight": 512 * 144,                   # 73,728
    "ffn_up.weight": 512 * 144,                     # 73,728
    "ffn_down.weight": 256 * (512 // 256) * 144,    # 73,728: rows of 512 values, two Q4_K blocks each
}
ROOT_BYTES = {
    "token_embd.weight": 300 * 256 * 2,             # 153,600
    "output_norm.weight": 256 * 4,                  # 1,024
    "output.weight": 300 * (256 // 32) * 34,        # 81,600
}
# 446,464 a layer: 2 x 446,464 + 236,224 = 1,129,152
TOTAL_BYTES = 1_129_152


#: The quantizations write_qwen2_as writes: the GGML type of every matrix and llama.cpp's file type.
QUANTS = {"F16": (T.F16, gguf.LlamaFileType.MOSTLY_F16), "Q8_0": (T.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
          "Q4_K_M": (T.Q4_K, gguf.LlamaFileType.MOSTLY_Q4_K_M)}


def write_qwen2_as(path, quant: str, split_max_tensors: int = 0, architecture: str = "qwen2",
                   layers: int = 2) -> None:
    """The Qwen2 of write_qwen2 as one quantization of QUANTS: every matrix (attention, MLP, output.weight) in its
    GGML type, the norms and biases F32, the token embedding F16."""
    kind, file_type = QUANTS[quant]

    def matrix(rows, cols):
        return (np.zeros((rows, cols), np.float16), None) if kind == T.F16 else (quantized(rows, cols, kind), kind)

    w = _qwen2_header(path, architecture, split_max_tensors, layers, file_type)
    w.add_tensor("token_embd.weight", np.zeros((300, 256), np.float16))
    w.add_tensor("output_norm.weight", np.zeros(256, np.float32))
    data, raw = matrix(300, 256)
    w.add_tensor("output.weight", data, raw_dtype=raw)
    for i in range(layers):
        p = f"blk.{i}."
        for name, size in (("attn_norm", 256), ("attn_q.bias", 256), ("attn_k.bias", 128), ("attn_v.bias", 128),
                           ("ffn_norm", 256)):
            w.add_tensor(p + (name if "." in name else name + ".weight"), np.zeros(size, np.float32))
        for name, rows, cols in (("attn_q", 256, 256), ("attn_k", 128, 256), ("attn_v", 128, 256),
                                 ("attn_output", 256, 256), ("ffn_gate", 512, 256), ("ffn_up", 512, 256),
                                 ("ffn_down", 256, 512)):
            data, raw = matrix(rows, cols)
            w.add_tensor(p + name + ".weight", data, raw_dtype=raw)
    finish(w)


def deepseek2_metadata(*, hidden: int = 256, heads: int = 4, kv_lora_rank: int = 64, rope: int = 32,
                       nope: int = 48, v_head: int = 48, q_lora_rank: int | None = 128) -> dict:
    """A three-layer DeepSeek-V3-style deepseek2 header as llama.cpp's converter writes it
    (conversion/deepseek.py DeepseekV2Model.set_gguf_parameters): MLA as one latent KV head (head_count_kv 1,
    key_length kv_lora_rank + rope, value_length kv_lora_rank) and the per-head sizes in key_length_mla
    (nope + rope) and value_length_mla; the first layer dense, then 8 routed experts of 64, 2 used, 1 shared.
    Keys are ``{arch}.``-relative, values (gguf value type, value)."""
    u32 = gguf.GGUFValueType.UINT32
    kv = {"{arch}.block_count": 3, "{arch}.embedding_length": hidden, "{arch}.feed_forward_length": 512,
          "{arch}.attention.head_count": heads, "{arch}.attention.head_count_kv": 1,
          "{arch}.attention.key_length": kv_lora_rank + rope, "{arch}.attention.value_length": kv_lora_rank,
          "{arch}.attention.key_length_mla": nope + rope, "{arch}.attention.value_length_mla": v_head,
          "{arch}.attention.kv_lora_rank": kv_lora_rank, "{arch}.rope.dimension_count": rope,
          "{arch}.leading_dense_block_count": 1, "{arch}.expert_count": 8, "{arch}.expert_used_count": 2,
          "{arch}.expert_shared_count": 1, "{arch}.expert_feed_forward_length": 64, "{arch}.context_length": 4096}
    if q_lora_rank is not None:
        kv["{arch}.attention.q_lora_rank"] = q_lora_rank
    return {k: (u32, v) for k, v in kv.items()}


def write_deepseek2(path, **dims) -> None:
    """A deepseek2 file of :func:`deepseek2_metadata`'s header (``dims`` passed on) and an untied F16 token embedding
    and head of 500 tokens (the tensors the table and the placement read)."""
    kv = deepseek2_metadata(**dims)
    hidden = kv["{arch}.embedding_length"][1]
    w = gguf.GGUFWriter(path, "deepseek2")
    for key, (kind, value) in kv.items():
        w.add_key_value(key.replace("{arch}", "deepseek2"), value, kind)
    w.add_tensor("token_embd.weight", np.zeros((500, hidden), np.float16))
    w.add_tensor("output.weight", np.zeros((500, hidden), np.float16))
    finish(w)


def write_lfm2(path, head_count_kv=(0, 2, 0, 2), hidden: int = 256, l_cache: int = 3) -> None:
    """An LFM2 file as llama.cpp's converter writes one (conversion/lfm2.py LFM2Model: head_count_kv one a layer, 0 for
    a short-convolution layer; shortconv.l_cache; the head tied), 4 heads of 64, MLP 512, 500 tokens, F16 zeros: a
    convolution layer's shortconv.conv / in_proj / out_proj, an attention layer's q, k, v, output and q/k norms."""
    w = gguf.GGUFWriter(path, "lfm2")
    w.add_block_count(len(head_count_kv))
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(512)
    w.add_head_count(4)
    w.add_head_count_kv(list(head_count_kv))
    w.add_context_length(8192)
    w.add_vocab_size(500)
    w.add_uint32("lfm2.shortconv.l_cache", l_cache)
    f16 = np.float16
    w.add_tensor("token_embd.weight", np.zeros((500, hidden), f16))
    w.add_tensor("token_embd_norm.weight", np.zeros(hidden, np.float32))
    for i, kv in enumerate(head_count_kv):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.zeros(hidden, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.zeros(hidden, np.float32))
        for name, shape in {"ffn_gate": (512, hidden), "ffn_up": (512, hidden), "ffn_down": (hidden, 512)}.items():
            w.add_tensor(f"blk.{i}.{name}.weight", np.zeros(shape, f16))
        if kv == 0:
            w.add_tensor(f"blk.{i}.shortconv.conv.weight", np.zeros((hidden, l_cache), f16))
            w.add_tensor(f"blk.{i}.shortconv.in_proj.weight", np.zeros((3 * hidden, hidden), f16))
            w.add_tensor(f"blk.{i}.shortconv.out_proj.weight", np.zeros((hidden, hidden), f16))
        else:
            for name, shape in {"attn_q": (hidden, hidden), "attn_k": (kv * 64, hidden), "attn_v": (kv * 64, hidden),
                                "attn_output": (hidden, hidden)}.items():
                w.add_tensor(f"blk.{i}.{name}.weight", np.zeros(shape, f16))
            w.add_tensor(f"blk.{i}.attn_q_norm.weight", np.zeros(64, np.float32))
            w.add_tensor(f"blk.{i}.attn_k_norm.weight", np.zeros(64, np.float32))
    finish(w)


def write_llama_moe(path, vocab: int = 320) -> dict:
    """A two-layer Mixtral-style file as llama.cpp's converter writes one (convert_hf_to_gguf.py MixtralModel, a
    LlamaModel: architecture llama, expert_count 4, expert_used_count 2, feed_forward_length one expert's 384; per
    layer the router ffn_gate_inp and the experts stacked in ffn_gate_exps, ffn_up_exps and ffn_down_exps), hidden 256,
    4 heads of 64, 2 KV heads, ``vocab`` tokens, untied, F16 matrices and F32 norms. Returns the tensors written."""
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(2)
    w.add_embedding_length(256)
    w.add_feed_forward_length(384)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_context_length(4096)
    w.add_expert_count(4)
    w.add_expert_used_count(2)
    f16, f32 = np.float16, np.float32
    tensors = {"token_embd.weight": np.zeros((vocab, 256), f16), "output_norm.weight": np.zeros(256, f32),
               "output.weight": np.zeros((vocab, 256), f16)}
    for i in range(2):  # numpy order: the ggml row length last
        p = f"blk.{i}."
        tensors.update({p + "attn_norm.weight": np.zeros(256, f32), p + "attn_q.weight": np.zeros((256, 256), f16),
                        p + "attn_k.weight": np.zeros((128, 256), f16), p + "attn_v.weight": np.zeros((128, 256), f16),
                        p + "attn_output.weight": np.zeros((256, 256), f16), p + "ffn_norm.weight": np.zeros(256, f32),
                        p + "ffn_gate_inp.weight": np.zeros((4, 256), f16),
                        p + "ffn_gate_exps.weight": np.zeros((4, 384, 256), f16),
                        p + "ffn_up_exps.weight": np.zeros((4, 384, 256), f16),
                        p + "ffn_down_exps.weight": np.zeros((4, 256, 384), f16)})
    finish(w, tensors)
    return tensors
