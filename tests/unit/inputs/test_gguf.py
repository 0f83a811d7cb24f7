"""GGUF files: the header read (metadata and tensor table, never the weights), each tensor's bytes by its GGML type,
split shards, and the config the metadata maps to through formulas/gguf.yaml.

The files are written here with gguf's own writer (``gguf.GGUFWriter``, llama.cpp's gguf-py); the header is read back
by vramwise's reader and compared with gguf's own reader (``gguf.GGUFReader``), the bytes with a hand derivation,
the resolved model with the one the equivalent config.json gives, and the table's keys with transformers' own GGUF
mapping (``transformers.integrations.ggml.GGUF_CONFIG_MAPPING``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
from importlib import resources

import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes "
                                          "the GGUF files these tests read")
np = pytest.importorskip("numpy")

import vramwise  # noqa: E402
from vramwise.errors import ConfigError, FileFormatError, MissingDependencyError, SettingsError  # noqa: E402
from vramwise.estimation.registry import Registry  # noqa: E402
from vramwise.inputs import gguf as vg  # noqa: E402
from vramwise.rules.datafiles import load_data_file  # noqa: E402

from gguf_files import (LAYER_BYTES, ROOT_BYTES, TOTAL_BYTES, deepseek2_metadata, finish, write_llama_moe,  # noqa: E402
                        write_qwen2)  # (tests/gguf_files.py)

T = gguf.GGMLQuantizationType

@pytest.fixture
def qwen2_file(tmp_path):
    path = tmp_path / "tiny-Q4_K_M.gguf"
    write_qwen2(path)
    return path


def test_metadata_and_tensor_table(qwen2_file):
    m = vg.read_gguf(qwen2_file)
    assert m.architecture == "qwen2"
    assert m.file_type == "Q4_K_M"  # general.file_type 15 is llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M
    assert m.metadata["qwen2.block_count"] == 2 and m.metadata["qwen2.attention.head_count_kv"] == 2
    assert m.metadata["qwen2.attention.layer_norm_rms_epsilon"] == 1e-6  # float32 read back as the decimal written
    assert m.array_lengths["tokenizer.ggml.tokens"] == 290
    assert "tokenizer.ggml.tokens" not in m.metadata  # a vocabulary's list is counted, not kept
    assert m.tensor("token_embd.weight").shape == (256, 300)  # ggml order: the row's length first
    assert m.tensor("blk.1.attn_v.weight").ggml_type == "Q8_0"
    # gguf's own reader reads the same table: names, types, shapes, offsets of the data in the file
    reader = gguf.GGUFReader(qwen2_file)
    assert [(t.name, t.tensor_type.name, tuple(int(d) for d in t.shape), int(t.data_offset)) for t in reader.tensors] == \
        [(t.name, t.ggml_type, t.shape, t.offset) for t in m.tensors]
    assert reader.fields["general.file_type"].contents() == 15
    # and the same key/values: each scalar (a float32 compared as float32), each array's length
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            assert m.array_lengths[key] == len(field.data), key
        elif field.types[0] == gguf.GGUFValueType.FLOAT32:
            assert np.float32(m.metadata[key]) == field.parts[-1][0], key
        else:
            assert m.metadata[key] == field.contents(), key


def test_each_tensor_bytes_by_its_ggml_type(qwen2_file):
    m = vg.read_gguf(qwen2_file)
    expected = dict(ROOT_BYTES)
    for i in range(2):
        expected.update({f"blk.{i}.{k}": v for k, v in LAYER_BYTES.items()})
    assert {t.name: t.nbytes for t in m.tensors} == expected
    assert m.weight_bytes == sum(expected.values()) == TOTAL_BYTES
    assert {t.ggml_type for t in m.tensors} == {"F32", "F16", "Q8_0", "Q4_K"}


def test_split_shards_read_from_any_shard_or_their_folder(tmp_path):
    write_qwen2(tmp_path / "tiny.gguf", split_max_tensors=15)
    names = sorted(os.listdir(tmp_path))
    assert names == ["tiny-00001-of-00002.gguf", "tiny-00002-of-00002.gguf"]
    for given in (tmp_path / names[0], tmp_path / names[1], tmp_path):
        m = vg.read_gguf(given)
        assert [os.path.basename(f) for f in m.files] == names
        assert len(m.tensors) == 27 and {t.shard for t in m.tensors} == {0, 1}
        assert m.weight_bytes == TOTAL_BYTES
    assert vg.read_gguf(tmp_path).metadata["split.tensors.count"] == 27  # gguf's writer records the split
    (tmp_path / names[1]).rename(tmp_path / "renamed.gguf")
    with pytest.raises(ConfigError, match="shard 2 of 2 .tiny-00002-of-00002.gguf. is missing"):
        vg.read_gguf(tmp_path / names[0])
    (tmp_path / names[0]).rename(tmp_path / "first.gguf")  # a shard renamed: read alone, it says so
    with pytest.raises(ConfigError, match="split.count is 2, but the file name says 1 shard"):
        vg.read_gguf(tmp_path / "first.gguf")


def test_folder_of_several_models_asks_for_one(tmp_path, qwen2_file):
    write_qwen2(tmp_path / "tiny-Q8_0.gguf")
    (tmp_path / "mmproj-F16.gguf").write_bytes(b"GGUF")  # a vision projector is not a model of the folder
    with pytest.raises(ConfigError, match=r"several GGUF models \(tiny-Q4_K_M.gguf, tiny-Q8_0.gguf\): name the file"):
        vg.read_gguf(tmp_path)


def test_the_weights_are_never_read(tmp_path):
    """A header that claims 1 GiB of Q8_0 data, the file extended to hold it without writing it (a sparse file):
    the header is read in a moment, and memory grows by far less than the data."""
    path = tmp_path / "big.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_token_list([f"tok{i}" for i in range(150_000)])  # a real vocabulary's size: skipped by its lengths
    rows, cols = 262_144, 4096
    nbytes = rows * cols // 32 * 34  # 1,140,850,688
    w.add_tensor_info("token_embd.weight", (rows, cols // 32 * 34), np.dtype(np.uint8), nbytes, raw_dtype=T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with open(path, "r+b") as f:
        f.truncate(-(-os.path.getsize(path) // 32) * 32 + nbytes)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    m = vg.read_gguf(path)
    assert m.tensor("token_embd.weight").nbytes == nbytes
    assert m.array_lengths["tokenizer.ggml.tokens"] == 150_000
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024
    with open(path, "r+b") as f:  # the data cut short: the tensor ends past the file
        f.truncate(nbytes // 2)
    with pytest.raises(ConfigError, match="token_embd.weight ends at byte .* past the file's"):
        vg.read_gguf(path)


def test_not_a_gguf_file(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"NOPE" + bytes(40))
    with pytest.raises(ConfigError, match="not a GGUF file"):
        vg.read_gguf(p)
    p.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (1).to_bytes(8, "little")
                  + (50).to_bytes(8, "little") + b"general")  # a key cut short
    with pytest.raises(ConfigError, match="ends past the end of the file"):
        vg.read_gguf(p)


# -- the config from the metadata -----------------------------------------------------------------------------

def _write(path, arch: str, kv: dict, tensors: dict) -> None:
    w = gguf.GGUFWriter(path, arch)
    for key, (kind, value) in kv.items():
        # an array: a value a layer, INT32 items as llama.cpp's converter writes them (GGUFWriter.add_array)
        w.add_key_value(key.replace("{arch}", arch), value, kind,
                        sub_type=gguf.GGUFValueType.INT32 if kind == gguf.GGUFValueType.ARRAY else None)
    finish(w, tensors)


U32, F32 = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32
# Each case: the llama.cpp architecture, its metadata, its tensors that the table reads (the token embedding's rows,
# a head or its absence, a bias), and the config.json written by hand that says the same.
CASES = {
    "llama-tied-no-key-length": (
        "llama",
        {"{arch}.block_count": (U32, 3), "{arch}.embedding_length": (U32, 512), "{arch}.feed_forward_length": (U32, 1024),
         "{arch}.attention.head_count": (U32, 8), "{arch}.attention.head_count_kv": (U32, 2),
         "{arch}.context_length": (U32, 8192), "{arch}.rope.freq_base": (F32, 500000.0),
         "{arch}.attention.layer_norm_rms_epsilon": (F32, 1e-5)},
        {"token_embd.weight": np.zeros((1000, 512), np.float16)},
        # no output.weight: tied; no key_length: llama.cpp's head size hidden / heads = 64
        {"model_type": "llama", "vocab_size": 1000, "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 3,
         "num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": 8192, "rope_theta": 500000.0,
         "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False},
    ),
    "llama-mistral-style-with-biases": (
        "llama",
        {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 768),
         "{arch}.attention.head_count": (U32, 4), "{arch}.attention.head_count_kv": (U32, 1)},
        {"token_embd.weight": np.zeros((500, 256), np.float16), "output.weight": np.zeros((500, 256), np.float16),
         "blk.0.attn_q.bias": np.zeros(256, np.float32), "blk.1.attn_q.bias": np.zeros(256, np.float32)},
        {"model_type": "llama", "vocab_size": 500, "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 1, "tie_word_embeddings": False, "attention_bias": True,
         "mlp_bias": False},
    ),
    "qwen3-key-length": (
        "qwen3",
        {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 512),
         "{arch}.attention.head_count": (U32, 8), "{arch}.attention.head_count_kv": (U32, 4),
         "{arch}.attention.key_length": (U32, 128), "{arch}.context_length": (U32, 40960)},
        {"token_embd.weight": np.zeros((700, 256), np.float16)},
        {"model_type": "qwen3", "vocab_size": 700, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
         "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128, "max_position_embeddings": 40960,
         "tie_word_embeddings": True},
    ),
    "qwen3moe": (
        "qwen3moe",
        {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 768),
         "{arch}.attention.head_count": (U32, 4), "{arch}.attention.head_count_kv": (U32, 2),
         "{arch}.attention.key_length": (U32, 64), "{arch}.expert_count": (U32, 8), "{arch}.expert_used_count": (U32, 2),
         "{arch}.expert_feed_forward_length": (U32, 128)},
        {"token_embd.weight": np.zeros((400, 256), np.float16), "output.weight": np.zeros((400, 256), np.float16)},
        {"model_type": "qwen3_moe", "vocab_size": 400, "hidden_size": 256, "intermediate_size": 768,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "num_experts": 8,
         "num_experts_per_tok": 2, "moe_intermediate_size": 128, "tie_word_embeddings": False},
    ),
    "qwen2moe-shared-expert": (
        "qwen2moe",
        {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 512),
         "{arch}.attention.head_count": (U32, 4), "{arch}.attention.head_count_kv": (U32, 4),
         "{arch}.expert_count": (U32, 6), "{arch}.expert_used_count": (U32, 2),
         "{arch}.expert_feed_forward_length": (U32, 96), "{arch}.expert_shared_feed_forward_length": (U32, 384)},
        {"token_embd.weight": np.zeros((300, 256), np.float16), "output.weight": np.zeros((300, 256), np.float16)},
        {"model_type": "qwen2_moe", "vocab_size": 300, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "num_experts": 6,
         "num_experts_per_tok": 2, "moe_intermediate_size": 96, "shared_expert_intermediate_size": 384,
         "tie_word_embeddings": False},
    ),
    "gemma2": (
        "gemma2",
        {"{arch}.block_count": (U32, 4), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 1024),
         "{arch}.attention.head_count": (U32, 2), "{arch}.attention.head_count_kv": (U32, 1),
         "{arch}.attention.key_length": (U32, 64), "{arch}.attention.sliding_window": (U32, 4096),
         "{arch}.attn_logit_softcapping": (F32, 50.0), "{arch}.final_logit_softcapping": (F32, 30.0)},
        {"token_embd.weight": np.zeros((600, 256), np.float16)},
        {"model_type": "gemma2", "vocab_size": 600, "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 4,
         "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "sliding_window": 4096,
         "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "tie_word_embeddings": True},
    ),
    "gemma3": (
        "gemma3",
        {"{arch}.block_count": (U32, 6), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 512),
         "{arch}.attention.head_count": (U32, 4), "{arch}.attention.head_count_kv": (U32, 1),
         "{arch}.attention.key_length": (U32, 128), "{arch}.attention.sliding_window": (U32, 512)},
        {"token_embd.weight": np.zeros((800, 256), np.float16)},
        {"model_type": "gemma3_text", "vocab_size": 800, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 128,
         "sliding_window": 512, "tie_word_embeddings": True},
    ),
    "gemma-head-256": (
        "gemma",
        {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 512), "{arch}.feed_forward_length": (U32, 1024),
         "{arch}.attention.head_count": (U32, 4), "{arch}.attention.head_count_kv": (U32, 1),
         "{arch}.attention.key_length": (U32, 256), "{arch}.attention.value_length": (U32, 256),
         "{arch}.context_length": (U32, 8192), "{arch}.attention.layer_norm_rms_epsilon": (F32, 1e-6)},
        {"token_embd.weight": np.zeros((900, 512), np.float16)},
        # head 256, not 512 / 4 = 128 (Gemma 7B's 16 heads of 256 over 3072): key_length is read
        {"model_type": "gemma", "vocab_size": 900, "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "max_position_embeddings": 8192,
         "rms_norm_eps": 1e-6, "tie_word_embeddings": True},
    ),
    "phi3-window-not-read": (
        "phi3",
        {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 768),
         "{arch}.attention.head_count": (U32, 4), "{arch}.attention.head_count_kv": (U32, 4),
         "{arch}.rope.dimension_count": (U32, 64), "{arch}.attention.sliding_window": (U32, 2047),
         "{arch}.context_length": (U32, 4096)},
        {"token_embd.weight": np.zeros((320, 256), np.float16), "output.weight": np.zeros((320, 256), np.float16)},
        # llama.cpp turns Phi-3's window off (src/models/phi3.cpp): the config has none, every layer full
        {"model_type": "phi3", "vocab_size": 320, "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 4096,
         "tie_word_embeddings": False},
    ),
    "starcoder2-biases": (
        "starcoder2",
        {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 1024),
         "{arch}.attention.head_count": (U32, 4), "{arch}.attention.head_count_kv": (U32, 2),
         "{arch}.attention.layer_norm_epsilon": (F32, 1e-5), "{arch}.context_length": (U32, 16384)},
        {"token_embd.weight": np.zeros((420, 256), np.float16), "blk.0.attn_q.bias": np.zeros(256, np.float32),
         "blk.1.attn_q.bias": np.zeros(256, np.float32)},
        {"model_type": "starcoder2", "vocab_size": 420, "hidden_size": 256, "intermediate_size": 1024,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "use_bias": True,
         "norm_epsilon": 1e-5, "max_position_embeddings": 16384, "tie_word_embeddings": True},
    ),
    "command-r-plus-qk-norm": (
        "command-r",
        {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 640),
         "{arch}.attention.head_count": (U32, 4), "{arch}.attention.head_count_kv": (U32, 2),
         "{arch}.attention.layer_norm_epsilon": (F32, 1e-5), "{arch}.logit_scale": (F32, 0.0625)},
        {"token_embd.weight": np.zeros((512, 256), np.float16), "blk.0.attn_q_norm.weight": np.zeros((4, 64), np.float32)},
        {"model_type": "cohere", "vocab_size": 512, "hidden_size": 256, "intermediate_size": 640, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "use_qk_norm": True, "layer_norm_eps": 1e-5,
         "tie_word_embeddings": True},
    ),
    "olmo2": (
        "olmo2",
        {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 512),
         "{arch}.attention.head_count": (U32, 4), "{arch}.context_length": (U32, 4096),
         "{arch}.attention.layer_norm_rms_epsilon": (F32, 1e-6)},
        {"token_embd.weight": np.zeros((352, 256), np.float16), "output.weight": np.zeros((352, 256), np.float16)},
        # no head_count_kv: llama.cpp's default, head_count
        {"model_type": "olmo2", "vocab_size": 352, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
         "tie_word_embeddings": False},
    ),
    "granite": (
        "granite",
        {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 512),
         "{arch}.attention.head_count": (U32, 4), "{arch}.attention.head_count_kv": (U32, 1),
         "{arch}.logit_scale": (F32, 8.0), "{arch}.residual_scale": (F32, 0.22), "{arch}.embedding_scale": (F32, 12.0),
         "{arch}.attention.scale": (F32, 0.0078125)},
        {"token_embd.weight": np.zeros((448, 256), np.float16)},
        {"model_type": "granite", "vocab_size": 448, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 1, "tie_word_embeddings": True, "attention_bias": False,
         "mlp_bias": False},
    ),
    "mistral3-head-128": (
        "mistral3",
        {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 768),
         "{arch}.attention.head_count": (U32, 4), "{arch}.attention.head_count_kv": (U32, 2),
         "{arch}.attention.key_length": (U32, 128), "{arch}.context_length": (U32, 262144)},
        {"token_embd.weight": np.zeros((640, 256), np.float16), "output.weight": np.zeros((640, 256), np.float16)},
        {"model_type": "ministral3", "vocab_size": 640, "hidden_size": 256, "intermediate_size": 768,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128,
         "max_position_embeddings": 262144, "tie_word_embeddings": False},
    ),
    "deepseek2-mla": (
        "deepseek2",
        deepseek2_metadata(),
        {"token_embd.weight": np.zeros((500, 256), np.float16), "output.weight": np.zeros((500, 256), np.float16)},
        # MLA written as one KV head (head_count_kv 1, key_length 64 + 32): DeepSeek's config has as many KV heads as
        # query heads; qk_nope_head_dim = key_length_mla 80 - rope 32 = 48
        {"model_type": "deepseek_v3", "vocab_size": 500, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 128,
         "kv_lora_rank": 64, "qk_nope_head_dim": 48, "qk_rope_head_dim": 32, "v_head_dim": 48, "n_routed_experts": 8,
         "num_experts_per_tok": 2, "n_shared_experts": 1, "moe_intermediate_size": 64, "first_k_dense_replace": 1,
         "max_position_embeddings": 4096, "tie_word_embeddings": False},
    ),
    "deepseek2-lite-full-rank-q": (
        "deepseek2",
        deepseek2_metadata(q_lora_rank=None),
        {"token_embd.weight": np.zeros((500, 256), np.float16), "output.weight": np.zeros((500, 256), np.float16)},
        # no q_lora_rank and no attn_q_a tensor (V2-Lite): a full-rank q_proj
        {"model_type": "deepseek_v3", "vocab_size": 500, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": None,
         "kv_lora_rank": 64, "qk_nope_head_dim": 48, "qk_rope_head_dim": 32, "v_head_dim": 48, "n_routed_experts": 8,
         "num_experts_per_tok": 2, "n_shared_experts": 1, "moe_intermediate_size": 64, "first_k_dense_replace": 1,
         "max_position_embeddings": 4096, "tie_word_embeddings": False},
    ),
    "lfm2-hybrid": (
        "lfm2",
        # conversion/lfm2.py LFM2Model.set_gguf_parameters: head_count_kv one a layer, 0 for a convolution layer;
        # feed_forward_length the MLP's width already adjusted; shortconv.l_cache from conv_L_cache
        {"{arch}.block_count": (U32, 4), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 512),
         "{arch}.attention.head_count": (U32, 4), "{arch}.attention.head_count_kv": (gguf.GGUFValueType.ARRAY, [0, 2, 0, 2]),
         "{arch}.context_length": (U32, 8192), "{arch}.vocab_size": (U32, 500), "{arch}.shortconv.l_cache": (U32, 3)},
        {"token_embd.weight": np.zeros((500, 256), np.float16)},
        # LFM2's config.json says the same: attention on layers 1 and 3 of 2 KV heads, the width not adjusted again
        {"model_type": "lfm2", "vocab_size": 500, "hidden_size": 256, "intermediate_size": 512,
         "block_auto_adjust_ff_dim": False, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
         "full_attn_idxs": [1, 3], "conv_L_cache": 3, "max_position_embeddings": 8192, "tie_embedding": True},
    ),
    "mamba2": (
        "mamba2",
        # conversion/mamba.py Mamba2Model.set_gguf_parameters: head_count and feed_forward_length 0 ("unused"),
        # ssm.inner_size d_inner, ssm.time_step_rank d_inner / head_dim (the mixer's heads)
        {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 0),
         "{arch}.attention.head_count": (U32, 0), "{arch}.context_length": (U32, 2 ** 20),
         "{arch}.ssm.conv_kernel": (U32, 4), "{arch}.ssm.inner_size": (U32, 512), "{arch}.ssm.state_size": (U32, 64),
         "{arch}.ssm.time_step_rank": (U32, 8), "{arch}.ssm.group_count": (U32, 2)},
        {"token_embd.weight": np.zeros((500, 256), np.float16), "output.weight": np.zeros((500, 256), np.float16)},
        # Mamba2Config: expand 2 (512 / 256), 8 heads of 64, 2 groups of state 64, kernel 4
        {"model_type": "mamba2", "vocab_size": 500, "hidden_size": 256, "num_hidden_layers": 2, "expand": 2,
         "num_heads": 8, "head_dim": 64, "n_groups": 2, "state_size": 64, "conv_kernel": 4,
         "max_position_embeddings": 1048576, "tie_word_embeddings": False},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_resolved_as_the_equivalent_config_json(case, tmp_path):
    arch, kv, tensors, config = CASES[case]
    path = tmp_path / f"{case}.gguf"
    _write(path, arch, kv, tensors)
    (tmp_path / "config.json").write_text(json.dumps(config))
    reg = Registry()
    from_gguf = reg.model(str(path))
    by_hand = reg.model(str(tmp_path / "config.json"))
    assert from_gguf.family == by_hand.family
    assert from_gguf.model_type == by_hand.model_type == config["model_type"]
    assert dict(from_gguf.facts) == dict(by_hand.facts)
    assert from_gguf.params_total == by_hand.params_total
    assert dict(from_gguf.params_by_group) == dict(by_hand.params_by_group)
    assert from_gguf.inventory.checkpoint_as_stored and not by_hand.inventory.checkpoint_as_stored
    assert from_gguf.inventory.checkpoint_bytes == sum(a.nbytes for a in tensors.values())  # F16 and F32: numpy's own


def test_mistral_written_as_llama_counts_as_its_config_json(tmp_path):
    """llama.cpp's converter writes Mistral 7B as llama (convert_hf_to_gguf.py LlamaModel registers
    MistralForCausalLM; llama.cpp has no mistral architecture before Mistral 3): the llama family reads it, with the
    mistral config.json's parameters (Mistral's layout is Llama's without biases). Its sliding window is not in the
    file and llama.cpp's llama architecture slides none."""
    kv = {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 896),
          "{arch}.attention.head_count": (U32, 4), "{arch}.attention.head_count_kv": (U32, 1)}
    _write(tmp_path / "m.gguf", "llama", kv, {"token_embd.weight": np.zeros((320, 256), np.float16),
                                              "output.weight": np.zeros((320, 256), np.float16)})
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "mistral", "vocab_size": 320, "hidden_size": 256, "intermediate_size": 896, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 1, "tie_word_embeddings": False}))
    reg = Registry()
    from_gguf, mistral = reg.model(str(tmp_path / "m.gguf")), reg.model(str(tmp_path / "config.json"))
    assert (from_gguf.family, mistral.family) == ("llama", "mistral")
    # per layer: q, o 256 x 256; k, v 64 x 256; gate, up, down 896 x 256; two norms of 256; then the final norm, the
    # embedding and the head of 320 x 256
    assert from_gguf.params_total == mistral.params_total == (
        2 * (2 * 256 * 256 + 2 * 64 * 256 + 3 * 896 * 256 + 2 * 256) + 256 + 2 * 320 * 256)


def test_a_llama_file_with_experts_is_mixtral(tmp_path):
    """llama.cpp's converter writes Mixtral as llama (convert_hf_to_gguf.py MixtralModel extends LlamaModel), its
    experts in expert_count, expert_used_count and the stacked ffn_*_exps, feed_forward_length one expert's width;
    llama.cpp's llama architecture routes them (src/models/llama.cpp:69-82, :182-215). The mixtral family reads it,
    as a Mixtral config.json of the same sizes, and its weights are the file's tensors."""
    tensors = write_llama_moe(tmp_path / "moe.gguf")
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "mixtral", "vocab_size": 320, "hidden_size": 256, "intermediate_size": 384, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
         "max_position_embeddings": 4096, "tie_word_embeddings": False}))
    reg = Registry()
    from_gguf, mixtral = reg.model(str(tmp_path / "moe.gguf")), reg.model(str(tmp_path / "config.json"))
    assert (from_gguf.family, from_gguf.model_type) == ("mixtral", "mixtral")
    assert dict(from_gguf.facts) == dict(mixtral.facts)
    # per layer: q, o 256 x 256; k, v 128 x 256; the router 4 x 256; 4 experts' gate, up and down 384 x 256; two norms
    # of 256; then the final norm, the embedding and the head of 320 x 256: the elements of the tensors written
    by_hand = 2 * (2 * 256 * 256 + 2 * 128 * 256 + 4 * 256 + 4 * 3 * 384 * 256 + 2 * 256) + 256 + 2 * 320 * 256
    assert by_hand == sum(a.size for a in tensors.values()) == 2919680
    assert from_gguf.params_total == mixtral.params_total == by_hand
    # llama.cpp's weights: the tensors' bytes as stored (F16 matrices, F32 norms), numpy's own count
    e = vramwise.estimate(str(tmp_path / "moe.gguf"), profile="llama.cpp", n_gpu_layers=0)
    assert e.weights == from_gguf.inventory.checkpoint_bytes == sum(a.nbytes for a in tensors.values())
    # a llama file without experts stays llama's
    assert reg.model(str(write_plain_llama(tmp_path))).family == "llama"


def write_plain_llama(tmp_path):
    path = tmp_path / "dense.gguf"
    _write(path, "llama", {"{arch}.block_count": (U32, 1), "{arch}.embedding_length": (U32, 256),
                           "{arch}.feed_forward_length": (U32, 512), "{arch}.attention.head_count": (U32, 4)},
           {"token_embd.weight": np.zeros((320, 256), np.float16)})
    return path


@pytest.mark.parametrize("arch, kv, message", [
    ("olmo2", {"{arch}.attention.sliding_window": (U32, 4096)},
     r"has metadata olmo2.attention.sliding_window: an OLMo 3 file .* \(formulas/gguf.yaml:\d+:\d+\)$"),
    ("deepseek2", {"{arch}.nextn_predict_layers": (U32, 1)},
     r"has metadata deepseek2.nextn_predict_layers: the file holds multi-token prediction \(NextN\) layers"),
])
def test_what_a_family_does_not_model_is_refused(tmp_path, arch, kv, message):
    base = {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 512),
            "{arch}.attention.head_count": (U32, 4)}
    if arch == "deepseek2":
        base = deepseek2_metadata()
    _write(tmp_path / "m.gguf", arch, {**base, **kv}, {"token_embd.weight": np.zeros((10, 256), np.float32)})
    with pytest.raises(ConfigError, match=message):
        vramwise.load_model(str(tmp_path / "m.gguf"))


def test_deepseek2_without_mla_head_sizes_or_experts_is_refused(tmp_path):
    # a file without key_length_mla is read by llama.cpp as full K and V heads (hparams.is_mla() false): refused, with
    # why, rather than counted as the latent cache
    kv = deepseek2_metadata()
    del kv["{arch}.attention.key_length_mla"]
    _write(tmp_path / "old.gguf", "deepseek2", kv, {"token_embd.weight": np.zeros((10, 256), np.float32)})
    with pytest.raises(ConfigError) as e:
        vramwise.load_model(str(tmp_path / "old.gguf"))
    msg = str(e.value)
    assert "has no metadata deepseek2.attention.key_length_mla (the config's gguf_key_length_mla; formulas/gguf.yaml:" in msg
    assert msg.endswith("which the llama.cpp profile does not model; convert the model again")
    assert "\n" not in msg
    kv = deepseek2_metadata()
    del kv["{arch}.expert_count"]
    _write(tmp_path / "dense.gguf", "deepseek2", kv, {"token_embd.weight": np.zeros((10, 256), np.float32)})
    with pytest.raises(ConfigError, match=r"has no metadata deepseek2.expert_count .*: a deepseek2 file without routed "
                                          r"experts \(Youtu-LLM\) is not a DeepSeek-V2/V3 model$"):
        vramwise.load_model(str(tmp_path / "dense.gguf"))


def test_table_keys_agree_with_transformers_gguf_mapping():
    """Where transformers' GGUF loader maps a metadata key of an architecture, the table maps it to the same config
    key (transformers names llama.cpp's qwen2moe and qwen3moe qwen2_moe and qwen3_moe)."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    checked = 0
    for arch, table in vg.tables().items():
        theirs = GGUF_CONFIG_MAPPING.get({"qwen3moe": "qwen3_moe", "qwen2moe": "qwen2_moe"}.get(arch, arch))
        if theirs is None:
            continue
        for rule in table.rules:
            for source in rule.sources:
                key = source.get("key", "")
                # lfm2's full_attn_idxs: the layers of head_count_kv that are not 0, which transformers derives from
                # the same key after mapping it (modeling_gguf_pytorch_utils.py load_gguf_checkpoint)
                if source.get("reduce") == "nonzero_indices":
                    continue
                if key.startswith("{arch}.") and key[len("{arch}."):] in theirs:
                    assert theirs[key[len("{arch}."):]] == rule.key, (arch, key)
                    checked += 1
    assert checked >= 40  # llama, qwen2, qwen3, qwen2_moe and qwen3_moe: 8 to 12 keys each


def test_unknown_architecture_names_the_known_ones(tmp_path):
    path = tmp_path / "m.gguf"
    _write(path, "rwkv7", {"{arch}.block_count": (U32, 2)}, {"token_embd.weight": np.zeros((10, 32), np.float32)})
    with pytest.raises(ConfigError) as e:
        vramwise.load_model(str(path))
    msg = str(e.value)
    assert "GGUF architecture 'rwkv7' has no table in formulas/gguf.yaml" in msg
    assert ("known: bloom, cohere2, command-r, deepseek2, ernie4_5, exaone, falcon, gemma, gemma2, gemma3, glm4, "
            "gpt2, gptneox, granite, granitemoe, lfm2, llama, mamba, mamba2, mistral3, nemotron, olmo, olmo2, "
            "olmoe, phi2, phi3, phimoe, qwen2, qwen2moe, qwen3, qwen3moe, seed_oss, smollm3, stablelm, starcoder2") in msg


def test_a_missing_key_names_the_metadata_key(tmp_path):
    path = tmp_path / "m.gguf"
    _write(path, "llama", {"{arch}.block_count": (U32, 2), "{arch}.attention.head_count": (U32, 2)},
           {"token_embd.weight": np.zeros((10, 32), np.float32)})
    with pytest.raises(ConfigError, match=r"has no metadata llama.embedding_length \(the config's hidden_size"):
        vramwise.load_model(str(path))


# -- estimates --------------------------------------------------------------------------------------------------

def test_inference_weights_are_the_tensors_bytes(qwen2_file):
    e = vramwise.estimate(str(qwen2_file), method="inference")
    assert e.weights == TOTAL_BYTES  # the hand derivation of tests/gguf_files.py, not the 16-bit 2 x parameters
    assert e.model.checkpoint_format == "GGUF Q4_K_M"
    assert any("27 tensors of tiny-Q4_K_M.gguf (GGUF Q4_K_M, architecture qwen2)" in w for w in e.warnings)


def test_training_on_a_gguf_says_what_it_can_do(qwen2_file):
    with pytest.raises(SettingsError) as e:
        vramwise.estimate(str(qwen2_file), method="lora")
    assert str(e.value) == (
        'a GGUF Q4_K_M file holds quantized weights for inference (llama.cpp): vramwise estimates it with --profile '
        'llama.cpp (llama.cpp\'s own memory) or --method inference (method="inference"); a lora estimate needs the '
        'model\'s config.json or its hub id')
    with pytest.raises(SettingsError, match="the vllm profile does not count the weights of a GGUF Q4_K_M file as "
                                            "stored: use the llama.cpp or unsloth profile"):
        vramwise.estimate(str(qwen2_file), method="inference", profile="vllm", gpu="H100")


def test_missing_gguf_package_is_one_clear_error(qwen2_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # import gguf then raises ImportError
    vg._read_files.cache_clear()
    with pytest.raises(MissingDependencyError) as e:
        Registry().model(str(qwen2_file))
    assert str(e.value) == "reading a GGUF file needs the gguf package (llama.cpp's reader): pip install 'vramwise[gguf]'"


# -- the tables file --------------------------------------------------------------------------------------------

def _table_text() -> str:
    return resources.files("vramwise.formulas").joinpath("gguf.yaml").read_text(encoding="utf-8")


def test_tables_file_is_valid():
    df = load_data_file(_table_text(), "formulas/gguf.yaml", "gguf-1.schema.json", validate=True)
    assert set(vg.compile_tables(df)) == {"llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "gemma", "gemma2", "gemma3",
                                          "phi3", "starcoder2", "command-r", "olmo2", "granite", "mistral3", "deepseek2",
                                          "lfm2", "mamba2", "seed_oss", "smollm3", "olmo", "olmoe", "stablelm",
                                          "granitemoe", "ernie4_5", "glm4", "nemotron", "gpt2", "gptneox", "bloom",
                                          "phi2", "falcon", "mamba", "phimoe", "cohere2", "exaone"}


def test_a_bad_table_fails_with_its_place():
    bad = _table_text().replace("  qwen2:\n    model_type: qwen2\n", "  qwen2:\n    model_type: qwen2\n    confg: {}\n")
    with pytest.raises(FileFormatError) as e:
        load_data_file(bad, "formulas/gguf.yaml", "gguf-1.schema.json", validate=True)
    line = bad.splitlines().index("    confg: {}") + 1
    assert f"formulas/gguf.yaml:{line}:5: $.architectures.qwen2.confg: unknown key 'confg'" in str(e.value)
    bad = _table_text().replace("otherwise: hidden_size // num_attention_heads", "otherwise: hidden_size // heads")
    df = load_data_file(bad, "formulas/gguf.yaml", "gguf-1.schema.json", validate=True)
    with pytest.raises(FileFormatError, match=r"formulas/gguf.yaml:\d+:\d+: \$.common.head_dim.otherwise: unknown name "
                                              r"`heads`"):
        vg.compile_tables(df)


def test_gguf_bytes_where_json_is_read_say_what_they_are(qwen2_file):
    from vramwise.inputs.config import parse_json_bytes

    with pytest.raises(ConfigError) as e:
        parse_json_bytes(qwen2_file.read_bytes(), "upload.gguf")
    assert str(e.value) == ("upload.gguf: a GGUF file (llama.cpp's quantized weights), not a JSON config: vramwise reads "
                            "one from its path, for inference (vramwise estimate MODEL.gguf --method inference)")


def test_a_folder_with_a_config_json_is_read_from_it(tmp_path, qwen2_file):
    config = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 2, "num_attention_heads": 4}
    (tmp_path / "config.json").write_text(json.dumps(config))
    m = Registry().model(str(tmp_path))
    assert m.family == "llama" and not m.inventory.checkpoint_as_stored
    assert m.origin == str(tmp_path / "config.json")


def test_lfm2_head_count_kv_given_once_makes_every_layer_attend(tmp_path):
    # reduce max of one number is the number; nonzero_indices of one number is no list, so full_attn_idxs stays unset
    # and the lfm2 family's default (null: every layer attends) applies
    kv = {"{arch}.block_count": (U32, 2), "{arch}.embedding_length": (U32, 256), "{arch}.feed_forward_length": (U32, 512),
          "{arch}.attention.head_count": (U32, 4), "{arch}.attention.head_count_kv": (U32, 2),
          "{arch}.shortconv.l_cache": (U32, 3)}
    _write(tmp_path / "m.gguf", "lfm2", kv, {"token_embd.weight": np.zeros((10, 256), np.float32)})
    config = vg.gguf_config(vg.read_gguf(tmp_path / "m.gguf"))
    assert config["num_key_value_heads"] == 2 and "full_attn_idxs" not in config
    assert config["block_auto_adjust_ff_dim"] is False and config["conv_L_cache"] == 3
